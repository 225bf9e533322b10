"""Training curves: training/plots.py, and the PNG a real (tiny) training run leaves beside history.csv."""
import csv
import struct

import pytest

from tests.fixtures import make_tiny
from training.plots import plot_history


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n"), f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])  # the IHDR chunk: width, height


def test_plot_history_writes_a_png(tmp_path):
    history = [{"epoch": e, "train_loss": 3.0 / e, "dev_wer": 0.5 / e, "dev_per": 0.1, "lr": 1e-3, "minutes": e}
               for e in range(1, 6)]
    path = tmp_path / "history.png"
    plot_history(history, path)
    width, height = png_size(path)
    assert width > 400 and height > 200
    plot_history(history[:1], path)  # one epoch (the first redraw) works too, and overwrites
    assert png_size(path) == (width, height)
    assert [p.name for p in tmp_path.iterdir()] == ["history.png"]  # no temporary file left behind
    with pytest.raises(ValueError):
        plot_history([], path)


def test_training_run_writes_curves_beside_history_csv(tiny_checkpoint):
    run = tiny_checkpoint.parent
    with (run / "history.csv").open() as f:
        assert [int(r["epoch"]) for r in csv.DictReader(f)] == list(range(1, make_tiny.EPOCHS + 1))
    png_size(run / "history.png")
