// Call the tools of a taskmesh worker (served by the Rust test tests/interop_ts/workers.rs)
// with the official MCP TypeScript SDK (@modelcontextprotocol/sdk 1.32.2) and its experimental
// tasks client, as tasks on protocol 2025-11-25, over Streamable HTTP.
//
// Usage: node ts_worker_client.mjs <server url> <bearer token>
//
// The script judges nothing itself. It prints one JSON object per line:
//   {"step": NAME, "data": {...}}   what the SDK saw in that step
//   {"step": NAME, "error": "..."}  the step threw
// and finally {"done": true}. Every step is bounded in time.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const RELATED_TASK = "io.modelcontextprotocol/related-task";
const STEP_TIMEOUT_MS = 40000;
const WORKER_TOOLS = ["tsw_sum", "tsw_interview", "tsw_wait_cancel"];
// The status message the worker's cancellable tool sets once it runs.
const RUNNING_MESSAGE = "waiting to be cancelled";

const [url, token] = process.argv.slice(2);

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function relatedTask(params) {
  return params?._meta?.[RELATED_TASK]?.taskId ?? null;
}

// Every elicitation the SDK handed to this client, with the task it names.
const elicitations = [];

const client = new Client(
  { name: "taskmesh-ts-worker-interop", version: "1.0.0" },
  { capabilities: { elicitation: {} } },
);
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  const p = request.params;
  elicitations.push({
    message: p.message,
    requestedSchema: p.requestedSchema ?? null,
    relatedTaskId: relatedTask(p),
  });
  return { action: "accept", content: { name: "TypeScript SDK" } };
});

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});

function texts(result) {
  return (result?.content ?? []).filter((c) => c.type === "text").map((c) => c.text);
}

// Run a tool as a task stream: the kinds of messages seen, the statuses polled, the task id
// and the outcome.
async function taskStream(name, args, options = {}) {
  const kinds = [];
  const statuses = [];
  let taskId = null;
  let result = null;
  let error = null;
  for await (const m of client.experimental.tasks.callToolStream(
    { name, arguments: args },
    undefined,
    { task: { ttl: 60000 }, timeout: STEP_TIMEOUT_MS, ...options },
  )) {
    kinds.push(m.type);
    if (m.type === "taskCreated") taskId = m.task.taskId;
    if (m.type === "taskStatus") statuses.push(m.task.status);
    if (m.type === "result") {
      result = {
        texts: texts(m.result),
        isError: m.result.isError ?? false,
        relatedTaskId: relatedTask(m.result),
      };
    }
    if (m.type === "error") error = String(m.error?.message ?? m.error);
  }
  return { kinds, statuses, taskId, result, error };
}

async function step(name, fn) {
  let timer;
  try {
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`step timed out after ${STEP_TIMEOUT_MS} ms`)),
        STEP_TIMEOUT_MS,
      );
    });
    const data = await Promise.race([fn(), timeout]);
    emit({ step: name, data });
  } catch (e) {
    emit({ step: name, error: String(e?.stack ?? e) });
  } finally {
    clearTimeout(timer);
  }
}

await step("initialize", async () => {
  await client.connect(transport);
  return { protocolVersion: transport.protocolVersion ?? null };
});

await step("list_tools", async () => {
  const r = await client.listTools();
  const tools = {};
  for (const t of r.tools.filter((t) => WORKER_TOOLS.includes(t.name))) {
    tools[t.name] = {
      taskSupport: t.execution?.taskSupport ?? null,
      title: t.title ?? null,
      inputSchema: t.inputSchema,
    };
  }
  return { tools };
});

// A result, with the progress the worker's handler reported relayed to onprogress. Progress
// may arrive on another stream than the result: wait (bounded) for all four.
await step("sum_task", async () => {
  const progress = [];
  const r = await taskStream(
    "tsw_sum",
    { numbers: [1, 2, 3, 4] },
    { onprogress: (p) => progress.push({ progress: p.progress, total: p.total ?? null, message: p.message ?? null }) },
  );
  const deadline = Date.now() + STEP_TIMEOUT_MS;
  while (progress.length < 4 && Date.now() < deadline) await sleep(50);
  return { ...r, progress };
});

// The same tool called without a task: the worker's result answers the call.
await step("sum_plain", async () => {
  const r = await client.callTool({ name: "tsw_sum", arguments: { numbers: [20, 22] } });
  return { texts: texts(r), isError: r.isError ?? false };
});

// An elicitation the worker's handler asks, answered by the handler above.
await step("interview", async () => {
  const before = elicitations.length;
  const r = await taskStream("tsw_interview", {});
  return { ...r, elicitations: elicitations.slice(before) };
});

// Cancel once the worker runs the task (its status message says so).
await step("cancel", async () => {
  const stream = client.experimental.tasks.callToolStream(
    { name: "tsw_wait_cancel", arguments: {} },
    undefined,
    { task: { ttl: 60000 }, timeout: STEP_TIMEOUT_MS },
  );
  const first = await stream.next();
  const taskId = first.value?.task?.taskId;
  const deadline = Date.now() + STEP_TIMEOUT_MS;
  let running;
  for (;;) {
    running = await client.experimental.tasks.getTask(taskId);
    if (running.status !== "working" || running.statusMessage === RUNNING_MESSAGE) break;
    if (Date.now() >= deadline) break;
    await sleep(100);
  }
  const cancelled = await client.experimental.tasks.cancelTask(taskId);
  await stream.return(undefined);
  const after = await client.experimental.tasks.getTask(taskId);
  return {
    taskId,
    runningStatus: running.status,
    runningStatusMessage: running.statusMessage ?? null,
    cancelStatus: cancelled.status,
    afterStatus: after.status,
  };
});

await client.close();
emit({ done: true });
