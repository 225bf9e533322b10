"""Add an int8 variant to a model bundle with onnxruntime dynamic quantization.

    python -m training.quantize --bundle models/g2p-en/1        (or `make quantize`)

Dynamic quantization stores weights as int8 and quantizes activations on the
fly. onnxruntime quantizes MatMul/Gemm and the LSTM op this way, but not GRU or
RNN: for those cells only the attention and output projections become int8.
The int8 graphs are evaluated on the same dev/test words and their WER/PER go
into the manifest beside fp32's, so the trade-off is stated, not assumed.
Serve the variant with `attnserve-server --precision int8`.
"""
from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic

from service.engine.bundle import load_bundle, write_manifest
from service.config import EngineConfig
from service.engine.engine import Engine
from training.data import references
from training.evaluate import evaluate_engine, load_splits

QUANTIZED_OPS = ["MatMul", "Gemm", "LSTM"]


def quantize_bundle(path: Path) -> dict:
    bundle = load_bundle(path)
    manifest = dict(bundle.manifest)
    graphs = dict(manifest["graphs"])
    ops = {}
    for role in ("encoder", "decoder_step"):
        source = bundle.graph_path(role)
        target = source.with_name(source.stem + ".int8.onnx")
        quantize_dynamic(source, target, op_types_to_quantize=QUANTIZED_OPS, weight_type=QuantType.QInt8)
        graphs[f"{role}.int8"] = target.name
        ops[role] = dict(collections.Counter(n.op_type for n in onnx.load(target).graph.node
                                             if "Integer" in n.op_type or n.op_type.startswith("Dynamic")))
    manifest["graphs"] = graphs
    write_manifest(bundle.path, manifest)  # hash the new files before the engine loads them
    engine = Engine(load_bundle(bundle.path), EngineConfig(intra_op_threads=0, precision="int8",
                                                           max_output_len=manifest.get("max_output_len", 40)))
    splits = load_splits(manifest["data"])
    metrics = {split: evaluate_engine(engine, references(splits[split])) for split in ("dev", "test")}
    manifest["int8"] = {"metrics": metrics, "quantized_ops": ops,
                        "method": "onnxruntime.quantization.quantize_dynamic, QInt8 weights, " + "/".join(QUANTIZED_OPS)}
    write_manifest(bundle.path, manifest)
    return manifest


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", type=Path, required=True, help="models/<name>/<version>")
    args = p.parse_args(argv)
    manifest = quantize_bundle(args.bundle)
    print(json.dumps({"fp32": manifest.get("metrics"), "int8": manifest["int8"]}, indent=2))


if __name__ == "__main__":
    main()
