"""Tasks handled in any language: ``tenure task worker --exec`` and ``--http``.

Each leased task goes, as one JSON object, to a command started for it
(:class:`TaskCommand`, on the stdin of a process supervised like every ``--exec`` command)
or to a local HTTP handler (:class:`TaskHandler`, the body of a POST over kept-alive
connections)::

    {"id": "…", "kind": "email", "state": "new", "data": {…}, "attempt": 1,
     "owner": "…", "epoch": 7}

``attempt`` counts this attempt (failed attempts so far + 1); ``owner`` and ``epoch`` are
the lease's fencing pair (``tenure.task_fence``, ``tenure.task_complete``). The answer,
on the command's stdout or as the body of a 2xx answer, is one JSON object shaped like
an outcome of ``tenure.task_cycle``::

    {"outcome": "complete"}                        optional "state", "data"
    {"outcome": "next", "state": "…"}              optional "data": the next state runs at once
    {"outcome": "release", "delay": 60}            optional "state", "data"
    {"outcome": "fail", "error": "…"}              optional "retry_delay"

Anything else (a non-zero exit, a non-2xx answer, output that is not such an object, a
handler that cannot be reached) is a failed attempt whose error says what went wrong.

The worker (:class:`~tenure.runtime.tasks.TaskWorker` for commands,
:class:`~tenure.runtime.tasks.AsyncTaskWorker` for handlers) extends the lease while the
task runs; when the lease is lost, the command's process group gets SIGTERM, then SIGKILL
after ``kill_grace`` (the warden does the same if the shim is frozen or killed), and the
handler's request is cut. Whatever arrives after that is discarded, never applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import math
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import IO, Any, Self
from urllib.parse import urlsplit

import httpx

from tenure.errors import InvalidConfiguration
from tenure.runtime.supervise import RECHECK, Child, Supervisor, command_line
from tenure.runtime.tasks import Complete, Fail, Next, Outcome, Release, Task, TaskLogic

log = logging.getLogger(__name__)

MAX_OUTPUT = 16 * 1024 * 1024  # bytes of an answer: past this it is refused
TAIL = 2000  # characters of stderr (or of an answer's body) kept in a failed attempt's error
# After a command exited, how long its pipes may stay open (something it started and left
# outside its process group still holding them) before its output is given up.
PIPES_AFTER_EXIT = 2.0

# The keys each outcome takes: (required, optional).
OUTCOME_KEYS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "complete": (frozenset(), frozenset({"state", "data"})),
    "next": (frozenset({"state"}), frozenset({"data"})),
    "release": (frozenset(), frozenset({"delay", "state", "data"})),
    "fail": (frozenset({"error"}), frozenset({"retry_delay"})),
}


def task_document(task: Task) -> dict[str, Any]:
    """The JSON object a command or a handler gets for ``task``."""
    return {
        "id": str(task.id),
        "kind": task.kind,
        "state": task.state,
        "data": task.data,
        "attempt": task.attempts + 1,
        "owner": str(task.owner),
        "epoch": task.epoch,
    }


def task_environment(task: Task) -> dict[str, str]:
    """What a command gets in its environment besides the JSON on its stdin."""
    return {
        "TENURE_TASK_ID": str(task.id),
        "TENURE_TASK_KIND": task.kind,
        "TENURE_TASK_STATE": task.state,
        "TENURE_TASK_ATTEMPT": str(task.attempts + 1),
        "TENURE_OWNER": str(task.owner),
        "TENURE_INSTANCE_ID": str(task.owner),
        "TENURE_EPOCH": str(task.epoch),
    }


def tail(text: bytes | str, limit: int = TAIL) -> str:
    """The end of ``text``, at most ``limit`` characters, for an error message."""
    if isinstance(text, bytes):
        text = text[-4 * limit :].decode("utf-8", "replace")
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


def _seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def parse_outcome(answer: bytes, *, source: str) -> Outcome:
    """The outcome in ``answer`` (a command's stdout, a handler's body); a :class:`Fail`
    that names the problem when it is not one JSON object shaped like an outcome."""

    def bad(problem: str) -> Fail:
        return Fail(
            f'{source} {problem}; expected one JSON object such as {{"outcome": "complete"}}, '
            f"got {tail(answer, 300)!r}" + (" (nothing)" if not answer.strip() else "")
        )

    if len(answer) > MAX_OUTPUT:
        return bad(f"is longer than {MAX_OUTPUT} bytes")
    try:
        given = json.loads(answer)
    except ValueError as error:
        return bad(f"is not JSON ({error})")
    if not isinstance(given, dict):
        return bad("is not a JSON object")
    kind = given.get("outcome")
    if kind not in OUTCOME_KEYS:
        return bad(f'has no "outcome" of {", ".join(OUTCOME_KEYS)}')
    required, optional = OUTCOME_KEYS[kind]
    keys = set(given) - {"outcome"}
    if missing := required - keys:
        return bad(f"has a {kind} outcome without {', '.join(sorted(missing))}")
    if unknown := keys - required - optional:
        allowed = ", ".join(sorted(required | optional)) or "nothing else"
        extra = ", ".join(sorted(unknown))
        return bad(f"has keys a {kind} outcome does not take: {extra} (it takes {allowed})")
    for key in ("state", "error"):
        if key in given and not isinstance(given[key], str):
            return bad(f"has a {key} that is not a string")
    for key in ("delay", "retry_delay"):
        if given.get(key) is not None and not _seconds(given[key]):
            return bad(f"has a {key} that is not a number of seconds")
    try:
        if kind == "complete":
            return Complete(state=given.get("state", "done"), data=given.get("data"))
        if kind == "next":
            return Next(state=given["state"], data=given.get("data"))
        if kind == "release":
            return Release(delay=given.get("delay") or 0.0, state=given.get("state"), data=given.get("data"))
        return Fail(error=given["error"], retry_delay=given.get("retry_delay"))
    except Exception as error:  # the outcome's own checks: a blank state, a negative delay, ...
        return bad(f"is not a valid {kind} outcome ({error})")


def _status_text(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"status {128 - returncode} (killed by {name})"
    return f"status {returncode}"


class TaskCommand:
    """The processor of ``tenure task worker --exec``: one process per task, through a
    :class:`~tenure.runtime.supervise.Supervisor`.

    The task is the process's stdin (one JSON object, then end of file), and its
    environment has ``TENURE_TASK_ID``, ``TENURE_OWNER``, ``TENURE_EPOCH`` (and the kind,
    state and attempt); its stdout is its outcome; its stderr goes to this process's
    stderr, line by line, and the tail of it into the error of a failed attempt. The
    process runs in a group of its own tied to the task's lease: the group gets SIGTERM
    when the lease is lost (or its safe window passes without an extension) and SIGKILL
    ``kill_grace`` seconds later. Blocks its thread: run it on a :class:`TaskWorker`,
    which :meth:`attach` ties to the supervisor. Use as a context manager (it starts and
    stops the supervisor and its warden).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        kill_grace: float,
        label: str = "task worker",
        stderr: IO[bytes] | None = None,
    ) -> None:
        checked = command_line(["--", *argv])  # refused at start, not with every task
        assert checked is not None
        self.argv = checked
        self.supervisor = Supervisor(self.argv, kill_grace=kill_grace, label=label)
        self._stderr = stderr
        self._stderr_lock = threading.Lock()

    def attach(self, worker: TaskLogic) -> None:
        """Wake the supervisor whenever ``worker`` extends or loses a lease."""
        worker.follow(self.supervisor.wake)

    def __enter__(self) -> Self:
        self.supervisor.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.supervisor.stop()

    def __call__(self, task: Task) -> Outcome:
        child = self.supervisor.spawn(
            f"task {task.id}",
            lambda: None if task.lost.is_set() else task.valid_until,
            task_environment(task),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        if child is None:
            return Fail("the lease ended before the command could start")
        output, errors, complete = self._exchange(child, _document_bytes(task))
        child.done.wait()  # the supervisor's reaper saw it end, and killed what it left in its group
        returncode = child.returncode
        assert returncode is not None
        if child.stopped_by_us:
            return Fail(f"the command was stopped ({child.reason}), {_status_text(returncode)}")
        if returncode != 0:
            stderr = tail(errors)
            return Fail(
                f"the command exited with {_status_text(returncode)}"
                + (f"; the end of its stderr: {stderr}" if stderr else "; its stderr was empty")
            )
        if not complete:
            return Fail(
                "the command exited, but something it started outside its process group still holds "
                "its stdout open: its outcome cannot be read"
            )
        return parse_outcome(output, source="the command's stdout")

    def _exchange(self, child: Child, payload: bytes) -> tuple[bytes, bytes, bool]:
        """Feed ``payload`` to the command's stdin and read its stdout and stderr to their
        ends, on this thread (like ``Popen.communicate``, with stderr copied to ours line by
        line as it comes): its stdout (at most one byte past MAX_OUTPUT), the end of its
        stderr, and whether its stdout reached its end, which it may not when something the
        command left outside its group holds it open past PIPES_AFTER_EXIT."""
        process = child.process
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        stdin, stdout, stderr = process.stdin, process.stdout, process.stderr
        os.set_blocking(stdin.fileno(), False)
        pending = memoryview(payload)
        output = bytearray()
        errors = bytearray()  # the end of stderr: at most 4 * TAIL bytes
        line = bytearray()  # stderr since its last newline
        give_up_at: float | None = None
        stdout_ended = False
        with selectors.DefaultSelector() as selector:
            selector.register(stdin, selectors.EVENT_WRITE)
            selector.register(stdout, selectors.EVENT_READ)
            selector.register(stderr, selectors.EVENT_READ)
            while len(selector.get_map()) > 0:
                if give_up_at is None and child.done.is_set():
                    give_up_at = time.monotonic() + PIPES_AFTER_EXIT
                wait = RECHECK if give_up_at is None else give_up_at - time.monotonic()
                if wait <= 0:
                    break
                for key, _ in selector.select(wait):
                    pipe = key.fileobj
                    if pipe is stdin:
                        try:
                            pending = pending[os.write(stdin.fileno(), pending) :]
                        except OSError:  # a command that does not read its stdin is no error
                            pending = pending[:0]
                        if not pending:
                            selector.unregister(stdin)
                            with contextlib.suppress(OSError):
                                stdin.close()
                        continue
                    assert isinstance(pipe, io.BufferedReader)
                    data = os.read(pipe.fileno(), 65536)
                    if not data:
                        selector.unregister(pipe)
                        stdout_ended = stdout_ended or pipe is stdout
                    elif pipe is stdout:
                        if len(output) <= MAX_OUTPUT:
                            output += data[: MAX_OUTPUT + 1 - len(output)]
                    else:
                        errors += data
                        del errors[: -4 * TAIL]
                        line += data
                        cut = line.rfind(b"\n") + 1
                        if cut or len(line) > 65536:
                            self._copy_stderr(bytes(line[: cut or len(line)]))
                            del line[: cut or len(line)]
        if line:
            self._copy_stderr(bytes(line))
        for end in (stdin, stdout, stderr):
            with contextlib.suppress(OSError):
                end.close()
        return bytes(output), bytes(errors), stdout_ended

    def _copy_stderr(self, lines: bytes) -> None:
        """The command's stderr, whole lines at a time, to ours."""
        with self._stderr_lock:
            try:
                if self._stderr is not None:
                    self._stderr.write(lines)
                    self._stderr.flush()
                else:  # sys.stderr as it is now (a test may have replaced it)
                    sys.stderr.write(lines.decode("utf-8", "replace"))
                    sys.stderr.flush()
            except (OSError, ValueError):
                pass


def _document_bytes(task: Task) -> bytes:
    return json.dumps(task_document(task)).encode() + b"\n"


class TaskHandler:
    """The processor of ``tenure task worker --http URL``, for an
    :class:`~tenure.runtime.tasks.AsyncTaskWorker`: the task is POSTed to ``url`` as JSON
    over kept-alive connections (at most ``concurrency``), the body of a 2xx answer is the
    outcome. The request has no timeout of its own: the lease bounds it, since the worker
    cancels the processor (and the request with it) when the lease is lost. Use as
    ``async with`` (it opens and closes the connections).

    Each connection is an ``httpx.AsyncClient`` of its own, taken from a queue of idle ones:
    one client with many connections looks at every connection of its pool for every
    request, which cost three times the CPU per task at a concurrency of 16.
    """

    def __init__(self, url: str, *, concurrency: int, connect_timeout: float = 5.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidConfiguration(
                f"--http needs an http:// or https:// URL with a host, got {url!r}",
                hint="For example: --http http://127.0.0.1:8080/tasks",
            )
        self.url = url
        self.concurrency = concurrency
        self.connect_timeout = connect_timeout
        self._clients: list[httpx.AsyncClient] = []
        self._idle: asyncio.Queue[httpx.AsyncClient] | None = None

    async def __aenter__(self) -> Self:
        tls = httpx.create_ssl_context()  # loaded once for every client
        self._idle = asyncio.Queue()
        for _ in range(self.concurrency):
            client = httpx.AsyncClient(
                timeout=httpx.Timeout(None, connect=self.connect_timeout),
                limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
                verify=tls,
                trust_env=False,  # a local handler: no proxy from the environment
            )
            self._clients.append(client)
            self._idle.put_nowait(client)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        clients, self._clients, self._idle = self._clients, [], None
        for client in clients:
            await client.aclose()

    async def __call__(self, task: Task) -> Outcome:
        idle = self._idle
        if idle is None:
            raise RuntimeError("TaskHandler is used outside its async with block")
        client = await idle.get()
        try:
            response = await client.post(
                self.url,
                content=_document_bytes(task),
                headers={
                    "content-type": "application/json",
                    "tenure-task-id": str(task.id),
                    "tenure-owner": str(task.owner),
                    "tenure-epoch": str(task.epoch),
                },
            )
        except httpx.HTTPError as error:
            return Fail(f"the handler at {self.url} failed: {type(error).__name__}: {error}")
        finally:
            idle.put_nowait(client)
        if not response.is_success:
            return Fail(
                f"the handler at {self.url} answered {response.status_code} {response.reason_phrase}: "
                f"{tail(response.content) or '(no body)'}"
            )
        return parse_outcome(response.content, source=f"the answer of {self.url}")
