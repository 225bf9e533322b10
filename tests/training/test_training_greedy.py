"""Training's greedy decoding (training/train.py greedy_outputs, the dev WER each epoch is chosen by) is
PyTorch's own loop, not the engine's decoding core (service/engine/strategy.py): it runs on torch tensors
and devices. So it is held to the core here: on the same trained model, exported, training's greedy
outputs equal the engine's for every dev word, through the ONNX Loop and through the core's step loop."""
from __future__ import annotations

import pytest

from service.config import EngineConfig
from service.engine.bundle import load_bundle
from service.engine.engine import Engine
from training.data import Vocab
from training.evaluate import load_splits
from training.export import load_checkpoint
from training.train import greedy_outputs

WORDS = 400


@pytest.mark.parametrize("greedy_loop", ["onnx", "python"])
def test_training_greedy_outputs_are_the_engines(tiny_checkpoint, tiny_bundle, greedy_loop):
    model, ckpt = load_checkpoint(tiny_checkpoint)
    max_len = ckpt["train_config"]["max_output_len"]
    sources = sorted({p.src for p in load_splits(ckpt["data"])["dev"]})[:WORDS]
    trained = greedy_outputs(model, sources, Vocab(ckpt["src_vocab"]), Vocab(ckpt["tgt_vocab"]), max_len)
    engine = Engine(load_bundle(tiny_bundle), EngineConfig(max_output_len=max_len, greedy_loop=greedy_loop))
    served = engine.decode([list(s) for s in sources])
    assert len(sources) == WORDS
    assert [trained[s] for s in sources] == [d.output_tokens for d in served]
