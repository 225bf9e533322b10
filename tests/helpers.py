"""Helpers for reaching a server process, shared by the tests, scripts/ (soak, container check) and bench/.

Nothing beyond the serving install (grpcio and its health checking): `make soak` runs them in a
serve-only venv. Test-only helpers (certificates, bundles, in-process servers) are in tests/live.py.
"""
from __future__ import annotations

import asyncio
import random
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


# Not the random module's shared state: code under test seeds it (training), and two processes seeded
# alike would pick the same ports.
_PICK = random.SystemRandom()


def free_port() -> int:
    """A loopback port nothing is bound to now (the server binds it next), picked below the kernel's
    ephemeral range. A port from bind(0) is in that range, free again once this returns, and so free
    for any process's bind(0) or outgoing connection to take before the server binds it; one bound
    with SO_REUSEPORT (a server on port 0, as the other tests' are) would share it with the server
    silently. Below the range only an explicit bind can take it."""
    low = ephemeral_low()
    if low - 1024 < 4096:  # a range that leaves too little room below it: bind(0) as before
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    for _ in range(1000):
        port = _PICK.randrange(max(1024, low - 16384), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # someone has it
                continue
            return port
    raise RuntimeError(f"no free port below {low} in 1000 tries")


def ephemeral_low() -> int:
    """The lowest port bind(0) and outgoing connections take (Linux's default where it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Each poll its own channel and connection (a subchannel pool of its own, not the process's, where an
# earlier channel's connection to the address may be backing off): one channel for the whole wait let
# gRPC's reconnect backoff grow past a minute, so a server that binds late would be seen long after it
# serves, and a connection that reached another listener on the port would be asked again and again.
POLL_OPTIONS = [("grpc.use_local_subchannel_pool", 1)]


def health_of(address: str, service: str = "") -> str:
    """SERVING, NOT_SERVING, ... or the gRPC status code and details of a failed Check."""
    with grpc.insecure_channel(address, options=POLL_OPTIONS) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=1)
        except grpc.RpcError as e:
            return f"{e.code().name}: {e.details()}"
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def wait_serving(address: str, timeout_s: float = 120, proc: subprocess.Popen | None = None, *,
                 service: str = "", gone: Callable[[], str | None] | None = None, poll_s: float = 0.1) -> None:
    """Until gRPC health at `address` says SERVING (for `service`; "" is the server as a whole).
    Fails at once when `proc` has exited or `gone()` says why the server went away; the deadline
    only bounds a hang (a server's start-up has no event to wait on from outside), and its error
    says what health last answered and ends with the server's log (`proc.log_path`, if it has one)."""
    deadline = time.monotonic() + timeout_s
    last = "never asked"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before serving{log_tail(proc)}")
        why = gone() if gone is not None else None
        if why:
            raise RuntimeError(why)
        last = health_of(address, service)
        if last == "SERVING":
            return
        time.sleep(poll_s)
    raise TimeoutError(f"{address} not SERVING after {timeout_s} s (health last said {last}){log_tail(proc)}")


def log_tail(proc: subprocess.Popen | None, lines: int = 30) -> str:
    path = getattr(proc, "log_path", None)
    if path is None:
        return ""
    try:
        with open(path, "rb") as f:
            tail = f.read().decode(errors="replace").splitlines()[-lines:]
    except OSError as e:
        return f"; its log {path}: {e}"
    return "; the server's log ends:\n" + "\n".join(tail)


async def until_counted(count, n: int, calls: list[asyncio.Future], timeout_s: float = 60) -> None:
    """Until count() (the server's metrics, read in a thread) reaches n, or one of `calls` has failed
    (the test then reports it): a poll, the deadline bounds a hang."""
    deadline = time.monotonic() + timeout_s
    while await asyncio.to_thread(count) < n:
        if any(c.done() and c.exception() is not None for c in calls):
            return
        assert time.monotonic() < deadline, f"the burst never reached the server in {timeout_s} s"
        await asyncio.sleep(0.01)
