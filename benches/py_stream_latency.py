"""Stream latency as the official MCP Python SDK client (mcp 1.30.0) sees it; run by
benches/py_stream_latency.sh.

Each round starts `confirm_delete` as a task (`session.experimental.call_tool_as_task`) and at
once asks for its result (`get_task_result`, a `tasks/result` the server holds open). The
task's `elicitation/create` reaches the SDK on that stream or on the session's GET stream,
which the SDK keeps open; the elicitation callback notes the instant it returns its answer,
and the script measures from there: the `notifications/tasks/status` saying `working` (seen
by the message handler) and the result, when `get_task_result` returns it.

Usage: python py_stream_latency.py <server url> <rounds>
"""

import sys
import time
import warnings

# The tasks API of mcp 1.x is experimental and deprecated; its warnings are expected here.
warnings.filterwarnings("ignore", category=DeprecationWarning)

import anyio  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamablehttp_client  # noqa: E402
from mcp.types import (  # noqa: E402
    CallToolResult,
    ElicitResult,
    ServerNotification,
    TaskStatusNotification,
)

WAIT_S = 10


class Round:
    def __init__(self):
        self.task_id = None
        self.answered = None
        self.working = None
        self.saw_working = anyio.Event()


def quantiles(name, values):
    ms = sorted(v * 1000 for v in values)

    def q(p):
        return ms[min(len(ms) - 1, int(p * len(ms)))]

    return f"{name:<34}{q(0.5):>9.3f}{q(0.9):>9.3f}{q(0.99):>9.3f}{ms[-1]:>9.3f}"


async def main(url, rounds):
    current = Round()

    async def on_elicit(context, params):
        current.answered = time.perf_counter()
        return ElicitResult(action="accept", content={"confirm": False})

    async def on_message(message):
        if not isinstance(message, ServerNotification):
            return
        n = message.root
        if (
            isinstance(n, TaskStatusNotification)
            and n.params.taskId == current.task_id
            and n.params.status == "working"
            and current.answered is not None
            and current.working is None
        ):
            current.working = time.perf_counter()
            current.saw_working.set()

    status, result = [], []
    async with streamablehttp_client(url) as (read, write, _):
        async with ClientSession(
            read, write, elicitation_callback=on_elicit, message_handler=on_message
        ) as session:
            await session.initialize()
            for i in range(rounds):
                current = Round()
                with anyio.fail_after(WAIT_S):
                    created = await session.experimental.call_tool_as_task(
                        "confirm_delete", {"filename": f"r{i}"}, ttl=60000
                    )
                    current.task_id = created.task.taskId
                    await session.experimental.get_task_result(current.task_id, CallToolResult)
                    done = time.perf_counter()
                    await current.saw_working.wait()
                if current.answered is None:
                    raise RuntimeError(f"round {i}: the result came without an elicitation")
                status.append(current.working - current.answered)
                result.append(done - current.answered)
    print(f"{rounds} rounds; ms after the elicitation callback returned its answer")
    print(f"{'':<34}{'p50':>9}{'p90':>9}{'p99':>9}{'max':>9}")
    print(quantiles("status `working` (message handler)", status))
    print(quantiles("result (get_task_result returns)", result))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], max(1, min(int(sys.argv[2]), 10000)))
