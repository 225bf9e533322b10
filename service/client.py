"""attnserve-client: transduce words over gRPC and show the attention behind each output.

Client side only: never imports torch, and matplotlib is imported only for --png so
the terminal path starts quickly and works without a display.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

import grpc
import numpy as np
from rich.cells import cell_len
from rich.color import Color
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.style import Style
from rich.text import Text

from attnserve.v1 import attnserve_pb2, attnserve_pb2_grpc

DEFAULT_SERVER = "localhost:50051"
LEVELS = 9
_DARK, _BRIGHT = (40, 40, 40), (30, 144, 255)
# Truecolour ramp; rich downgrades it on 256/16-colour terminals. Dark text from the
# middle up keeps the values legible on the bright cells.
_STYLES = [
    Style(
        bgcolor=Color.from_rgb(*(round(a + (b - a) * k / (LEVELS - 1)) for a, b in zip(_DARK, _BRIGHT))),
        color="black" if k >= 6 else "white",
    )
    for k in range(LEVELS)
]
# Without colour (pipes, NO_COLOR, dumb terminals) shading characters carry the intensity.
_SHADES = " ░▒▓█"


def attention_matrix(result) -> np.ndarray:
    """The (T, S) attention of a Result; (0, 0) when the server sent none."""
    if not result.HasField("attention"):
        return np.zeros((0, 0), dtype=np.float32)
    att = result.attention
    if len(att.weights) != att.rows * att.cols:
        raise ValueError(f"attention has {len(att.weights)} weights, expected {att.rows} x {att.cols}")
    return np.asarray(list(att.weights), dtype=np.float32).reshape(att.rows, att.cols)


def _labels(labels, n: int) -> list[str]:
    # A malformed reply should still render, so fall back to positions.
    labels = list(labels)
    return labels if len(labels) == n else [str(i) for i in range(n)]


def _f32_list(row) -> list[float]:
    # str() of a float32 is its shortest round-tripping decimal: 0.7, not 0.699999988079071.
    return [float(str(v)) for v in np.asarray(row, dtype=np.float32)]


def result_to_dict(input_text: str, result) -> dict:
    """A JSON-ready dict of one Result; "attention" is None when the server sent none."""
    out = {"input": input_text, "output_tokens": list(result.output_tokens), "output_text": result.output_text,
           "log_prob": result.log_prob, "finished": result.finished, "attention": None}
    if result.HasField("attention"):
        m, att = attention_matrix(result), result.attention
        out["attention"] = {"rows": att.rows, "cols": att.cols, "weights": [_f32_list(r) for r in m],
                            "source_labels": list(att.source_labels), "target_labels": list(att.target_labels)}
    return out


def _center(s: str, width: int) -> str:
    # cell_len, not len: wide characters take two terminal cells.
    pad = max(0, width - cell_len(s))
    return " " * (pad // 2) + s + " " * (pad - pad // 2)


class Heatmap:
    """Attention as a labelled grid; the weights are printed only when they fit the width."""

    def __init__(self, matrix: np.ndarray, source_labels: list[str], target_labels: list[str]):
        self.matrix, self.source_labels, self.target_labels = matrix, source_labels, target_labels

    def _widths(self, with_values: bool) -> list[int]:
        base = 6 if with_values else 3
        return [max(base, cell_len(s) + 2) for s in self.source_labels]

    def _label_width(self) -> int:
        return max((cell_len(t) for t in self.target_labels), default=0) + 1

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        lw = self._label_width()
        return Measurement(lw + sum(self._widths(False)), lw + sum(self._widths(True)))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.matrix.size == 0:
            yield Text("(no attention)", style="dim")
            return
        lw = self._label_width()
        show_values = lw + sum(self._widths(True)) <= options.max_width
        widths = self._widths(show_values)
        colour = console.color_system is not None and not console.no_color
        levels = np.clip(np.nan_to_num(self.matrix) * LEVELS, 0, LEVELS - 1).astype(int)

        header = Text(" " * lw, no_wrap=True, overflow="crop")
        for s, w in zip(self.source_labels, widths):
            header.append(_center(s, w), style="bold")
        yield header
        for i, t in enumerate(self.target_labels):
            line = Text(no_wrap=True, overflow="crop")
            line.append(t + " " * (lw - cell_len(t)), style="bold")
            for j, w in enumerate(widths):
                lv = int(levels[i, j])
                shade = _SHADES[lv * (len(_SHADES) - 1) // (LEVELS - 1)]
                if show_values:
                    body = _center(f"{self.matrix[i, j]:.2f}", w)
                else:
                    body = " " * w if colour else _center(shade * (w - 1), w)
                line.append(body, style=_STYLES[lv] if colour else "")
            yield line


def render_heatmap(result) -> Heatmap:
    m = attention_matrix(result)
    att = result.attention
    return Heatmap(m, _labels(att.source_labels, m.shape[1]), _labels(att.target_labels, m.shape[0]))


def _plain(s: str) -> str:
    # matplotlib reads text between two "$" as mathtext.
    return s.replace("$", r"\$")


def write_png(items: list[tuple[str, object]], path) -> None:
    """One PNG with one heat-map subplot per (input, Result)."""
    if not items:
        raise ValueError("no results to plot")
    # The Agg canvas directly, not pyplot: no GUI backend lookup and no global figure state.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    mats = [attention_matrix(r) for _, r in items]
    width = max(4.0, 0.45 * max(m.shape[1] for m in mats) + 3.0)
    heights = [max(2.5, 0.4 * m.shape[0] + 1.5) for m in mats]
    fig = Figure(figsize=(width, sum(heights)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(items), 1, squeeze=False, height_ratios=heights)[:, 0]
    for ax, (text, result), m in zip(axes, items, mats):
        ax.set_title(_plain(f"{text} -> {result.output_text}"))
        if m.size == 0:
            ax.text(0.5, 0.5, "(no attention)", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
            continue
        att = result.attention
        im = ax.imshow(m, cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.set_xticks(range(m.shape[1]), labels=[_plain(s) for s in _labels(att.source_labels, m.shape[1])])
        ax.set_yticks(range(m.shape[0]), labels=[_plain(s) for s in _labels(att.target_labels, m.shape[0])])
        ax.set(xlabel="source", ylabel="target")
        fig.colorbar(im, ax=ax, label="attention weight")
    # format= so that a FILE without a .png suffix still gets a PNG.
    fig.savefig(path, format="png", dpi=120)


def _summary(input_text: str, result) -> Text:
    lp = result.log_prob
    line = Text.assemble((input_text, "bold"), " -> ", (result.output_text, "bold cyan"))
    line.append(f"   log_prob {lp:.4f}  p={math.exp(lp):.4f}")
    if not result.finished:
        line.append("  (cut at the length limit)", style="yellow")
    return line


def _cmd_transduce(stub, args) -> int:
    options = attnserve_pb2.DecodeOptions(return_attention=not args.no_attention, max_output_len=args.max_output_len)
    resp = stub.Transduce(attnserve_pb2.TransduceRequest(inputs=args.words, options=options), timeout=args.timeout_s)
    if len(resp.results) != len(args.words):
        raise ValueError(f"server returned {len(resp.results)} results for {len(args.words)} inputs")
    items = list(zip(args.words, resp.results))
    if args.png:
        write_png(items, args.png)
        # stderr, so that --json output stays a single JSON document.
        print(f"wrote {args.png}", file=sys.stderr)
    if args.json:
        doc = {"model": {"name": resp.model_name, "version": resp.model_version},
               "results": [result_to_dict(w, r) for w, r in items]}
        print(json.dumps(doc, indent=2, ensure_ascii=False))
        return 0
    console = Console()
    console.print(Text(f"model {resp.model_name} {resp.model_version}", style="dim"))
    for w, r in items:
        console.print(_summary(w, r))
        if not args.no_attention:
            console.print(render_heatmap(r))
            console.print()
    return 0


def _json_or_text(s: str):
    try:
        return json.loads(s) if s else None
    except json.JSONDecodeError:
        return s


def _cmd_info(stub, args) -> int:
    info = stub.GetModelInfo(attnserve_pb2.GetModelInfoRequest(), timeout=args.timeout_s)
    metrics = dict(sorted(info.metrics.items()))
    if args.json:
        doc = {"name": info.name, "version": info.version, "metrics": metrics,
               "source_vocab_size": len(info.source_vocab), "target_vocab_size": len(info.target_vocab),
               "config": _json_or_text(info.config_json)}
        print(json.dumps(doc, indent=2, ensure_ascii=False))
        return 0
    lines = [f"model   {info.name} {info.version}",
             f"vocab   source {len(info.source_vocab)}, target {len(info.target_vocab)}"]
    Console().print(Text("\n".join(lines + [f"metric  {k:<12} {v:.4f}" for k, v in metrics.items()])))
    return 0


def _checked(kind, ok, what):
    def parse(s: str):
        v = kind(s)
        if not ok(v):
            raise argparse.ArgumentTypeError(f"must be {what}, got {s}")
        return v
    return parse


def _build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # Read at call time, not import time, so the environment of each run counts.
    common.add_argument("--server", default=os.environ.get("ATTNSERVE_SERVER") or DEFAULT_SERVER,
                        help="host:port of the server (default: $ATTNSERVE_SERVER or %(default)s)")
    common.add_argument("--json", action="store_true", help="print one JSON object instead of the terminal view")
    common.add_argument("--timeout-s", type=_checked(float, lambda v: v > 0, "> 0"), default=10.0, help="RPC deadline (default: %(default)s)")

    parser = argparse.ArgumentParser(prog="attnserve-client", description="Query an attnserve server.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{phonemes,info}")
    t = sub.add_parser("phonemes", aliases=["transduce"], parents=[common],
                       help="transduce words (G2P: spelling -> phonemes) and show the attention")
    t.add_argument("words", nargs="+", metavar="WORD")
    t.add_argument("--png", metavar="FILE", help="also write the heat maps as one PNG image")
    t.add_argument("--no-attention", action="store_true", help="do not request the attention weights")
    t.add_argument("--max-output-len", type=_checked(int, lambda v: v >= 0, ">= 0"), default=0, metavar="N",
                   help="cap on output tokens (0: the server's limit)")
    t.set_defaults(func=_cmd_transduce)
    i = sub.add_parser("info", parents=[common], help="show the served model's name, version and metrics")
    i.set_defaults(func=_cmd_info)
    return parser


def _rpc_error_text(e: grpc.RpcError) -> str:
    # Not every RpcError is also a grpc.Call; fall back rather than raise inside the handler.
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else str(e)
    return f"error: {code.name if code is not None else 'UNKNOWN'}: {details}"


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (the console-script wrapper passes it to sys.exit)."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "png", None) and args.no_attention:
        parser.error("--png needs the attention weights; drop --no-attention")
    try:
        with grpc.insecure_channel(args.server) as channel:
            return args.func(attnserve_pb2_grpc.TransducerStub(channel), args)
    except grpc.RpcError as e:
        print(_rpc_error_text(e), file=sys.stderr)
        return 1
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
