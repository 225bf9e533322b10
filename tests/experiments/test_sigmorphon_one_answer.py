"""One answer per input for every SIGMORPHON model in the precision it is served: a test word decoded
alone and the same word padded beside a longer one give the same output and score. Padding is what
moved a word in int8 once its rows were scaled each on its own (docs/models.md, "int8, one answer per
input"): the fp32 work over the padded source positions rounds differently, and int8 rounding can turn
that into a quantization step. `make quantize`'s check samples dev words in shuffled batches; this holds
the shipped bundles to the same on their test words, padded on purpose."""
from __future__ import annotations

import pytest

from service.config import EngineConfig
from service.engine.bundle import load_bundle
from service.engine.engine import Engine
from training.data import references
from training.evaluate import load_splits
from training.quantize import SCORE_TOLERANCE
from experiments.sigmorphon.driver import study_of

WORDS = 30  # a model's first test words in sorted order: the same every run
STUDY = study_of()


@pytest.mark.parametrize("name", sorted(language.model for language in STUDY.task.languages.values()))
def test_a_word_padded_beside_a_longer_one_keeps_its_answer(name):
    bundle = load_bundle(STUDY.paths.models / name / "1")
    engine = Engine(bundle, EngineConfig(intra_op_threads=1, precision="auto"))
    words = [list(w) for w in sorted(references(load_splits(bundle.manifest["data"])["test"]))[:WORDS]]
    longest = max(words, key=len)
    longer = longest + longest[:4]
    moved = []
    for word in words:
        alone, padded = engine.decode([word])[0], engine.decode([word, longer])[0]
        if alone.output_ids != padded.output_ids or abs(alone.log_prob - padded.log_prob) > SCORE_TOLERANCE:
            moved.append(("".join(word), alone.log_prob, padded.log_prob))
    assert moved == [], (engine.precision, moved)
