// The TypeScript tasks extension client (`@modelcontextprotocol/ext-tasks`, on the SDK's
// `@modelcontextprotocol/client` 2.x pinned to protocol 2026-07-28) against a taskmesh server:
// one JSON line per observation on stdout, asserted by tests/interop_ts_tasks.rs, and
// `{"done": true}` last.
//
// The extension's 2026-07-28 requester needs a raw request path (its codecs take the task
// traffic the SDK's typed requests reject): `rawDispatch` below posts each request as the
// protocol frames it, with the routing headers its body names.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  createTaskSessionFromClient,
  resultFromTaskOutcome,
} from "@modelcontextprotocol/ext-tasks/client";

const [url] = process.argv.slice(2);
const VERSION = "2026-07-28";
const out = (o) => console.log(JSON.stringify(o));

const clientInfo = { name: "taskmesh-ext-tasks-interop", version: "1.0.0" };
const clientCapabilities = {
  elicitation: {},
  extensions: { "io.modelcontextprotocol/tasks": {} },
};
const client = new Client(clientInfo, {
  capabilities: clientCapabilities,
  versionNegotiation: { mode: { pin: VERSION } },
});
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
out({ era: client.getProtocolEra() });

let nextId = 1;

/** One request (`{method, params}`) over HTTP as a JSON-RPC request of its own id; its
 * response (the last one on an SSE answer), as the extension's port takes it:
 * `{kind: "result", result}` or `{kind: "error", error}`. */
async function rawDispatch(request, options) {
  const m = await post({ jsonrpc: "2.0", id: nextId++, ...request }, options);
  return m.error !== undefined ? { kind: "error", error: m.error } : { kind: "result", result: m.result };
}

async function post(request, options) {
  const p = request.params ?? {};
  const headers = {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "mcp-protocol-version": VERSION,
    "mcp-method": request.method,
  };
  const name = request.method === "tools/call" ? p.name : p.taskId;
  if (typeof name === "string") headers["mcp-name"] = name;
  const r = await fetch(url, {
    method: "POST",
    headers,
    body: JSON.stringify(request),
    signal: options?.signal,
  });
  const text = await r.text();
  if ((r.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
    const messages = text
      .split("\n")
      .filter((l) => l.startsWith("data:"))
      .map((l) => JSON.parse(l.slice(5)));
    return messages.reverse().find((m) => m.id !== undefined);
  }
  return JSON.parse(text);
}

const asked = [];
const session = createTaskSessionFromClient(client, {
  endpointId: "taskmesh-interop",
  rawDispatch,
  v2RequestFraming: { protocolVersion: VERSION, clientInfo, clientCapabilities },
  onInputRequest: async (request, context) => {
    asked.push({ kind: request.kind, scope: context.scope, delivery: context.delivery, message: request.params?.message });
    if (request.kind !== "elicitation") throw new Error(`unexpected ${request.kind}`);
    const message = request.params.message;
    if (message.startsWith("Delete")) return { action: "accept", content: { confirm: true } };
    if (message.startsWith("Step 1")) return { action: "accept", content: { name: "Ts" } };
    if (message.startsWith("Step 2")) return { action: "accept", content: { color: "teal" } };
    return { action: "decline" };
  },
});
out({ capabilities: session.capabilities });

const text = (result) => result?.content?.[0]?.text;
try {
  // A task the server decided on, settled through tasks/get.
  let execution = await session.callTool("slow_compute", { seconds: 0.2 });
  let { outcome } = await execution.settle();
  out({ step: "slow_compute", status: outcome.status, text: text(resultFromTaskOutcome(outcome)), taskId: outcome.task?.taskId ?? null });

  // A tool error: completed with isError on this wire.
  execution = await session.callTool("failing_job", {});
  ({ outcome } = await execution.settle());
  out({ step: "failing_job", status: outcome.status, isError: outcome.result?.isError ?? null });

  // Input inside a task: inputRequests answered with tasks/update.
  execution = await session.callTool("confirm_delete", { filename: "ts.txt" });
  ({ outcome } = await execution.settle());
  out({ step: "confirm_delete", status: outcome.status, text: text(resultFromTaskOutcome(outcome)) });

  // A plain call's input rounds.
  execution = await session.callTool("test_input_required_result_multi_round", {});
  ({ outcome } = await execution.settle());
  out({ step: "multi_round", status: outcome.status, text: text(resultFromTaskOutcome(outcome)) });

  // Cancellation of a task.
  execution = await session.callTool("slow_compute", { seconds: 30 });
  const settling = execution.settle();
  await execution.cancel();
  ({ outcome } = await settling);
  out({ step: "cancel", status: outcome.status });
  out({ asked });
} finally {
  await session.close();
  await client.close();
}
out({ done: true });
