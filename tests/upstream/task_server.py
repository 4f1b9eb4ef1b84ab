"""An MCP server on the official Python SDK's low-level API that runs tool calls as tasks
itself (2025-11-25 tasks, the SDK's experimental task support), for the upstream tests.

    python task_server.py stdio STARTS_FILE
    python task_server.py http PORT STARTS_FILE

Over stdio it appends its pid to STARTS_FILE.pids when it starts. Its tasks are served to any
of its sessions that has their id (ids chosen here, not scoped to
the creating session), as a task-running server behind several taskmesh nodes must: a node
that takes a task over follows it through its own session.

Tools (taskSupport optional unless said):
- research(seconds, steps): works for `seconds`, reporting progress `steps` times; appends a
  line to STARTS_FILE when it starts, so a test can count how often a call ran;
- clarify(topic): asks the user which topic they mean (elicitation through tasks/result), then
  answers with it;
- broken(): ends as a tool error (isError);
- starts(): how many research calls started (taskSupport forbidden);
- statuses(): how many of its tasks are in each status, as JSON (taskSupport forbidden).
"""
import contextlib
import json
import os
import sys
import uuid
import warnings

import anyio

import mcp.types as types
from mcp.server.experimental.task_context import ServerTaskContext
from mcp.server.lowlevel import Server

mode = sys.argv[1]
port = int(sys.argv[2]) if mode == "http" else 0
starts_file = sys.argv[3] if mode == "http" else sys.argv[2]

server = Server("task-upstream-under-test")
support = server.experimental.enable_tasks()


def text(s: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=s)])


def started() -> int:
    try:
        with open(starts_file) as f:
            return len(f.readlines())
    except FileNotFoundError:
        return 0


TOOLS = [
    types.Tool(
        name="research",
        description="Work for a while, reporting progress.",
        inputSchema={
            "type": "object",
            "properties": {"seconds": {"type": "number"}, "steps": {"type": "integer"}},
            "required": ["seconds"],
        },
        execution=types.ToolExecution(taskSupport="optional"),
    ),
    types.Tool(
        name="clarify",
        description="Ask which topic is meant.",
        inputSchema={
            "type": "object",
            "properties": {"topic": {"type": "string"}},
            "required": ["topic"],
        },
        execution=types.ToolExecution(taskSupport="optional"),
    ),
    types.Tool(
        name="broken",
        description="End as a tool error.",
        inputSchema={"type": "object"},
        execution=types.ToolExecution(taskSupport="optional"),
    ),
    types.Tool(
        name="starts",
        description="How many research calls started.",
        inputSchema={"type": "object"},
        execution=types.ToolExecution(taskSupport="forbidden"),
    ),
    types.Tool(
        name="statuses",
        description="How many tasks are in each status.",
        inputSchema={"type": "object"},
        execution=types.ToolExecution(taskSupport="forbidden"),
    ),
]


async def statuses() -> dict:
    counts: dict = {}
    cursor = None
    while True:
        tasks, cursor = await support.store.list_tasks(cursor)
        for t in tasks:
            counts[t.status] = counts.get(t.status, 0) + 1
        if cursor is None:
            return counts


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    return TOOLS


async def research(args: dict, progress) -> types.CallToolResult:
    with open(starts_file, "a") as f:
        f.write("start\n")
    seconds = float(args["seconds"])
    steps = max(1, int(args.get("steps", 1)))
    for i in range(steps):
        await anyio.sleep(seconds / steps)
        await progress(i + 1, steps)
    return text(f"researched for {seconds} s in {steps} steps")


@server.call_tool()
async def call_tool(name: str, args: dict):
    ctx = server.request_context
    if name == "starts":
        return text(str(started()))
    if name == "statuses":
        return text(json.dumps(await statuses(), sort_keys=True))
    token = ctx.meta.progressToken if ctx.meta else None

    async def progress(done: int, total: int) -> None:
        if token is not None:
            await ctx.session.send_progress_notification(token, done, total)

    async def work(task: ServerTaskContext) -> types.CallToolResult:
        if name == "research":
            return await research(args, progress)
        if name == "clarify":
            answer = await task.elicit(
                message=f"Which {args['topic']} do you mean?",
                requestedSchema={
                    "type": "object",
                    "properties": {"meaning": {"type": "string"}},
                    "required": ["meaning"],
                },
            )
            if answer.action == "accept" and answer.content:
                return text(f"{args['topic']} as in {answer.content['meaning']}")
            return text(f"{args['topic']}: no answer ({answer.action})")
        if name == "broken":
            return types.CallToolResult(
                content=[types.TextContent(type="text", text="broken on purpose")], isError=True
            )
        raise ValueError(f"unknown tool {name}")

    if not ctx.experimental.is_task:
        if name == "research":
            return await research(args, progress)
        raise ValueError(f"{name} runs as a task only here")
    with warnings.catch_warnings():
        # An id of our own is one any session may follow (see the module doc).
        warnings.simplefilter("ignore", DeprecationWarning)
        return await ctx.experimental.run_task(work, task_id=str(uuid.uuid4()))


async def main() -> None:
    if mode == "stdio":
        # A test that kills the process finds its pid here.
        with open(starts_file + ".pids", "a") as f:
            f.write(f"{os.getpid()}\n")
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    import uvicorn
    from starlette.applications import Starlette
    from starlette.routing import Route

    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    manager = StreamableHTTPSessionManager(app=server)

    class Endpoint:
        async def __call__(self, scope, receive, send):
            await manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with manager.run():
            yield

    app = Starlette(routes=[Route("/mcp", endpoint=Endpoint())], lifespan=lifespan)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    await uvicorn.Server(config).serve()


anyio.run(main)
