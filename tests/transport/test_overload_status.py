"""Overload is answered with a status a client can act on: a real server process, flooded by the
stock tritonclient aio client, refuses every call it cannot take with RESOURCE_EXHAUSTED or
UNAVAILABLE (which clients retry elsewhere), never CANCELLED (which reads as the client's own
giving up), and answers the calls it took.

The engine holds every call it is given until the test releases it (tests/held_server.py), so
the calls taken in stay in flight, however fast the machine, while the rest of the burst arrives;
the test releases them once every other call has been answered. Each burst runs bench/burst.py in
a process of its own: tritonclient's generated `inference` messages cannot share a process with
the server's (see tests/triton_calls.py).
"""
import asyncio
import json
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from service.config import ServerConfig
from tests.helpers import free_port, wait_serving
from tests.live import release, spawn_server, terminate

# The tiny model's own alphabet; no cache, so every call taken in waits for the engine.
WORDS = ["abc", "bead", "cafe", "faced", "decade", "accede", "beef", "dab"]
# A client timeout no call comes near: a DEADLINE_EXCEEDED would be the server's doing.
TIMEOUT_S = 120
ACTIONABLE = {"RESOURCE_EXHAUSTED", "UNAVAILABLE"}
STREAMS = ServerConfig().max_streams_per_connection


@pytest.fixture
def held(tiny_bundle, request):
    """A held server started with the test's flags; its port."""
    port = free_port()
    proc = spawn_server(tiny_bundle, port, "--cache-entries", "0", *request.param, held=True)
    try:
        wait_serving(f"127.0.0.1:{port}", 120, proc)
        yield port, proc
    finally:
        terminate(proc)


def burst(held, tmp_path: Path, calls: int, connections: int, at_most_held: int) -> dict:
    """`calls` calls at once over `connections` connections; once all but `at_most_held` (the most the
    server can have taken in) are answered, the engine is released and the rest answered too."""
    port, proc = held
    words = tmp_path / "words.txt"
    words.write_text("\n".join(WORDS))
    client = subprocess.Popen([sys.executable, "-m", "bench.burst", "--addr", f"127.0.0.1:{port}", "--model", "tiny",
                               "--words", str(words), "--calls", str(calls), "--connections", str(connections),
                               "--timeout-s", str(TIMEOUT_S), "--say-when-done", str(calls - at_most_held)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline() == f"done {calls - at_most_held}\n"
        release(proc)
        result = json.loads(client.stdout.readline())
        assert client.wait(60) == 0
    finally:
        if client.poll() is None:
            client.kill()
    print(f"\n{calls} calls over {connections} connection(s): {result['statuses']}")
    return result


@pytest.fixture
def server(tiny_bundle, request):
    """A server (engine not held) started with the test's flags; its port."""
    port = free_port()
    proc = spawn_server(tiny_bundle, port, "--cache-entries", "0", "--workers", "1", *request.param)
    try:
        wait_serving(f"127.0.0.1:{port}", 120, proc)
        yield port
    finally:
        terminate(proc)


@pytest.mark.parametrize("server", [()], indirect=True)
def test_a_burst_on_one_connection_is_answered_or_refused_with_an_actionable_status(server, tmp_path):
    """One connection, 3,000 calls at once against the default limits. gRPC core lets at most the
    connection's stream limit in at once; a call sent past it is refused before any Python runs
    (REFUSED_STREAM: UNAVAILABLE), or waits in the client for a stream as calls end. Before, every
    call was let in, and gRPC's own backlog bounds reset those the event loop had not taken in
    within a second: CANCELLED."""
    words = tmp_path / "words.txt"
    words.write_text("\n".join(WORDS))
    out = subprocess.run([sys.executable, "-m", "bench.burst", "--addr", f"127.0.0.1:{server}", "--model", "tiny",
                          "--words", str(words), "--calls", "3000", "--timeout-s", str(TIMEOUT_S)],
                         capture_output=True, text=True, check=True, timeout=2 * TIMEOUT_S)
    result = json.loads(out.stdout.splitlines()[-1])
    print(f"\n3000 calls over 1 connection: {result['statuses']}")
    assert set(result["statuses"]) - {"OK"} <= ACTIONABLE, result["details"]
    assert result["ok"] > 0


@pytest.mark.parametrize("held", [("--max-inflight-calls", "16")], indirect=True)
def test_calls_past_the_process_limit_hear_resource_exhausted(held, tmp_path):
    """Several connections: the process holds at most --max-inflight-calls, and a call past it hears
    RESOURCE_EXHAUSTED before its request is parsed (or UNAVAILABLE, where its connection's streams
    are still full of calls being refused)."""
    result = burst(held, tmp_path, calls=800, connections=4, at_most_held=16)
    assert set(result["statuses"]) - {"OK"} <= ACTIONABLE, result["details"]
    assert any(d["status"] == "RESOURCE_EXHAUSTED" and "calls in flight" in d["message"] for d in result["details"])
    assert result["ok"] == 16  # counted from admission: no more than the bound get in, however fast the burst


@pytest.mark.parametrize("server", [("--max-streams-per-connection", "32")], indirect=True)
def test_a_client_that_keeps_within_the_stream_limit_is_never_refused(server):
    """A closed loop of as many callers as the connection's stream limit, each calling again once
    answered: every call is answered. gRPC core by default counts a stream until this process has
    freed it, which lags behind the answers, so such a client used to hear REFUSED_STREAM
    (UNAVAILABLE) now and then although it never had more calls open than the limit."""
    callers, calls_each = 32, 100

    async def loop() -> dict[str, int]:
        statuses: dict[str, int] = {}
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server}") as channel:
            stub = pbg.TransducerStub(channel)

            async def caller(i: int) -> None:
                for n in range(calls_each):
                    request = pb.TransduceRequest(model_name="tiny", inputs=[WORDS[(i + n) % len(WORDS)]])
                    try:
                        await stub.Transduce(request, timeout=TIMEOUT_S)
                        code = "OK"
                    except grpc.aio.AioRpcError as e:
                        code = e.code().name
                    statuses[code] = statuses.get(code, 0) + 1

            await asyncio.gather(*(caller(i) for i in range(callers)))
        return statuses

    statuses = asyncio.run(loop())
    assert statuses == {"OK": callers * calls_each}
