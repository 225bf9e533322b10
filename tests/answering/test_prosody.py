"""A bundle's prosody memory: the decision (attnserve/bundle/prosody.py), its writing from trained pairs
(training/prosody_memory.py), and the engine applying it (service/engine/decoding.py settle) on the
shipped Korean model, whose bundle has one."""
import json
from pathlib import Path

import pytest

from attnserve.bundle.prosody import ProsodyMemory, load, markable

ROOT = Path(__file__).resolve().parents[2]
KOR = ROOT / "models" / "g2p-kor" / "1"
VOCAB = ["a", "aː", "e", "eː", "ʌ", "ɘː", "ɛː", "k", "n"]


def memory(marked: dict[str, bool]) -> ProsodyMemory:
    return ProsodyMemory("ː", (3, 2), marked, markable(VOCAB, "ː", {"ʌ": "ɘː"}), frozenset(t for t in VOCAB if "ː" in t))


def test_markable_pairs_segments_differing_by_the_mark_and_the_given_ones():
    assert markable(VOCAB, "ː", {"ʌ": "ɘː", "x": "xː"}) == {"a": "aː", "e": "eː", "ʌ": "ɘː"}  # x is in no vocabulary


@pytest.mark.parametrize("output, marked, expected", [
    (["k", "a", "n"], {"가나": True}, ["k", "aː", "n"]),  # lengthened: its first vowel
    (["k", "aː", "n", "eː"], {"가나": False}, ["k", "a", "n", "eː"]),  # shortened: the first vowel only
    (["k", "ʌ", "n"], {"가나": True}, ["k", "ɘː", "n"]),  # a pair whose quality differs
    (["k", "ɘː", "n"], {"가나": False}, ["k", "ʌ", "n"]),
    (["k", "aː", "n"], {"가나": True}, None),  # already as the memory says
    (["k", "ɛː", "n"], {"가나": False}, None),  # marked, with no bare form to go back to
    (["k", "a", "n"], {"나가": True}, None),  # no trained word begins so
    (["k", "n"], {"가나": True}, None),  # nothing can carry the mark
])
def test_decide(output, marked, expected):
    assert memory(marked).decide(list("가나다"), output) == expected


def test_the_key_is_nfc_whatever_the_model_reads():
    jamo = list("\u1100\u1161\u1102\u1161")  # 가나 as the jamo an NFD model reads
    assert memory({"가나": True}).key(jamo) == "가나"
    assert memory({"가나": True}).key(list("가")) is None  # shorter than any beginning with a vote: no decision
    assert memory({"가나다": False, "가나": True}).key(list("가나다라")) == "가나다"  # the longest first
    assert memory({"가나다": False, "가나": True}).decide(list("가나라"), ["k", "a"]) == ["k", "aː"]  # else shorter


def test_votes_leave_ties_to_the_model_and_the_place_is_checked():
    from training.prosody_memory import place_checked, votes

    pairs = [("가나다", "k aː n a"), ("가나무", "k aː n a m u"), ("가나", "k a n a"), ("나라다", "n aː"), ("나라", "n a")]
    assert votes(pairs, "ː", (2,)) == {"가나": True}  # 나라: one each, a tie, left out
    assert votes(pairs, "ː", (3, 1))["가"] and "나" not in votes(pairs, "ː", (3, 1))  # 나: a tie again
    place_checked(pairs, "ː", {"a": "aː"})
    with pytest.raises(ValueError, match="not only on the first"):
        place_checked([("가나", "k a n aː")], "ː", {"a": "aː"})


def test_add_memory_writes_a_bundle_the_server_verifies(tmp_path):
    from service.engine.bundle import load_bundle, write_manifest
    from training.prosody_memory import add_memory

    write_manifest(tmp_path, {"name": "m", "version": "1", "graphs": {}, "tgt_vocab": VOCAB,
                              "src_tokenization": "chars", "tgt_tokenization": "words"})
    spec = add_memory(tmp_path, [("가나다", "k aː n"), ("가나", "k aː")], "ː", (2,), {"ʌ": "ɘː"})
    assert spec["entries"] == 1 and spec["pairs"] == {"ʌ": "ɘː"}
    bundle = load_bundle(tmp_path)  # the memory's file is in the manifest's sha256 list
    assert load(bundle.manifest, bundle.path).marked == {"가나": True}


@pytest.fixture(scope="module")
def kor_engine():
    from service.config import EngineConfig
    from service.engine.bundle import load_bundle
    from service.engine.engine import Engine

    bundle = load_bundle(KOR)
    assert "prosody_memory" in bundle.manifest, "the recipe gives g2p-kor a memory (its prosody_memory)"
    return Engine(bundle, EngineConfig(precision="auto", intra_op_threads=1))


def edited_words(engine, n: int) -> list[str]:
    """Test words whose greedy output the memory changes."""
    from training.data import read_lines

    words = sorted({s for s, _ in read_lines(ROOT / "data/sigmorphon-2021/medium/kor_test.tsv")})[:300]
    out = []
    for word in words:
        tokens = engine.tokenize(word)
        (d,) = engine.decode([tokens])
        if engine.prosody.decide(d.src_tokens, d.output_tokens) is not None:
            out.append(word)
        if len(out) == n:
            return out
    return out


def test_the_engine_applies_the_memory_on_every_path_with_one_answer(kor_engine):
    """Greedy whole-batch, beam and the continuous batch give an edited word one output and one score,
    alone or beside others, and that score is the model's teacher-forced score of that output."""
    from service.domain import DecodeOptions
    from service.engine.decoding import StepBatch, Work, decode_whole
    from service.engine.forced import force

    engine = kor_engine
    words = edited_words(engine, 3)
    assert len(words) == 3, "the memory edits some test words' greedy outputs"
    tokens = [engine.tokenize(w) for w in words]
    greedy, beam = DecodeOptions(), DecodeOptions(beam_size=5)
    alone = [decode_whole(engine, [Work(t, greedy)])[0][0][0] for t in tokens]
    together = [h[0] for h in decode_whole(engine, [Work(t, greedy) for t in tokens])[0]]
    batch = StepBatch(engine)
    batch.join([(i, t, greedy) for i, t in enumerate(tokens)])
    stepped = {}
    while len(batch):
        stepped.update(batch.step())
    for i, (a, b) in enumerate(zip(alone, together)):
        model = engine.decode([tokens[i]])[0]
        assert a.output_tokens == engine.prosody.decide(model.src_tokens, model.output_tokens)
        assert (b.output_tokens, b.log_prob) == (a.output_tokens, a.log_prob)
        assert (stepped[i].output_tokens, stepped[i].log_prob) == (a.output_tokens, a.log_prob)
        (forced,) = force(engine, [tokens[i]], [a.output_ids])
        assert a.log_prob == forced.log_prob and a.attn.shape == forced.attn.shape
    beams = decode_whole(engine, [Work(t, beam) for t in tokens])[0]
    for t, hyps in zip(tokens, beams):
        best = hyps[0]
        assert [h.output_ids for h in hyps].count(best.output_ids) == 1
        assert (best.output_tokens, best.log_prob) == (
            (decode_whole(engine, [Work(t, beam)])[0][0][0].output_tokens,
             decode_whole(engine, [Work(t, beam)])[0][0][0].log_prob))


def test_shipped_memory_is_the_recipes():
    manifest = json.loads((KOR / "manifest.json").read_text(encoding="utf-8"))
    from experiments.sigmorphon.driver import study_of

    spec = study_of().task.languages["kor"].prosody_memory
    assert (manifest["prosody_memory"]["mark"], manifest["prosody_memory"]["prefixes"]) == (
        spec.mark, list(spec.prefixes))
