"""A decoder step's LSTM in per-row int8 with fewer, larger nodes (issue 69; training/quantize.py's default).

training/rowwise_int8.py writes a decoder step's LSTM as two products, x W^T with x quantized per row
(a scale computed for each row) and h R^T with h at the fixed scale 1/127. Where the LSTM's input x is
a concatenation along its features, here each part takes the cheapest form that is still computed row
by row:
- an embedding (Gather of a constant table) is folded into the weights at export: table W_part^T is
  a (vocabulary, 4H) fp32 table, gathered by the same ids, so its part of the gates costs no product
  and no quantization;
- a part known to lie in [-1, 1] (a tanh output fed back, as the attentional input feed is) joins h:
  the two are quantized together at the fixed scale 1/127 and multiply [W_part; R] stacked, in one
  product;
- anything else keeps a scale of its own per row, as before.
A row's gates are thus the same alone or in any batch, by construction. Where the input is not such
a concatenation, the step is written as rowwise_int8._one_step writes it. An encoder layer whose input
is the embedding lookup (reversed per source for the backward direction) takes the same fold for its
input projection (folded_input).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from training.rowwise_int8 import (_check_lstm, _give_outputs, _Graph, _lstm_cell, _Lstm, bounded_tensors,
                                   rowwise_matmul)

# Ops that keep a (B, I) tensor's rows and features in order when the only axes they add, drop or move
# have size 1, as in a one-step LSTM's input (1, B, I).
_SHAPE_OPS = {"Unsqueeze", "Squeeze", "Reshape", "Identity", "Transpose"}
FOLD_MAX = 1 << 22  # fp32 elements of a folded embedding table (vocabulary x 4H): 16 MiB at most


def _attr(node: onnx.NodeProto, name: str, default=None):
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def concat_parts(x: str, producer: dict, shapes: dict) -> list[str] | None:
    """The (B, I_p) tensors a one-step LSTM's input x (1, B, I) is the feature-wise concatenation of, or None."""
    name = x
    while name in producer and producer[name].op_type in _SHAPE_OPS:
        node = producer[name]
        perm = _attr(node, "perm")
        if node.op_type == "Transpose" and (perm is None or perm[-1] != len(perm) - 1):
            return None  # the features must stay the last axis
        name = node.input[0]
    node = producer.get(name)
    rank = len(shapes.get(name) or ())
    if node is None or node.op_type != "Concat" or rank != 2 or _attr(node, "axis") not in (-1, 1):
        return None
    return list(node.input)


def _folded_table(part: str, producer: dict, inits: dict, W_part: np.ndarray) -> tuple[np.ndarray, str] | None:
    """(table W_part^T (V, 4H), the ids) where part is a row Gather of a constant (V, I_p) table."""
    node = producer.get(part)
    if node is None or node.op_type != "Gather" or node.input[0] not in inits or _attr(node, "axis", 0) != 0:
        return None
    table = numpy_helper.to_array(inits[node.input[0]])
    if table.ndim != 2 or table.shape[0] * W_part.shape[0] > FOLD_MAX:
        return None
    return (table.astype(np.float64) @ W_part.T.astype(np.float64)).astype(np.float32), node.input[1]


def fused_one_step(g: _Graph, c: dict, node: onnx.NodeProto, inits: dict, producer: dict, shapes: dict,
                   bounded: set) -> bool:
    """Write a decoder step's LSTM node as the module says; False (nothing written) where its input is not
    a feature-wise concatenation whose parts' widths are known."""
    x, w, r, b, _, h0, c0 = _check_lstm(node)
    parts = concat_parts(x, producer, shapes)
    widths = [(shapes.get(p) or [None])[-1] for p in parts or ()]
    W, R = numpy_helper.to_array(inits[w])[0], numpy_helper.to_array(inits[r])[0]  # (4H, I), (4H, H)
    if not parts or None in widths or sum(widths) != W.shape[1]:
        return False
    H = R.shape[1]
    bias = numpy_helper.to_array(inits[b])[0] if b else np.zeros(8 * H, np.float32)
    terms = [g.const("bias", (bias[:4 * H] + bias[4 * H:]).astype(np.float32))]
    h = g.op("Squeeze", [h0, c["axis0"]])
    fixed, per_row = [], []  # (name, weight (I_p, 4H))
    for part, lo, hi in zip(parts, np.cumsum([0] + widths[:-1]), np.cumsum(widths)):
        W_part = W[:, lo:hi]
        if folded := _folded_table(part, producer, inits, W_part):
            table, ids = folded
            terms.append(g.op("Gather", [g.const("folded_embedding", table), ids], axis=0))
        else:
            (fixed if part in bounded else per_row).append((part, W_part.T))
    fixed.append((h, R.T))
    for group, is_bounded in ((fixed, True), (per_row, False)):
        if group:
            rows = group[0][0] if len(group) == 1 else g.op("Concat", [n for n, _ in group], axis=-1)
            terms.append(rowwise_matmul(g, c, rows, np.concatenate([wt for _, wt in group]), bounded=is_bounded))
    gates = terms[0]
    for t in terms[1:]:
        gates = g.op("Add", [gates, t])
    h_new, c_new = _lstm_cell(g, gates, g.op("Squeeze", [c0, c["axis0"]]))
    lstm = _Lstm("", h, "", R, (list(node.output) + ["", "", ""])[:3])
    _give_outputs(g, c, lstm, g.op("Unsqueeze", [h_new, c["axis0"]]), h_new, c_new)
    return True


def _lookup_chain(x: str, producer: dict, inits: dict, shapes: dict):
    """(table, ids, chain) where x is an embedding lookup, Gather(constant (V, E) table, ids), then
    row reorderings that keep the features last: Transposes, and GatherElements along another axis by
    an index expanded from one of last dim 1 (an encoder's reversal of each source); else None."""
    chain, name = [], x
    while (node := producer.get(name)) is not None:
        if node.op_type == "Transpose" and (perm := _attr(node, "perm")) and perm[-1] == len(perm) - 1:
            chain.append(node)
        elif node.op_type == "GatherElements":
            rank, index = len(shapes.get(node.input[0]) or ()), producer.get(node.input[1])
            if not rank or _attr(node, "axis", 0) % rank == rank - 1 or index is None or index.op_type != "Expand" \
                    or (shapes.get(index.input[0]) or [None])[-1] != 1:
                return None
            chain.append(node)
        elif node.op_type == "Gather" and node.input[0] in inits and _attr(node, "axis", 0) == 0:
            table = numpy_helper.to_array(inits[node.input[0]])
            return (table, node.input[1], chain[::-1]) if table.ndim == 2 else None
        else:
            return None
        name = node.input[0]
    return None


def folded_input(g: _Graph, c: dict, x: str, weight: np.ndarray, bias: np.ndarray, producer: dict, inits: dict,
                 shapes: dict) -> str | None:
    """x weight + bias where x is an embedding lookup (_lookup_chain): the table times the weight, plus the
    bias, folded at export into an fp32 (V, N) table, gathered by the same ids and reordered as x was; no
    product, no quantization, and each row its own."""
    found = _lookup_chain(x, producer, inits, shapes)
    if found is None or found[0].shape[0] * weight.shape[1] > FOLD_MAX:
        return None
    table, ids, chain = found
    folded = (table.astype(np.float64) @ weight.astype(np.float64) + bias).astype(np.float32)
    out = g.op("Gather", [g.const("folded_input", folded), ids], axis=0)
    for node in chain:
        if node.op_type == "Transpose":
            out = g.op("Transpose", [out], perm=_attr(node, "perm"))
        else:  # the same reordering, its index expanded to the folded width
            index = g.op("Expand", [producer[node.input[1]].input[0], g.op("Shape", [out])])
            out = g.op("GatherElements", [out, index], axis=_attr(node, "axis", 0))
    return out


def _zeros(graph: onnx.GraphProto) -> set:
    """Outputs of ConstantOfShape nodes that fill with zero (the default)."""
    out = set()
    for n in graph.node:
        value = _attr(n, "value")
        if n.op_type == "ConstantOfShape" and (value is None or not numpy_helper.to_array(value).any()):
            out.update(n.output)
    return out


def bounded_state_inputs(step: onnx.ModelProto, encoder: onnx.ModelProto) -> set:
    """The step's state inputs X known to lie in [-1, 1] at every step: the step returns X_next within
    (-1, 1) (a tanh, bounded_tensors) and the encoder gives X's first value within it (or zeros)."""
    step_bounded = bounded_tensors(step.graph)
    encoder_bounded = bounded_tensors(encoder.graph) | _zeros(encoder.graph)
    return {i.name for i in step.graph.input if f"{i.name}_next" in step_bounded and i.name in encoder_bounded
            and i.name in {o.name for o in encoder.graph.output}}
