#!/usr/bin/env python3
"""Build the real image (deploy/Dockerfile) with Debian's podman and check it from outside.

    make container-check            # = .venv/bin/python scripts/container_check.py (as root)

On a Debian 12 machine with no Docker engine and no reachable image registry:

1. apt-get installs podman, runc and debootstrap when missing;
2. writes build/container/containers.conf (runc, cgroupfs, no default ulimits: see CONTAINERS_CONF in
   scripts/container_image.py, where steps 1-4 are);
3. makes a Debian base with `debootstrap --variant=minbase` from the machine's own Debian mirror, once
   (build/container/base-<suite>.tar, reused while the suite, mirror and packages stay the same), and
   `podman import`s it;
4. builds deploy/Dockerfile with --build-arg BASE_IMAGE=<that base>, pip reaching the package index
   the way this machine does (its CA bundle mounted in, its index URL if it has one);
5. runs the image read-only, as uid 10001, on the host network with free ports, and checks from
   outside: gRPC health, a Transduce with attention, Prometheus /metrics, and SIGTERM in the middle of
   a burst of concurrent calls (every call answered OK or UNAVAILABLE, exit code 0).

Prints a summary and writes it to build/container-check.json; exits 1 when a check fails.
`--help` for the options (an official base instead of debootstrap, --no-cache for a full build).
"""
from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUMMARY = REPO / "build" / "container-check.json"
VENV_BIN = Path(sys.executable).parent

sys.path.insert(0, str(REPO))  # run as a file: the repository's tests/ too
from tests.helpers import free_port, wait_serving  # noqa: E402  (what the tests reach servers with)
from scripts.container_image import (IMAGE, UID, WORK, build, ensure_base, ensure_tools, podman,  # noqa: E402
                                     podman_env, run)

WORDS = ["internationalization", "characteristically", "photosynthesis", "counterproductive",
         "incomprehensible", "extraordinarily", "misunderstanding", "responsibilities"]


# ------------------------------------------------------------------------------------ checks --

def grpc_ready(address: str, deadline_s: float, container: str) -> float:
    """Seconds until the container's server says SERVING."""
    def gone() -> str | None:
        state = podman("inspect", container, "--format", "{{.State.Status}}", check=False).stdout.strip()
        return None if state in ("running", "created", "configured") else f"the container is {state!r} before serving"
    t0 = time.monotonic()
    wait_serving(address, deadline_s, service="attnserve.v1.Transducer", gone=gone, poll_s=0.5)
    return round(time.monotonic() - t0, 1)


def check_health(address: str) -> dict:
    out = {}
    for service in ("", "attnserve.v1.Transducer"):
        cmd = [sys.executable, "-m", "service.client.healthcheck", "--addr", address]
        cmd += ["--service", service] if service else []
        r = run(cmd, check=False, cwd=REPO)
        out[service or "server"] = (r.stdout.strip() or r.stderr.strip()), r.returncode
    return {"ok": all(rc == 0 and s == "SERVING" for s, rc in out.values()),
            "status": {k: s for k, (s, _) in out.items()}}


def check_image_healthcheck(container: str) -> dict:
    """The image's own HEALTHCHECK (python -m service.client.healthcheck inside the container)."""
    r = podman("healthcheck", "run", container, check=False, timeout=30)
    return {"ok": r.returncode == 0, "result": (r.stdout.strip() or r.stderr.strip() or "healthy")}


def check_transduce(address: str) -> dict:
    words = ["phonemes", "attention"]
    r = run([str(VENV_BIN / "attnserve-client"), "phonemes", *words, "--server", address, "--json"],
            check=False, cwd=REPO)
    if r.returncode != 0:
        return {"ok": False, "error": r.stderr.strip()[-500:]}
    doc = json.loads(r.stdout)
    problems, outputs = [], {}
    for word, res in zip(words, doc["results"]):
        outputs[word] = res["output_text"]
        att = res["attention"]
        if not att:
            problems.append(f"{word}: no attention")
            continue
        sums = [sum(row) for row in att["weights"]]
        if att["cols"] != len(word) or att["rows"] != len(att["weights"]) or att["rows"] < 1 \
                or not all(math.isclose(s, 1.0, abs_tol=1e-3) for s in sums) or not res["output_text"]:
            problems.append(f"{word}: attention {att['rows']}x{att['cols']}, row sums {sums[:3]}...")
    return {"ok": len(doc["results"]) == len(words) and not problems, "model": doc["model"], "outputs": outputs,
            "attention_shapes": {w: [res["attention"]["rows"], res["attention"]["cols"]]
                                 for w, res in zip(words, doc["results"]) if res["attention"]},
            "problems": problems}


def scrape(metrics_port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()


def check_metrics(metrics_port: int) -> dict:
    try:
        text = scrape(metrics_port)
    except OSError as e:
        return {"ok": False, "error": str(e)}
    ours = [line for line in text.splitlines() if line.startswith("attnserve_")]
    return {"ok": bool(ours), "attnserve_samples": len(ours), "families": len({re.split(r"[{ ]", s)[0] for s in ours}),
            "example": ours[0] if ours else None}


def received(metrics_port: int, rpc: str = "Transduce") -> float:
    """`rpc` calls the server has taken in: finished plus in flight (calls of any RPC)."""
    from prometheus_client.parser import text_string_to_metric_families
    total = 0.0
    for family in text_string_to_metric_families(scrape(metrics_port)):
        for s in family.samples:
            if s.name == "attnserve_requests_total" and s.labels.get("rpc") == rpc:
                total += s.value
            elif s.name == "attnserve_inflight_requests":
                total += s.value
    return total


def classify(outcomes, words: list[str]) -> dict:
    """Counts of the calls' outcomes by status: OK (every word answered), refused (UNAVAILABLE), lost
    (anything else), unanswered (no status came back, or the deadline passed)."""
    import grpc

    counts: dict[str, int] = {}
    details: dict[str, str] = {}  # what the first call of each failing status said
    for o in outcomes:
        if isinstance(o, grpc.aio.AioRpcError):
            code = o.code().name
            details.setdefault(code, o.details() or "")
        elif isinstance(o, BaseException):
            code = type(o).__name__
        else:
            code = "OK" if len(o.results) == len(words) else "WRONG_RESULT_COUNT"
        counts[code] = counts.get(code, 0) + 1
    ok, refused = counts.get("OK", 0), counts.get("UNAVAILABLE", 0)
    # No answer at all: the deadline passed, or no gRPC status came back.
    unanswered = sum(n for code, n in counts.items() if code == "DEADLINE_EXCEEDED" or not code.isupper())
    return {"sent": len(outcomes), "ok": ok, "refused_unavailable": refused,
            "lost": len(outcomes) - ok - refused, "unanswered": unanswered, "codes": counts,
            "details": details}


async def sigterm_mid_burst(address: str, metrics_port: int, container: str, burst_size: int,
                            require_drained: bool) -> dict:
    """`burst_size` concurrent callers of Transduce, each sending again once answered;
    `podman kill --signal TERM` once the server has taken in `burst_size` of their calls, with about
    `burst_size` calls in flight; then new calls (a new connection each) every 0.2 s
    until the container has exited. Every burst call must end OK or UNAVAILABLE ("lost": anything
    else), every late call must get an answer (its status is reported: a late call can meet a full
    queue, RESOURCE_EXHAUSTED, or the instant the server stops, CANCELLED); `podman wait` must say 0.
    With the image's own lame duck and grace period (`require_drained`) every burst call must end OK:
    they had all reached the server before the signal, and the drain gives them 10 s."""
    import grpc
    from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg

    async def late_call() -> object:
        async with grpc.aio.insecure_channel(address) as channel:
            try:
                return await pbg.TransducerStub(channel).Transduce(pb.TransduceRequest(inputs=WORDS), timeout=30)
            except grpc.aio.AioRpcError as e:
                return e

    base = await asyncio.to_thread(received, metrics_port)
    # A closed loop, not a fixed burst: each of `burst_size` callers sends its next call as soon as
    # its last is answered, until the signal is sent, so that about burst_size calls are in flight at
    # SIGTERM however fast the server (a fixed burst of 200 calls was once answered whole before the
    # signal). One word a call: what is in flight must drain within the image's grace period on a
    # machine busy with other work too (`make test` runs test files side by side), and 16 long words
    # a call (3,200 in flight) once took longer than that there.
    burst_words = WORDS[:1]
    request = pb.TransduceRequest(inputs=burst_words, options=pb.DecodeOptions(return_attention=True))
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pbg.TransducerStub(channel)
        await stub.Transduce(pb.TransduceRequest(inputs=["warm"]), timeout=30)  # the connection is up
        base += 1
        signalled = asyncio.Event()
        burst: list[asyncio.Future] = []  # every call the callers sent before the signal

        async def caller() -> None:
            while not signalled.is_set():
                call = asyncio.ensure_future(stub.Transduce(request, timeout=60))
                burst.append(call)
                try:
                    await call
                except grpc.aio.AioRpcError:
                    return  # classified with the others below; a failing server ends the loop

        t_burst = time.monotonic()
        callers = [asyncio.ensure_future(caller()) for _ in range(burst_size)]
        reached_all = True
        while await asyncio.to_thread(received, metrics_port) < base + burst_size:
            if time.monotonic() - t_burst > 30 or all(c.done() for c in callers):
                reached_all = False
                break
            await asyncio.sleep(0.005)
        signalled.set()  # no caller sends again; the calls out now are the ones in flight at SIGTERM
        in_flight = sum(not c.done() for c in burst)
        t_signal = time.monotonic()
        kill = await asyncio.to_thread(podman, "kill", "--signal", "TERM", container, check=False)
        late = []
        waiter = asyncio.ensure_future(asyncio.to_thread(
            podman, "wait", container, check=False, timeout=120))
        while not waiter.done():
            late.append(asyncio.ensure_future(late_call()))
            await asyncio.wait([waiter], timeout=0.2)
        await asyncio.gather(*callers, return_exceptions=True)
        outcomes = await asyncio.gather(*burst, return_exceptions=True)
        late_outcomes = await asyncio.gather(*late, return_exceptions=True)
    waited = waiter.result()
    exit_s = round(time.monotonic() - t_signal, 1)
    try:
        exit_code = int(waited.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        exit_code = None
    burst_doc, late_doc = classify(outcomes, burst_words), classify(late_outcomes, WORDS)
    drained = burst_doc["ok"] == burst_doc["sent"]
    ok = (kill.returncode == 0 and in_flight > 0 and burst_doc["lost"] == 0 and late_doc["unanswered"] == 0
          and exit_code == 0 and (drained or not require_drained))
    return {"ok": ok, "burst": burst_doc, "in_flight_at_sigterm": in_flight, "all_reached_server": reached_all,
            "burst_to_sigterm_s": round(t_signal - t_burst, 2), "late_calls_after_sigterm": late_doc,
            "sigterm_to_exit_s": exit_s, "exit_code": exit_code, "drained": drained,
            "drain_required": require_drained,
            "kill": kill.stderr.strip() or "sent", **({} if in_flight else {"problem": "the burst was done before "
                                                                                       "SIGTERM: nothing tested"})}


# ------------------------------------------------------------------------------------ main --

def start_container(name: str, port: int, metrics_port: int, extra_env: list[str]) -> dict:
    podman("rm", "-f", "--ignore", name, check=False)
    cmd = ["podman", "run", "-d", "--name", name, "--network=host",
           "--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp:rw,nosuid,nodev,size=64m,mode=1777",
           "--user", f"{UID}:{UID}", "--cap-drop=all", "--security-opt", "no-new-privileges",
           "--health-interval", "disable",  # no systemd timers here: the health check is run by hand below
           "-e", "ATTNSERVE_HOST=127.0.0.1", "-e", f"ATTNSERVE_PORT={port}",
           "-e", f"ATTNSERVE_METRICS_PORT={metrics_port}", *[a for e in extra_env for a in ("-e", e)], IMAGE]
    run(cmd)
    return {"name": name, "grpc": f"127.0.0.1:{port}", "metrics": f"http://127.0.0.1:{metrics_port}/metrics",
            "run": " ".join(cmd[2:])}


def check_container_facts(name: str) -> dict:
    """From outside: the server process's uid, a read-only root filesystem (a write is refused)."""
    fmt = "{{.State.Pid}} {{.HostConfig.ReadonlyRootfs}} {{.Config.User}}"
    pid, readonly, user = podman("inspect", name, "--format", fmt).stdout.split()
    status = Path(f"/proc/{pid}/status").read_text()
    uids = re.search(r"^Uid:\s+(.*)$", status, re.MULTILINE).group(1).split()
    write = podman("exec", name, "/bin/sh", "-c", "touch /probe", check=False)
    tmp = podman("exec", name, "/bin/sh", "-c", "touch /tmp/probe && rm /tmp/probe", check=False)
    return {"ok": set(uids) == {str(UID)} and readonly == "true" and write.returncode != 0 and tmp.returncode == 0,
            "uids": sorted(set(uids)), "config_user": user, "read_only_rootfs": readonly == "true",
            "write_to_root": write.stderr.strip() or f"rc {write.returncode}", "tmp_writable": tmp.returncode == 0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-image", help="build on this image instead of a debootstrapped Debian "
                                         "(e.g. python:3.11.14-slim-trixie where a registry is reachable)")
    ap.add_argument("--suite", help="Debian suite to debootstrap (default: the machine's, from its apt sources)")
    ap.add_argument("--mirror", help="Debian mirror (default: the machine's, from its apt sources)")
    ap.add_argument("--fresh-base", action="store_true", help="debootstrap again even if the base is cached")
    ap.add_argument("--no-cache", action="store_true", help="build every Dockerfile step again (podman --no-cache)")
    ap.add_argument("--git-ref", help="build a commit's files (git archive) instead of the working tree")
    ap.add_argument("--burst", type=int, default=200, help="concurrent Transduce calls in flight at SIGTERM")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="more server settings, e.g. ATTNSERVE_GRACE_PERIOD_S=0 (repeatable)")
    ap.add_argument("--ready-timeout-s", type=float, default=180)
    ap.add_argument("--keep", action="store_true", help="leave the stopped container (default: removed)")
    args = ap.parse_args(argv)

    if os.geteuid() != 0:
        print("container-check needs root (apt-get, debootstrap, rootful podman): run it as root "
              "or with sudo", file=sys.stderr)
        return 2
    WORK.mkdir(parents=True, exist_ok=True)
    lock = open(WORK / ".lock", "w")  # one run at a time: they share the base, its rootfs and the image tag
    fcntl.flock(lock, fcntl.LOCK_EX)
    name = f"attnserve-check-{os.getpid()}"
    summary: dict = {"ok": False, "checks": {}}
    t_start = time.monotonic()

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)  # through the finally below: the container is removed

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        summary["tools"] = ensure_tools()
        summary["tools"].update(podman_env())
        if args.base_image:
            summary["base"] = {"image": args.base_image, "source": "given"}
        else:
            summary["base"] = {"source": "debootstrap", **ensure_base(args)}
        summary["build"] = build(summary["base"]["image"], args)
        port, metrics_port = free_port(), free_port()
        summary["container"] = start_container(name, port, metrics_port, args.env)
        address = f"127.0.0.1:{port}"
        summary["container"]["ready_s"] = grpc_ready(address, args.ready_timeout_s, name)
        checks = summary["checks"]
        checks["non_root_read_only"] = check_container_facts(name)
        checks["health"] = check_health(address)
        checks["image_healthcheck"] = check_image_healthcheck(name)
        checks["transduce_attention"] = check_transduce(address)
        checks["metrics"] = check_metrics(metrics_port)
        require_drained = not any(e.startswith(("ATTNSERVE_LAME_DUCK_S=", "ATTNSERVE_GRACE_PERIOD_S="))
                                  for e in args.env)
        checks["sigterm_mid_burst"] = asyncio.run(sigterm_mid_burst(address, metrics_port, name, args.burst,
                                                                    require_drained))
        summary["ok"] = all(c["ok"] for c in checks.values())
    except Exception as e:  # noqa: BLE001 - every failure ends in the summary, and exit 1
        summary["error"] = f"{type(e).__name__}: {e}"
    finally:
        if podman("container", "exists", name, check=False).returncode == 0:
            with open(WORK / "server.log", "w") as out:
                subprocess.run(["podman", "logs", name], check=False, stdout=out, stderr=subprocess.STDOUT)
            summary.setdefault("container", {})["log"] = str((WORK / "server.log").relative_to(REPO))
            if not args.keep:
                podman("rm", "-f", name, check=False)
        summary["total_s"] = round(time.monotonic() - t_start, 1)
        SUMMARY.parent.mkdir(parents=True, exist_ok=True)
        SUMMARY.write_text(json.dumps(summary, indent=2) + "\n")
    print_summary(summary)
    return 0 if summary["ok"] else 1


def print_summary(s: dict) -> None:
    base, build_ = s.get("base", {}), s.get("build", {})
    how = ""
    if base.get("source") == "debootstrap":
        how = " (cached)" if base.get("cached") else f" (debootstrap {base.get('debootstrap_s')} s)"
    lines = [f"base      {base.get('image')}{how}"]
    if build_:
        lines.append(f"build     {build_['seconds']} s ({build_['steps_from_cache']}/{build_['steps']} steps "
                     f"from cache), image {build_['image_size_mb']} MB")
    c = s.get("checks", {})

    def mark(key: str) -> str:
        return "PASS" if c.get(key, {}).get("ok") else "FAIL"
    if "non_root_read_only" in c:
        f = c["non_root_read_only"]
        lines.append(f"{mark('non_root_read_only')}  uid {','.join(f['uids'])}, read-only root "
                     f"{f['read_only_rootfs']} (write: {f['write_to_root']}), /tmp writable {f['tmp_writable']}")
    if "health" in c:
        lines.append(f"{mark('health')}  gRPC health {c['health']['status']} (ready after "
                     f"{s['container'].get('ready_s')} s); image HEALTHCHECK: "
                     f"{c.get('image_healthcheck', {}).get('result')} [{mark('image_healthcheck')}]")
    if "transduce_attention" in c:
        t = c["transduce_attention"]
        lines.append(f"{mark('transduce_attention')}  Transduce {t.get('outputs')} attention "
                     f"{t.get('attention_shapes')} {t.get('problems') or t.get('error') or ''}")
    if "metrics" in c:
        m = c["metrics"]
        lines.append(f"{mark('metrics')}  /metrics: {m.get('attnserve_samples')} attnserve_ samples in "
                     f"{m.get('families')} families {m.get('error', '')}")
    if "sigterm_mid_burst" in c:
        b = c["sigterm_mid_burst"]
        late_codes = " ".join(f"{k} {v}" for k, v in sorted(b["late_calls_after_sigterm"]["codes"].items()))
        lines.append(f"{mark('sigterm_mid_burst')}  SIGTERM with {b['in_flight_at_sigterm']} of {b['burst']['sent']} "
                     f"calls in flight: ok {b['burst']['ok']}, refused {b['burst']['refused_unavailable']}, lost "
                     f"{b['burst']['lost']}; late calls {late_codes}, unanswered "
                     f"{b['late_calls_after_sigterm']['unanswered']}; exit code {b['exit_code']} after "
                     f"{b['sigterm_to_exit_s']} s" + ("" if b["drained"] or not b["drain_required"]
                                                       else f" (burst calls refused, not drained: {b['burst']['details']})"))
    if "error" in s:
        lines.append(f"ERROR  {s['error']}")
    lines.append(f"{'OK' if s['ok'] else 'FAILED'} in {s.get('total_s')} s; summary in "
                 f"{SUMMARY.relative_to(REPO)}")
    print("\n".join("[container-check] " + line for line in lines), flush=True)


if __name__ == "__main__":
    sys.exit(main())
