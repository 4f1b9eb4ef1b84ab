"""Drive a taskmesh server with the official MCP Python SDK (mcp 1.30.0) and its
experimental tasks client API, over Streamable HTTP.

Usage: python python_tasks_client.py <server url> [bearer token]

With INTEROP_STEPS=upstream in the environment it runs the steps for a server whose tools are
an upstream's (tests/upstream/server.py, prefixed `py_`) instead, and answers sampling too.

The script judges nothing itself. It prints one JSON object per line:
  {"step": NAME, "data": {...}}   what the SDK saw in that step
  {"step": NAME, "error": "..."}  the step raised (the traceback is in the text)
and finally {"done": true}. The Rust test (tests/interop_python.rs) reads these lines
and asserts on them. Every step is bounded in time.
"""

import asyncio
import json
import os
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
    CreateMessageResult,
    ElicitResult,
    TextContent,
)

RELATED_TASK = "io.modelcontextprotocol/related-task"
STEP_TIMEOUT_S = 40


def emit(obj):
    print(json.dumps(obj, default=str), flush=True)


def texts(result):
    return [c.text for c in result.content if isinstance(c, TextContent)]


def task_fields(task):
    """The fields of a Task as the SDK parsed them."""
    return {
        "taskId": task.taskId,
        "status": task.status,
        "statusMessage": task.statusMessage,
        "ttl": task.ttl,
        "pollInterval": task.pollInterval,
        "createdAt": task.createdAt.isoformat() if task.createdAt else None,
        "lastUpdatedAt": task.lastUpdatedAt.isoformat() if task.lastUpdatedAt else None,
    }


def related_task_id(meta):
    if not meta:
        return None
    value = meta.get(RELATED_TASK)
    if isinstance(value, dict):
        return value.get("taskId")
    return None


def error_fields(exc):
    return {"code": exc.error.code, "message": exc.error.message}


class Elicitations:
    """Answers elicitation/create requests and remembers what it was asked.

    A request whose message names "keep" is declined, and that answer carries the
    related-task _meta (as the 2025-11-25 tasks spec asks of a client). Every other
    request is accepted with {"confirm": true} exactly as the SDK sends it by default
    (no _meta), as a plain SDK client would.
    """

    def __init__(self):
        self.seen = []

    async def __call__(self, context, params):
        meta = params.meta.model_dump(by_alias=True, exclude_none=True) if params.meta else {}
        message = getattr(params, "message", None)
        self.seen.append(
            {
                "mode": getattr(params, "mode", None),
                "message": message,
                "requestedSchema": getattr(params, "requestedSchema", None),
                "relatedTaskId": related_task_id(meta),
                "requestId": context.request_id,
            }
        )
        schema = getattr(params, "requestedSchema", None) or {}
        if "name" in schema.get("properties", {}):
            return ElicitResult(action="accept", content={"name": "Python SDK"})
        if message and "keep" in message:
            answer = {"action": "decline"}
            task_id = related_task_id(meta)
            if task_id is not None:
                answer["_meta"] = {RELATED_TASK: {"taskId": task_id}}
            return ElicitResult.model_validate(answer)
        return ElicitResult(action="accept", content={"confirm": True})


async def poll_to_end(session, task_id, stop_at=()):
    """Poll with the SDK's poll_task; returns (statuses, last task)."""
    statuses = []
    last = None
    async for status in session.experimental.poll_task(task_id):
        statuses.append(status.status)
        last = status
        if status.status in stop_at:
            break
    return statuses, last


async def step_initialize(session, state):
    init = await session.initialize()
    tasks = init.capabilities.tasks
    return {
        "protocolVersion": init.protocolVersion,
        "serverName": init.serverInfo.name,
        "tasks": tasks.model_dump(by_alias=True, exclude_none=True) if tasks else None,
        "toolsCallDeclared": bool(
            tasks and tasks.requests and tasks.requests.tools and tasks.requests.tools.call is not None
        ),
        "listDeclared": bool(tasks and tasks.list is not None),
        "cancelDeclared": bool(tasks and tasks.cancel is not None),
    }


async def step_list_tools(session, state):
    listed = await session.list_tools()
    support = {}
    for tool in listed.tools:
        support[tool.name] = tool.execution.taskSupport if tool.execution else None
    return {"taskSupport": support}


async def step_slow_task(session, state):
    created = await session.experimental.call_tool_as_task(
        "slow_compute", {"seconds": 2, "label": "py-interop"}, ttl=60000
    )
    task_id = created.task.taskId
    state["slow_task"] = task_id
    statuses, last = await poll_to_end(session, task_id)
    result = await session.experimental.get_task_result(task_id, CallToolResult)
    return {
        "created": task_fields(created.task),
        "statuses": statuses,
        "final": task_fields(last),
        "resultText": texts(result),
        "isError": result.isError,
        "resultRelatedTaskId": related_task_id(result.meta),
    }


async def step_failing_task(session, state):
    created = await session.experimental.call_tool_as_task("failing_job", {}, ttl=60000)
    task_id = created.task.taskId
    state["failing_task"] = task_id
    statuses, last = await poll_to_end(session, task_id)
    data = {
        "created": task_fields(created.task),
        "statuses": statuses,
        "final": task_fields(last),
    }
    try:
        result = await session.experimental.get_task_result(task_id, CallToolResult)
        data["resultText"] = texts(result)
        data["isError"] = result.isError
        data["resultRelatedTaskId"] = related_task_id(result.meta)
    except McpError as exc:
        data["resultError"] = error_fields(exc)
    return data


async def step_cancel_task(session, state):
    created = await session.experimental.call_tool_as_task(
        "slow_compute", {"seconds": 600, "label": "py-cancel"}, ttl=60000
    )
    task_id = created.task.taskId
    state["cancelled_task"] = task_id
    before = await session.experimental.get_task(task_id)
    cancelled = await session.experimental.cancel_task(task_id)
    after = await session.experimental.get_task(task_id)
    # The work may still be winding down: cancelled must stick.
    await anyio.sleep(1.5)
    later = await session.experimental.get_task(task_id)
    statuses, _ = await poll_to_end(session, task_id)
    data = {
        "created": task_fields(created.task),
        "before": before.status,
        "cancelResult": task_fields(cancelled),
        "cancelResultRelatedTaskId": related_task_id(cancelled.meta),
        "getAfter": task_fields(after),
        "getLater": later.status,
        "pollStatuses": statuses,
    }
    try:
        await session.experimental.cancel_task(task_id)
        data["secondCancel"] = "succeeded"
    except McpError as exc:
        data["secondCancel"] = error_fields(exc)
    # What tasks/result answers for a cancelled task is left open by the spec; record it.
    try:
        with anyio.fail_after(10):
            result = await session.experimental.get_task_result(task_id, CallToolResult)
        data["resultAfterCancel"] = {"text": texts(result), "isError": result.isError}
    except McpError as exc:
        data["resultAfterCancel"] = {"error": error_fields(exc)}
    except TimeoutError:
        data["resultAfterCancel"] = {"timeout": True}
    return data


async def step_greet(session, state):
    result = await session.call_tool("greet", {"name": "Python SDK"})
    return {"text": texts(result), "isError": result.isError}


async def task_to_result(session, state, tool, arguments, stop_at=()):
    """`tool` as a task: polled (until `stop_at` or its end), then its result, which blocks until
    the task ends. The server sends its requests on that stream (or on the session's GET stream
    when no tasks/result is open yet) and the SDK hands them to its callbacks."""
    elicitations = state["elicitations"]
    asked_before = len(elicitations.seen)
    created = await session.experimental.call_tool_as_task(tool, arguments, ttl=60000)
    task_id = created.task.taskId
    statuses, _ = await poll_to_end(session, task_id, stop_at=stop_at)
    result = await session.experimental.get_task_result(task_id, CallToolResult)
    final = await session.experimental.get_task(task_id)
    return {
        "taskId": task_id,
        "created": task_fields(created.task),
        "statusesBeforeResult": statuses,
        "elicitations": elicitations.seen[asked_before:],
        "resultText": texts(result),
        "isError": result.isError,
        "resultRelatedTaskId": related_task_id(result.meta),
        "finalStatus": final.status,
    }


async def confirm_delete_as_task(session, state, filename):
    return await task_to_result(
        session, state, "confirm_delete", {"filename": filename}, stop_at=("input_required",)
    )


async def step_elicit_accept(session, state):
    data = await confirm_delete_as_task(session, state, "report.txt")
    state["elicit_accept_task"] = data["taskId"]
    return data


async def step_elicit_decline(session, state):
    data = await confirm_delete_as_task(session, state, "keep.txt")
    state["elicit_decline_task"] = data["taskId"]
    return data


async def step_list_tasks(session, state):
    # tasks/list exists only when the server declared tasks.list; record either way.
    statuses = {}
    pages = 0
    cursor = None
    try:
        while pages < 50:
            page = await session.experimental.list_tasks(cursor)
            pages += 1
            for task in page.tasks:
                statuses[task.taskId] = task.status
            cursor = page.nextCursor
            if not cursor:
                break
    except McpError as exc:
        return {"outcome": "error", "error": error_fields(exc)}
    return {"outcome": "listed", "statuses": statuses, "pages": pages}


async def step_unknown_task(session, state):
    try:
        await session.experimental.get_task("no-such-task")
        return {"outcome": "succeeded"}
    except McpError as exc:
        return {"outcome": "error", "error": error_fields(exc)}


async def answer_sampling(context, params):
    """Answers sampling/createMessage with a fixed text."""
    return CreateMessageResult(
        role="assistant",
        content=TextContent(type="text", text="sampled by the Python SDK"),
        model="interop-model",
    )


async def step_upstream_slow(session, state):
    return await task_to_result(session, state, "py_slow", {"steps": 3})


async def step_upstream_ask(session, state):
    return await task_to_result(session, state, "py_ask", {}, stop_at=("input_required",))


async def step_upstream_sample(session, state):
    return await task_to_result(
        session, state, "py_sample", {"prompt": "hi"}, stop_at=("input_required",)
    )


async def step_upstream_fail(session, state):
    return await task_to_result(session, state, "py_fail", {})


async def step_upstream_echo(session, state):
    result = await session.call_tool("py_echo", {"text": "plain through taskmesh"})
    return {"text": texts(result), "isError": result.isError}


UPSTREAM_STEPS = [
    ("initialize", step_initialize),
    ("list_tools", step_list_tools),
    ("upstream_slow", step_upstream_slow),
    ("upstream_ask", step_upstream_ask),
    ("upstream_sample", step_upstream_sample),
    ("upstream_fail", step_upstream_fail),
    ("upstream_echo", step_upstream_echo),
]

STEPS = [
    ("initialize", step_initialize),
    ("list_tools", step_list_tools),
    ("slow_task", step_slow_task),
    ("failing_task", step_failing_task),
    ("cancel_task", step_cancel_task),
    ("greet", step_greet),
    ("elicit_accept", step_elicit_accept),
    ("elicit_decline", step_elicit_decline),
    ("list_tasks", step_list_tasks),
    ("unknown_task", step_unknown_task),
]


async def main(url, token):
    state = {"elicitations": Elicitations()}
    headers = {"Authorization": f"Bearer {token}"} if token else None
    # terminate_on_close=False keeps the session alive after the script so the Rust
    # side can cross-check the same tasks with its own raw client.
    async with streamablehttp_client(url, headers=headers, timeout=30, terminate_on_close=False) as (
        read,
        write,
        get_session_id,
    ):
        upstream = os.environ.get("INTEROP_STEPS") == "upstream"
        callbacks = {"elicitation_callback": state["elicitations"]}
        if upstream:
            callbacks["sampling_callback"] = answer_sampling
        async with ClientSession(read, write, **callbacks) as session:
            for name, step in UPSTREAM_STEPS if upstream else STEPS:
                try:
                    with anyio.fail_after(STEP_TIMEOUT_S):
                        data = await step(session, state)
                    emit({"step": name, "data": data})
                except Exception:  # noqa: BLE001 - report every failure to the Rust side
                    emit({"step": name, "error": traceback.format_exc()})
                    if name == "initialize":
                        break
            emit(
                {
                    "step": "session",
                    "data": {
                        "sessionId": get_session_id(),
                        "tasks": {
                            k: v for k, v in state.items() if isinstance(v, str)
                        },
                    },
                }
            )
    emit({"done": True})


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print("usage: python_tasks_client.py <server url> [bearer token]", file=sys.stderr)
        sys.exit(2)
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else None))
