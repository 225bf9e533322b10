"""Which int8 encoder a bundle keeps: its LSTMs as onnxruntime's fp32 op, or each cell written out per row
in a Scan over the steps (training/rowwise_int8.py). Neither wins on every model: the Scan's integer
products pay where the LSTMs are wide, its per-step nodes cost more than they save where they are
narrow. So `make quantize` times both on the bundle's own dev words and keeps the faster.

Timed in a process of its own (`python -m training.encoder_choice SPEC`), as quantize --speed is:
each session takes one thread of its own, as a server worker decodes, which onnxruntime refuses in
a process whose engine made the global thread pool.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _batch(rows: list[list[int]], pad: int) -> dict:
    src = np.full((len(rows), max(len(r) for r in rows)), pad, dtype=np.int64)
    for b, r in enumerate(rows):
        src[b, :len(r)] = r
    return {"src": src, "src_len": np.array([len(r) for r in rows], dtype=np.int64)}


def time_encoders(paths: dict, ids: list, pad: int, batch: int = 64, rounds: int = 5) -> dict:
    """ms a word for each encoder graph, alone and `batch` to a run, the best of interleaved rounds."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    sessions = {name: ort.InferenceSession(str(p), opts, providers=["CPUExecutionProvider"]) for name, p in paths.items()}
    loads = {"lone": [_batch([r], pad) for r in ids], "batch": [_batch([ids[i % len(ids)] for i in range(batch)], pad)]}
    best = {(name, load): float("inf") for name in sessions for load in loads}
    for _ in range(rounds):
        for name, sess in sessions.items():
            wanted = {i.name for i in sess.get_inputs()}
            for load, feeds in loads.items():
                started = time.perf_counter()
                for f in feeds:
                    sess.run(None, {k: v for k, v in f.items() if k in wanted})
                words = len(feeds) if load == "lone" else batch
                best[name, load] = min(best[name, load], (time.perf_counter() - started) / words * 1000)
    return {name: {f"{load}_ms": round(best[name, load], 4) for load in loads} for name in sessions}


def choose(paths: dict, ids: list, pad: int) -> tuple[str, dict]:
    """(the name of the faster graph, the timings): the geometric mean of the lone and batch times."""
    spec = json.dumps({"paths": {k: str(v) for k, v in paths.items()}, "ids": ids, "pad": pad})
    done = subprocess.run([sys.executable, "-m", "training.encoder_choice", spec], cwd=REPO, capture_output=True,
                          text=True, check=True)
    timings = json.loads(done.stdout)
    return min(timings, key=lambda n: (timings[n]["lone_ms"] * timings[n]["batch_ms"]) ** 0.5), timings


if __name__ == "__main__":
    print(json.dumps(time_encoders(**json.loads(sys.argv[1]))))
