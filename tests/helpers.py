"""Helpers for reaching a server process, shared by the tests and scripts/ (soak, container check).

Nothing beyond the serve extra (grpcio and its health checking): `make soak` runs them in a
serve-only venv. Test-only helpers (certificates, bundles, in-process servers) are in tests/live.py.
"""
from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from typing import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def free_port() -> int:
    """A loopback port nothing listens on now (the server binds it next)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Each poll its own connection, retried soon: a channel's reconnect backoff grows past a minute, so a
# server that binds late would be seen long after it serves, and a connection that reached another
# listener on the port (SO_REUSEPORT) would be asked again and again.
POLL_OPTIONS = [("grpc.use_local_subchannel_pool", 1), ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.min_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 500)]


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
