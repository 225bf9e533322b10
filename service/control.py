"""The channel between the supervisor (service/supervisor.py) and each of its worker processes.

One Unix socket per worker, JSON lines both ways. A worker says when it has loaded ("ready");
the supervisor, once every worker has, says "serving", so that health is one view across the
processes. An admin operation (ReloadModel, the repository's load and unload) reaches one worker,
through whichever connection the kernel gave it; that worker asks the supervisor ("ask"), the
supervisor tells every worker to do it ("do") one operation at a time, so that every process
applies the same operations in the same order, gathers what each did ("done") and answers the
worker that asked ("answer") with the first failure, or none. So a reply means every process has
done it, and says so if one could not.

Why the supervisor and not a file every worker watches: the caller's reply waits on events
(each worker's "done") instead of on a poll interval, a failure in any worker reaches the caller,
and the order of two operations sent to two workers at once is the supervisor's, the same everywhere.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import logging
import socket

from service.domain import BundleError, NotReady, UnknownModel, VersionNotFound

log = logging.getLogger("attnserve")
FD_ENV = "ATTNSERVE_SUPERVISOR_FD"  # a worker's end of the channel, inherited from the supervisor
INDEX_ENV = "ATTNSERVE_WORKER_INDEX"  # the worker's number, 0..N-1 (its log lines say it)
ERRORS = {cls.__name__: cls for cls in (BundleError, VersionNotFound, UnknownModel, NotReady)}


def encode_error(e: BaseException | None) -> dict | None:
    if e is None:
        return None
    if isinstance(e, BundleError):
        return {"type": type(e).__name__, "message": str(e), "reason": e.reason}
    return {"type": type(e).__name__ if type(e).__name__ in ERRORS else "RuntimeError", "message": str(e)}


def decode_error(d: dict) -> Exception:
    """The domain error a worker raised, raised again where the call came in; anything else INTERNAL."""
    cls = ERRORS.get(d["type"], RuntimeError)
    if issubclass(cls, BundleError):
        reason = d["reason"]
        return cls(d["message"].removesuffix(f": {reason}"), reason)
    return cls(d["message"])


class Lines:
    """JSON lines over one connected Unix socket."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @classmethod
    async def over(cls, sock: socket.socket) -> Lines:
        return cls(*await asyncio.open_unix_connection(sock=sock))

    def send(self, **message) -> None:
        if not self.writer.is_closing():
            self.writer.write(json.dumps(message).encode() + b"\n")

    async def receive(self) -> dict | None:
        """The next message; None once the other end has closed."""
        try:
            line = await self.reader.readline()
        except ConnectionError:
            return None
        return json.loads(line) if line else None

    def close(self) -> None:
        self.writer.close()


class WorkerLink:
    """A worker's end of the channel: `fanout` is the repository's way to every worker (given to
    it at construction), `run` applies what the supervisor says until it closes the channel."""

    def __init__(self, lines: Lines):
        self.lines = lines
        self._asked: dict[int, asyncio.Future] = {}
        self._ids = itertools.count()
        self._doing: set[asyncio.Task] = set()

    @classmethod
    async def inherited(cls, fd: int) -> WorkerLink:
        return cls(await Lines.over(socket.socket(fileno=fd)))

    def ready(self) -> None:
        self.lines.send(kind="ready")

    async def fanout(self, op: str, name: str, version: str) -> None:
        """Have every worker (this one too) apply the operation; raises the first failure."""
        key = next(self._ids)
        self._asked[key] = answer = asyncio.get_running_loop().create_future()
        self.lines.send(kind="ask", id=key, op=op, name=name, version=version)
        error = await answer
        if error is not None:
            raise decode_error(error)

    async def run(self, apply, serving) -> None:
        """apply: the repository's (op, name, version) in this process; serving: awaited when every
        worker has loaded. Returns when the supervisor has closed the channel (it is gone)."""
        while (message := await self.lines.receive()) is not None:
            kind = message["kind"]
            if kind == "serving":
                await serving()
            elif kind == "answer":
                self._asked.pop(message["id"]).set_result(message["error"])
            elif kind == "do":
                task = asyncio.get_running_loop().create_task(self._do(apply, message))
                self._doing.add(task)
                task.add_done_callback(self._doing.discard)
        for answer in self._asked.values():
            answer.set_result(encode_error(NotReady("the server is shutting down (its supervisor has gone)")))
        self._asked.clear()

    async def _do(self, apply, message: dict) -> None:
        error = None
        try:
            await apply(message["op"], message["name"], message["version"])
        except Exception as e:  # every failure goes back to the caller; the domain's keep their status
            if type(e).__name__ not in ERRORS:
                log.error("admin operation %s %s failed", message["op"], message["name"], exc_info=e)
            error = e
        self.lines.send(kind="done", id=message["id"], error=encode_error(error))
