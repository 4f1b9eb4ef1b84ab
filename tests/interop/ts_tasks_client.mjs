// Drive a taskmesh server with the official MCP TypeScript SDK (@modelcontextprotocol/sdk
// 1.32.2) and its experimental tasks client (`client.experimental.tasks`), over Streamable
// HTTP (the transport keeps its GET stream open, as an SDK client does by default).
//
// Usage: node ts_tasks_client.mjs <server url> <bearer token>
//
// The script judges nothing itself. It prints one JSON object per line:
//   {"step": NAME, "data": {...}}   what the SDK saw in that step
//   {"step": NAME, "error": "..."}  the step threw
// and finally {"done": true}. The Rust test (tests/interop_ts/main.rs) asserts on them.
// Every step is bounded in time.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";

const RELATED_TASK = "io.modelcontextprotocol/related-task";
const STEP_TIMEOUT_MS = 40000;

const [url, token] = process.argv.slice(2);

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

// Handler calls per task id: each request of a task must reach a handler exactly once.
const elicitations = [];
const samplings = [];

function relatedTask(params) {
  return params?._meta?.[RELATED_TASK]?.taskId ?? null;
}

const client = new Client(
  { name: "taskmesh-ts-interop", version: "1.0.0" },
  { capabilities: { elicitation: {}, sampling: {} } },
);
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  const p = request.params;
  elicitations.push({ taskId: relatedTask(p), message: p.message });
  if (p.message === "Your name?") {
    return { action: "accept", content: { name: "Ada" } };
  }
  if (p.message === "Your favourite colour?") {
    return { action: "accept", content: { colour: "green" } };
  }
  return { action: "accept", content: { confirm: true } };
});
client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
  const p = request.params;
  samplings.push({ taskId: relatedTask(p) });
  return {
    role: "assistant",
    content: { type: "text", text: "model says hi" },
    model: "interop-model",
    stopReason: "endTurn",
  };
});

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});

function texts(result) {
  return (result?.content ?? []).filter((c) => c.type === "text").map((c) => c.text);
}

// Run a tool as a task stream; the kinds of messages seen, the task id and the outcome.
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
    if (m.type === "result") result = { texts: texts(m.result), isError: m.result.isError ?? false };
    if (m.type === "error") error = String(m.error?.message ?? m.error);
  }
  return { kinds, statuses, taskId, result, error };
}

function forTask(list, taskId) {
  return list.filter((e) => e.taskId === taskId).length;
}

async function step(name, fn) {
  let timer;
  try {
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`step timed out after ${STEP_TIMEOUT_MS} ms`)), STEP_TIMEOUT_MS);
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
  const caps = client.getServerCapabilities();
  return { tasks: caps?.tasks ?? null, protocolVersion: transport.protocolVersion ?? null };
});

await step("list_tools", async () => {
  const r = await client.listTools();
  return {
    tools: Object.fromEntries(r.tools.map((t) => [t.name, t.execution?.taskSupport ?? null])),
  };
});

await step("slow_task_with_progress", async () => {
  const progress = [];
  const r = await taskStream(
    "slow_compute",
    { seconds: 1.2, label: "ts" },
    { onprogress: (p) => progress.push(p.progress) },
  );
  return { ...r, progress };
});

await step("elicitation", async () => {
  const r = await taskStream("confirm_delete", { filename: "ts.txt" });
  return { ...r, handlerCalls: forTask(elicitations, r.taskId) };
});

await step("two_elicitations", async () => {
  const r = await taskStream("multi_input", {});
  return { ...r, handlerCalls: forTask(elicitations, r.taskId) };
});

await step("sampling", async () => {
  const r = await taskStream("ask_model", { prompt: "hello" });
  return { ...r, handlerCalls: forTask(samplings, r.taskId) };
});

await step("cancel", async () => {
  const stream = client.experimental.tasks.callToolStream(
    { name: "slow_compute", arguments: { seconds: 60, label: "long" } },
    undefined,
    { task: { ttl: 60000 }, timeout: STEP_TIMEOUT_MS },
  );
  const first = await stream.next();
  const taskId = first.value?.task?.taskId;
  const cancelled = await client.experimental.tasks.cancelTask(taskId);
  await stream.return(undefined);
  const after = await client.experimental.tasks.getTask(taskId);
  return { taskId, cancelStatus: cancelled.status, getStatus: after.status };
});

await step("list_tasks", async () => {
  const ids = [];
  let cursor;
  do {
    const page = await client.experimental.tasks.listTasks(cursor);
    for (const t of page.tasks) ids.push(t.taskId);
    cursor = page.nextCursor;
  } while (cursor);
  return { ids };
});

await client.close();
emit({ done: true });
