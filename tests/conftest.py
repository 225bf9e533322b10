"""Shared fixtures: the tiny model committed as a real bundle (tests/fixtures/make_tiny.py makes it),
the same model trained afresh for the tests of training and export, one server per module or test
built from the module's `server_setup`, and a gRPC channel and stub to it.

Serving tests import no torch: the fixtures they use read committed files (tests/test_no_torch.py
holds them to it). Only tiny_checkpoint and trained_bundle train, and import torch when they do."""
from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest
import pytest_asyncio

from tests.fixtures import make_tiny

REPO = Path(__file__).resolve().parents[1]
SHIPPED_MODEL = REPO / "models" / "g2p-en"


def cmudict_slice(path: Path, every: int) -> Path:
    """Every `every`-th pair of each CMUdict split, written as a TSV corpus (the generic corpus path)."""
    return make_tiny.cmudict_slice(path, every)


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory) -> Path:
    """The committed tiny model (tests/fixtures/models/tiny), in the models/<name>/<version>/ layout:
    the model directory (versions inside). A copy: a test that writes beside it leaves the commit alone."""
    return shutil.copytree(make_tiny.FIXTURE, tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """The slice of CMUdict the tiny model was trained on, as a TSV file (~1,300 dev words)."""
    return cmudict_slice(tmp_path_factory.mktemp("corpus") / make_tiny.CORPUS_NAME, every=make_tiny.EVERY)


@pytest.fixture(scope="session")
def tiny_corpus_bundle(tiny_corpus, tmp_path_factory) -> Path:
    """The committed tiny model naming its corpus where tiny_corpus wrote it, for what reads the corpus
    a bundle was trained on (lexicon, evaluation, distillation); the recorded sha256 still checks it."""
    from tests.live import copy_bundle

    manifest = json.loads((make_tiny.FIXTURE / "1" / "manifest.json").read_text(encoding="utf-8"))
    model_dir = tmp_path_factory.mktemp("models") / "tiny"
    copy_bundle(make_tiny.FIXTURE / "1", model_dir / "1", data={**manifest["data"], "path": str(tiny_corpus)})
    return model_dir


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> Path:
    """A thinner slice, ~70 dev words: for models trained a few steps (variants, ensemble members)."""
    return cmudict_slice(tmp_path_factory.mktemp("corpus") / "small.tsv", every=100)


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_corpus, tmp_path_factory) -> Path:
    """The tiny model trained afresh, by the recipe the committed one was made with."""
    return make_tiny.train(tiny_corpus, tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="session")
def trained_bundle(tiny_checkpoint, tmp_path_factory) -> Path:
    """tiny_checkpoint exported as the committed model was (its checkpoint.pt kept): the model directory."""
    return make_tiny.export(tiny_checkpoint, tmp_path_factory.mktemp("models") / "tiny")


# --- servers -----------------------------------------------------------------------------------

@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def module_server(server_setup):
    """The server a module's tests share (one per parameter of its server_setup); None where the
    module asks for a fresh server per test."""
    if server_setup.per_test:
        yield None
        return
    async with _serving(server_setup) as s:
        yield s


@pytest_asyncio.fixture(loop_scope="session")
async def server(server_setup, module_server):
    """A real server on loopback as the module's `server_setup` fixture describes it (a
    tests.live.ServerSetup): shared by the module's tests, or fresh for each test."""
    if module_server is not None:
        yield module_server
        return
    async with _serving(server_setup) as s:
        yield s


@contextlib.asynccontextmanager
async def _serving(setup):
    """A server as a tests.live.ServerSetup describes it, prepared."""
    from tests.live import serving

    async with serving(setup.config) as s:
        setup.prepare(s)
        yield s


@pytest_asyncio.fixture(loop_scope="session")
async def channel(server):
    """A gRPC channel to the `server` fixture of the module using it."""
    import grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        yield ch


@pytest.fixture
def stub(channel):
    """The native Transducer API on `channel`."""
    from attnserve.v1 import attnserve_pb2_grpc as pbg

    return pbg.TransducerStub(channel)
