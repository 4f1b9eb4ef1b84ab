"""The peer: a FastMCP server with one task-capable tool equivalent to taskmesh's
slow_compute, for the load generator's poll scenario (see fastmcp_peer.sh)."""

import argparse
import asyncio

from fastmcp import FastMCP

mcp = FastMCP("fastmcp-peer")


@mcp.tool(task=True)
async def slow_compute(seconds: float, label: str = "") -> str:
    """Sleep for `seconds`, then report it (like taskmesh's built-in slow_compute)."""
    await asyncio.sleep(seconds)
    return f"{label or 'result'}: computed for {seconds} seconds"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=9300)
    args = parser.parse_args()
    mcp.run(transport="http", host="127.0.0.1", port=args.port, log_level="warning")
