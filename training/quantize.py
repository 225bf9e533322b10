"""Add an int8 variant to a model bundle, computed per row so that answers do not depend on the batch.

    python -m training.quantize --bundle models/g2p-en/1        (or `make quantize`)

The default method (training/rowwise_int8.py) stores weights as int8 and quantizes each row of
each activation with a scale of its own, so a word's output and score are the same alone or in
any batch. The encoder's LSTMs stay onnxruntime's fp32 op: their int8 form, each cell written out per
row in a Scan over the steps (`--method rowwise-scan`, kept for comparison), ran slower here 64 words
to a call on every shipped model measured, and alone on all but the widest (g2p-en's). `--method
dynamic` is onnxruntime's dynamic quantization (one activation scale over the whole batch), kept for
comparison: faster, but a word's answer moves with its neighbours.
The int8 graphs are evaluated on the same dev/test words as fp32 (WER/PER into the manifest), and
checked for batch independence: dev words decoded alone and 64 to a call, in a shuffled order,
greedy and beam, outputs compared and scores held to SCORE_TOLERANCE. Then both precisions are timed
(`speed`), a lone word and a batch of 64: per-row int8 adds nodes to every step, so on small models
it is slower than fp32 for a lone word. `--precision auto` serves int8 only where the checks pass and
it is not the slower over the two (service/engine/engine.py). `--speed` times an int8 bundle again.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic

from attnserve.bundle import write
from attnserve.config import parse, setting
from service.domain import DecodeOptions
from service.engine.beam import beam_search
from service.engine.bundle import load_bundle
from service.engine import engine as engine_module
from service.engine.engine import Engine, EngineConfig
from training.data import references
from training.evaluate import evaluate_engine, load_splits
from training.rowwise_int8 import quantize_rowwise, quantized_ops

DYNAMIC_OPS = ["MatMul", "Gemm", "LSTM"]
SCORE_TOLERANCE = 1e-4  # a word's score alone and in a batch agree within this
METHODS = {"rowwise": "training/rowwise_int8.py: int8 weights (a scale per output column), activations "
                      "quantized per row (the decoder step's LSTM cells written out; the encoder's LSTMs fp32)",
           "rowwise-scan": "training/rowwise_int8.py: int8 weights (a scale per output column), activations "
                           "quantized per row (LSTM cells written out, a Scan over the encoder's steps)",
           "dynamic": "onnxruntime.quantization.quantize_dynamic, QInt8 weights, " + "/".join(DYNAMIC_OPS)
                      + ": one activation scale per tensor, i.e. per batch"}


def write_int8_graph(source: Path, target: Path, role: str, method: str) -> dict:
    """The int8 graph of one role; returns its integer ops by type."""
    if method == "dynamic":
        quantize_dynamic(source, target, op_types_to_quantize=DYNAMIC_OPS, weight_type=QuantType.QInt8)
        model = onnx.load(target)
        return {n: sum(1 for x in model.graph.node if x.op_type == n)
                for n in {x.op_type for x in model.graph.node if "Integer" in x.op_type or x.op_type.startswith("Dynamic")}}
    model = quantize_rowwise(onnx.load(source), one_step_lstm=role == "decoder_step", scan_lstms=method == "rowwise-scan")
    onnx.save(model, target)
    return quantized_ops(model)


def batch_independence(engine: Engine, sources: list, batch: int = 64, beam_size: int = 4, seed: int = 0) -> dict:
    """Each source decoded alone, then `batch` to a call with shuffled neighbours, greedy and beam:
    how many best outputs changed and how many scores moved by more than SCORE_TOLERANCE."""
    mixed = list(sources)
    random.Random(seed).shuffle(mixed)
    out = {"words": len(sources), "batch": batch}
    for mode, run in (("greedy", lambda chunk: [[d] for d in engine.decode(chunk)]),
                      (f"beam{beam_size}", lambda chunk: beam_search(engine, chunk, DecodeOptions(beam_size=beam_size)))):
        alone = {tuple(s): run([list(s)])[0][0] for s in mixed}
        together = {}
        for i in range(0, len(mixed), batch):
            chunk = [list(s) for s in mixed[i:i + batch]]
            together.update({tuple(s): h[0] for s, h in zip(chunk, run(chunk))})
        deltas = [abs(alone[s].log_prob - together[s].log_prob) for s in alone]
        out[mode] = {"outputs_changed": sum(alone[s].output_ids != together[s].output_ids for s in alone),
                     "scores_moved": sum(d > SCORE_TOLERANCE for d in deltas), "max_score_delta": max(deltas)}
    out["independent"] = all(out[m]["outputs_changed"] == 0 and out[m]["scores_moved"] == 0
                             for m in ("greedy", f"beam{beam_size}"))
    return out


def int8_speed(path: Path, sources: list, batch: int = 64, rounds: int = 5) -> dict:
    """ms a word in each precision, one thread, the best of interleaved rounds (so that a busy machine
    weighs on both alike), at the two loads a server sees: a lone word (greedy, one word a call) and
    full batches of `batch` words. int8_over_fp32: the geometric mean of the two ratios."""
    bundle = load_bundle(path)
    engines = {p: Engine(bundle, EngineConfig(intra_op_threads=1, precision=p)) for p in ("fp32", "int8")}
    words = [list(s) for s in sources]
    full = [words[i % len(words)] for i in range(batch)]
    best = {(p, load): float("inf") for p in engines for load in ("lone", "batch")}
    for _ in range(rounds):
        for p, engine in engines.items():
            started = time.perf_counter()
            for w in words:
                engine.decode([w])
            best[p, "lone"] = min(best[p, "lone"], (time.perf_counter() - started) / len(words) * 1000)
            started = time.perf_counter()
            engine.decode(full)
            best[p, "batch"] = min(best[p, "batch"], (time.perf_counter() - started) / batch * 1000)
    ratio = (best["int8", "lone"] / best["fp32", "lone"] * best["int8", "batch"] / best["fp32", "batch"]) ** 0.5
    return {"words": len(words), "batch": batch, "rounds": rounds, "threads": engine_module._process_pool_threads,
            **{f"{load}_{p}_ms": round(best[p, load], 4) for p, load in best}, "int8_over_fp32": round(ratio, 3)}


def record_speed(path: Path, check_words: int = 100) -> dict:
    """Time a quantized bundle in both precisions into its manifest's int8.speed; the manifest's JSON object."""
    manifest = load_bundle(path).manifest
    dev_sources = sorted(references(load_splits(manifest.data)["dev"]))[:check_words]
    return write(path, manifest.replace(int8={**manifest.int8, "speed": int8_speed(path, dev_sources)})).to_dict()


def quantize_bundle(path: Path, method: str = "rowwise", check_words: int = 300) -> dict:
    """Add int8 graphs to the bundle, with what they measure; the manifest's JSON object."""
    bundle = load_bundle(path)
    graphs = dict(bundle.manifest.graphs)
    ops = {}
    for role in ("encoder", "decoder_step"):
        source = bundle.graph_path(role)
        target = source.with_name(source.stem + ".int8.onnx")
        ops[role] = write_int8_graph(source, target, role, method)
        graphs[f"{role}.int8"] = target.name
    manifest = write(bundle.path, bundle.manifest.replace(graphs=graphs))  # hashed before the engine loads them
    engine = Engine(load_bundle(bundle.path), EngineConfig(intra_op_threads=0, precision="int8",
                                                           max_output_len=manifest.max_output_len or 40))
    splits = load_splits(manifest.data)
    metrics = {split: evaluate_engine(engine, references(splits[split])) for split in ("dev", "test")}
    dev_sources = sorted(references(splits["dev"]))[:check_words]
    write(bundle.path, manifest.replace(int8={"metrics": metrics, "quantized_ops": ops, "method": METHODS[method],
                                              "batch_independence": batch_independence(engine, dev_sources)}))
    # Timed in a process of its own: onnxruntime's thread pool is the process's, sized by its first
    # engine (this one's is every core), and a server worker decodes on one thread.
    subprocess.run([sys.executable, "-m", "training.quantize", "--bundle", str(bundle.path), "--speed"],
                   cwd=Path(__file__).resolve().parents[1], check=True, stdout=subprocess.DEVNULL)
    return load_bundle(bundle.path).manifest.to_dict()


@dataclass(frozen=True)
class QuantizeConfig:
    bundle: Path = setting(doc="the bundle to quantize: models/<name>/<version>")
    method: str = setting("rowwise", "how the int8 graphs are made", choices=tuple(sorted(METHODS)))
    speed: bool = setting(False, "only time a quantized bundle in both precisions again", switch=True)


def main(argv=None):
    args = parse(QuantizeConfig, argv, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    manifest = record_speed(args.bundle) if args.speed else quantize_bundle(args.bundle, args.method)
    print(json.dumps({"fp32": manifest.get("metrics"), "int8": manifest["int8"]}, indent=2))


if __name__ == "__main__":
    main()
