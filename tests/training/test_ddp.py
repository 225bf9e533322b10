"""Distributed data-parallel training: two real processes under torchrun (gloo, CPU)."""
import csv
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO
from training import distributed
from training.export import load_checkpoint


def test_shards_are_disjoint_equal_and_cover_all_but_the_remainder():
    batches = list(range(11))
    shards = [distributed.shard(batches, distributed.Dist(rank, 3)) for rank in range(3)]
    assert [len(s) for s in shards] == [3, 3, 3]  # equal step counts: DDP syncs every backward
    seen = [b for s in shards for b in s]
    assert len(set(seen)) == len(seen) == 9 and set(seen) <= set(batches)
    with pytest.raises(SystemExit, match="cannot feed 3 ranks"):
        distributed.shard([0, 1], distributed.Dist(0, 3))


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """Three epochs of a small model on a small slice of CMUdict, 2 ranks, one thread each."""
    from training.data import load_cmudict

    root = tmp_path_factory.mktemp("ddp")
    splits = load_cmudict()
    pairs = [p for split in ("train", "dev") for p in splits[split][::40]]
    corpus = root / "small.tsv"
    corpus.write_text("".join(f"{''.join(p.src)}\t{' '.join(p.tgt)}\n" for p in pairs), encoding="utf-8")
    out = root / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "training.train", "--corpus", "tsv", "--tsv", str(corpus), "--out", str(out),
           "--hidden-size", "32", "--enc-layers", "1", "--emb-dim", "16", "--batch-size", "64",
           "--max-epochs", "3", "--patience-epochs", "3", "--lr", "0.01", "--dropout", "0.0",
           "--label-smoothing", "0.0", "--seed", "3", "--threads", "1", "--device", "cpu"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc


def test_two_ranks_train_and_the_loss_falls(ddp_run):
    out, proc = ddp_run
    assert "2 rank(s) on cpu" in proc.stdout
    with (out / "history.csv").open() as f:
        losses = [float(row["train_loss"]) for row in csv.DictReader(f)]
    assert len(losses) == 3
    # Cross-entropy without smoothing starts near ln(V) = ln(43) ~ 3.8 and must fall every epoch.
    assert losses[0] < 3.8 and losses[1] < losses[0] and losses[2] < losses[1]
    assert losses[2] < 0.8 * losses[0]


def test_rank_0_alone_writes_exactly_one_checkpoint(ddp_run):
    out, proc = ddp_run
    assert sorted(p.name for p in out.iterdir()) == ["best.pt", "history.csv", "history.png"]
    assert proc.stdout.count('"epoch": 1,') == 1  # one rank prints the epoch rows


def test_replicas_have_equal_weights_and_the_checkpoint_is_them(ddp_run):
    out, _ = ddp_run
    model, ckpt = load_checkpoint(out / "best.pt")
    replicas = ckpt["replicas"]
    assert replicas["world_size"] == 2
    rank0, rank1 = replicas["weights_sha256"]  # each rank hashed its own replica at the checkpoint
    assert rank0 == rank1 == distributed.weights_sha256(model)
    assert all(torch.isfinite(p).all() for p in model.parameters())
