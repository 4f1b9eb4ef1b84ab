"""Call the tools of tests/interop/python_worker_serve.py (a Python worker) through taskmesh with
the official MCP Python SDK (mcp 1.30.0) as tasks, on protocol 2025-11-25, over Streamable HTTP.

Usage: python python_worker_client.py <server url> <bearer token>

The script judges nothing itself. It prints one JSON object per line:
  {"step": NAME, "data": {...}}   what the SDK saw in that step
  {"step": NAME, "error": "..."}  the step raised (the traceback is in the text)
and finally {"done": true}. The Rust test (tests/interop_python/workers.rs) asserts on them.
Every step is bounded in time.
"""

import asyncio
import json
import sys
import traceback
import warnings

# The tasks API of mcp 1.x is experimental and deprecated; its warnings are expected here.
warnings.filterwarnings("ignore", category=DeprecationWarning)

import anyio  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamablehttp_client  # noqa: E402
from mcp.shared.exceptions import McpError  # noqa: E402
from mcp.types import (  # noqa: E402
    CallToolResult,
    ElicitResult,
    ProgressNotification,
    ServerNotification,
    TextContent,
)

RELATED_TASK = "io.modelcontextprotocol/related-task"
STEP_TIMEOUT_S = 40
WORKER_TOOLS = ["py_sum", "py_interview", "py_wait_cancel", "py_fail", "py_reject"]


def emit(obj):
    print(json.dumps(obj, default=str), flush=True)


def texts(result):
    return [c.text for c in result.content if isinstance(c, TextContent)]


def related_task_id(meta):
    if not meta:
        return None
    value = meta.get(RELATED_TASK)
    return value.get("taskId") if isinstance(value, dict) else None


class Observer:
    """The SDK's callbacks: answers elicitations with a name, and keeps the progress
    notifications it receives, by progress token."""

    def __init__(self):
        self.elicitations = []
        self.progress = {}
        self.progress_seen = anyio.Event()

    async def elicit(self, context, params):
        meta = params.meta.model_dump(by_alias=True, exclude_none=True) if params.meta else {}
        self.elicitations.append(
            {
                "message": getattr(params, "message", None),
                "requestedSchema": getattr(params, "requestedSchema", None),
                "relatedTaskId": related_task_id(meta),
            }
        )
        return ElicitResult(action="accept", content={"name": "Python SDK"})

    async def on_message(self, message):
        root = getattr(message, "root", None)
        if isinstance(message, ServerNotification) and isinstance(root, ProgressNotification):
            p = root.params
            meta = p.meta.model_dump(by_alias=True, exclude_none=True) if p.meta else {}
            self.progress.setdefault(str(p.progressToken), []).append(
                {
                    "progress": p.progress,
                    "total": p.total,
                    "message": p.message,
                    "relatedTaskId": related_task_id(meta),
                }
            )
            self.progress_seen.set()
            self.progress_seen = anyio.Event()

    async def wait_progress(self, token, count):
        """Wait until `count` progress notifications of `token` arrived (the step's bound
        applies); they may come on another stream than the result."""
        while len(self.progress.get(token, [])) < count:
            await self.progress_seen.wait()
        return self.progress[token]


async def poll_to_end(session, task_id, stop_at=()):
    statuses = []
    last = None
    async for status in session.experimental.poll_task(task_id):
        statuses.append(status.status)
        last = status
        if status.status in stop_at:
            break
    return statuses, last


async def step_initialize(session, observer):
    init = await session.initialize()
    return {"protocolVersion": init.protocolVersion}


def tool_fields(tool):
    return {
        "taskSupport": tool.execution.taskSupport if tool.execution else None,
        "title": tool.title,
        "description": tool.description,
        "inputSchema": tool.inputSchema,
    }


async def step_wait_tools(session, observer):
    """The worker registers on its own time: wait until its tools are listed."""
    while True:
        listed = await session.list_tools()
        tools = {t.name: t for t in listed.tools}
        if all(name in tools for name in WORKER_TOOLS):
            return {name: tool_fields(tools[name]) for name in WORKER_TOOLS}
        await anyio.sleep(0.2)


async def run_task(session, tool, arguments, progress_token=None, stop_at=()):
    meta = {"progressToken": progress_token} if progress_token else None
    created = await session.experimental.call_tool_as_task(tool, arguments, ttl=60000, meta=meta)
    task_id = created.task.taskId
    statuses, _ = await poll_to_end(session, task_id, stop_at=stop_at)
    data = {"taskId": task_id, "createdStatus": created.task.status, "statuses": statuses}
    try:
        result = await session.experimental.get_task_result(task_id, CallToolResult)
        data.update(
            {
                "resultText": texts(result),
                "structuredContent": result.structuredContent,
                "isError": result.isError,
                "resultRelatedTaskId": related_task_id(result.meta),
            }
        )
    except McpError as exc:
        data["resultError"] = {
            "code": exc.error.code,
            "message": exc.error.message,
            "data": exc.error.data,
        }
    final = await session.experimental.get_task(task_id)
    data["finalStatus"] = final.status
    data["finalStatusMessage"] = final.statusMessage
    return data


async def step_sum_task(session, observer):
    data = await run_task(session, "py_sum", {"numbers": [1, 2, 3, 4]}, "sum-progress")
    data["progress"] = await observer.wait_progress("sum-progress", 4)
    return data


async def step_sum_plain(session, observer):
    result = await session.call_tool("py_sum", {"numbers": [10, 32]})
    return {"text": texts(result), "isError": result.isError}


async def step_interview(session, observer):
    asked_before = len(observer.elicitations)
    data = await run_task(
        session, "py_interview", {}, "interview-progress", stop_at=("input_required",)
    )
    data["elicitations"] = observer.elicitations[asked_before:]
    data["progress"] = await observer.wait_progress("interview-progress", 2)
    return data


async def step_cancel(session, observer):
    created = await session.experimental.call_tool_as_task("py_wait_cancel", {}, ttl=60000)
    task_id = created.task.taskId
    # Cancel once the worker runs it: its status message says so.
    while True:
        running = await session.experimental.get_task(task_id)
        if running.statusMessage == "waiting to be cancelled" or running.status != "working":
            break
        await anyio.sleep(0.1)
    cancelled = await session.experimental.cancel_task(task_id)
    statuses, last = await poll_to_end(session, task_id)
    return {
        "taskId": task_id,
        "runningStatus": running.status,
        "runningStatusMessage": running.statusMessage,
        "cancelStatus": cancelled.status,
        "pollStatuses": statuses,
        "finalStatus": last.status if last else None,
    }


async def step_fail(session, observer):
    return await run_task(session, "py_fail", {})


async def step_reject(session, observer):
    return await run_task(session, "py_reject", {})


STEPS = [
    ("initialize", step_initialize),
    ("wait_tools", step_wait_tools),
    ("sum_task", step_sum_task),
    ("sum_plain", step_sum_plain),
    ("interview", step_interview),
    ("cancel", step_cancel),
    ("fail", step_fail),
    ("reject", step_reject),
]


async def main(url, token):
    observer = Observer()
    headers = {"Authorization": f"Bearer {token}"}
    async with streamablehttp_client(url, headers=headers, timeout=30) as (read, write, _):
        async with ClientSession(
            read,
            write,
            elicitation_callback=observer.elicit,
            message_handler=observer.on_message,
        ) as session:
            for name, step in STEPS:
                try:
                    with anyio.fail_after(STEP_TIMEOUT_S):
                        data = await step(session, observer)
                    emit({"step": name, "data": data})
                except Exception:  # noqa: BLE001 - report every failure to the Rust side
                    emit({"step": name, "error": traceback.format_exc()})
                    if name in ("initialize", "wait_tools"):
                        break
    emit({"done": True})


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python_worker_client.py <server url> <bearer token>", file=sys.stderr)
        sys.exit(2)
    asyncio.run(main(sys.argv[1], sys.argv[2]))
