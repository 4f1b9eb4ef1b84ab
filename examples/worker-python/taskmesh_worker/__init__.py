"""A taskmesh worker in plain Python (standard library only).

A worker serves tools whose calls run as taskmesh tasks. It talks to taskmesh's worker API
over its JSON mirror (``POST <base>/worker/v1/<call>`` with a worker token as the bearer):
it registers the tools it serves, polls for leased tasks, keeps each lease alive with
heartbeats while the handler runs, asks the task's client for input when the handler
wants it, and completes the task with what the handler returned.

    worker = Worker("http://127.0.0.1:8080/mcp", "my-worker-token")

    @worker.tool(input_schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    def square(ctx, n):
        ctx.progress(1, 1, "squared")
        return str(n * n)

    worker.run()

A handler is called as ``handler(ctx, **arguments)``: the call's arguments are keyword
arguments, and ``ctx`` is the task's :class:`Context`. What it returns, raises, or how it
is cancelled decides the task's end:

* a string: ``completed``, with the string as one text content item;
* a CallToolResult dict (with a ``content`` list): ``completed``, or ``failed`` if
  ``"isError": True``;
* :class:`ToolError`: ``failed``, and ``tasks/result`` answers with that JSON-RPC error;
* any other exception: ``failed`` with an ``isError`` result naming the exception (a tool
  execution error, as MCP reports them: the model sees what went wrong);
* :class:`Cancelled` (raised by ``ctx`` once the task was cancelled): nothing is sent.
"""

import json
import logging
import os
import socket
import threading
import urllib.error
import urllib.request

__all__ = ["Worker", "Context", "Cancelled", "ToolError", "WorkerError"]

log = logging.getLogger("taskmesh_worker")

# The longest a worker API call may take, in seconds (a poll adds its own wait to it).
CALL_TIMEOUT_S = 30
# The longest an input request may wait for the client's answer, in seconds: a person may be
# the one answering.
INPUT_TIMEOUT_S = 3600
# The longest a poll waits for work, in seconds, whatever the server allows: it bounds how
# long stop() takes to be noticed.
POLL_WAIT_MAX_S = 10
# The server's defaults of workers.lease_ms and workers.poll_wait_max_ms, for an answer that
# lacks them.
DEFAULT_LEASE_MS = 30_000
DEFAULT_POLL_WAIT_MAX_MS = 30_000
# Waits between retries when the server cannot be reached, in seconds.
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 10


class WorkerError(Exception):
    """A worker API call failed.

    ``status`` is the HTTP status and ``code`` the gRPC code's name the server answered
    with (``NOT_FOUND``, ``FAILED_PRECONDITION``, ...); a call that did not reach the server,
    or whose answer did not arrive whole, has ``status`` None and ``code`` ``"TRANSPORT"``.
    """

    def __init__(self, status, code, message):
        super().__init__(f"{code} ({status}): {message}")
        self.status = status
        self.code = code
        self.message = message


class Cancelled(Exception):
    """The task was cancelled by its client, or this worker lost its lease: stop the work.

    Raised by ``ctx.progress()``, ``ctx.elicit()``, ``ctx.request_input()`` and
    ``ctx.check_cancelled()``. The worker sends no completion for the task.
    """


class ToolError(Exception):
    """Raise from a handler to fail the task with a JSON-RPC error.

    Also raised by ``ctx.elicit()`` when the client answered the request with an error.
    """

    def __init__(self, message, code=-32000, data=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self):
        error = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class _Api:
    """The worker API's JSON mirror at one server, called with one credential."""

    def __init__(self, url, token):
        base = url.rstrip("/")
        if base.endswith("/mcp"):
            base = base[: -len("/mcp")]
        self.base = base
        self._token = token

    def call(self, name, body, timeout_s=CALL_TIMEOUT_S):
        request = urllib.request.Request(
            f"{self.base}/worker/v1/{name}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={
                "Authorization": f"Bearer {self._token}",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:
                return json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as e:
            try:
                error = json.loads(e.read()).get("error") or {}
            except ValueError:
                error = {}
            raise WorkerError(
                e.code, error.get("code", "UNKNOWN"), error.get("message", str(e.reason))
            ) from None
        except (OSError, ValueError) as e:
            raise WorkerError(None, "TRANSPORT", str(e)) from None


class Context:
    """What a handler gets for one leased task.

    ``task_id``, ``tool``, ``attempt`` (from 1: more when an earlier lease of the task ran
    out), ``principal`` (who created the task) and ``progress_wanted`` (whether the client
    asked for progress: it is relayed only then) describe the task. ``cancelled`` turns true
    when a heartbeat learns that the task was cancelled.
    """

    def __init__(self, api, lease):
        self._api = api
        self.task_id = lease["taskId"]
        self.tool = lease.get("tool", "")
        self.attempt = lease.get("attempt", 1)
        self.principal = lease.get("principal", "")
        self.progress_wanted = bool(lease.get("progressWanted"))
        self._token = lease["token"]
        self._cancelled = threading.Event()

    @property
    def cancelled(self):
        """Whether the task was cancelled (or this worker's lease of it was lost)."""
        return self._cancelled.is_set()

    def check_cancelled(self):
        """Raise :class:`Cancelled` if the task was cancelled."""
        if self._cancelled.is_set():
            raise Cancelled(f"task {self.task_id} was cancelled")

    def progress(self, progress, total=None, message=None):
        """Report progress (in the tool's own unit), sent at once with a heartbeat.

        Raises :class:`Cancelled` if the task was cancelled.
        """
        self.check_cancelled()
        beat = {"progress": float(progress)}
        if total is not None:
            beat["total"] = float(total)
        if message is not None:
            beat["progressMessage"] = message
        self._beat(beat)
        self.check_cancelled()

    def set_status(self, message):
        """Set the task's status message (what ``tasks/get`` shows), sent at once."""
        self._beat({"statusMessage": message})

    def elicit(self, message, requested_schema, key=None):
        """Ask the task's client for input (``elicitation/create``) and wait for the answer.

        Returns the client's ElicitResult as a dict (``action`` and, when accepted,
        ``content``). Raises :class:`ToolError` if the client answered with an error, and
        :class:`Cancelled` if the task was cancelled. ``key`` names the request within the
        task: asked again with the same key (after a failover), the server returns the
        answer it already has instead of asking twice.
        """
        params = {"message": message, "requestedSchema": requested_schema}
        return self.request_input("elicitation/create", params, key)

    def request_input(self, method, params, key=None):
        """Send ``method`` (``elicitation/create`` or ``sampling/createMessage``) with
        ``params`` to the task's client and return its result (a dict).

        The task is ``input_required`` meanwhile; the worker keeps heartbeating. Raises as
        :meth:`elicit` does.
        """
        self.check_cancelled()
        body = {"taskId": self.task_id, "token": self._token, "method": method, "params": params}
        if key is not None:
            body["key"] = key
        try:
            answer = self._api.call("request_input", body, INPUT_TIMEOUT_S)
        except WorkerError:
            # A refusal may mean the task ended meanwhile: find out before reporting it.
            self._beat({})
            self.check_cancelled()
            raise
        self.check_cancelled()
        if "result" in answer:
            return answer["result"]
        error = answer.get("error") or {}
        raise ToolError(
            error.get("message", "the client gave no answer"),
            error.get("code", -32603),
            error.get("data"),
        )

    def _beat(self, fields):
        """Renew the lease with ``fields`` added; note a cancellation or a lost lease."""
        body = {"taskId": self.task_id, "token": self._token, **fields}
        try:
            answer = self._api.call("heartbeat", body)
        except WorkerError as e:
            if e.code in ("FAILED_PRECONDITION", "NOT_FOUND"):
                # The lease is no longer this worker's: its work can no longer complete.
                log.warning("task %s: lease lost: %s", self.task_id, e)
                self._cancelled.set()
            else:
                log.warning("task %s: heartbeat failed: %s", self.task_id, e)
            return
        if answer.get("cancelled"):
            self._cancelled.set()


def _result_of(value):
    """A handler's return value as a CallToolResult."""
    if isinstance(value, str):
        return {"content": [{"type": "text", "text": value}]}
    if isinstance(value, dict) and isinstance(value.get("content"), list):
        return value
    raise TypeError(
        "a handler returns a string or a CallToolResult dict with a content list, "
        f"not {type(value).__name__}"
    )


def _error_result(exc):
    text = f"{type(exc).__name__}: {exc}"
    return {"content": [{"type": "text", "text": text}], "isError": True}


class Worker:
    """A worker process's registration at one taskmesh server, and the loop that serves it.

    ``url`` is the server's MCP endpoint (``.../mcp``) or its base URL; ``token`` a worker
    credential (``[workers.tokens]`` or an access token with the worker scope);
    ``max_concurrent`` how many tasks run at once; ``label`` names this process for
    operators (``taskmesh workers``).
    """

    def __init__(self, url, token, max_concurrent=4, label=None):
        self._api = _Api(url, token)
        self.max_concurrent = max(1, int(max_concurrent))
        self.label = label or f"{socket.gethostname()}:{os.getpid()}"
        self.worker_id = None
        # Both as the server's registration answers them; unknown until then.
        self.lease_ms = None
        self.poll_wait_max_ms = None
        self._tools = {}
        self._stopping = threading.Event()
        self._changed = threading.Condition()
        # The running tasks' contexts by lease token.
        self._jobs = {}

    def tool(
        self,
        name=None,
        *,
        input_schema=None,
        title=None,
        description=None,
        output_schema=None,
        annotations=None,
        task_support="optional",
        resume="rerun",
    ):
        """Decorator: serve the decorated ``handler(ctx, **arguments)`` as a tool.

        ``name`` defaults to the function's name, ``description`` to its docstring,
        ``input_schema`` to any object. ``task_support`` is ``optional``, ``required`` or
        ``forbidden``; ``resume`` (what becomes of a task whose worker is lost) ``rerun``
        (offered again, a bounded number of times) or ``fail``.
        """

        def register(handler):
            tool = {
                "name": name or handler.__name__,
                "inputSchema": input_schema or {"type": "object"},
                "taskSupport": task_support,
                "resume": resume,
            }
            doc = description or (handler.__doc__ or "").strip()
            for field, value in (("title", title), ("description", doc)):
                if value:
                    tool[field] = value
            for field, value in (("outputSchema", output_schema), ("annotations", annotations)):
                if value is not None:
                    tool[field] = value
            self._tools[tool["name"]] = (handler, tool)
            return handler

        return register

    def stop(self):
        """Ask :meth:`run` to stop polling, deregister and return once running tasks end.

        Noticed when the poll under way returns: within ``POLL_WAIT_MAX_S``."""
        self._stopping.set()

    def run(self):
        """Serve until :meth:`stop` or KeyboardInterrupt; then deregister and wait for the
        tasks still running (their leases are kept alive meanwhile). A worker runs once.

        The server may be unreachable at first or for a while: the worker retries, and
        registers again when the server dropped its registration.

        Raises :class:`WorkerError` when the server refuses the registration (a tool this
        worker's identity may not serve, a bad schema, a bad credential).
        """
        if not self._tools:
            raise ValueError("no tools: declare some with @worker.tool()")
        beats_done = threading.Event()
        beater = threading.Thread(
            target=self._heartbeat_loop, args=(beats_done,), name="taskmesh-heartbeat", daemon=True
        )
        beater.start()
        try:
            self._poll_loop()
        except KeyboardInterrupt:
            log.info("interrupted: stopping")
        finally:
            self._stopping.set()
            self._deregister()
            with self._changed:
                while self._jobs:
                    self._changed.wait()
            beats_done.set()

    def _register(self):
        body = {
            "tools": [declaration for _, declaration in self._tools.values()],
            "maxConcurrentTasks": self.max_concurrent,
            "label": self.label,
        }
        answer = self._api.call("register", body)
        self.worker_id = answer["workerId"]
        self.lease_ms = answer.get("leaseMs") or DEFAULT_LEASE_MS
        self.poll_wait_max_ms = answer.get("pollWaitMaxMs") or DEFAULT_POLL_WAIT_MAX_MS
        log.info("registered as %s: %s", self.worker_id, ", ".join(self._tools))

    def _deregister(self):
        if self.worker_id is None:
            return
        try:
            self._api.call("deregister", {"workerId": self.worker_id})
        except WorkerError as e:
            log.warning("deregistration failed: %s", e)
        self.worker_id = None

    def _free_places(self):
        """Wait for a free place; how many there are (0 once stopping)."""
        with self._changed:
            while len(self._jobs) >= self.max_concurrent and not self._stopping.is_set():
                self._changed.wait(1.0)
            return 0 if self._stopping.is_set() else self.max_concurrent - len(self._jobs)

    def _poll_loop(self):
        retry_s = RETRY_FIRST_S
        while not self._stopping.is_set():
            try:
                if self.worker_id is None:
                    self._register()
                free = self._free_places()
                if free == 0:
                    return
                wait_ms = min(self.poll_wait_max_ms, POLL_WAIT_MAX_S * 1000)
                body = {"workerId": self.worker_id, "maxTasks": free, "waitMs": wait_ms}
                answer = self._api.call("poll", body, CALL_TIMEOUT_S + wait_ms / 1000)
            except WorkerError as e:
                if e.code == "NOT_FOUND":
                    # The registration was dropped (idle too long, or its node restarted).
                    log.warning("registration %s is gone: registering again", self.worker_id)
                    self.worker_id = None
                    continue
                if e.code in ("TRANSPORT", "UNAVAILABLE", "RESOURCE_EXHAUSTED"):
                    log.warning("worker API unavailable (%s): retrying in %ss", e, retry_s)
                    self._stopping.wait(retry_s)
                    retry_s = min(retry_s * 2, RETRY_MAX_S)
                    continue
                raise
            retry_s = RETRY_FIRST_S
            for lease in answer.get("leases", []):
                self._start(lease)

    def _start(self, lease):
        ctx = Context(self._api, lease)
        with self._changed:
            # By lease: a task whose lease ran out may be leased to this worker again.
            self._jobs[ctx._token] = ctx
        arguments = lease.get("arguments")
        job = threading.Thread(
            target=self._run_job,
            args=(ctx, arguments if isinstance(arguments, dict) else {}),
            name=f"taskmesh-task-{ctx.task_id}",
            daemon=True,
        )
        job.start()

    def _run_job(self, ctx, arguments):
        try:
            outcome = self._outcome(ctx, arguments)
            if outcome is not None and not ctx.cancelled:
                self._complete(ctx, outcome)
        finally:
            with self._changed:
                self._jobs.pop(ctx._token, None)
                self._changed.notify_all()

    def _outcome(self, ctx, arguments):
        """What the handler's run ends the task with; None when it was cancelled."""
        handler, _ = self._tools.get(ctx.tool, (None, None))
        try:
            if handler is None:
                raise ToolError(f"this worker does not serve '{ctx.tool}'", -32602)
            return {"result": _result_of(handler(ctx, **arguments))}
        except Cancelled:
            return None
        except ToolError as e:
            return {"error": e.to_json()}
        except Exception as e:  # noqa: BLE001 - any failure of the handler ends its task
            log.exception("task %s: the handler of %s failed", ctx.task_id, ctx.tool)
            return {"result": _error_result(e)}

    def _complete(self, ctx, outcome):
        body = {"taskId": ctx.task_id, "token": ctx._token, **outcome}
        try:
            self._api.call("complete", body)
        except WorkerError as e:
            if e.code != "INVALID_ARGUMENT" or "result" not in body:
                log.warning("task %s: completion refused: %s", ctx.task_id, e)
                return
            # The result itself was refused (too large, malformed): fail the task saying so,
            # rather than leave it to run out its lease.
            body.pop("result")
            message = f"the tool's result was refused: {e.message}"
            body["error"] = {"code": -32603, "message": message}
            try:
                self._api.call("complete", body)
            except WorkerError as again:
                log.warning("task %s: completion refused: %s", ctx.task_id, again)

    def _heartbeat_loop(self, done):
        """Renew every running task's lease every third of the lease (no task runs before
        the registration tells how long a lease is)."""
        while not done.wait(self.lease_ms / 3000 if self.lease_ms else 0.1):
            with self._changed:
                jobs = list(self._jobs.values())
            for ctx in jobs:
                if not ctx.cancelled:
                    ctx._beat({})
