"""The official MCP Python SDK (mcp 1.30.0) client as the receiver of task-augmented requests:
its experimental task handlers (ExperimentalTaskHandlers) declare
`tasks.requests.elicitation.create` and `tasks.requests.sampling.createMessage`, make a task
of each such request in the SDK's InMemoryTaskStore, finish it a moment later, and answer the
server's `tasks/get` and `tasks/result` about it from the store.

Usage: python python_client_tasks.py <server url> <token>

The script judges nothing itself. It prints one JSON object per line:
  {"step": NAME, "data": {...}}   what the SDK saw in that step
  {"step": NAME, "error": "..."}  the step raised (the traceback is in the text)
and finally {"done": true}. The Rust test (tests/interop_python/client_tasks.rs) asserts on
them. Every step is bounded in time.
"""

import asyncio
import json
import sys
import traceback
import warnings

# The tasks API of mcp 1.x is experimental and deprecated; its warnings are expected here.
warnings.filterwarnings("ignore", category=DeprecationWarning)

from mcp import ClientSession  # noqa: E402
from mcp.client.experimental.task_handlers import ExperimentalTaskHandlers  # noqa: E402
from mcp.client.streamable_http import streamablehttp_client  # noqa: E402
from mcp.shared.experimental.tasks.in_memory_task_store import InMemoryTaskStore  # noqa: E402
from mcp.types import (  # noqa: E402
    INVALID_PARAMS,
    CallToolResult,
    CreateMessageResult,
    CreateTaskResult,
    ElicitResult,
    ErrorData,
    GetTaskPayloadResult,
    GetTaskResult,
    TextContent,
)

STEP_TIMEOUT_S = 40
ANSWER_AFTER_S = 1.5

store = InMemoryTaskStore()
handled = []
background = set()


def emit(obj):
    print(json.dumps(obj, default=str), flush=True)


def texts(result):
    return [c.text for c in result.content if isinstance(c, TextContent)]


async def as_task(kind, task_metadata, answer):
    """A client task for a task-augmented request, finished with `answer` a moment later."""
    task = await store.create_task(task_metadata)
    handled.append({"kind": kind, "ttl": task_metadata.ttl, "clientTaskId": task.taskId})

    async def finish():
        await asyncio.sleep(ANSWER_AFTER_S)
        await store.store_result(task.taskId, answer)
        await store.update_task(task.taskId, status="completed")

    job = asyncio.create_task(finish())
    background.add(job)
    job.add_done_callback(background.discard)
    return CreateTaskResult(task=task)


async def augmented_elicitation(context, params, task_metadata):
    return await as_task(
        "elicitation", task_metadata, ElicitResult(action="accept", content={"confirm": True})
    )


async def augmented_sampling(context, params, task_metadata):
    answer = CreateMessageResult(
        role="assistant",
        content=TextContent(type="text", text="forty-two"),
        model="interop-model",
        stopReason="endTurn",
    )
    return await as_task("sampling", task_metadata, answer)


async def get_task(context, params):
    task = await store.get_task(params.taskId)
    if task is None:
        return ErrorData(code=INVALID_PARAMS, message=f"Task {params.taskId} not found")
    return GetTaskResult(**task.model_dump())


async def get_task_result(context, params):
    result = await store.get_result(params.taskId)
    if result is None:
        return ErrorData(code=INVALID_PARAMS, message=f"Task {params.taskId} has no result")
    return GetTaskPayloadResult.model_validate(result.model_dump(by_alias=True, exclude_none=True))


handlers = ExperimentalTaskHandlers(
    get_task=get_task,
    get_task_result=get_task_result,
    augmented_elicitation=augmented_elicitation,
    augmented_sampling=augmented_sampling,
)


async def step(name, body):
    try:
        data = await asyncio.wait_for(body(), STEP_TIMEOUT_S)
        emit({"step": name, "data": data})
    except Exception:  # noqa: BLE001 - every failure is reported to the Rust side
        emit({"step": name, "error": traceback.format_exc()})


async def run_tool(session, tool, arguments):
    """`tool` as a task: polled until it waits or ends, then its result (which blocks until it
    ends; the server's requests about the client's task arrive meanwhile)."""
    before = len(handled)
    created = await session.experimental.call_tool_as_task(tool, arguments, ttl=60000)
    task_id = created.task.taskId
    statuses = []
    async for status in session.experimental.poll_task(task_id):
        statuses.append(status.status)
        if status.status == "input_required":
            break
    result = await session.experimental.get_task_result(task_id, CallToolResult)
    mine = handled[before:]
    client_tasks = []
    for h in mine:
        t = await store.get_task(h["clientTaskId"])
        client_tasks.append({"status": t.status if t else None})
    return {
        "statuses": statuses,
        "handled": mine,
        "clientTasks": client_tasks,
        "resultText": texts(result),
        "isError": result.isError,
    }


async def plain_elicitation(context, params):
    """Declares the elicitation capability; a plain request (none is expected) is declined."""
    return ElicitResult(action="decline")


async def plain_sampling(context, params):
    """Declares the sampling capability; a plain request (none is expected) is refused."""
    return ErrorData(code=INVALID_PARAMS, message="only task-augmented sampling here")


async def main(url, token):
    async with streamablehttp_client(url, headers={"Authorization": f"Bearer {token}"}) as (
        read,
        write,
        _,
    ):
        async with ClientSession(
            read,
            write,
            elicitation_callback=plain_elicitation,
            sampling_callback=plain_sampling,
            experimental_task_handlers=handlers,
        ) as session:

            async def initialize():
                init = await session.initialize()
                return {"protocolVersion": init.protocolVersion}

            await step("initialize", initialize)
            await step(
                "elicitation",
                lambda: run_tool(session, "confirm_delete", {"filename": "py-report.txt"}),
            )
            await step("sampling", lambda: run_tool(session, "ask_model", {"prompt": "6 x 7?"}))
    emit({"done": True})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
