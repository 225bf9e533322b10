"""Two real server processes behind one client channel (service/client/balancing.py's service config):
both take a share of the load, then one gets SIGTERM mid-load and the client loses no call."""
import asyncio
import signal
import time
import urllib.request

import grpc
from prometheus_client.parser import text_string_to_metric_families

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from service.client.balancing import channel_options
from service.config import Config, ServerConfig
from tests.helpers import free_port, wait_serving
from tests.live import serving, spawn_server, terminate

CALLERS = 8
WORDS = ["replica", "balance", "failover", "attention"]


def served(metrics_port: int) -> float:
    """Transduce calls this replica answered OK (its own /metrics)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "attnserve_requests_total" and s.labels.get("rpc") == "Transduce"
               and s.labels.get("code") == "OK")


async def until_answered(ok: dict, answered: asyncio.Condition, phase: str, n: int, timeout_s: float = 60) -> None:
    """Until the callers have n answers in `phase` (each answer wakes it; the timeout bounds a hang)."""
    try:
        async with answered:
            await asyncio.wait_for(answered.wait_for(lambda: ok[phase] >= n), timeout_s)
    except asyncio.TimeoutError:
        raise AssertionError(f"{ok[phase]} calls answered in phase {phase!r}, not {n}") from None


async def test_two_replicas_share_the_load_and_one_leaves_without_a_failed_call(tiny_bundle, tmp_path, capsys):
    ports = [(free_port(), free_port()) for _ in range(2)]
    procs = [spawn_server(tiny_bundle, port, "--metrics-port", str(mport), "--lame-duck-s", "1",
                          log_path=tmp_path / f"replica-{i}.log") for i, (port, mport) in enumerate(ports)]
    try:
        for proc, (port, _) in zip(procs, ports):
            await asyncio.to_thread(wait_serving, f"127.0.0.1:{port}", 120, proc)
        target = "ipv4:" + ",".join(f"127.0.0.1:{port}" for port, _ in ports)
        ok, failed, phase = {"both": 0, "after": 0}, [], "both"
        stop, answered = asyncio.Event(), asyncio.Condition()
        async with grpc.aio.insecure_channel(target, options=channel_options()) as channel:
            stub = pbg.TransducerStub(channel)

            async def caller():
                while not stop.is_set():
                    try:
                        reply = await stub.Transduce(pb.TransduceRequest(inputs=WORDS), timeout=10)
                        assert len(reply.results) == len(WORDS)
                        ok[phase] += 1
                        async with answered:
                            answered.notify_all()
                    except grpc.aio.AioRpcError as e:
                        failed.append(f"{e.code().name}: {e.details()}")

            callers = [asyncio.create_task(caller()) for _ in range(CALLERS)]
            await until_answered(ok, answered, "both", 40)
            shares = [await asyncio.to_thread(served, mport) for _, mport in ports]
            procs[0].send_signal(signal.SIGTERM)  # replica 0 leaves mid-load
            exit_code = await asyncio.to_thread(procs[0].wait, 60)
            phase = "after"
            b_before = await asyncio.to_thread(served, ports[1][1])
            await until_answered(ok, answered, "after", 10)
            stop.set()
            await asyncio.gather(*callers)
        b_after = await asyncio.to_thread(served, ports[1][1])
    finally:
        for proc in procs:
            terminate(proc)
    with capsys.disabled():
        print(f"\nreplicas: before SIGTERM replica 0 served {shares[0]:.0f} and replica 1 {shares[1]:.0f}; replica 0 "
              f"exited {exit_code}; after it, replica 1 served {b_after - b_before:.0f} more; client: "
              f"{ok['both'] + ok['after']} ok, {len(failed)} failed")
    assert failed == [], failed[:5]
    assert min(shares) > 0.2 * sum(shares), shares  # round robin: both replicas carry load
    assert exit_code == 0
    assert ok["after"] > 0 and b_after > b_before  # the load goes on, on the other replica


def client_ports(server_port: int) -> set[int]:
    """Local ports of this machine's established TCP connections to server_port (gRPC uses IPv6
    sockets with v4-mapped addresses, so both tables)."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, remote, state = line.split()[1:4]
                if state == "01" and int(remote.rsplit(":", 1)[1], 16) == server_port:  # 01: ESTABLISHED
                    ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


async def test_connections_are_closed_at_their_maximum_age_and_no_call_fails(tiny_bundle):
    """--max-connection-age-s: the server sends GOAWAY to old connections, so clients reconnect
    (and re-resolve DNS); calls on the old connection finish, new ones go to the new one."""
    cfg = Config(model_dir=tiny_bundle, server=ServerConfig(host="127.0.0.1", port=0, metrics_port=-1,
                                                            max_connection_age_s=0.5, max_connection_age_grace_s=5))
    async with serving(cfg) as server:
        seen, failed, calls = set(), [], 0
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}", options=channel_options()) as channel:
            stub = pbg.TransducerStub(channel)
            # Calls until the client has been on three connections; the deadline only bounds a hang.
            deadline = time.monotonic() + 60
            while len(seen) < 3 and time.monotonic() < deadline:
                try:
                    await stub.Transduce(pb.TransduceRequest(inputs=WORDS), timeout=10)
                    calls += 1
                except grpc.aio.AioRpcError as e:
                    failed.append(e.code().name)
                seen |= client_ports(server.port)
    assert failed == [] and calls > 0
    assert len(seen) >= 3, f"the client kept {len(seen)} connection(s) for 60 s and {calls} calls; age limit 0.5 s"
