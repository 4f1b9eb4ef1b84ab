"""An MCP server on the official Python SDK, for the upstream tests.

    python server.py stdio
    python server.py http PORT

Tools: echo, add, slow (sleeps, reporting progress), ask (elicits a name), sample (asks the
client's model), fail (a tool error, isError), chatty (logs, then
answers), mutter (waits, then logs at info and at warning, then answers), grow (adds the tool `extra` and says the list changed), wait_cancel (reports progress 0, then
waits until it is cancelled; `cancelled` then reports how many were), crash (the process exits
mid-call), crash_once (exits mid-call unless its marker file exists, which it creates first),
refuse (answered with a JSON-RPC error), whoami (the X-Principal and Authorization headers of
the HTTP request that carried the call, "none" for each one absent), traceparent (the W3C
traceparent header of that request, "none" when absent).
"""
import sys

import anyio
from pydantic import BaseModel

from mcp.server.fastmcp import Context, FastMCP
from mcp.shared.exceptions import McpError
from mcp.types import CallToolRequest, ErrorData, SamplingMessage, TextContent

mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
mcp = FastMCP("upstream-under-test", host="127.0.0.1", port=port or 8000, log_level="WARNING")
cancellations = {"n": 0}


@mcp.tool(description="Echo the text back.")
def echo(text: str) -> str:
    return text


@mcp.tool(description="Add two numbers.")
def add(a: float, b: float) -> str:
    return str(a + b)


@mcp.tool(description="Sleep, reporting progress each step.")
async def slow(steps: int, ctx: Context) -> str:
    for i in range(steps):
        await anyio.sleep(0.05)
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
    return f"slept {steps} steps"


class Name(BaseModel):
    name: str


@mcp.tool(description="Ask the user for a name.")
async def ask(ctx: Context) -> str:
    r = await ctx.elicit("What is your name?", Name)
    if r.action == "accept":
        return f"hello {r.data.name}"
    return f"no name ({r.action})"


@mcp.tool(description="Ask the client's model.")
async def sample(prompt: str, ctx: Context) -> str:
    r = await ctx.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
        max_tokens=20,
        related_request_id=ctx.request_id,
    )
    return f"model said: {r.content.text}"


@mcp.tool(description="Fail as a tool.")
def fail() -> str:
    raise ValueError("the tool failed on purpose")


@mcp.tool(description="Log, then answer.")
async def chatty(ctx: Context) -> str:
    await ctx.info("thinking")
    return "done talking"


@mcp.tool(description="Wait, then log at info and at warning, then answer.")
async def mutter(seconds: float, ctx: Context) -> str:
    await anyio.sleep(seconds)
    await ctx.info("hmm")
    await ctx.warning("careful")
    return "muttered"


@mcp.tool(description="Add a tool and say the list changed.")
async def grow(ctx: Context) -> str:
    def extra() -> str:
        """A tool added at run time."""
        return "extra"

    mcp.add_tool(extra)
    await ctx.session.send_tool_list_changed()
    return "grown"


@mcp.tool(description="Report progress 0, then wait until cancelled.")
async def wait_cancel(ctx: Context) -> str:
    await ctx.report_progress(0, 1, "waiting")
    try:
        await anyio.sleep(60)
    except anyio.get_cancelled_exc_class():
        cancellations["n"] += 1
        raise
    return "not cancelled"


@mcp.tool(description="Exit the process in the middle of the call.")
def crash() -> str:
    import os

    os._exit(3)


@mcp.tool(description="Exit mid-call the first time: unless the marker file exists.")
def crash_once(marker: str) -> str:
    import os

    if os.path.exists(marker):
        return "ran again"
    open(marker, "w").close()
    os._exit(3)


@mcp.tool(description="The X-Principal and Authorization headers of the call's request.")
def whoami(ctx: Context) -> str:
    request = ctx.request_context.request
    if request is None:
        return "none|none"
    h = request.headers
    return f"{h.get('x-principal', 'none')}|{h.get('authorization', 'none')}"


@mcp.tool(description="The traceparent header of the call's request.")
def traceparent(ctx: Context) -> str:
    request = ctx.request_context.request
    if request is None:
        return "none"
    return request.headers.get("traceparent", "none")


@mcp.tool(description="How many wait_cancel calls were cancelled.")
def cancelled() -> str:
    return str(cancellations["n"])


@mcp.tool(description="Answer with a JSON-RPC error.")
def refuse() -> str:
    return "never: the handler below answers first"


# A JSON-RPC error as the answer of tools/call: FastMCP turns what a tool raises into a tool
# error (isError), so `refuse` is answered before it reaches the tool.
tool_call = mcp._mcp_server.request_handlers[CallToolRequest]


async def call_or_refuse(req: CallToolRequest):
    if req.params.name == "refuse":
        raise McpError(ErrorData(code=-32602, message="refused on purpose", data={"why": "test"}))
    return await tool_call(req)


mcp._mcp_server.request_handlers[CallToolRequest] = call_or_refuse

if mode == "http":
    mcp.run(transport="streamable-http")
else:
    mcp.run(transport="stdio")
