"""bench/int8_products.py: each way's graph computes x @ W (within int8's error), and the per-row
product, which the int8 bundles use, gives a row the same result alone and among others. Run in a
fresh interpreter, as the bench runs: its sessions take threads of their own, which onnxruntime
refuses in a process whose engine made the global thread pool (an earlier test file's, under xdist)."""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def check(bounded: bool) -> None:
    import numpy as np

    from bench import int8_products as ip

    rng = np.random.default_rng(1)
    K, N = 256, 128
    W = (rng.standard_normal((K, N)) * 0.05).astype(np.float32)
    x = rng.standard_normal((16, K)).astype(np.float32)
    x = np.tanh(x) if bounded else x
    ref = x @ W
    ways = {"fp32": ip.fp32(W), "rowwise": ip.rowwise(W, bounded), "rowwise s7": ip.rowwise(W, bounded, "s7"),
            "nbits32": ip.nbits(W, 32, 4), "nbits128": ip.nbits(W, 128, 4)}
    for name, model in ways.items():
        sess = ip.session(model)
        y = sess.run(None, {"x": x})[0]
        assert y.shape == (16, N)
        assert np.abs(y - ref).max() / np.abs(ref).max() < (1e-5 if name == "fp32" else 3e-2), name
        if name.startswith("rowwise"):
            alone = np.concatenate([sess.run(None, {"x": x[i:i + 1]})[0] for i in range(16)])
            assert np.array_equal(alone, y)
    print("ok")


@pytest.mark.parametrize("bounded", [False, True])
def test_every_way_computes_the_product_and_per_row_int8_keeps_a_rows_answer(bounded):
    r = subprocess.run([sys.executable, "-c", f"from tests.bench.test_int8_products import check; check({bounded})"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr[-3000:]
