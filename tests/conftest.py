"""Shared fixtures: a tiny real model, trained in seconds, exported to a real bundle; a gRPC channel
and stub to the server a module serves."""
from __future__ import annotations

from pathlib import Path

import pytest
import pytest_asyncio

REPO = Path(__file__).resolve().parents[1]
SHIPPED_MODEL = REPO / "models" / "g2p-en"


def cmudict_slice(path: Path, every: int) -> Path:
    """Every `every`-th pair of each CMUdict split, written as a TSV corpus (the generic corpus path)."""
    from training.data import load_cmudict

    splits = load_cmudict()
    pairs = [p for split in ("train", "dev", "test") for p in splits[split][::every]]
    path.write_text("".join(f"{''.join(p.src)}\t{' '.join(p.tgt)}\n" for p in pairs), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """A slice of CMUdict as a TSV file, ~1,200 dev words."""
    return cmudict_slice(tmp_path_factory.mktemp("corpus") / "g2p.tsv", every=5)


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> Path:
    """A thinner slice, ~70 dev words: for models trained a few steps (variants, ensemble members)."""
    return cmudict_slice(tmp_path_factory.mktemp("corpus") / "small.tsv", every=100)


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_corpus, tmp_path_factory) -> Path:
    from training import train

    out = tmp_path_factory.mktemp("run")
    train.main(["--corpus", "tsv", "--tsv", str(tiny_corpus), "--out", str(out), "--hidden-size", "48",
                "--enc-layers", "1", "--emb-dim", "16", "--batch-size", "128", "--max-epochs", "2",
                "--lr", "0.01", "--dropout", "0.0", "--seed", "3", "--threads", "1"])
    return out / "best.pt"


@pytest.fixture(scope="session")
def tiny_bundle(tiny_checkpoint, tmp_path_factory) -> Path:
    """models/<name>/<version>/ layout: returns the model directory (versions inside)."""
    from training.export import build_bundle

    model_dir = tmp_path_factory.mktemp("models") / "tiny"
    # No lexicon: tests of decoding must see the model's own outputs (tests/test_lexicon.py adds one).
    build_bundle(tiny_checkpoint, model_dir / "1", name="tiny", version="1", parity_words=2000, lexicon=False)
    return model_dir


@pytest_asyncio.fixture(loop_scope="session")
async def channel(server):
    """A gRPC channel to the `server` fixture of the module using it (each such module has one)."""
    import grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        yield ch


@pytest.fixture
def stub(channel):
    """The native Transducer API on `channel`."""
    from attnserve.v1 import attnserve_pb2_grpc as pbg

    return pbg.TransducerStub(channel)
