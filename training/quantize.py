"""Add an int8 variant to a model bundle, computed per row so that answers do not depend on the batch.

    python -m training.quantize --bundle models/g2p-en/1        (or `make quantize`)

The default method (training/rowwise_int8.py) stores weights as int8 and quantizes each row of
each activation with a scale of its own, so a word's output and score are the same alone or in
any batch. Weights lie within [-64, 64], so that onnxruntime's fastest integer kernel (uint8 x int8)
computes exact sums on every CPU; the decoder step's LSTM takes fewer, larger nodes
(training/rowwise_step.py); the encoder's LSTMs stay onnxruntime's fp32 op or are written out per row
in a Scan over the steps, whichever this bundle's encoder runs faster (training/encoder_choice.py:
the Scan pays on wide models, not on narrow ones). `--method rowwise-u8` / `rowwise-u8-scan` are the
earlier forms (uint8 weights, the step's cell written out as is), `rowwise-s7` / `rowwise-s7-scan`
the int8 weights alone; `--method dynamic` is onnxruntime's dynamic quantization (one activation scale
over the whole batch), kept for comparison: faster, but a word's answer moves with its neighbours.
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
from training.encoder_choice import choose
from training.evaluate import evaluate_engine, load_splits
from training.rowwise_int8 import can_write_out, quantize_rowwise, quantized_ops
from training.rowwise_step import bounded_state_inputs, folded_input, fused_one_step

DYNAMIC_OPS = ["MatMul", "Gemm", "LSTM"]
SCORE_TOLERANCE = 1e-4  # a word's score alone and in a batch agree within this
_U8 = "int8 weights (a scale per output column, stored as uint8), activations quantized per row"
_S7 = ("int8 weights within [-64, 64] (a scale per output column), activations quantized per row, uint8 x int8 "
       "products")
_STEP = "the decoder step's LSTM cells written out"
_FUSED = ("the decoder step's LSTM in fewer, larger nodes (training/rowwise_step.py: embedding folded into its "
          "weights, [feed; h] in one product at a fixed scale), the encoder's embedding folded into its first layer")
METHODS = {"rowwise": f"training/rowwise_int8.py: {_S7}; {_FUSED}; the encoder's LSTMs onnxruntime's fp32 op or "
                      "written out in a Scan over its steps, whichever make quantize timed faster "
                      "(training/encoder_choice.py)",
           "rowwise-u8": f"training/rowwise_int8.py: {_U8} ({_STEP}; the encoder's LSTMs fp32)",
           "rowwise-u8-scan": f"training/rowwise_int8.py: {_U8} (LSTM cells written out, a Scan over the encoder's steps)",
           "rowwise-s7": f"training/rowwise_int8.py: {_S7} ({_STEP}; the encoder's LSTMs fp32)",
           "rowwise-s7-scan": f"training/rowwise_int8.py: {_S7} (LSTM cells written out, a Scan over the encoder's steps)",
           "dynamic": "onnxruntime.quantization.quantize_dynamic, QInt8 weights, " + "/".join(DYNAMIC_OPS)
                      + ": one activation scale per tensor, i.e. per batch"}
# (weight form, the encoder's LSTMs in a Scan: True, False or "timed", the decoder step fused) per method
SPECS = {"rowwise": ("s7", "timed", True), "rowwise-u8": ("u8", False, False), "rowwise-u8-scan": ("u8", True, False),
         "rowwise-s7": ("s7", False, False), "rowwise-s7-scan": ("s7", True, False)}


def write_int8_graph(source: Path, target: Path, role: str, method: str, encoder: Path | None = None,
                     scan: bool | None = None) -> dict:
    """The int8 graph of one role; returns its integer ops by type. encoder: the fp32 encoder beside a
    decoder step, read for which of the step's state inputs stay within [-1, 1] (a fused step); scan: the
    encoder's LSTMs in a Scan, where the method leaves it to be timed."""
    if method == "dynamic":
        quantize_dynamic(source, target, op_types_to_quantize=DYNAMIC_OPS, weight_type=QuantType.QInt8)
        model = onnx.load(target)
        return {n: sum(1 for x in model.graph.node if x.op_type == n)
                for n in {x.op_type for x in model.graph.node if "Integer" in x.op_type or x.op_type.startswith("Dynamic")}}
    weights, scan_lstms, fused = SPECS[method]
    graph = onnx.load(source)
    step = role == "decoder_step"
    bounded = bounded_state_inputs(graph, onnx.load(encoder)) if fused and step and encoder else set()
    model = quantize_rowwise(graph, one_step_lstm=step, scan_lstms=bool(scan if scan_lstms == "timed" else scan_lstms),
                             weights=weights, write_step=fused_one_step if fused else None, bounded_inputs=bounded,
                             fold_input=folded_input if fused else None)
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


def _encoder_forms(bundle, method: str, sources: list) -> tuple[list, dict]:
    """The encoder's two int8 forms, the faster first (training/encoder_choice.py), and what was timed;
    [None] where the method leaves no choice or the encoder has no LSTM."""
    source = bundle.graph_path("encoder")
    graph = onnx.load(source)
    if SPECS.get(method, (None, None))[1] != "timed" or not any(n.op_type == "LSTM" for n in graph.graph.node) \
            or not can_write_out(graph):
        return [None], {}
    paths = {"fp32 op": source.with_name(source.stem + ".int8.lstm.onnx"),
             "scan": source.with_name(source.stem + ".int8.scan.onnx")}
    for form, p in paths.items():
        write_int8_graph(source, p, "encoder", method, scan=form == "scan")
    index = {t: i for i, t in enumerate(bundle.manifest.src_vocab)}
    ids = [[index[t] for t in s if t in index] or [bundle.manifest.special_ids.unk] for s in sources[:64]]
    try:
        _, timings = choose(paths, ids, pad=bundle.manifest.special_ids.pad)
    finally:
        for p in paths.values():
            p.unlink(missing_ok=True)
    return sorted(paths, key=lambda f: (timings[f]["lone_ms"] * timings[f]["batch_ms"]) ** 0.5), timings


def quantize_bundle(path: Path, method: str = "rowwise", check_words: int = 300) -> dict:
    """Add int8 graphs to the bundle, with what they measure; the manifest's JSON object.

    Where the method times the encoder's two forms, the faster is kept unless its answers depend on the
    batch and the other's do not: the fp32 LSTM op's sums may differ in their last bits with the batch,
    enough for an activation on an int8 rounding boundary to round the other way; the Scan's integer
    products are exact."""
    bundle = load_bundle(path)
    graphs = dict(bundle.manifest.graphs)
    splits = load_splits(bundle.manifest.data)
    dev_sources = sorted(references(splits["dev"]))[:check_words]
    forms, timings = _encoder_forms(bundle, method, dev_sources)
    checked = {}
    for form in forms:
        ops = {}
        for role in ("encoder", "decoder_step"):
            source = bundle.graph_path(role)
            target = source.with_name(source.stem + ".int8.onnx")
            ops[role] = write_int8_graph(source, target, role, method, encoder=bundle.graph_path("encoder"),
                                         scan=form == "scan")
            graphs[f"{role}.int8"] = target.name
        manifest = write(bundle.path, bundle.manifest.replace(graphs=graphs))  # hashed before the engine loads them
        engine = Engine(load_bundle(bundle.path), EngineConfig(intra_op_threads=0, precision="int8",
                                                               max_output_len=manifest.max_output_len or 40))
        check = batch_independence(engine, dev_sources)
        checked[str(form)] = check["independent"]
        if check["independent"]:
            break
    extra = {"encoder_lstms": {"kept": form, "ms_a_word": timings, "batch_independent": checked}} if timings else {}
    metrics = {split: evaluate_engine(engine, references(splits[split])) for split in ("dev", "test")}
    write(bundle.path, manifest.replace(int8={"metrics": metrics, "quantized_ops": ops, "method": METHODS[method], **extra,
                                              "batch_independence": check}))
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
