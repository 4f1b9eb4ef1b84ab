// Stream latency as the official TypeScript SDK client (@modelcontextprotocol/sdk 1.32.2) sees
// it; run by benches/ts_stream_latency.sh. Each round runs `confirm_delete` as a task stream
// (`client.experimental.tasks.callToolStream`); the elicitation handler notes the instant it
// returns its answer, and the script measures from there: the `notifications/tasks/status`
// saying `working` (the SDK's transport keeps the GET stream open) and the task's result as
// the task stream yields it (through the SDK's own `tasks/result` call).
//
// Usage: node ts_stream_latency.mjs <server url> <rounds>

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema, TaskStatusNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, roundsArg] = process.argv.slice(2);
const rounds = Math.min(Math.max(parseInt(roundsArg ?? "100", 10), 1), 10000);

let answeredAt = null;
let workingAt = null;
let waitingFor = null;

const client = new Client(
  { name: "taskmesh-ts-latency", version: "1.0.0" },
  { capabilities: { elicitation: {} } },
);
client.setRequestHandler(ElicitRequestSchema, async () => {
  answeredAt = performance.now();
  return { action: "accept", content: { confirm: false } };
});
client.setNotificationHandler(TaskStatusNotificationSchema, (n) => {
  if (n.params.taskId === waitingFor && n.params.status === "working" && answeredAt !== null) {
    workingAt ??= performance.now();
  }
});
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
await client.listTools();

const status = [];
const result = [];
for (let i = 0; i < rounds; i++) {
  answeredAt = null;
  workingAt = null;
  waitingFor = null;
  let done = null;
  for await (const m of client.experimental.tasks.callToolStream(
    { name: "confirm_delete", arguments: { filename: `r${i}` } },
    undefined,
    { task: { ttl: 60000 } },
  )) {
    if (m.type === "taskCreated") waitingFor = m.task.taskId;
    if (m.type === "result") done = performance.now();
    if (m.type === "error") throw m.error;
  }
  if (answeredAt === null || done === null) throw new Error(`round ${i}: no answer or no result`);
  result.push(done - answeredAt);
  if (workingAt !== null) status.push(workingAt - answeredAt);
}
await client.close();

function q(list, p) {
  const s = [...list].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
}
function line(name, list) {
  if (list.length === 0) return `${name.padEnd(40)}   (none seen)`;
  const f = (v) => v.toFixed(3).padStart(9);
  return `${name.padEnd(40)}${f(q(list, 0.5))}${f(q(list, 0.9))}${f(q(list, 0.99))}${f(Math.max(...list))}  (${list.length})`;
}
console.log(`${rounds} rounds; ms after the elicitation handler returned its answer`);
console.log(`${"".padEnd(40)}${"p50".padStart(9)}${"p90".padStart(9)}${"p99".padStart(9)}${"max".padStart(9)}`);
console.log(line("status `working` notification", status));
console.log(line("result yielded by the task stream", result));
