"""`attnserve-server --workers N`: N server processes on one gRPC port and one HTTP port.

Each worker is a whole server (service/server.py) with its own event loop, engines, queues and
interpreter lock, so one call's transport and another's decoding run on different cores. The
kernel spreads connections over the workers' listening sockets (SO_REUSEPORT: gRPC sets it on its
own, the HTTP port asks aiohttp for it); a connection stays with the worker that accepted it.

The supervisor serves no call. It
- starts the workers, each with its end of a control channel (service/control.py), and tells them
  to say SERVING once every one has loaded, so health is one view;
- carries every admin operation (ReloadModel, the repository's load and unload) to every worker;
  each worker polls its own overrides file and, with --model-poll-s, its model directories;
- gives the workers one Prometheus directory (PROMETHEUS_MULTIPROC_DIR, or a temporary one), so that
  /metrics on any of them shows the whole server (service/metrics.py);
- forwards SIGTERM and SIGINT to every worker, each of which goes lame duck and drains as a single
  server does, and exits 0 once every worker has exited 0;
- stops every worker when one exits on its own, and exits non-zero, so that an orchestrator
  restarts the server whole rather than a worker coming back on a version the others left.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import multiprocess

from service.config import Config
from service.control import FD_ENV, INDEX_ENV, Lines, encode_error
from service.domain import NotReady

log = logging.getLogger("attnserve")
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@dataclass
class Worker:
    index: int
    proc: asyncio.subprocess.Process
    lines: Lines
    loaded: bool = False
    pending: dict[int, asyncio.Future] = field(default_factory=dict)  # "do" id -> its "done" error


def reserve_port(host: str) -> socket.socket:
    """A socket bound to a free port, with SO_REUSEPORT so the workers can bind it too; it never
    listens, so the kernel gives it no connection."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, 0))
    return sock


def metrics_dir() -> tuple[Path, bool]:
    """The workers' Prometheus directory, emptied of an earlier run's files (whose counts would be
    added in), and whether it is a temporary one to remove at the end."""
    given = os.environ.get(MULTIPROC_ENV)
    if not given:
        return Path(tempfile.mkdtemp(prefix="attnserve-metrics-")), True
    path = Path(given)
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink()
    return path, False


class Supervisor:
    def __init__(self, argv: list[str], cfg: Config, count: int):
        self.argv, self.cfg, self.count = argv, cfg, count
        self.workers: list[Worker] = []
        self.stopping = False
        self.exit_code = 0
        self._one_at_a_time = asyncio.Lock()  # admin operations, in one order for every worker
        self._ids = itertools.count()
        self.metrics = Path()
        self._tasks: set[asyncio.Task] = set()
        self._reserved: list[socket.socket] = []

    async def run(self) -> int:
        self.metrics, temporary = metrics_dir()
        ports = self._ports()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.forward, sig)
        try:
            for index in range(self.count):
                if self.stopping:  # a signal while starting: the workers started so far stop, no more start
                    break
                self.workers.append(await self._spawn(index, ports, self.metrics))
            log.info("supervising %d workers on port %d (HTTP %d)", self.count, *ports)
            waits = {asyncio.ensure_future(w.proc.wait()): w for w in self.workers}
            readers = [self._task(self._listen(w)) for w in self.workers]
            while waits:
                done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for finished in done:
                    self._exited(waits.pop(finished))
            await asyncio.gather(*readers, return_exceptions=True)
        finally:
            for sock in self._reserved:
                sock.close()
            if temporary:
                shutil.rmtree(self.metrics, ignore_errors=True)
        return self.exit_code

    def _ports(self) -> tuple[int, int]:
        """The gRPC and HTTP ports every worker binds: those configured, or free ones picked here
        for a configured 0 (every worker must bind the same one)."""
        out = []
        for port in (self.cfg.server.port, self.cfg.server.metrics_port):
            if port == 0:
                sock = reserve_port(self.cfg.server.host)
                self._reserved.append(sock)
                port = sock.getsockname()[1]
            out.append(port)
        return out[0], out[1]

    async def _spawn(self, index: int, ports: tuple[int, int], metrics: Path) -> Worker:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {**os.environ, MULTIPROC_ENV: str(metrics), FD_ENV: str(theirs.fileno()), INDEX_ENV: str(index)}
        # Its own process group, so that a terminal's Ctrl-C reaches the supervisor alone, which
        # forwards it once; the same session, so that the scheduler's autogroup shares the cores
        # between the server's processes and others as it would for one process.
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "service.server", *self.argv, "--port", str(ports[0]), "--metrics-port",
            str(ports[1]), pass_fds=(theirs.fileno(),), env=env, process_group=0)
        theirs.close()
        return Worker(index, proc, await Lines.over(ours))

    def _task(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def forward(self, sig: int) -> None:
        """SIGTERM or SIGINT to every worker still running: each goes lame duck and drains (a second
        signal cuts its lame duck short, as for a single server)."""
        if not self.stopping:
            log.info("supervisor: %s, passing it to the %d workers", signal.Signals(sig).name, self.count)
        self.stopping = True
        for w in self.workers:
            if w.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    w.proc.send_signal(sig)

    def _exited(self, w: Worker) -> None:
        code = w.proc.returncode
        for pending in w.pending.values():  # an operation it never finished
            if not pending.done():
                pending.set_result(encode_error(NotReady(f"worker {w.index} exited with code {code}")))
        # Its live gauges (in flight, queue depth) leave the sums at once; its counters stay counted.
        multiprocess.mark_process_dead(w.proc.pid, str(self.metrics))
        if code != 0:
            self.exit_code = self.exit_code or (code if code > 0 else 1)
        if not self.stopping:
            log.error("worker %d exited with code %s on its own; stopping the others", w.index, code)
            self.exit_code = self.exit_code or 1
            self.forward(signal.SIGTERM)
        w.lines.close()

    async def _listen(self, w: Worker) -> None:
        while (message := await w.lines.receive()) is not None:
            kind = message["kind"]
            if kind == "ready":
                w.loaded = True
                if len(self.workers) == self.count and all(x.loaded for x in self.workers):
                    for x in self.workers:
                        x.lines.send(kind="serving")
                    log.info("every worker has loaded: SERVING")
            elif kind == "ask":
                self._task(self._fan_out(w, message))
            elif kind == "done":
                w.pending.pop(message["id"]).set_result(message["error"])

    async def _fan_out(self, asker: Worker, message: dict) -> None:
        """One admin operation: every running worker applies it; the asker hears the first failure."""
        async with self._one_at_a_time:
            answers = []
            for w in self.workers:
                if w.proc.returncode is not None:
                    continue
                key = next(self._ids)
                w.pending[key] = answer = asyncio.get_running_loop().create_future()
                w.lines.send(kind="do", id=key, op=message["op"], name=message["name"], version=message["version"])
                answers.append(answer)
            errors = [e for e in await asyncio.gather(*answers) if e is not None]
        log.info("admin %s %s %s: done by %d workers%s", message["op"], message["name"], message["version"],
                 len(answers), f", {len(errors)} failed: {errors[0]['message']}" if errors else "")
        asker.lines.send(kind="answer", id=message["id"], error=errors[0] if errors else None)


def supervise(argv: list[str], cfg: Config, count: int) -> int:
    return asyncio.run(Supervisor(argv, cfg, count).run())
