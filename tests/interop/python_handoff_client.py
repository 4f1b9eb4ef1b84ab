"""Call a long tool plainly with the official MCP Python SDK (mcp 1.30.0), a client that does
not declare tasks, against a taskmesh server whose plain calls are handed off, then follow the
task through the offered tools with the SDK's plain call_tool as well.

Usage: python python_handoff_client.py <server url> <token> <another principal's token>

The script judges nothing itself. It prints one JSON object per line:
  {"step": NAME, "data": {...}}   what the SDK saw in that step
  {"step": NAME, "error": "..."}  the step raised (the traceback is in the text)
and finally {"done": true}. The Rust test (tests/interop_python/handoff.rs) asserts on them.
Every step is bounded in time.
"""

import asyncio
import json
import sys
import traceback
from contextlib import AsyncExitStack

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError
from mcp.types import TextContent

STEP_TIMEOUT_S = 40


def emit(obj):
    print(json.dumps(obj, default=str), flush=True)


def texts(result):
    return [c.text for c in result.content if isinstance(c, TextContent)]


async def step(name, body):
    try:
        data = await asyncio.wait_for(body(), STEP_TIMEOUT_S)
        emit({"step": name, "data": data})
        return data
    except Exception:  # noqa: BLE001 - every failure is reported to the Rust side
        emit({"step": name, "error": traceback.format_exc()})
        return None


async def open_session(stack, url, token):
    read, write, _ = await stack.enter_async_context(
        streamablehttp_client(url, headers={"Authorization": f"Bearer {token}"})
    )
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session


async def main(url, token, other_token):
    async with AsyncExitStack() as stack:
        alice = await open_session(stack, url, token)
        bob = await open_session(stack, url, other_token)

        async def listed():
            tools = await alice.list_tools()
            return {"names": sorted(t.name for t in tools.tools)}

        await step("listed", listed)

        async def handed():
            r = await alice.call_tool("slow_compute", {"seconds": 3, "label": "py-long"})
            return {
                "texts": texts(r),
                "isError": r.isError,
                "structured": r.structuredContent,
            }

        h = await step("handed", handed)
        task_id = (h or {}).get("structured", {}).get("taskId")

        async def status():
            r = await alice.call_tool("task_status", {"taskId": task_id})
            return {"structured": r.structuredContent, "texts": texts(r)}

        await step("status", status)

        async def foreign():
            codes = {}
            for tool in ("task_status", "task_result", "task_cancel"):
                try:
                    await bob.call_tool(tool, {"taskId": task_id, "waitSeconds": 0})
                    codes[tool] = None
                except McpError as e:
                    codes[tool] = e.error.code
            return codes

        await step("foreign", foreign)

        async def result():
            r = await alice.call_tool("task_result", {"taskId": task_id})
            return {"texts": texts(r), "isError": r.isError}

        await step("result", result)
    emit({"done": True})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
