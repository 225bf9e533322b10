"""Housekeeping of the ONNX graphs training/rowwise_int8.py rewrites: node order, shapes, dead nodes and
constants, and a count of the integer products."""
from __future__ import annotations

import onnx


def topological(nodes: list, graph_inputs: set) -> list:
    """The nodes in an order where each comes after the producers of its inputs (stable)."""
    produced = {o for n in nodes for o in n.output}
    ready, out, pending = set(graph_inputs), [], list(nodes)
    while pending:
        rest = []
        for n in pending:
            if all(i == "" or i in ready or i not in produced for i in n.input):
                out.append(n)
                ready.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise ValueError(f"per-row int8: a cycle or a missing input around {rest[0].name!r}")
        pending = rest
    return out


def tensor_shapes(model: onnx.ModelProto) -> dict:
    """The shape of each tensor of the graph that shape inference can tell (None for a dim it cannot)."""
    inferred = onnx.shape_inference.infer_shapes(model).graph
    return {v.name: [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
            for v in (*inferred.input, *inferred.value_info, *inferred.output) if v.type.tensor_type.HasField("shape")}


def live_nodes(nodes: list, outputs: set) -> list:
    """The nodes whose outputs something reads: a graph output or a live node (its subgraphs too)."""
    def reads(n) -> set:
        names = set(n.input)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                names |= {i for m in a.g.node for i in reads(m)}
        return names

    live, needed, changed = list(nodes), set(outputs), True
    while changed:
        needed = set(outputs).union(*(reads(n) for n in live))
        kept = [n for n in live if any(o in needed for o in n.output)]
        changed, live = len(kept) != len(live), kept
    return live


def drop_unused_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without initializers no node reads (each shared constant is made for every graph,
    and onnxruntime warns of each one left unread when it loads), in Scan bodies too."""
    def names_read(graph) -> set:
        read = {o.name for o in graph.output}
        for n in graph.node:
            read.update(n.input)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    read |= names_read(a.g)  # a body may read the outer graph's names
        return read

    def prune(graph):
        read = names_read(graph)
        kept = [t for t in graph.initializer if t.name in read]
        del graph.initializer[:]
        graph.initializer.extend(kept)
        for n in graph.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    prune(a.g)

    prune(model.graph)
    return model


def quantized_ops(model: onnx.ModelProto) -> dict:
    """How many integer matrix products the graph runs, its Scan bodies included."""
    counts: dict = {}

    def walk(graph):
        for n in graph.node:
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
    walk(model.graph)
    return {k: v for k, v in counts.items() if k in ("MatMulInteger", "MatMulIntegerToFloat", "Scan")}
