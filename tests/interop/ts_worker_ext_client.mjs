// Call the tools of a taskmesh worker (served by the Rust test tests/interop_ts/workers.rs)
// with the TypeScript tasks extension client (`@modelcontextprotocol/ext-tasks` 0.2.2 on the
// SDK's `@modelcontextprotocol/client` 2.4.0, pinned to protocol 2026-07-28).
//
// Usage: node ts_worker_ext_client.mjs <server url> <bearer token>
//
// One JSON line per observation on stdout and `{"done": true}` last; a step that throws is
// `{"step": NAME, "error": "..."}`. The script judges nothing itself.
//
// The extension's 2026-07-28 requester takes a raw request path: `rawDispatch` posts each
// request as the protocol frames it, with the routing headers its body names and the bearer
// token.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  createTaskSessionFromClient,
  resultFromTaskOutcome,
} from "@modelcontextprotocol/ext-tasks/client";

const [url, token] = process.argv.slice(2);
const VERSION = "2026-07-28";
const STEP_TIMEOUT_MS = 40000;
// The status message the worker's cancellable tool sets once it runs.
const RUNNING_MESSAGE = "waiting to be cancelled";
const out = (o) => console.log(JSON.stringify(o));

const clientInfo = { name: "taskmesh-ts-worker-ext-interop", version: "1.0.0" };
const clientCapabilities = {
  elicitation: {},
  extensions: { "io.modelcontextprotocol/tasks": {} },
};
const client = new Client(clientInfo, {
  capabilities: clientCapabilities,
  versionNegotiation: { mode: { pin: VERSION } },
});
await client.connect(
  new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  }),
);
out({ era: client.getProtocolEra() });

let nextId = 1;

/** One request (`{method, params}`) as a JSON-RPC request of its own id; its response (the
 * last one on an SSE answer), as the extension's port takes it. */
async function rawDispatch(request, options) {
  const m = await post({ jsonrpc: "2.0", id: nextId++, ...request }, options);
  return m.error !== undefined ? { kind: "error", error: m.error } : { kind: "result", result: m.result };
}

async function post(request, options) {
  const p = request.params ?? {};
  const headers = {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    authorization: `Bearer ${token}`,
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
  endpointId: "taskmesh-worker-interop",
  rawDispatch,
  v2RequestFraming: { protocolVersion: VERSION, clientInfo, clientCapabilities },
  onInputRequest: async (request, context) => {
    asked.push({
      kind: request.kind,
      scope: context.scope,
      delivery: context.delivery,
      taskId: context.taskId ?? null,
      message: request.params?.message ?? null,
    });
    if (request.kind !== "elicitation") throw new Error(`unexpected ${request.kind}`);
    return { action: "accept", content: { name: "Ext" } };
  },
});
out({ capabilities: session.capabilities });

const texts = (result) => (result?.content ?? []).filter((c) => c.type === "text").map((c) => c.text);

/** Run `fn` as step `name`, bounded in time; its data as one line, or its error. */
async function step(name, fn) {
  let timer;
  try {
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`step timed out after ${STEP_TIMEOUT_MS} ms`)), STEP_TIMEOUT_MS);
    });
    out({ step: name, ...(await Promise.race([fn(), timeout])) });
  } catch (e) {
    out({ step: name, error: String(e?.stack ?? e) });
  } finally {
    clearTimeout(timer);
  }
}

/** Call `tool`, settle it, and what came of it. */
async function settled(tool, args) {
  const execution = await session.callTool(tool, args);
  const { outcome } = await execution.settle();
  let result = null;
  if (outcome.status === "completed") {
    const r = resultFromTaskOutcome(outcome);
    result = { texts: texts(r), isError: r.isError ?? false };
  }
  return { kind: execution.kind, status: outcome.status, taskId: execution.handle?.taskId ?? null, result };
}

try {
  // A result: the worker's tool as a task the server decided on, settled through tasks/get.
  await step("sum", () => settled("tsw_sum", { numbers: [5, 6] }));

  // Input inside a task: the worker's elicitation as an input request, answered with
  // tasks/update.
  await step("interview", async () => {
    const before = asked.length;
    const r = await settled("tsw_interview", {});
    return { ...r, asked: asked.slice(before) };
  });

  // Cancellation once the worker runs the task (its status message says so).
  await step("cancel", async () => {
    const execution = await session.callTool("tsw_wait_cancel", {});
    let cancelling = null;
    let runningMessage = null;
    const { outcome } = await execution.settle({
      onEvent: (event) => {
        if (event.type === "task" && event.task.statusMessage === RUNNING_MESSAGE && !cancelling) {
          runningMessage = event.task.statusMessage;
          cancelling = execution.cancel();
        }
      },
    });
    await cancelling;
    return { kind: execution.kind, taskId: execution.handle?.taskId ?? null, runningMessage, status: outcome.status };
  });
} finally {
  await session.close();
  await client.close();
}
out({ done: true });
