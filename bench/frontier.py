"""Accuracy against speed, every model measured in one run on the same test words (targets 6 and 7).

For each bundle: test WER/PER of its greedy outputs over the whole test split (decoded at batch
64, so the WER is this run's, not the manifest's), batch-64 words/s over those words, and batch-1
latency (p50 of single-word decode calls) and words/s over the first BATCH1_WORDS of them. g2p-en's
own numpy loop decodes one word at a time: its batch-1 figures are its loop over the same words, and
it has no batch-64 mode, so its loop's rate stands there too (said in the table).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

BATCH1_WORDS = 1000
DYNAMIC_INT8 = "build/frontier/g2p-en-dynamic/1"  # the shipped model, quantized per tensor (dynamic_int8_bundle)
# (label, bundle directory, precision). A bundle that is not there is left out, and said so.
FRONTIER = (
    ("shipped g2p-en, fp32", "models/g2p-en/1", "fp32"),
    ("shipped g2p-en, int8", "models/g2p-en/1", "int8"),
    ("shipped g2p-en, int8 per tensor (onnxruntime dynamic, batch-dependent; not served)", DYNAMIC_INT8, "int8"),
    ("ensemble: shipped + compact", "build/frontier/ensemble/1", "fp32"),
    ("g2p-en's architecture (GRU, no attention), ours, fp32", "bench/models/g2p-en-gru/1", "fp32"),
    ("g2p-en's architecture (GRU, no attention), ours, int8", "bench/models/g2p-en-gru/1", "int8"),
    ("compact, fp32", "models/g2p-en-compact/1", "fp32"),
    ("compact, int8", "models/g2p-en-compact/1", "int8"),
)


def engine_point(bundle_dir: str, precision: str, words: list[str], refs: dict) -> dict:
    from service.engine.bundle import load_bundle
    from service.config import EngineConfig
    from service.engine.engine import served_precision
    from service.repository.models import warm_engine
    from training.evaluate import engine_hyps
    from training.metrics import score

    bundle = load_bundle(bundle_dir)
    engine = warm_engine(bundle, EngineConfig(precision=precision))
    sources = [tuple(w) for w in words]
    started = time.perf_counter()
    hyps = engine_hyps(engine, sources, batch_size=64)  # batches of similar length, as evaluation decodes
    batch64 = len(sources) / (time.perf_counter() - started)
    s = score(hyps, {src: refs[src] for src in sources})
    lat = []
    for w in words[:BATCH1_WORDS]:
        t = time.perf_counter()
        engine.decode([list(w)])
        lat.append(time.perf_counter() - t)
    return {"bundle": bundle_dir, "precision": precision, "parameters": bundle.manifest.extra.get("parameters"),
            "served": precision == served_precision(bundle.manifest, "auto"),  # what --precision auto serves
            "wer": s.wer, "per": s.per, "words": len(words), "batch64_words_per_s": batch64,
            "batch1_p50_ms": 1000 * float(np.median(lat)), "batch1_words_per_s": len(lat) / sum(lat)}


def g2p_en_point(words: list[str], refs: dict) -> dict:
    """g2p-en's neural model (bench/peers.py), one word at a time: its only mode."""
    from bench.peers import PEER_NOTE, g2p_en_timed, load_g2p_en
    from training.metrics import score

    g = load_g2p_en()
    outputs, lat = g2p_en_timed(words, g)
    s = score({tuple(w): h for w, h in outputs.items()}, {tuple(w): refs[tuple(w)] for w in words})
    first = lat[:BATCH1_WORDS]
    return {"bundle": "g2p-en 2.1.0 (numpy)", "precision": "fp32", "parameters": sum(v.size for v in g.variables.values()),
            "wer": s.wer, "per": s.per, "words": len(words), "batch64_words_per_s": len(lat) / sum(lat),
            "batch1_p50_ms": 1000 * float(np.median(first)), "batch1_words_per_s": len(first) / sum(first),
            "note": PEER_NOTE + "; it decodes one word at a time, so its loop's rate stands for batch 64"}


def dynamic_int8_bundle(shipped: str = "models/g2p-en/1", out: str = DYNAMIC_INT8) -> None:
    """The shipped model quantized the way it was before answers were made batch-independent
    (onnxruntime's dynamic quantization), for the frontier to measure beside the served int8."""
    import json
    import shutil

    from service.engine.bundle import write_manifest
    from training.quantize import quantize_bundle

    if (Path(out) / "manifest.json").exists():
        return
    print(f"  {out}: the shipped model, quantized per tensor (training.quantize --method dynamic)", flush=True)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(shipped, out, ignore=shutil.ignore_patterns("*.int8.onnx"))
    manifest = json.loads((Path(out) / "manifest.json").read_text())
    manifest["graphs"] = {role: f for role, f in manifest["graphs"].items() if not role.endswith(".int8")}
    write_manifest(out, {k: v for k, v in manifest.items() if k not in ("files", "int8")})
    quantize_bundle(Path(out), method="dynamic")


def measure(words: list[str], refs: dict, frontier=FRONTIER) -> dict:
    """Every point of the frontier that can be measured here, keyed by label."""
    out = {}
    dynamic_int8_bundle()
    print("  g2p-en's numpy loop", flush=True)
    out["g2p-en (its numpy loop)"] = g2p_en_point(words, refs)
    for label, bundle_dir, precision in frontier:
        if not (Path(bundle_dir) / "manifest.json").exists():
            print(f"  {label}: {bundle_dir} is not there, left out", flush=True)
            continue
        out[label] = engine_point(bundle_dir, precision, words, refs)
        p = out[label]
        print(f"  {label}: WER {100 * p['wer']:.2f}%, batch-1 p50 {p['batch1_p50_ms']:.2f} ms, "
              f"batch 64 {p['batch64_words_per_s']:.0f} words/s", flush=True)
    return out


def lines(points: dict) -> list[str]:
    rows = ["| model | parameters | test WER | PER | batch-1 p50 ms | batch-1 words/s | batch-64 words/s |",
            "|---|---|---|---|---|---|---|"]
    for label, p in points.items():
        params = f"{p['parameters'] / 1e6:.2f} M" if p.get("parameters") else "-"
        rows.append(f"| {label} | {params} | {100 * p['wer']:.2f}% | {100 * p['per']:.2f}% | "
                    f"{p['batch1_p50_ms']:.2f} | {p['batch1_words_per_s']:.0f} | {p['batch64_words_per_s']:.0f} |")
    g = points.get("g2p-en (its numpy loop)")
    if g:
        rows += ["", f"g2p-en: {g['note']}."]
    return rows


def plot(points: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    for i, (label, p) in enumerate(points.items()):
        color = f"C{i}"
        ax1.scatter(p["batch1_p50_ms"], 100 * p["wer"], color=color, s=50, label=label)
        ax2.scatter(p["batch64_words_per_s"], 100 * p["wer"], color=color, s=50)
    ax1.set_xlabel("batch-1 latency, p50 ms (lower is better)")
    ax1.set_ylabel("test WER, % (lower is better)")
    ax2.set_xlabel("batch-64 words/s (higher is better)")
    ax1.set_xscale("log")
    ax2.set_xscale("log")
    ax1.set_title("latency")
    ax2.set_title("throughput")
    ax1.legend(fontsize=8, loc="upper right")
    fig.suptitle("Accuracy against speed, one `make bench` run, in-process onnxruntime, 1 thread")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
