"""Int8 graphs whose every row is computed on its own: per-row activation scales.

onnxruntime's dynamic quantization (DynamicQuantizeLinear, DynamicQuantizeLSTM) computes one
activation scale over the whole tensor, i.e. over every row of the batch, so a word's output and
score depend on the words it is batched with, and length grouping makes those depend on load.
Here each row of an activation (one word, one decoder row, one encoder position) is quantized
with a scale of its own, so a row's result is the same alone or in any batch:

    s = max(|x|, over the row) / 127                  # (..., 1)
    q = round(x / s) + 128                             # uint8, zero point 128 (symmetric)
    y = MatMulInteger(q, W_q; 128, 128) * s * w_scale # W_q uint8 (quantize_weight), one scale per output column

The LSTM op has no per-row form, so each LSTM becomes its cell written out: the input
projection of every step at once (x W^T, one row per position), then, through a Scan over the
steps (or inline in a one-step decoder graph), h R^T per row, the gates and the new state.
MatMul and Gemm nodes with constant weights are quantized the same way, a stacked ensemble's batched
products one member at a time; anything else stays fp32.

Weights are stored in one of two forms (WEIGHT_FORMS), each giving the exact integer sums on every
CPU: uint8 with zero point 128 (uint8 x uint8, a kernel that widens to 16 bits first), or int8
within [-64, 64] (uint8 x int8, the kernel onnxruntime runs fastest: VPDPBUSD with VNNI,
VPMADDUBSW without, whose 16-bit sum of two products 255 x 64 x 2 stays below 32767).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from training.graph_tools import (drop_unused_initializers, live_nodes, quantized_ops,  # noqa: F401 (theirs)
                                  tensor_shapes, topological)

QUANTIZED_OPS = ("MatMul", "Gemm", "LSTM")
# A product with fewer output columns (attention's score vector, a small output vocabulary) stays
# fp32: quantizing its input would cost more than the product itself.
MIN_COLUMNS = 64
# The weights' integer range per form: "u8" [-127, 127] stored + 128 as uint8; "s7" [-64, 64] as int8.
WEIGHT_FORMS = {"u8": 127, "s7": 64}


class _Graph:
    """The node list and initializers being built, with fresh names."""

    def __init__(self, prefix: str, opset: int, weights: str = "u8"):
        self.prefix, self.count, self.opset, self.weights = prefix, 0, opset, weights
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{self.prefix}/{hint}_{self.count}"

    def const(self, hint: str, value: np.ndarray) -> str:
        n = self.name(hint)
        self.inits.append(numpy_helper.from_array(value, n))
        return n

    def op(self, op_type: str, inputs: list[str], outputs: list[str] | None = None, **attrs) -> str:
        outputs = outputs or [self.name(op_type.lower())]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=self.name(op_type), **attrs))
        return outputs[0]


def _shared_constants(g: _Graph) -> dict:
    return {"tiny": g.const("tiny", np.array(1e-30, np.float32)),
            "inv127": g.const("inv127", np.array(1 / 127, np.float32)),
            "f128_5": g.const("f128_5", np.array(128.5, np.float32)),
            "one": g.const("one", np.array(1, np.float32)),
            "zp128": g.const("zp128", np.array(128, np.uint8)),
            "zp0_s8": g.const("zp0_s8", np.array(0, np.int8)),
            "axis0": g.const("axis0", np.array([0], np.int64))}


def quantize_weight(w: np.ndarray, form: str = "u8") -> tuple[np.ndarray, np.ndarray]:
    """(K, N) fp32 -> integers (K, N) and one scale per output column (N,), symmetric: "u8" uint8 with zero
    point 128, "s7" int8 within [-64, 64] (zero point 0).

    Not int8 over [-127, 127]: onnxruntime multiplies uint8 by int8 on x86 CPUs without VNNI (AVX2,
    AVX-512BW) with VPMADDUBSW, whose 16-bit sums of two products saturate (255 x 127 x 2 > 32767), so
    the same graph gave other answers there than on a VNNI CPU. uint8 x uint8 takes a kernel that widens
    to 16 bits first; int8 within [-64, 64] keeps the pair sums below 32767: either way every CPU
    computes the same exact integer sums."""
    top = WEIGHT_FORMS[form]
    scale = np.maximum(np.abs(w).max(axis=0), 1e-30) / top
    q = np.clip(np.round(w / scale), -top, top).astype(np.int16)
    return (q + 128).astype(np.uint8) if form == "u8" else q.astype(np.int8), scale.astype(np.float32)


def _weight(g: "_Graph", c: dict, w: np.ndarray) -> tuple[str, str, str]:
    """The names of w's integers, its column scales and its zero point, in the graph's weight form."""
    w_q, w_scale = quantize_weight(w, g.weights)
    return g.const("w_int", w_q), g.const("w_scale", w_scale), c["zp128"] if g.weights == "u8" else c["zp0_s8"]


def _quantized_rows(g: _Graph, c: dict, x: str, bounded: bool) -> tuple[str, str, str | None]:
    """(q, a_scale, s): x (..., K) as uint8 with zero point 128, the scale MatMulIntegerToFloat takes, and
    each row's own scale (..., 1) to multiply its products by (None where a_scale is the row's scale)."""
    if bounded:
        return g.op("QuantizeLinear", [x, c["inv127"], c["zp128"]]), c["inv127"], None
    row_max = g.op("ReduceMax", [g.op("Abs", [x])], axes=[-1], keepdims=1) if g.opset < 18 else \
        g.op("ReduceMax", [g.op("Abs", [x]), g.const("last_axis", np.array([-1], np.int64))], keepdims=1)
    s = g.op("Mul", [g.op("Max", [row_max, c["tiny"]]), c["inv127"]])  # (..., 1) the row's scale
    # x / s lies in [-127, 127]; + 128.5 and the cast's truncation round it to [1, 255]
    q = g.op("Cast", [g.op("Add", [g.op("Div", [x, s]), c["f128_5"]])], to=TensorProto.UINT8)
    return q, c["one"], s


def rowwise_matmul(g: _Graph, c: dict, x: str, weight: np.ndarray, out: str | None = None,
                   bounded: bool = False) -> str:
    """x (..., K) @ weight (K, N), x quantized per row.

    bounded: x is known to lie in (-1, 1) (an LSTM's h), so its scale is fixed at 1/127 and
    folded into the weights' scales, which saves computing one per row.
    """
    w_q, w_scale, w_zp = _weight(g, c, weight)
    q, a_scale, s = _quantized_rows(g, c, x, bounded)
    acc = g.op("MatMulIntegerToFloat", [q, w_q, a_scale, w_scale, c["zp128"], w_zp],
               [out] if out and s is None else None, domain="com.microsoft")
    return acc if s is None else g.op("Mul", [acc, s], [out] if out else None)  # acc: in units of the row's scale


def member_matmul(g: _Graph, c: dict, x: str, weight: np.ndarray, out: str, bounded: bool = False) -> str:
    """x (M, ..., K) @ weight (M, 1, ..., 1, K, N): the members of a stacked ensemble (training/stacked.py),
    each its own product. One product per member, on a 2-D weight: onnxruntime lays a constant 2-D weight
    out for its kernel once, at load, but reads a batched one whole at every call, and the members' fp32
    weights together outgrow the core's cache where a lone word's step is all reading weights.
    x is quantized per row once, for every member."""
    M, (K, N) = weight.shape[0], weight.shape[-2:]
    q, a_scale, s = _quantized_rows(g, c, x, bounded)
    parts = [g.name(f"member{m}") for m in range(M)]
    g.op("Split", [q], parts, axis=0, **({"num_outputs": M} if g.opset >= 18 else {}))
    products = []
    for m, part in enumerate(parts):
        w_q, w_scale, w_zp = _weight(g, c, weight[m].reshape(K, N))
        products.append(g.op("MatMulIntegerToFloat", [part, w_q, a_scale, w_scale, c["zp128"], w_zp],
                             domain="com.microsoft"))
    acc = g.op("Concat", products, [out] if s is None else None, axis=0)
    return acc if s is None else g.op("Mul", [acc, s], [out])


def _lstm_cell(g: _Graph, gates: str, c_prev: str) -> tuple[str, str]:
    """ONNX LSTM gates (B, 4H) in the order i, o, f, c -> the new h and c (B, H)."""
    i, o, f, cand = (g.name(n) for n in ("i", "o", "f", "cand"))
    g.op("Split", [gates], [i, o, f, cand], axis=-1, **({"num_outputs": 4} if g.opset >= 18 else {}))
    c_new = g.op("Add", [g.op("Mul", [g.op("Sigmoid", [f]), c_prev]),
                         g.op("Mul", [g.op("Sigmoid", [i]), g.op("Tanh", [cand])])])
    h_new = g.op("Mul", [g.op("Sigmoid", [o]), g.op("Tanh", [c_new])])
    return h_new, c_new


def _check_lstm(node: onnx.NodeProto):
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    unsupported = {k: v for k, v in attrs.items() if k not in ("hidden_size",) and
                   not (k == "direction" and v in (b"forward", "forward")) and not (k == "layout" and v == 0)}
    inputs = list(node.input) + [""] * (7 - len(node.input))
    if unsupported or inputs[4] or not inputs[5] or not inputs[6] or len(node.input) > 7:
        raise ValueError(f"LSTM node {node.name!r}: per-row int8 handles a forward LSTM with initial h and c, "
                         f"no sequence_lens and default activations; it has {attrs} and inputs {list(node.input)}")
    return inputs


def can_write_out(model: onnx.ModelProto) -> bool:
    """Whether every LSTM of the graph can be written out per row: constant W and R (not a stacked
    ensemble's, sliced from its members' at run time) and the form _check_lstm takes."""
    inits = {t.name for t in model.graph.initializer}
    try:
        return all(x[1] in inits and x[2] in inits for x in
                   (_check_lstm(n) for n in model.graph.node if n.op_type == "LSTM"))
    except ValueError:
        return False


class _Lstm(NamedTuple):
    """An LSTM node taken apart: its input projection done, its recurrence still to run."""
    x_proj: str  # (S, B, 4H) x W^T + both biases, per-row int8
    h0: str  # (B, H)
    c0: str  # (B, H)
    R: np.ndarray  # (4H, H)
    outputs: list  # the node's Y, Y_h, Y_c ("" where unused)


def _take_apart(g: _Graph, c: dict, node: onnx.NodeProto, inits: dict, bounded: set, fold=None) -> _Lstm:
    """fold(x, weight, bias): x weight + bias another way where it returns a name (rowwise_step.folded_input)."""
    x, w, r, b, _, h0, c0 = _check_lstm(node)
    W, R = numpy_helper.to_array(inits[w])[0], numpy_helper.to_array(inits[r])[0]  # (4H, in), (4H, H)
    H = R.shape[1]
    bias = numpy_helper.to_array(inits[b])[0] if b else np.zeros(8 * H, np.float32)
    bias = (bias[:4 * H] + bias[4 * H:]).astype(np.float32)
    x_proj = (fold and fold(x, W.T, bias)) or g.op("Add", [rowwise_matmul(g, c, x, W.T, bounded=x in bounded),
                                                         g.const("bias", bias)])
    return _Lstm(x_proj, g.op("Squeeze", [h0, c["axis0"]]), g.op("Squeeze", [c0, c["axis0"]]), R,
                 (list(node.output) + ["", "", ""])[:3])


def _give_outputs(g: _Graph, c: dict, lstm: _Lstm, steps: str, h_new: str, c_new: str):
    """The node's outputs from steps (S, B, H) and the last state (B, H): Y (S, 1, B, H), Y_h, Y_c."""
    y, y_h, y_c = lstm.outputs
    for name, value in ((y, lambda: g.op("Unsqueeze", [steps, g.const("axis1", np.array([1], np.int64))])),
                        (y_h, lambda: g.op("Unsqueeze", [h_new, c["axis0"]])),
                        (y_c, lambda: g.op("Unsqueeze", [c_new, c["axis0"]]))):
        if name:
            g.op("Identity", [value()], [name])


def _one_step(g: _Graph, c: dict, lstm: _Lstm):
    """A decoder step's LSTM (x_proj is (1, B, 4H)), written inline."""
    gates = g.op("Add", [g.op("Squeeze", [lstm.x_proj, c["axis0"]]),
                         rowwise_matmul(g, c, lstm.h0, lstm.R.T, bounded=True)])
    h_new, c_new = _lstm_cell(g, gates, lstm.c0)
    _give_outputs(g, c, lstm, g.op("Unsqueeze", [h_new, c["axis0"]]), h_new, c_new)


def _scan(g: _Graph, c: dict, lstms: list):
    """One Scan running the recurrences of independent LSTMs of one size over the same steps (an
    encoder layer's two directions), their rows stacked: (k B, H) states, so that the gates and the
    cell are computed once a step for all of them, and only h R^T once per LSTM."""
    k = len(lstms)
    body = _Graph(g.name("scan_body"), g.opset, g.weights)
    bc = _shared_constants(body)
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
    h_prev, c_prev, x_t = body.name("h_prev"), body.name("c_prev"), body.name("x_t")  # (kB, H), (kB, H), (kB, 4H)
    if k == 1:
        recurrent = rowwise_matmul(body, bc, h_prev, lstms[0].R.T, bounded=True)
    else:
        rows = [body.name("h_rows") for _ in lstms]
        body.op("Split", [h_prev], rows, axis=0, **({"num_outputs": k} if body.opset >= 18 else {}))
        recurrent = body.op("Concat", [rowwise_matmul(body, bc, r, lstm.R.T, bounded=True)
                                       for r, lstm in zip(rows, lstms)], axis=0)
    h_new, c_new = _lstm_cell(body, body.op("Add", [x_t, recurrent]), c_prev)
    y_t = body.op("Identity", [h_new])
    graph = helper.make_graph(body.nodes, body.prefix, [vi(h_prev), vi(c_prev), vi(x_t)],
                              [vi(h_new), vi(c_new), vi(y_t)], body.inits)
    stack = (lambda names, axis: names[0]) if k == 1 else (lambda names, axis: g.op("Concat", names, axis=axis))
    h_last, c_last, steps = g.name("h_last"), g.name("c_last"), g.name("steps")
    g.op("Scan", [stack([x.h0 for x in lstms], 0), stack([x.c0 for x in lstms], 0),
                  stack([x.x_proj for x in lstms], 1)], [h_last, c_last, steps], num_scan_inputs=1, body=graph)
    if k == 1:
        _give_outputs(g, c, lstms[0], steps, h_last, c_last)
        return
    parts = []
    for name, axis in ((steps, 1), (h_last, 0), (c_last, 0)):
        outs = [g.name("part") for _ in lstms]
        g.op("Split", [name], outs, axis=axis, **({"num_outputs": k} if g.opset >= 18 else {}))
        parts.append(outs)
    for lstm, y, h, cc in zip(lstms, *parts):
        _give_outputs(g, c, lstm, y, h, cc)


def _independent_groups(graph: onnx.GraphProto) -> list:
    """LSTM nodes in graph order, grouped while each reads none of its group's outputs and has the
    group's size: an encoder layer's forward and backward RNN (every member's, in an ensemble).
    The LSTMs of one encoder graph all run over the source positions, so a group shares its steps."""
    producer = {o: n for n in graph.node for o in n.output}

    def reads(node, outputs: set) -> bool:
        seen, todo = set(), list(node.input)
        while todo:
            name = todo.pop()
            if name in outputs:
                return True
            if name in seen or name not in producer:
                continue
            seen.add(name)
            todo.extend(producer[name].input)
        return False

    hidden = lambda n: next(helper.get_attribute_value(a) for a in n.attribute if a.name == "hidden_size")
    groups: list = []
    for node in (n for n in graph.node if n.op_type == "LSTM"):
        group = groups[-1] if groups else []
        if group and hidden(group[0]) == hidden(node) and not reads(node, {o for n in group for o in n.output}):
            group.append(node)
        else:
            groups.append([node])
    return groups


# Ops whose output lies within the range of their (first) input, or of all their inputs for Concat.
_RANGE_KEEPING = {"Transpose", "Squeeze", "Unsqueeze", "Reshape", "Identity", "Slice", "Flatten"}


def bounded_tensors(graph: onnx.GraphProto) -> set:
    """Names of tensors known to lie in (-1, 1): tanh and sigmoid outputs, an LSTM's h (Y, Y_h),
    and what shape ops, Gather of their rows or Concat of them make of those."""
    bounded = set()
    for n in graph.node:  # in topological order
        if n.op_type in ("Tanh", "Sigmoid") or \
                (n.op_type in _RANGE_KEEPING and n.input[0] in bounded) or \
                (n.op_type in ("Gather", "GatherElements") and n.input[0] in bounded) or \
                (n.op_type == "Concat" and all(i in bounded for i in n.input)):
            bounded.update(n.output)
        elif n.op_type == "LSTM":
            bounded.update(n.output[:2])
    return bounded


def _members(node: onnx.NodeProto, inits: dict, shapes: dict) -> bool:
    """Whether a MatMul is a stacked ensemble's product: a constant weight (M, 1, ..., 1, K, N), M > 1, read
    by an input of its rank whose first dim is not known to be other than M (M, ..., K), so that member m's
    rows meet member m's weight only."""
    if node.input[1] not in inits:
        return False
    dims, x = list(inits[node.input[1]].dims), shapes.get(node.input[0])
    return len(dims) >= 3 and dims[0] > 1 and all(d == 1 for d in dims[1:-2]) and dims[-1] >= MIN_COLUMNS \
        and x is not None and len(x) == len(dims) and x[0] in (dims[0], None)


def _rewrite_gemm(g: _Graph, c: dict, node: onnx.NodeProto, inits: dict, bounded: set) -> bool:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.input[1] not in inits or attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 \
            or attrs.get("beta", 1.0) != 1.0:
        return False
    w = numpy_helper.to_array(inits[node.input[1]])
    w = w.T if attrs.get("transB", 0) else w  # (K, N)
    if w.shape[1] < MIN_COLUMNS:
        return False
    x, is_bounded = node.input[0], node.input[0] in bounded
    if len(node.input) > 2 and node.input[2]:
        g.op("Add", [rowwise_matmul(g, c, x, w, bounded=is_bounded), node.input[2]], [node.output[0]])
    else:
        rowwise_matmul(g, c, x, w, node.output[0], bounded=is_bounded)
    return True


def quantize_rowwise(model: onnx.ModelProto, one_step_lstm: bool, scan_lstms: bool = False,
                     weights: str = "u8", write_step=None, bounded_inputs=frozenset(),
                     fold_input=None) -> onnx.ModelProto:
    """The model with its MatMul/Gemm nodes that have constant weights, and its LSTMs, in per-row int8.

    one_step_lstm: the graph is a decoder step (each LSTM runs one step, written inline). Else each
    LSTM runs over its sequence: in a Scan of its cell written out where scan_lstms, else it stays
    onnxruntime's fp32 LSTM op, which ran faster than that Scan here in batches (alone too, but for g2p-en's).
    weights: their form, WEIGHT_FORMS. write_step: writes a decoder step's LSTM node another way where it
    returns True (training/rowwise_step.fused_one_step). bounded_inputs: graph inputs known to lie in [-1, 1].
    fold_input: computes an LSTM's input projection another way where it returns a name (rowwise_step.folded_input).
    """

    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset < 13:
        raise ValueError(f"per-row int8 needs opset >= 13 (Squeeze axes as an input); the graph has {opset}")
    g = _Graph("int8", opset, weights)
    c = _shared_constants(g)
    bounded = bounded_tensors(graph) | set(bounded_inputs)
    shapes = tensor_shapes(model)
    producer = {o: n for n in graph.node for o in n.output}
    groups = {id(group[-1]): group for group in _independent_groups(graph)}  # emitted at their last node
    for node in graph.node:
        if node.op_type == "LSTM":
            if one_step_lstm and write_step and write_step(g, c, node, inits, producer, shapes, bounded):
                continue
            if not (one_step_lstm or scan_lstms):
                g.nodes.append(node)
                continue
            group = groups.get(id(node), []) if not one_step_lstm else [node]
            fold = (lambda x, w, b: fold_input(g, c, x, w, b, producer, inits, shapes)) if fold_input else None
            lstms = [_take_apart(g, c, n, inits, bounded, fold) for n in group]
            for lstm in lstms if one_step_lstm else ():
                _one_step(g, c, lstm)
            if lstms and not one_step_lstm:
                _scan(g, c, lstms)
        elif node.op_type == "MatMul" and node.input[1] in inits and len(inits[node.input[1]].dims) == 2 \
                and inits[node.input[1]].dims[1] >= MIN_COLUMNS:
            rowwise_matmul(g, c, node.input[0], numpy_helper.to_array(inits[node.input[1]]), node.output[0],
                           bounded=node.input[0] in bounded)
        elif node.op_type == "MatMul" and _members(node, inits, shapes):
            member_matmul(g, c, node.input[0], numpy_helper.to_array(inits[node.input[1]]), node.output[0],
                          bounded=node.input[0] in bounded)
        elif not (node.op_type == "Gemm" and _rewrite_gemm(g, c, node, inits, bounded)):
            g.nodes.append(node)
    used = {i for n in g.nodes for i in n.input} | {o.name for o in graph.output}
    del graph.node[:]
    # the nodes a rewrite left unread (a fused step's embedding lookup) are dropped, not run
    graph.node.extend(topological(live_nodes(g.nodes, {o.name for o in graph.output}),
                                  {i.name for i in graph.input} | {t.name for t in graph.initializer} |
                                  {t.name for t in g.inits}))
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept + g.inits)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return drop_unused_initializers(model)
