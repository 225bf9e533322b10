"""Greedy decoding as one ONNX graph: an ONNX `Loop` around the bundle's decoder step.

Built when the engine loads, from whichever decoder-step graph it serves (fp32 or
int8): the step graph stays the one artifact, and its nodes become the Loop's body,
with argmax, the running log_prob and the stop test (</s> or each row's length limit)
added around them. The engine builds it around `soft_only(step)`: the step without
the hard / top-k attention nodes, which a soft row (the default) never needs. One
onnxruntime call then decodes a whole batch, instead of one call per step with numpy
between. It is an accelerator of the decoding core's GreedySearch over a whole batch
(service/engine/strategy.py), which it answers as bit for bit (tests/engine/test_decoding_parity.py)
but for adding each row's log_prob in float32. The server uses it for request-level
batching; continuous batching and beam search need the core's step loop (rows join,
leave and reorder between steps), so both paths stay, and export checks parity with
PyTorch through both.

Inputs are the encoder's outputs as the step graph names them (y_prev, h, c, feed, align,
enc_out, keys, pad_mask, top_k), plus `max_output_len` (B,): each row's step limit, `steps0` and
`log_prob0` (B,): each row's steps and log_prob so far (zeros for a fresh decode), and `min_live` ():
the Loop stops once no more rows than this are live (0: when all are done).
Outputs: ids (B, T), each step's emitted id (</s> included, then pad; Decoded.output_ids
leaves </s> out), steps (B,), log_prob (B,) (each row's, </s> included, added up in float32), for a
model with attention attn (B, T, S), and where the Loop stopped: done (B,), y_last (B,) and the state
(h_last, c_last, ...), from which run_loop goes on with the live rows alone.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper

STATE_NAMES = ("h", "c", "feed", "align")
OUTER_NAMES = ("enc_out", "keys", "pad_mask", "top_k")  # read by every step, never changed
LIVE_SHARE = 0.5  # run_loop: a call stops once no more than this share of its rows is live
COMPACT_MIN_ROWS = 8  # run_loop: below this, dropping finished rows saves less than a call of its own costs


def _value(name: str, elem: int, shape=None):
    return oh.make_tensor_value_info(name, elem, shape)


def _renamed(value: onnx.ValueInfoProto, name: str) -> onnx.ValueInfoProto:
    out = onnx.ValueInfoProto()
    out.CopyFrom(value)
    out.name = name
    return out


def _const(name: str, value) -> onnx.NodeProto:
    return oh.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value), name))


# The weights an onnxruntime kernel prepacks (lays out for its products once, at load). It does so for the
# constants of its own graph only: a body reading these from the outer graph decoded more slowly, with the
# same answers, so they stay the body's.
_PACKED_INPUTS = {"MatMul": (1,), "Gemm": (1,), "LSTM": (1, 2), "GRU": (1, 2), "RNN": (1, 2)}
_QUANTIZED_PRODUCTS = {"MatMulInteger", "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM"}


def _body_weights(step: onnx.GraphProto) -> set[str]:
    """Names of the step's initializers that stay in the body: the prepacked ones (a MatMul's or Gemm's 2-D
    weight, an RNN's W and R, everything a quantized product reads). The rest (embeddings, biases, the
    stacked ensembles' batched weights) move to the outer graph, which the body reads: a Loop session holds
    its body's own initializers about twice over, the outer graph's once, and every served model has one."""
    dims = {t.name: len(t.dims) for t in step.initializer}
    body = set()
    for n in step.node:
        if n.op_type in _QUANTIZED_PRODUCTS:
            body.update(n.input)
        for i in _PACKED_INPUTS.get(n.op_type, ()):
            if i < len(n.input) and (n.op_type not in ("MatMul", "Gemm") or dims.get(n.input[i]) == 2):
                body.add(n.input[i])
    return body


def _greedy_body(step: onnx.GraphProto, state: list[str], has_attn: bool, eos_id: int, pad_id: int,
                 weights: set[str]):
    """One iteration: the step graph's nodes, then argmax, log_prob, stop test. Carries
    (y_prev, *state, done, steps, log_prob); scans (ids, attn). Holds the step's `weights` (_body_weights)."""
    F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    nodes = list(step.node) + [
        _const("loop_zero_f", np.float32(0)),
        _const("loop_eos", np.int64(eos_id)), _const("loop_pad", np.int64(pad_id)),
        _const("loop_axis1", np.array([1], dtype=np.int64)),
        oh.make_node("ArgMax", ["log_probs"], ["loop_y"], axis=-1, keepdims=0),  # (B,)
        oh.make_node("Unsqueeze", ["loop_y", "loop_axis1"], ["loop_y_col"]),  # (B, 1)
        oh.make_node("GatherElements", ["log_probs", "loop_y_col"], ["loop_lp_col"], axis=1),  # (B, 1)
        oh.make_node("Squeeze", ["loop_lp_col", "loop_axis1"], ["loop_lp"]),  # (B,)
        # Finished rows keep stepping with the batch but add nothing and emit pad.
        oh.make_node("Where", ["loop_done", "loop_zero_f", "loop_lp"], ["loop_lp_live"]),
        oh.make_node("Add", ["loop_log_prob", "loop_lp_live"], ["loop_log_prob_next"]),
        oh.make_node("Not", ["loop_done"], ["loop_live"]),
        oh.make_node("Cast", ["loop_live"], ["loop_live_i"], to=I64),
        oh.make_node("Add", ["loop_steps", "loop_live_i"], ["loop_steps_next"]),
        oh.make_node("Where", ["loop_done", "loop_pad", "loop_y"], ["loop_out_y"]),
        oh.make_node("Equal", ["loop_y", "loop_eos"], ["loop_is_eos"]),
        oh.make_node("GreaterOrEqual", ["loop_steps_next", "max_output_len"], ["loop_at_limit"]),
        oh.make_node("Or", ["loop_done", "loop_is_eos"], ["loop_done_eos"]),
        oh.make_node("Or", ["loop_done_eos", "loop_at_limit"], ["loop_done_next"]),
        # Go on while more rows are live than min_live (an outer input): with 0, until every row is done.
        oh.make_node("Not", ["loop_done_next"], ["loop_live_next"]),
        oh.make_node("Cast", ["loop_live_next"], ["loop_live_next_i"], to=I64),
        oh.make_node("ReduceSum", ["loop_live_next_i"], ["loop_live_count"], keepdims=0),
        oh.make_node("Greater", ["loop_live_count", "min_live"], ["loop_cond_out"]),
    ]
    inputs = ([_value("loop_iter", I64, []), _value("loop_cond_in", BOOL, []), _value("y_prev", I64)]
              + [_value(n, F) for n in state]
              + [_value("loop_done", BOOL), _value("loop_steps", I64), _value("loop_log_prob", F)])
    outputs = ([_value("loop_cond_out", BOOL, []), _value("loop_y", I64)]
               + [_value(f"{n}_next", F) for n in state]
               + [_value("loop_done_next", BOOL), _value("loop_steps_next", I64), _value("loop_log_prob_next", F),
                  _value("loop_out_y", I64)] + ([_value("attn", F)] if has_attn else []))
    return oh.make_graph(nodes, "greedy_step", inputs, outputs,
                         initializer=[t for t in step.initializer if t.name in weights])


def _is_soft_test(name: str, producers: dict, consts: dict) -> bool:
    """Whether tensor `name` is keep_top_k's `top_k[:, None] == 0` (training/hard_attention.py), as exported."""
    node = producers.get(name)
    if node is None or node.op_type != "Equal":
        return False
    a, b = (producers.get(i) for i in node.input)
    for unsqueezed, zero in ((a, node.input[1]), (b, node.input[0])):
        if (unsqueezed is not None and unsqueezed.op_type == "Unsqueeze" and unsqueezed.input[0] == "top_k"
                and zero in consts and not consts[zero].any()):
            return True
    return False


def soft_only(step: onnx.ModelProto) -> onnx.ModelProto | None:
    """The decoder step with every row soft (top_k 0): keep_top_k's last choice, `Where(top_k == 0,
    attn, kept)`, becomes `attn`, and the nodes that only fed `kept` go, so a soft decode (the default)
    does no top-k work. The same values as the whole graph's for soft rows: a Where passes its first
    branch through untouched. None when the graph does not have that shape (no top_k, or top_k read
    anywhere else)."""
    graph = step.graph
    if "top_k" not in {i.name for i in graph.input}:
        return None
    producers = {o: n for n in graph.node for o in n.output}
    consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in graph.node
              if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"}
    consts.update({t.name: numpy_helper.to_array(t) for t in graph.initializer})
    nodes = []
    for n in graph.node:  # ONNX keeps nodes in topological order
        if n.op_type == "Where" and _is_soft_test(n.input[0], producers, consts):
            n = oh.make_node("Identity", [n.input[1]], [n.output[0]], name=n.name + "/soft")
        nodes.append(n)
    needed = {o.name for o in graph.output}
    kept = []
    for n in reversed(nodes):  # backwards from the outputs: what they need
        if any(o in needed for o in n.output):
            kept.append(n)
            needed.update(i for i in n.input if i)
    if "top_k" in needed:
        return None
    kept.reverse()
    inputs = [i for i in graph.input if i.name != "top_k"]
    initializers = [t for t in graph.initializer if t.name in needed]
    g = oh.make_graph(kept, graph.name + "_soft", inputs, list(graph.output), initializer=initializers)
    model = oh.make_model(g, opset_imports=list(step.opset_import), ir_version=step.ir_version)
    for field in ("domain", "model_version", "producer_name", "producer_version"):
        setattr(model, field, getattr(step, field))
    onnx.checker.check_model(model)
    return model


def build_greedy_loop(step: onnx.ModelProto, eos_id: int, pad_id: int) -> onnx.ModelProto:
    """The greedy-decoding graph around a decoder-step model (fp32 or quantized alike)."""
    F, I64 = TensorProto.FLOAT, TensorProto.INT64
    inputs = {i.name: i for i in step.graph.input}
    state = [n for n in STATE_NAMES if n in inputs]
    outer = [n for n in OUTER_NAMES if n in inputs]
    has_attn = "attn" in {o.name for o in step.graph.output}
    body_weights = _body_weights(step.graph)
    body = _greedy_body(step.graph, state, has_attn, eos_id, pad_id, body_weights)
    nodes = [
        oh.make_node("Sub", ["max_output_len", "steps0"], ["steps_left"]),  # (B,)
        oh.make_node("ReduceMax", ["steps_left"], ["max_steps"], keepdims=0),  # () the trip count
        _const("cond0", np.array(True)),
        oh.make_node("Equal", ["y_prev", "y_prev"], ["all_true"]),
        oh.make_node("Not", ["all_true"], ["done0"]),  # (B,) False
        oh.make_node("Loop", ["max_steps", "cond0", "y_prev", *state, "done0", "steps0", "log_prob0"],
                     ["y_last", *[f"{n}_last" for n in state], "done", "steps", "log_prob", "ids_tb"]
                     + (["attn_tbs"] if has_attn else []), body=body),
        oh.make_node("Transpose", ["ids_tb"], ["ids"], perm=[1, 0]),  # (T, B) -> (B, T)
    ] + ([oh.make_node("Transpose", ["attn_tbs"], ["attn"], perm=[1, 0, 2])] if has_attn else [])
    graph = oh.make_graph(
        nodes, "greedy_decode",
        [inputs["y_prev"], *[inputs[n] for n in state + outer], _value("max_output_len", I64, ["batch"]),
         _value("steps0", I64, ["batch"]), _value("log_prob0", F, ["batch"]), _value("min_live", I64, [])],
        [_value("ids", I64, ["batch", "steps"]), _value("steps", I64, ["batch"]),
         _value("log_prob", F, ["batch"])]
        + ([_value("attn", F, ["batch", "steps", "src_time"])] if has_attn else [])
        + [_value("done", TensorProto.BOOL, ["batch"]), _value("y_last", I64, ["batch"])]
        + [_renamed(inputs[n], f"{n}_last") for n in state],
        initializer=[t for t in step.graph.initializer if t.name not in body_weights])
    model = oh.make_model(graph, opset_imports=list(step.opset_import), ir_version=step.ir_version)
    onnx.checker.check_model(model)
    return model


def run_loop(session, input_names: list[str], output_names: list[str], run, limits: np.ndarray, pad_id: int = 0,
             compact: bool = True):
    """One greedy decode of `run` (service/engine/engine.py Running) through a Loop session whose inputs and
    outputs are named so, each row to limits[row] steps at most: ids (B, T) (pad after a row's last step),
    steps (B,), log_prob (B,) float32, attn (B, T, S) or None.

    Finished rows leave the batch (compact): a call stops once half its rows are done (LIVE_SHARE; with
    COMPACT_MIN_ROWS rows or more), and the live rows go on in a call of their own from where they were,
    their state, steps and log_prob so far, so that no step is spent on a row the first half of the batch
    no longer needs. A row's answer does not change, to the last bit: each step is its own per-row work
    over the same source positions (the padding is kept), and its log_prob goes on adding in float32 in
    the same order. Live rows have all taken every step so far, so each call
    starts at one step index for all of its rows."""
    B = len(run)
    steps, log_prob = np.zeros(B, np.int64), np.zeros(B, np.float32)
    segments = []  # (rows, first step, ids (b, n), attn (b, n, S') or None)
    rows, part, t = np.arange(B), run, 0
    while True:
        min_live = int(len(rows) * LIVE_SHARE) if compact and len(rows) >= COMPACT_MIN_ROWS else 0
        inputs = {"y_prev": part.y_prev, **part.state, "enc_out": part.enc_out, "keys": part.keys,
                  "pad_mask": part.pad_mask, "top_k": part.top_k, "max_output_len": limits[rows].astype(np.int64),
                  "steps0": steps[rows], "log_prob0": log_prob[rows],
                  "min_live": np.array(min_live, np.int64)}
        out = dict(zip(output_names, session.run(None, {n: inputs[n] for n in input_names})))
        segments.append((rows, t, out["ids"], out.get("attn")))
        steps[rows], log_prob[rows] = out["steps"], out["log_prob"]
        t += out["ids"].shape[1]
        live = np.flatnonzero(~out["done"])
        if not len(live):
            break
        part = dataclasses.replace(part, y_prev=out["y_last"], state={n: out[f"{n}_last"] for n in part.state}
                                   ).select(live, trim=False)
        rows = rows[live]
    ids = np.full((B, t), pad_id, np.int64)
    attn = None if segments[0][3] is None else np.zeros((B, t, run.pad_mask.shape[1]), np.float32)
    for rows, first, seg_ids, seg_attn in segments:
        ids[rows, first:first + seg_ids.shape[1]] = seg_ids
        if attn is not None:
            attn[rows, first:first + seg_attn.shape[1], :seg_attn.shape[2]] = seg_attn
    return ids, steps, log_prob, attn
