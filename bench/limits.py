"""The machine's own ceilings beside the engine (`make bench` runs it; or `python -m bench.limits`).

Two questions: how much arithmetic and memory traffic a word costs, read from the bundle's graphs
(graph_costs), and how fast this machine does that arithmetic and traffic at the model's own shapes
(ceilings). measure() divides the engine's words/s by them: batch 64 is compute-bound, so its
GFLOP/s is set against GEMM; batch 1 streams every decoder weight once per step, so its GB/s is set
against matrix-vector products.

Ceilings are measured, not assumed, in fresh subprocesses (so the caller's process-wide onnxruntime
pool, service/engine/engine.py, neither sizes nor competes with them): onnxruntime sessions of
MatMuls with the weights as initializers (intra-op threads 1 or 2, inter-op 1; int8 through
quantize_dynamic, so the int8 ceiling is MLAS's own), and numpy as a second opinion for fp32 (its
BLAS threads set by OMP/OPENBLAS/MKL_NUM_THREADS). Each point is the best of repeated runs within
~0.3 s. Matrix-vector bandwidth is read twice: "dram" cycles through enough copies of the weights
that they exceed twice the last-level cache (from /sys), so they cannot stay cached between runs;
"llc" keeps copies within half of it, as a step of a model that fits in cache could see.
Ceilings are a best-of while the engine's words/s are a mean over seconds: on a busy machine the
fractions read low.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]
RECURRENT_GATES = {"LSTM": 4, "DynamicQuantizeLSTM": 4, "GRU": 3, "RNN": 1}
MATMULS = ("MatMul", "MatMulInteger", "MatMulIntegerToFloat", "Gemm")
GEMM_BATCH = 64


def _dims(model: onnx.ModelProto) -> dict[str, list]:
    """Every tensor's shape that the graph or ONNX shape inference knows: ints, or dim names."""
    graph, inferred = model.graph, onnx.shape_inference.infer_shapes(model).graph
    out = {}
    for v in [*inferred.value_info, *inferred.input, *inferred.output]:
        if v.type.tensor_type.HasField("shape"):
            out[v.name] = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in v.type.tensor_type.shape.dim]
    out.update({i.name: list(i.dims) for i in graph.initializer})
    return out


def _size(d, S: float) -> float:
    """A dimension's size per row of the batch: "batch" counts 1; any other name (the exports' only
    other dynamic axis is src_time, and inference's unk__ dims stand for it) counts S."""
    return d if isinstance(d, int) and d > 0 else 1.0 if d == "batch" else S


def _node_costs(node, dims: dict, weights: set, S: float) -> tuple[float, list[tuple[int, int]]]:
    """(multiply-add FLOPs per row of the batch per graph call, the constant weight matrices as (K, N)).

    Recurrent ops: 2·(I + H)·gates·H per time step per direction, I and H from the W shape and the
    hidden_size attribute (ONNX LSTM stores W as (dirs, gates·H, I); DynamicQuantizeLSTM as
    (dirs, I, gates·H)); the time steps are the input's first dim. MatMul / MatMulInteger:
    2·rows·K·N, rows = the activation's dims but the last, so the additive-attention score
    v·tanh(...) over (B, S, H) and the context attn @ enc_out count S each. Gemm: 2·K·N.
    """
    op, ins = node.op_type, list(node.input)
    if op in RECURRENT_GATES:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        H, G, w = attrs["hidden_size"], RECURRENT_GATES[op], dims[ins[1]]
        dirs, I = w[0], math.prod(w) // (w[0] * G * H)
        steps = _size(dims.get(ins[0], [None])[0], S)
        return steps * dirs * 2 * (I + H) * G * H, [(I, G * H), (H, G * H)] * dirs
    if op not in MATMULS:
        return 0.0, []
    a, b = dims.get(ins[0]), dims.get(ins[1])
    if b is None or (a is None and ins[1] not in weights):
        raise ValueError(f"{node.name}: unknown operand shapes, cannot count its FLOPs")
    if op == "Gemm":  # (batch, K) @ W, W (N, K) when transB
        trans = any(x.name == "transB" and x.i for x in node.attribute)
        K, N = (b[1], b[0]) if trans else (b[0], b[1])
        return 2.0 * K * N, [(K, N)]
    rows = math.prod(_size(d, S) for d in (a[1:-1] if a else []))  # (batch, ..., K) without batch and K
    K, N = _size(b[-2], S), _size(b[-1], S)
    return 2.0 * rows * K * N, [(b[-2], b[-1])] if ins[1] in weights else []


class Graph:
    """An ONNX graph read for counting: its nodes, every shape known, its weights and their bytes.
    Bytes at each initializer's own dtype: int8 weights 1 byte each, their fp32 scales and biases 4."""

    def __init__(self, path: Path):
        model = onnx.load(str(path))
        self.nodes, self.dims = list(model.graph.node), _dims(model)  # If/Loop bodies not walked: no weights there
        self.weights = {i.name for i in model.graph.initializer}
        self.nbytes = sum(math.prod(i.dims) * helper.tensor_dtype_to_np_dtype(i.data_type).itemsize
                          for i in model.graph.initializer)

    def flops(self, S: float) -> float:
        """Multiply-add FLOPs per row of the batch per call, at source length S."""
        return sum(_node_costs(n, self.dims, self.weights, S)[0] for n in self.nodes)

    def shapes(self) -> list[tuple[int, int]]:
        """The weight matrices as (K, N), as they multiply a (B, K) activation."""
        return [s for n in self.nodes for s in _node_costs(n, self.dims, self.weights, 1.0)[1]]


@functools.lru_cache(maxsize=4)
def _test_lengths(data: str) -> tuple[int, float, float]:
    """(test words, mean source length, mean reference length): each word's references averaged.
    Cached: reading CMUdict takes seconds, and both precisions ask."""
    from training.evaluate import load_refs

    refs = load_refs(json.loads(data), "test")
    return (len(refs), statistics.fmean(len(src) for src in refs),
            statistics.fmean(statistics.fmean(len(r) for r in rs) for rs in refs.values()))


def graph_costs(bundle_path, precision: str = "fp32") -> dict:
    """FLOPs per word and weight bytes per decoder step, from the bundle's graphs and test words.

    S = mean source length, L = mean reference length (each word's references averaged), L + 1 steps
    per word (the step that emits </s>). encoder(S) is FLOPs per source: per character its
    recurrent layers and any key projection, once per source the decoder's initial-state layer
    (encoder(0)). step(S) is FLOPs per decoder step per row, S entering through attention.
        FLOPs/word = encoder(S) + step(S) · (L + 1)
    Attention at the mean S rather than per word's own S, and only multiply-adds: elementwise ops,
    softmax and padding in a batch are left out.
    """
    from service.engine.bundle import load_bundle

    bundle = load_bundle(Path(bundle_path))
    suffix = "" if precision == "fp32" else f".{precision}"
    n, S, L = _test_lengths(json.dumps(bundle.manifest.data, sort_keys=True))
    # The multiply-adds are the model's in either precision, so they are counted on the fp32 graphs
    # (the int8 encoder runs its recurrences inside Scan bodies); weights at the precision's own bytes.
    encoder, fp32_decoder = Graph(bundle.graph_path("encoder")), Graph(bundle.graph_path("decoder_step"))
    decoder = Graph(bundle.graph_path("decoder_step" + suffix))
    enc, step = encoder.flops(S), fp32_decoder.flops(S)
    return {"precision": precision, "test_words": n, "mean_source_len": S, "mean_output_len": L,
            "steps_per_word": L + 1, "encoder_flops_per_char": encoder.flops(1.0) - encoder.flops(0.0),
            "encoder_flops_per_source": encoder.flops(0.0), "encoder_flops_per_word": enc,
            "decoder_step_flops": step,
            "decoder_step_flops_per_source_char": fp32_decoder.flops(1.0) - fp32_decoder.flops(0.0),
            "flops_per_word": enc + step * (L + 1), "decoder_weight_bytes_per_step": decoder.nbytes,
            "decoder_shapes": [list(s) for s in decoder.shapes()]}


def last_level_cache_bytes() -> int:
    best = (0, 32 << 20)  # (level, bytes); 32 MiB when /sys says nothing
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level, size = int((index / "level").read_text()), (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
        best = max(best, (level, int(size.rstrip("KMG")) * scale))
    return best[1]


def _weights(shapes, copies: int) -> list[np.ndarray]:
    """`copies` of each (K, N) weight, each its own array (rolled, so no two are alike)."""
    rng = np.random.default_rng(0)
    base = [rng.standard_normal((k, n), dtype=np.float32) for k, n in shapes]  # (K, N) each
    return [np.roll(w, c, axis=0) for c in range(copies) for w in base]


def _matmul_model(shapes) -> onnx.ModelProto:
    """One input x<K> (batch, K) per distinct K, one MatMul per weight (an initializer), the
    outputs concatenated into y: the decoder's weight matrices in one call."""
    inits, nodes = [], []
    for i, w in enumerate(_weights(shapes, 1)):
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [f"x{w.shape[0]}", f"w{i}"], [f"y{i}"]))
    nodes.append(helper.make_node("Concat", [f"y{i}" for i in range(len(shapes))], ["y"], axis=1))
    inputs = [helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT, ["batch", k]) for k in sorted({k for k, _ in shapes})]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None])
    return helper.make_model(helper.make_graph(nodes, "ceiling", inputs, [out], inits),
                             opset_imports=[helper.make_opsetid("", 17)], ir_version=8)  # one onnxruntime reads


def _replicate(model: onnx.ModelProto, copies: int) -> onnx.ModelProto:
    """`copies` of the graph side by side on the same inputs, each with its own weights (rolled, so
    no two are alike), their outputs concatenated: one run streams every copy for one call's
    overhead. Done after quantizing, so int8 copies cost one quantize_dynamic."""
    g = model.graph
    shared = {i.name for i in g.input} | {""}
    nodes, inits = [], []
    for c in range(copies):
        rename = lambda n: n if n in shared else f"{n}_c{c}"  # noqa: B023 - used at once, in this loop
        for n in g.node:
            node = onnx.NodeProto()
            node.CopyFrom(n)
            node.input[:], node.output[:], node.name = [rename(x) for x in n.input], [rename(x) for x in n.output], ""
            nodes.append(node)
        for i in g.initializer:
            w = numpy_helper.to_array(i)
            inits.append(numpy_helper.from_array(np.roll(w, c, axis=0) if w.ndim == 2 else w, rename(i.name)))
    nodes.append(helper.make_node("Concat", [f"{g.output[0].name}_c{c}" for c in range(copies)], [g.output[0].name], axis=1))
    out = helper.make_tensor_value_info(g.output[0].name, g.output[0].type.tensor_type.elem_type, ["batch", None])
    graph = helper.make_graph(nodes, "ceiling", list(g.input), [out], inits)
    return helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)


def _best_s(run, point_s: float) -> float:
    """Best of repeated runs (at least 3) after one warm-up: the least disturbed by other work."""
    run()
    best, end, n = math.inf, time.perf_counter() + point_s, 0
    while n < 3 or time.perf_counter() < end:
        t = time.perf_counter()
        run()
        best, n = min(best, time.perf_counter() - t), n + 1
    return best


def _copies(shapes, itemsize: int, llc: int) -> dict[str, int]:
    one = sum(k * n for k, n in shapes) * itemsize
    return {"llc": max(1, llc // 2 // one), "dram": math.ceil(2 * llc / one)}


def _points(make_run, shapes, itemsize: int, llc: int, point_s: float) -> dict:
    """GEMM at batch 64 over one copy; matrix-vector at batch 1 over the llc and dram working sets."""
    macs = sum(k * n for k, n in shapes)
    out = {"gemm_gflops": 2 * GEMM_BATCH * macs / _best_s(make_run(1, GEMM_BATCH), point_s) / 1e9}
    for where, copies in _copies(shapes, itemsize, llc).items():
        out[f"matvec_gbs_{where}"] = copies * macs * itemsize / _best_s(make_run(copies, 1), point_s) / 1e9
    return out


def _worker(backend: str, threads: int, shapes, precisions, llc: int, point_s: float) -> dict:
    """Runs inside the subprocess: every point for one backend at one thread count."""
    rng = np.random.default_rng(1)
    xs = lambda batch: {f"x{k}": rng.standard_normal((batch, k), dtype=np.float32) for k, _ in shapes}
    if backend == "numpy":
        def numpy_run(copies, batch):
            ws, x = _weights(shapes, copies), xs(batch)
            return lambda: [x[f"x{w.shape[0]}"] @ w for w in ws]  # (B, K) @ (K, N)
        return {"fp32": _points(numpy_run, shapes, 4, llc, point_s)}
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1

    def one_copy(precision: str) -> onnx.ModelProto:
        if precision == "fp32":
            return _matmul_model(shapes)
        with tempfile.TemporaryDirectory() as tmp:  # the same recipe as training/quantize.py
            onnx.save(_matmul_model(shapes), f"{tmp}/m.onnx")
            quantize_dynamic(f"{tmp}/m.onnx", f"{tmp}/q.onnx", op_types_to_quantize=["MatMul"],
                             weight_type=QuantType.QInt8)
            return onnx.load(f"{tmp}/q.onnx")

    def ort_run(precision):
        model = one_copy(precision)

        def make(copies, batch):
            graph = model if copies == 1 else _replicate(model, copies)
            sess = ort.InferenceSession(graph.SerializeToString(), opts, providers=["CPUExecutionProvider"])
            feeds = xs(batch)
            return lambda: sess.run(None, feeds)
        return make
    return {p: _points(ort_run(p), shapes, 4 if p == "fp32" else 1, llc, point_s) for p in precisions}


def ceilings(shapes, threads=(1, 2), precisions=("fp32", "int8"), point_s: float = 0.3,
             llc_bytes: int | None = None) -> dict:
    """GEMM GFLOP/s ((64, K) @ (K, N)) and matrix-vector GB/s ((1, K) @ (K, N), bytes = the weights')
    over the weight matrices `shapes`, per backend, precision and thread count. llc_bytes: the
    last-level cache the working sets are sized against (default: this machine's)."""
    shapes = [tuple(s) for s in shapes]
    llc = llc_bytes or last_level_cache_bytes()
    out = {"llc_bytes": llc, "shapes": [list(s) for s in shapes],
           "copies": {p: _copies(shapes, 4 if p == "fp32" else 1, llc) for p in precisions}}
    for backend in ("onnxruntime", "numpy"):
        for t in threads:
            env = {**os.environ, **{v: str(t) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}}
            spec = json.dumps([backend, t, shapes, list(precisions), llc, point_s])
            done = subprocess.run([sys.executable, "-m", "bench.limits", "--worker", spec], cwd=REPO, env=env,
                                  capture_output=True, text=True, check=False)
            if done.returncode:
                raise RuntimeError(f"ceilings worker {backend} threads={t} failed:\n{done.stderr[-3000:]}")
            for p, r in json.loads(done.stdout).items():
                out.setdefault(backend, {}).setdefault(p, {})[f"threads={t}"] = r
    return out


def engine_key(engine: dict, precision: str, batch: int) -> str | None:
    """The sweep's key for this point: the ONNX Loop (the server's default), else the step loop."""
    keys = [f"{precision}/greedy-loop={loop}/batch={batch}" for loop in ("onnx", "python")]
    return next((k for k in keys if k in engine), None)


def measure(bundle_path, engine: dict, engine_threads: int | None = None, point_s: float = 0.3) -> dict:
    """The engine sweep's words/s (bench/sweep.py's keys) against the graphs' costs and the ceilings,
    at the engine's thread count (the server's default, EngineConfig.intra_op_threads)."""
    from service.config import EngineConfig

    threads = engine_threads or EngineConfig().intra_op_threads or os.cpu_count()
    precisions = [p for p in ("fp32", "int8") if engine_key(engine, p, 64) or engine_key(engine, p, 1)]
    costs = {p: graph_costs(bundle_path, p) for p in precisions}
    ceil = ceilings(costs[precisions[0]]["decoder_shapes"], sorted({1, 2, threads}), precisions, point_s)
    out = {"engine_threads": threads, "ceilings": ceil, "precisions": {}}
    for p in precisions:
        c, mine = costs[p], ceil["onnxruntime"][p][f"threads={threads}"]
        r = out["precisions"][p] = {"costs": c}
        if k := engine_key(engine, p, 64):
            gflops = engine[k] * c["flops_per_word"] / 1e9
            r["batch64"] = {"key": k, "words_per_s": engine[k], "gflops": gflops,
                            "fraction_of_gemm": gflops / mine["gemm_gflops"]}
        if k := engine_key(engine, p, 1):
            gbs = engine[k] * c["steps_per_word"] * c["decoder_weight_bytes_per_step"] / 1e9
            r["batch1"] = {"key": k, "words_per_s": engine[k], "gbs": gbs,
                           "fraction_of_matvec_dram": gbs / mine["matvec_gbs_dram"],
                           "fraction_of_matvec_llc": gbs / mine["matvec_gbs_llc"]}
    return out


def _pair(ort_point: dict, numpy_point: dict | None, key: str) -> str:
    return f"{ort_point[key]:.1f}" + (f" ({numpy_point[key]:.1f})" if numpy_point else "")


def lines(r: dict) -> list[str]:
    t, ceil = r["engine_threads"], r["ceilings"]
    out = [(f"- Ceilings measured at the decoder's weight shapes (K, N) {ceil['shapes']}: onnxruntime, numpy's fp32 "
            f"in brackets; int8 GFLOP/s count its integer multiply-adds as 2 each; matrix-vector from DRAM cycles "
            f"through over 2x the {ceil['llc_bytes'] >> 20} MiB last-level cache, in cache within half of it. "
            f"The engine runs {t} intra-op thread(s) (EngineConfig).")]
    for p, r_p in r["precisions"].items():
        c = r_p["costs"]
        out.append(f"- {p}: {c['flops_per_word'] / 1e6:.1f} MFLOP per word (encoder {c['encoder_flops_per_word'] / 1e6:.1f}"
                   f" at {c['mean_source_len']:.2f} letters, {c['steps_per_word']:.2f} decoder steps of "
                   f"{c['decoder_step_flops'] / 1e6:.2f}); {c['decoder_weight_bytes_per_step'] / 1e6:.2f} MB of decoder "
                   f"weights per step.")
        for tk, m in ceil["onnxruntime"][p].items():
            n = ceil.get("numpy", {}).get(p, {}).get(tk)
            out.append(f"  - ceilings, {tk}: GEMM (64xK)@(KxN) {_pair(m, n, 'gemm_gflops')} GFLOP/s; matrix-vector "
                       f"{_pair(m, n, 'matvec_gbs_dram')} GB/s from DRAM, {_pair(m, n, 'matvec_gbs_llc')} GB/s in cache.")
        if b := r_p.get("batch64"):
            out.append(f"  - engine, batch 64: {b['words_per_s']:.0f} words/s x FLOPs/word = {b['gflops']:.1f} GFLOP/s, "
                       f"**{b['fraction_of_gemm']:.0%}** of the GEMM ceiling at threads={t}.")
        if b := r_p.get("batch1"):
            out.append(f"  - engine, batch 1: {b['words_per_s']:.0f} words/s x steps/word x bytes/step = {b['gbs']:.1f} "
                       f"GB/s of decoder weights (the encoder's reads uncounted), **{b['fraction_of_matvec_dram']:.0%}** "
                       f"of the matrix-vector ceiling from DRAM at threads={t}, {b['fraction_of_matvec_llc']:.0%} of it "
                       f"in cache.")
    return out


def quick_engine(bundle_path, seconds: float) -> dict:
    """words/s at batch 1 and 64 per precision, as bench/sweep.py's engine sweep measures them."""
    from bench.harness import test_words
    from bench.sweep import decode_rate, warmed
    from service.engine.bundle import load_bundle
    from service.config import EngineConfig
    from service.engine.engine import Engine

    bundle = load_bundle(Path(bundle_path))
    words = test_words(bundle)
    out = {}
    for p in ("fp32", "int8") if "encoder.int8" in bundle.manifest.graphs else ("fp32",):
        engine = warmed(Engine(bundle, EngineConfig(precision=p)))
        engine.decode([list(w) for w in words[:64]])  # warm-up
        for batch in (1, 64):
            out[f"{p}/greedy-loop=onnx/batch={batch}"] = decode_rate(engine, words, batch, seconds)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", default="models/g2p-en/1")
    p.add_argument("--engine-json", help="the engine sweep (bench.json's 'engine'); default: measure it here")
    p.add_argument("--seconds", type=float, default=2.0, help="per engine point, when measured here")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON too")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # ceilings()' subprocess
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(*json.loads(args.worker))))
        return None
    if args.engine_json:
        given = json.loads(Path(args.engine_json).read_text())
        engine = given.get("engine", given)  # bench.json whole, or its "engine" part
    else:
        engine = quick_engine(args.bundle, args.seconds)
    r = measure(args.bundle, engine)
    r["engine"] = engine
    if args.json:
        print(json.dumps(r, indent=2))
    print("\n".join(lines(r)))
    return r


if __name__ == "__main__":
    main()
