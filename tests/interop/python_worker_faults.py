"""A Python worker (examples/worker-python) whose tasks never finish, for the worker fault tests
(tests/cluster/worker_faults.rs): the test kills it with SIGKILL while it holds a lease.

Usage: python3 python_worker_faults.py <server url> <worker token>

It serves two tools, `fault_rerun` (resume policy `rerun`) and `fault_fail` (resume policy
`fail`). Each handler sets the task's status message, prints one JSON line on standard output
(`{"event": "started", "taskId": ..., "tool": ..., "attempt": ...}`), then blocks: only the
kill ends it. The worker's own log goes to standard error.

It exits by itself when its standard input closes (the test that started it is gone), so that
it never outlives the test.
"""

import json
import logging
import os
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "worker-python"))

from taskmesh_worker import Worker  # noqa: E402

# The longest a handler blocks, in seconds: far past any test's wait for the kill.
BLOCK_MAX_S = 600

OUTPUT = threading.Lock()


def say(event, **fields):
    """Print one JSON line, whole, at once."""
    with OUTPUT:
        sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
        sys.stdout.flush()


def exit_when_orphaned():
    """Exit as soon as standard input reaches its end: the test holding it has gone."""
    try:
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        os._exit(3)


def block(ctx):
    """Tell the task's client and the test that the work started, then wait for the kill."""
    ctx.set_status(f"attempt {ctx.attempt} running in the Python worker")
    say("started", taskId=ctx.task_id, tool=ctx.tool, attempt=ctx.attempt)
    threading.Event().wait(BLOCK_MAX_S)
    raise RuntimeError(f"task {ctx.task_id} was not killed within {BLOCK_MAX_S} s")


def serve(url, token):
    worker = Worker(url, token, max_concurrent=1, label="python-worker-faults")

    # No docstrings: a tool's description is its handler's docstring, and the tests' Rust
    # workers declare the same tools without one (a tool's declarations must match).
    @worker.tool(input_schema={"type": "object"}, resume="rerun")
    def fault_rerun(ctx, **_arguments):
        block(ctx)

    @worker.tool(input_schema={"type": "object"}, resume="fail")
    def fault_fail(ctx, **_arguments):
        block(ctx)

    worker.run()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)s %(message)s")
    threading.Thread(target=exit_when_orphaned, name="orphan-watch", daemon=True).start()
    serve(sys.argv[1], sys.argv[2])
