"""Fair sharing of the cores between models (`make bench` runs it; or `python -m bench.fairness`).

Two models in one server: the bundle twice, as models A and B of a temporary repository. Each
model has its own queue, batcher and engine thread (service/repository/repository.py), so B's work never
waits in A's queue; the two engine threads share the cores through the OS scheduler and the
process's one onnxruntime pool. Measured, with bench/cpp/loadgen.cc as the client:

1. B's unloaded p50: single-word calls, one at a time;
2. the same while A is saturated by 16-word requests at concurrency 16 (target: <= 3x (1));
3. both saturated by 16-word requests at concurrency 16: each model's share of the engine time
   (its attnserve_batch_duration_seconds_sum; target: >= 40% each).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from pathlib import Path


from bench.overload import CHANNELS, METHOD, write_requests
from bench.harness import BIN, MODEL_ONLY, Server, free_port, metric_samples, test_words
from service.engine.bundle import MANIFEST, load_bundle, write_manifest

A, B = "model-a", "model-b"


def as_model(bundle_dir: Path, repository: Path, name: str) -> None:
    dst = repository / name / "1"
    shutil.copytree(bundle_dir, dst)
    manifest = json.loads((dst / MANIFEST).read_text())
    write_manifest(dst, {**{k: v for k, v in manifest.items() if k not in ("files", "format_version")}, "name": name})


def loadgen(binary: str, server: Server, requests: Path, seconds: float, concurrency: int) -> subprocess.Popen:
    return subprocess.Popen([binary, "--target", server.addr, "--method", METHOD, "--requests", str(requests),
                             "--seconds", str(seconds), "--deadline-ms", "30000", "--concurrency", str(concurrency),
                             "--channels", str(CHANNELS)],
                            stdout=subprocess.PIPE, text=True)


def result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=120)
    return json.loads(out)


def engine_seconds(metrics_port: int) -> dict[str, float]:
    return {s.labels["model"]: s.value for s in metric_samples(metrics_port)
            if s.name == "attnserve_batch_duration_seconds_sum"}


def measure(bundle_dir: Path, binary: str, seconds: float) -> dict:
    words = test_words(load_bundle(bundle_dir))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name in (A, B):
            as_model(bundle_dir, tmp / "models", name)
        write_requests(tmp / "b1.bin", B, words)
        write_requests(tmp / "a16.bin", A, words, per_request=16)
        write_requests(tmp / "b16.bin", B, words, per_request=16)
        metrics_port = free_port()
        with Server([str(BIN / "attnserve-server"), "--model-repository", str(tmp / "models"),
                     "--default-model", A, "--metrics-port", str(metrics_port), *MODEL_ONLY]) as server:
            result(loadgen(binary, server, tmp / "b1.bin", 2, 4))  # warm-up
            unloaded = result(loadgen(binary, server, tmp / "b1.bin", seconds / 2, 1))
            a = loadgen(binary, server, tmp / "a16.bin", seconds, 16)
            b_beside = result(loadgen(binary, server, tmp / "b1.bin", seconds, 1))
            a_alone = result(a)
            before = engine_seconds(metrics_port)
            a, b = (loadgen(binary, server, tmp / f"{m}16.bin", seconds, 16) for m in ("a", "b"))
            both = {A: result(a), B: result(b)}
            after = engine_seconds(metrics_port)
    spent = {m: after[m] - before.get(m, 0.0) for m in (A, B)}
    p50 = lambda r: r["latency_ms"]["OK"]["p50_ms"]  # noqa: E731
    return {"b_unloaded_p50_ms": p50(unloaded), "b_beside_saturated_a_p50_ms": p50(b_beside),
            "b_ratio": p50(b_beside) / p50(unloaded), "a_words_per_s_meanwhile": a_alone["goodput_per_s"] * 16,
            "both_saturated_engine_share": {m: spent[m] / sum(spent.values()) for m in spent},
            "both_saturated_words_per_s": {m: r["goodput_per_s"] * 16 for m, r in both.items()},
            "codes": {"b_unloaded": unloaded["codes"], "b_beside": b_beside["codes"], "a_meanwhile": a_alone["codes"],
                      **{f"both_{m}": r["codes"] for m, r in both.items()}}}


def lines(r: dict) -> list[str]:
    share = r["both_saturated_engine_share"]
    return [f"- Model B's single-word p50 while model A is saturated (16-word requests at concurrency 16): "
            f"{r['b_beside_saturated_a_p50_ms']:.2f} ms against {r['b_unloaded_p50_ms']:.2f} ms unloaded, "
            f"{r['b_ratio']:.2f}x (target <= 3x: {'met' if r['b_ratio'] <= 3 else '**not met**'}).",
            f"- Both saturated: engine time A {share[A]:.0%}, B {share[B]:.0%} (target >= 40% each: "
            f"{'met' if min(share.values()) >= 0.4 else '**not met**'}); words/s A "
            f"{r['both_saturated_words_per_s'][A]:.0f}, B {r['both_saturated_words_per_s'][B]:.0f}."]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", default="models/g2p-en/1")
    p.add_argument("--loadgen", default="build/attnserve-loadgen")
    p.add_argument("--seconds", type=float, default=10.0)
    args = p.parse_args(argv)
    r = measure(Path(args.bundle), args.loadgen, args.seconds)
    print(json.dumps(r, indent=2))
    print("\n".join(lines(r)))
    return r


if __name__ == "__main__":
    main()
