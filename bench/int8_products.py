"""One int8 product, four ways, at a model's own shapes: `python -m bench.int8_products`.

The per-row product the int8 bundles use (training/rowwise_int8.py: each row of the activations
quantized with its own scale; uint8 x uint8 in the earlier form, uint8 x int8 with the weights within
[-64, 64] since issue 69) beside fp32 and onnxruntime's MatMulNBits (8-bit weights
in blocks along K; accuracy_level 4 quantizes each row of the activations block by block), each a
one-node-or-chain ONNX graph on one thread. For each shape and batch it prints the time a run takes
(best of five rounds), the error against numpy's fp32 product, and how far row 0's result moves
between running alone and among the batch (0 where a row's answer does not depend on its batch).
Not part of `make bench`: it answers whether a faster int8 product exists that keeps one answer per
input (docs/models.md, "int8, one answer per input").
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from training.rowwise_int8 import _Graph, _shared_constants, rowwise_matmul

# g2p-en's decoder step: the LSTM's input product (embedding and attention context), its recurrent
# product (h lies in (-1, 1): the fixed-scale form), the attention's query product; and the fused step's
# one LSTM product (training/rowwise_step.py: [feed; h], both within (-1, 1)).
SHAPES = ((1152, 2048, False), (512, 2048, True), (512, 512, False), (1024, 2048, True))


def _model(nodes, inits, K: int, N: int):
    graph = helper.make_graph(nodes, "product", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", K])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", N])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9
    return model


def fp32(W: np.ndarray):
    return _model([helper.make_node("MatMul", ["x", "W"], ["y"])], [numpy_helper.from_array(W, "W")], *W.shape)


def rowwise(W: np.ndarray, bounded: bool, weights: str = "u8"):
    g = _Graph("q", 17, weights)
    rowwise_matmul(g, _shared_constants(g), "x", W, "y", bounded=bounded)
    return _model(g.nodes, g.inits, *W.shape)


def nbits(W: np.ndarray, block: int, accuracy_level: int):
    K, N = W.shape
    n_blocks = -(-K // block)
    padded = np.zeros((n_blocks * block, N), np.float32)
    padded[:K] = W
    blocks = padded.T.reshape(N, n_blocks, block)  # (N, blocks, block): MatMulNBits' layout of B
    scale = (np.maximum(np.abs(blocks).max(-1), 1e-30) / 127.0).astype(np.float32)
    q = (np.clip(np.round(blocks / scale[..., None]), -127, 127) + 128).astype(np.uint8)  # zero point 128
    node = helper.make_node("MatMulNBits", ["x", "B", "S"], ["y"], domain="com.microsoft", K=K, N=N, bits=8,
                            block_size=block, accuracy_level=accuracy_level)
    return _model([node], [numpy_helper.from_array(q, "B"), numpy_helper.from_array(scale, "S")], K, N)


def session(model) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def best_us(sess: ort.InferenceSession, x: np.ndarray, runs: int) -> float:
    for _ in range(20):
        sess.run(None, {"x": x})
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(runs):
            sess.run(None, {"x": x})
        rounds.append((time.perf_counter() - started) / runs * 1e6)
    return min(rounds)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    print("| K | N | batch | way | us a run | relative error | row 0 alone - in batch |\n|---|---|---|---|---|---|---|")
    for K, N, bounded in SHAPES:
        W = (rng.standard_normal((K, N)) * 0.05).astype(np.float32)
        ways = {"fp32": fp32(W), "per-row int8": rowwise(W, bounded),
                "per-row int8, weights in [-64, 64]": rowwise(W, bounded, "s7"), "MatMulNBits 8-bit, block 32": nbits(W, 32, 4),
                "MatMulNBits 8-bit, block 128": nbits(W, 128, 4)}
        sessions = {name: session(m) for name, m in ways.items()}
        for M in args.batches:
            x = rng.standard_normal((M, K)).astype(np.float32)
            x = np.tanh(x) if bounded else x
            ref = x @ W
            for name, sess in sessions.items():
                y = sess.run(None, {"x": x})[0]
                moved = float(np.abs(sess.run(None, {"x": x[:1]})[0] - y[:1]).max())
                err = float(np.abs(y - ref).max() / np.abs(ref).max())
                print(f"| {K} | {N} | {M} | {name} | {best_us(sess, x, 300 if M == 1 else 50):.1f} | {err:.1e} | {moved:.0e} |",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
