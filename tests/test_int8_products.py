"""bench/int8_products.py: each way's graph computes x @ W (within int8's error), and the per-row
product, which the int8 bundles use, gives a row the same result alone and among others."""
import numpy as np
import pytest

from bench import int8_products as ip


@pytest.mark.parametrize("bounded", [False, True])
def test_every_way_computes_the_product_and_per_row_int8_keeps_a_rows_answer(bounded):
    rng = np.random.default_rng(1)
    K, N = 256, 128
    W = (rng.standard_normal((K, N)) * 0.05).astype(np.float32)
    x = rng.standard_normal((16, K)).astype(np.float32)
    x = np.tanh(x) if bounded else x
    ref = x @ W
    ways = {"fp32": ip.fp32(W), "rowwise": ip.rowwise(W, bounded), "nbits32": ip.nbits(W, 32, 4),
            "nbits128": ip.nbits(W, 128, 4)}
    for name, model in ways.items():
        sess = ip.session(model)
        y = sess.run(None, {"x": x})[0]
        assert y.shape == (16, N)
        assert np.abs(y - ref).max() / np.abs(ref).max() < (1e-5 if name == "fp32" else 3e-2), name
        if name == "rowwise":
            alone = np.concatenate([sess.run(None, {"x": x[i:i + 1]})[0] for i in range(16)])
            assert np.array_equal(alone, y)
