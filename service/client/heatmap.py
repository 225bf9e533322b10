"""Attention matrices of `attnserve.v1.Result`s: as a terminal heat map (rich), a PNG
(matplotlib, imported only when a PNG is written) or a JSON-ready dict."""
from __future__ import annotations

import numpy as np
from rich.cells import cell_len
from rich.color import Color
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.style import Style
from rich.text import Text

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
    """A JSON-ready dict of one Result; "attention" is None when the server sent none.

    "alternatives" holds the other beam-search hypotheses (--n-best), each a dict like this one.
    """
    out = {"input": input_text, "output_tokens": list(result.output_tokens), "output_text": result.output_text,
           "log_prob": result.log_prob, "score": result.score, "finished": result.finished,
           "origin": ("MODEL", "LEXICON", "OVERRIDE", "RULE")[result.origin], "attention": None,
           "alternatives": [result_to_dict(input_text, alt) for alt in result.alternatives]}
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


# Font families tried in order for each glyph (matplotlib falls back per glyph): DejaVu Sans has
# Latin with diacritics, Greek, Cyrillic and IPA; Noto (Debian's fonts-noto-core and fonts-noto-cjk,
# which `make system-deps` installs) the other scripts of the SIGMORPHON languages.
FONT_FAMILIES = ("DejaVu Sans", "Noto Sans", "Noto Sans Armenian", "Noto Sans Georgian", "Noto Sans Khmer",
                 "Noto Sans CJK JP", "Noto Sans CJK KR")


def font_families() -> list[str]:
    """The FONT_FAMILIES installed here (asking matplotlib for a missing one logs a warning per call)."""
    from matplotlib import font_manager

    installed = {f.name for f in font_manager.fontManager.ttflist}
    if not set(FONT_FAMILIES) <= installed:  # fonts installed after matplotlib cached its list
        for path in font_manager.findSystemFonts():
            if "Noto" in path and "Sans" in path:
                font_manager.fontManager.addfont(path)
        installed = {f.name for f in font_manager.fontManager.ttflist}
    return [f for f in FONT_FAMILIES if f in installed] or ["DejaVu Sans"]


def write_png(items: list[tuple[str, object]], path) -> None:
    """One PNG with one heat-map subplot per (input, Result)."""
    if not items:
        raise ValueError("no results to plot")
    import matplotlib

    with matplotlib.rc_context({"font.family": font_families()}):
        _draw_png(items, path)


def _draw_png(items: list[tuple[str, object]], path) -> None:
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
