"""Graceful shutdown of the real `attnserve-server` process: SIGTERM with a burst in flight, and
SIGTERM arriving a few milliseconds after a burst was sent (the lame duck: service/server.py)."""
import asyncio
import signal
import socket
import time
import urllib.request

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from attnserve.inference import grpc_service_pb2 as kpb, grpc_service_pb2_grpc as kpbg
from scripts.container_check import received  # the one count of calls a server has taken in
from tests.helpers import free_port, health_of, until_counted, wait_serving
from tests.live import release, spawn_server, terminate

WORDS = ["internationalization", "characteristically", "photosynthesis", "counterproductive",
         "incomprehensible", "extraordinarily", "misunderstanding", "responsibilities"]
BURST = 64


async def code_of(address: str) -> grpc.StatusCode:
    async with grpc.aio.insecure_channel(address) as channel:
        try:
            await pbg.TransducerStub(channel).Transduce(pb.TransduceRequest(inputs=["late"]), timeout=2)
        except grpc.aio.AioRpcError as e:
            return e.code()
    return grpc.StatusCode.OK


async def until_refused(address: str, timeout_s: float = 60) -> None:
    """Until the port refuses a new connection: the server has stopped taking calls (a poll; the
    deadline only bounds a hang). A call refused on a connection accepted while gRPC closes its
    listener is not enough: gRPC core may accept one more, and cancel its call (CANCELLED), until the
    listener is gone; from then on every new connection is refused, which a client hears as UNAVAILABLE."""
    deadline = time.monotonic() + timeout_s
    while not (await asyncio.to_thread(health_of, address)).startswith("UNAVAILABLE") or \
            not await asyncio.to_thread(connection_refused, address):
        assert time.monotonic() < deadline, f"{address} still took new calls {timeout_s} s after SIGTERM"
        await asyncio.sleep(0.05)


def connection_refused(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except ConnectionRefusedError:
        return True
    except OSError:  # a timeout: the port is neither taking nor refusing connections yet
        return False
    return False


# gRPC's backlog sheds calls it has held a second (--max-pending-age-s, CANCELLED): a burst on a busy
# machine can wait that long, and shedding is the overload tests' subject, not shutdown's.
PATIENT = ("--max-pending-age-s", "60")


async def test_sigterm_drains_the_burst_in_flight_then_exits_0(tiny_bundle, tmp_path, capsys):
    port, metrics_port = free_port(), free_port()
    address = f"127.0.0.1:{port}"
    log = tmp_path / "server.log"
    # The engine holds every call until release(): the whole burst is in flight at SIGTERM and
    # through the drain, whatever the machine's speed.
    proc = spawn_server(tiny_bundle, port, "--metrics-port", str(metrics_port), "--grace-period-s", "60",
                        "--lame-duck-s", "0", *PATIENT, log_path=log, held=True)
    try:
        await asyncio.to_thread(wait_serving, address, 120, proc)
        async with grpc.aio.insecure_channel(address) as channel:
            stub = pbg.TransducerStub(channel)
            watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
            assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
            options = pb.DecodeOptions(return_attention=False)
            burst = [asyncio.ensure_future(stub.Transduce(pb.TransduceRequest(inputs=WORDS, options=options),
                                                          timeout=120)) for _ in range(BURST)]
            await until_counted(lambda: received(metrics_port), BURST, burst)
            proc.send_signal(signal.SIGTERM)
            in_flight = sum(not call.done() for call in burst)
            # Once health says NOT_SERVING the server is draining: a new connection now is refused.
            assert (await watch.read()).status == health_pb2.HealthCheckResponse.NOT_SERVING
            watch.cancel()
            await until_refused(address)
            during = await code_of(address)
            still_in_flight = sum(not call.done() for call in burst)
            release(proc)
            outcomes = await asyncio.gather(*burst, return_exceptions=True)
        exit_code = await asyncio.to_thread(proc.wait, 60)
        after = await code_of(address)
    finally:
        terminate(proc)
    failed = [o for o in outcomes if isinstance(o, Exception)]
    with capsys.disabled():
        print(f"\nshutdown: SIGTERM with {in_flight} of {BURST} calls in flight: {len(failed)} failed, exit code "
              f"{exit_code}; new connection during drain ({still_in_flight} calls still in flight): {during.name}, "
              f"after exit: {after.name}")
    assert in_flight == still_in_flight == BURST  # the engine held them all
    assert failed == [], failed[:3]
    assert all(len(o.results) == len(WORDS) for o in outcomes)
    assert exit_code == 0
    assert during == grpc.StatusCode.UNAVAILABLE and after == grpc.StatusCode.UNAVAILABLE
    assert "shutting down" in log.read_text()


def infer_request(words: list[str]) -> kpb.ModelInferRequest:
    req = kpb.ModelInferRequest(model_name="tiny")
    req.inputs.add(name="TEXT", datatype="BYTES", shape=[len(words)]).contents.bytes_contents.extend(
        w.encode() for w in words)
    return req


SIGNAL_AFTER_MS = (0, 1, 3, 5, 10, 20)
SIXTEEN = (WORDS * 2)[:16]


async def test_sigterm_just_after_a_burst_loses_no_call(tiny_bundle, tmp_path, capsys):
    """48 ModelInfer calls of 16 words over one warm connection, SIGTERM a few ms later: every
    call is answered (the lame duck takes what was on its way), at each timing; the server exits 0.
    The lame duck lasts until the server has counted every call, then a second SIGTERM ends it: a
    lame duck of fixed length would also be a bound on how soon a busy machine delivers the calls."""
    rows = []
    for after_ms in SIGNAL_AFTER_MS:  # the signal's timing against the burst: any must pass
        port, metrics_port = free_port(), free_port()
        proc = spawn_server(tiny_bundle, port, "--metrics-port", str(metrics_port), "--lame-duck-s", "120",
                            "--grace-period-s", "30", *PATIENT, log_path=tmp_path / f"server-{after_ms}.log")
        try:
            await asyncio.to_thread(wait_serving, f"127.0.0.1:{port}", 120, proc)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = kpbg.GRPCInferenceServiceStub(channel)
                await stub.ModelInfer(infer_request(["warm"]), timeout=10)  # the connection is up
                burst = [asyncio.ensure_future(stub.ModelInfer(infer_request(SIXTEEN), timeout=60))
                         for _ in range(48)]
                await asyncio.sleep(after_ms / 1000)
                proc.send_signal(signal.SIGTERM)
                await until_counted(lambda: received(metrics_port, "ModelInfer"), 1 + len(burst), burst)
                proc.send_signal(signal.SIGTERM)  # ends the lame duck: drain and exit
                outcomes = await asyncio.gather(*burst, return_exceptions=True)
            exit_code = await asyncio.to_thread(proc.wait, 60)
        finally:
            terminate(proc)
        failed = [f"{o.code().name}: {o.details()}" if isinstance(o, grpc.aio.AioRpcError) else repr(o)
                  for o in outcomes if isinstance(o, Exception)]
        rows.append((after_ms, len(burst), failed, exit_code))
        assert all(isinstance(o, Exception) or list(o.outputs[0].shape) == [16] for o in outcomes)
    with capsys.disabled():
        print("\nSIGTERM after a burst of 48 x 16 words: " +
              "; ".join(f"{ms} ms: {n} sent, {len(f)} failed, exit {code}" for ms, n, f, code in rows))
    assert [(ms, f) for ms, _, f, _ in rows if f] == []
    assert all(code == 0 for *_, code in rows)


async def test_the_lame_duck_serves_new_calls_and_a_second_signal_cuts_it_short(tiny_bundle, tmp_path):
    """During the lame duck health says NOT_SERVING while a new call is still answered; a second
    SIGTERM ends the lame duck at once (60 s here), and the server drains and exits 0."""
    port = free_port()
    proc = spawn_server(tiny_bundle, port, "--lame-duck-s", "60", "--grace-period-s", "5",
                        log_path=tmp_path / "server.log")
    try:
        await asyncio.to_thread(wait_serving, f"127.0.0.1:{port}", 120, proc)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
            assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert (await watch.read()).status == health_pb2.HealthCheckResponse.NOT_SERVING
            watch.cancel()
            during = await code_of(f"127.0.0.1:{port}")  # a new connection and call, in the lame duck
        proc.send_signal(signal.SIGTERM)
        exit_code = await asyncio.to_thread(proc.wait, 60)
        took_s = time.monotonic() - t0
    finally:
        terminate(proc)
    assert during == grpc.StatusCode.OK
    assert exit_code == 0 and took_s < 60, (exit_code, took_s)  # it did not wait out the 60 s lame duck


async def test_sigterm_mid_burst_on_the_http_port_answers_every_call_then_exits_0(tiny_bundle, tmp_path, capsys):
    """The REST binding drains like gRPC: calls in flight at SIGTERM are answered, none is cut."""
    import aiohttp

    port, http_port = free_port(), free_port()
    proc = spawn_server(tiny_bundle, port, "--metrics-port", str(http_port), "--grace-period-s", "60",
                        "--lame-duck-s", "0", log_path=tmp_path / "server.log", held=True)
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(WORDS)], "data": WORDS}],
            "parameters": {"return_attention": False}}
    try:
        await asyncio.to_thread(wait_serving, f"127.0.0.1:{port}", 120, proc)
        async with aiohttp.ClientSession(f"http://127.0.0.1:{http_port}") as http:
            async def call():
                async with http.post("/v2/models/tiny/infer", json=body) as r:
                    return r.status, await r.json()
            burst = [asyncio.ensure_future(call()) for _ in range(BURST)]
            await until_counted(lambda: inflight(http_port), BURST, burst)  # all taken in, held by the engine
            proc.send_signal(signal.SIGTERM)
            in_flight = sum(not c.done() for c in burst)
            await until_refused(f"127.0.0.1:{port}")  # the server is draining
            still_in_flight = sum(not c.done() for c in burst)
            release(proc)
            outcomes = await asyncio.gather(*burst, return_exceptions=True)
        exit_code = await asyncio.to_thread(proc.wait, 60)
    finally:
        terminate(proc)
    ok = [o for o in outcomes if not isinstance(o, Exception) and o[0] == 200]
    lost = [o for o in outcomes if isinstance(o, Exception) or o[0] != 200]
    with capsys.disabled():
        print(f"\nHTTP shutdown: SIGTERM with {in_flight} of {BURST} calls in flight: {len(ok)} ok, "
              f"{len(lost)} lost; exit code {exit_code}")
    assert in_flight == still_in_flight == BURST  # the engine held them all
    assert lost == [], lost[:3]
    assert all(len(o[1]["outputs"][0]["data"]) == len(WORDS) for o in ok)
    assert exit_code == 0


def inflight(http_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5).read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "attnserve_inflight_requests")
