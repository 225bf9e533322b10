"""Training curves: history.csv as a picture, redrawn after every epoch.

The Agg canvas directly, not pyplot: no GUI backend lookup (training runs headless)
and no global figure state left behind between epochs.
"""
from __future__ import annotations

import os
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator


def plot_history(history: list[dict], path: Path) -> None:
    """Write train loss and dev WER per epoch as one PNG (two panels: the scales differ)."""
    if not history:
        raise ValueError("no epochs to plot")
    epochs = [row["epoch"] for row in history]
    fig = Figure(figsize=(9, 3.5), layout="constrained")
    FigureCanvasAgg(fig)
    loss_ax, wer_ax = fig.subplots(1, 2)
    loss_ax.plot(epochs, [row["train_loss"] for row in history], marker="o")
    loss_ax.set(title="train loss", xlabel="epoch", ylabel="cross-entropy (label-smoothed)")
    wer_ax.plot(epochs, [100 * row["dev_wer"] for row in history], marker="o", color="tab:orange")
    best = min(history, key=lambda row: row["dev_wer"])
    wer_ax.annotate(f"best {100 * best['dev_wer']:.2f}%", (best["epoch"], 100 * best["dev_wer"]),
                    textcoords="offset points", xytext=(0, 8), ha="center")
    wer_ax.set(title="dev WER", xlabel="epoch", ylabel="WER (%)")
    for ax in (loss_ax, wer_ax):
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # epochs are whole numbers
        ax.set_xlim(epochs[0] - 0.5, epochs[-1] + 0.5)  # room for the labels, also with one epoch
    # Write beside, then rename: whoever looks at the file mid-training never sees half a PNG.
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format="png", dpi=100)
    os.replace(tmp, path)
