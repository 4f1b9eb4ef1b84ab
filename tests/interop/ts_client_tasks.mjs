// The official MCP TypeScript SDK (@modelcontextprotocol/sdk 1.32.2) as the receiver of
// task-augmented requests: its client declares `tasks.requests.elicitation.create` and
// `tasks.requests.sampling.createMessage` and keeps its tasks in the SDK's InMemoryTaskStore,
// which answers the server's `tasks/get` and `tasks/result`. Its elicitation and sampling
// handlers create a task for a task-augmented request and finish it a moment later, as an
// application that waits for a person would.
//
// Usage: node ts_client_tasks.mjs <server url> <bearer token>
//
// The script judges nothing itself. It prints one JSON object per line:
//   {"step": NAME, "data": {...}}   what the SDK saw in that step
//   {"step": NAME, "error": "..."}  the step threw
// and finally {"done": true}. The Rust test (tests/interop_ts/client_tasks.rs) asserts on them.
// Every step is bounded in time.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { InMemoryTaskStore } from "@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";

const STEP_TIMEOUT_MS = 40000;
// How long the client's own tasks take to finish.
const ANSWER_AFTER_MS = 1500;

const [url, token] = process.argv.slice(2);

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

const store = new InMemoryTaskStore();
// What each handler was asked, and the client tasks it made.
const handled = [];

const client = new Client(
  { name: "taskmesh-ts-client-tasks", version: "1.0.0" },
  {
    capabilities: {
      elicitation: {},
      sampling: {},
      tasks: {
        list: {},
        cancel: {},
        requests: { elicitation: { create: {} }, sampling: { createMessage: {} } },
      },
    },
    taskStore: store,
  },
);

// Answer `request` with `answer`, as a client task when the server asked for one.
async function answerAsTask(kind, request, extra, answer) {
  const asked = request.params.task;
  const entry = { kind, taskAugmented: Boolean(asked), ttl: asked?.ttl ?? null, clientTaskId: null };
  handled.push(entry);
  if (!asked || !extra.taskStore) {
    return answer;
  }
  const task = await extra.taskStore.createTask({ ttl: asked.ttl, pollInterval: 200 });
  entry.clientTaskId = task.taskId;
  setTimeout(() => {
    extra.taskStore.storeTaskResult(task.taskId, "completed", answer).catch((e) => {
      entry.storeError = String(e);
    });
  }, ANSWER_AFTER_MS);
  return { task };
}

client.setRequestHandler(ElicitRequestSchema, (request, extra) =>
  answerAsTask("elicitation", request, extra, { action: "accept", content: { confirm: true } }),
);
client.setRequestHandler(CreateMessageRequestSchema, (request, extra) =>
  answerAsTask("sampling", request, extra, {
    role: "assistant",
    content: { type: "text", text: "forty-two" },
    model: "interop-model",
    stopReason: "endTurn",
  }),
);

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});

function texts(result) {
  return (result?.content ?? []).filter((c) => c.type === "text").map((c) => c.text);
}

// Run a tool as a task stream: the statuses seen and the outcome.
async function taskStream(name, args) {
  const statuses = [];
  const messages = [];
  let result = null;
  let error = null;
  for await (const m of client.experimental.tasks.callToolStream(
    { name, arguments: args },
    undefined,
    { task: { ttl: 60000 }, timeout: STEP_TIMEOUT_MS },
  )) {
    if (m.type === "taskStatus") {
      statuses.push(m.task.status);
      if (m.task.statusMessage) messages.push(m.task.statusMessage);
    }
    if (m.type === "result") result = { texts: texts(m.result), isError: m.result.isError ?? false };
    if (m.type === "error") error = String(m.error?.message ?? m.error);
  }
  return { statuses, messages, result, error };
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
  return { protocolVersion: transport.protocolVersion ?? null };
});

for (const [name, tool, args] of [
  ["elicitation", "confirm_delete", { filename: "ts-report.txt" }],
  ["sampling", "ask_model", { prompt: "6 x 7?" }],
]) {
  await step(name, async () => {
    const before = handled.length;
    const run = await taskStream(tool, args);
    const mine = handled.slice(before);
    const clientTasks = [];
    for (const h of mine) {
      if (h.clientTaskId) {
        const t = await store.getTask(h.clientTaskId);
        clientTasks.push({ status: t?.status ?? null, ttl: t?.ttl ?? null });
      }
    }
    return { ...run, handled: mine, clientTasks };
  });
}

await client.close();
// The store holds a timer per task until its TTL (24 h here): let them go.
store.cleanup();
emit({ done: true });
