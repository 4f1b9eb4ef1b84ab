"""Serve a few tools through taskmesh with the Python worker of examples/worker-python.

Usage: python python_worker_serve.py <server url> <worker token> <events file>

It runs until it is killed. What only the worker can see (the answer its elicitation got, the
Cancelled exception its handler caught) it appends to the events file, one JSON object per
line, for the Rust test (tests/interop_python/workers.rs) to assert.
"""

import json
import logging
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "worker-python"))

from taskmesh_worker import Cancelled, ToolError, Worker  # noqa: E402

# How long the cancellable tool waits to be cancelled before it gives up.
CANCEL_WAIT_MAX_S = 60

NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


class Events:
    """Appends events to a file, one JSON line each, whole lines only."""

    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()

    def __call__(self, event, **fields):
        line = json.dumps({"event": event, **fields}) + "\n"
        with self.lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()


def serve(url, token, events):
    worker = Worker(url, token, max_concurrent=4, label="python-worker-interop")

    @worker.tool(
        input_schema={
            "type": "object",
            "properties": {"numbers": {"type": "array", "items": {"type": "number"}}},
            "required": ["numbers"],
        },
        title="Sum numbers",
    )
    def py_sum(ctx, numbers):
        """Add numbers up, reporting progress after each."""
        total = 0
        for i, n in enumerate(numbers):
            total += n
            ctx.progress(i + 1, len(numbers), f"added {n}")
        return f"sum={total} attempt={ctx.attempt} principal={ctx.principal}"

    @worker.tool(input_schema={"type": "object"})
    def py_interview(ctx):
        """Ask the client for a name and greet it."""
        ctx.set_status("asking for a name")
        answer = ctx.elicit("What is your name?", NAME_SCHEMA)
        events("elicited", taskId=ctx.task_id, answer=answer)
        ctx.progress(1, 2, "got a name")
        name = answer.get("content", {}).get("name", "nobody")
        ctx.progress(2, 2, "greeting")
        return {
            "content": [{"type": "text", "text": f"Hello, {name}!"}],
            "structuredContent": {"name": name},
        }

    @worker.tool(input_schema={"type": "object"}, task_support="required")
    def py_wait_cancel(ctx):
        """Work until cancelled."""
        ctx.set_status("waiting to be cancelled")
        deadline = time.monotonic() + CANCEL_WAIT_MAX_S
        try:
            while time.monotonic() < deadline:
                ctx.check_cancelled()
                time.sleep(0.05)
        except Cancelled as e:
            events("cancelled", taskId=ctx.task_id, flag=ctx.cancelled, error=str(e))
            raise
        events("never_cancelled", taskId=ctx.task_id)
        return "never cancelled"

    @worker.tool(input_schema={"type": "object"})
    def py_fail(ctx):
        """Fail with an exception."""
        raise ValueError("bad input on purpose")

    @worker.tool(input_schema={"type": "object"})
    def py_reject(ctx):
        """Fail with a JSON-RPC error."""
        raise ToolError("rejected on purpose", code=-32001, data={"why": "testing"})

    worker.run()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)s %(message)s")
    serve(sys.argv[1], sys.argv[2], Events(sys.argv[3]))
