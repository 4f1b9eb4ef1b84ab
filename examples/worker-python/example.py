"""An example worker: three tools served to taskmesh's clients.

Usage: python example.py <taskmesh url> <worker token>

The server must let the token's identity serve these tools, e.g. in its configuration:

    [workers.tokens]
    "example-worker-token" = "examples"
    [workers.identities.examples]
    tools = ["example_*"]

Stop it with Ctrl-C: it deregisters and lets the tasks it is running finish.
"""

import logging
import sys
import time

from taskmesh_worker import Cancelled, ToolError, Worker


def main(url, token):
    worker = Worker(url, token, max_concurrent=4, label="example.py")

    @worker.tool(
        name="example_count",
        title="Count slowly",
        input_schema={
            "type": "object",
            "properties": {"to": {"type": "integer", "minimum": 1, "maximum": 1000}},
            "required": ["to"],
        },
    )
    def count(ctx, to):
        """Count to `to`, one number a second, reporting progress."""
        try:
            for n in range(1, to + 1):
                ctx.progress(n, to, f"counted {n}")
                time.sleep(1)
        except Cancelled:
            logging.info("task %s cancelled: cleaning up", ctx.task_id)
            raise
        return f"counted to {to} (attempt {ctx.attempt}, for {ctx.principal})"

    @worker.tool(name="example_greet", input_schema={"type": "object"})
    def greet(ctx):
        """Ask the client for a name, then greet it."""
        ctx.set_status("waiting for a name")
        answer = ctx.elicit(
            "Who should be greeted?",
            {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        )
        if answer.get("action") != "accept":
            return {"content": [{"type": "text", "text": "nobody to greet"}], "isError": True}
        name = answer["content"]["name"]
        return {
            "content": [{"type": "text", "text": f"Hello, {name}!"}],
            "structuredContent": {"greeted": name},
        }

    @worker.tool(
        name="example_divide",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
        task_support="forbidden",
    )
    def divide(ctx, a, b):
        """Divide a by b (a plain call: the answer comes when the task ends)."""
        if b == 0:
            # An exception of the handler would become an isError result; this is a
            # JSON-RPC error instead.
            raise ToolError("cannot divide by zero", code=-32602)
        return str(a / b)

    worker.run()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    main(sys.argv[1], sys.argv[2])
