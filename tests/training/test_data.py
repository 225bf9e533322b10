from training.data import (CMUDICT_WORD_RE, UNK_ID, Vocab, load_cmudict, load_tsv, references, split_of,
                           strip_stress)
import pytest


def test_split_is_a_pure_function_of_the_word():
    assert split_of("attention") == split_of("attention")
    counts = {"train": 0, "dev": 0, "test": 0}
    for i in range(20000):
        counts[split_of(f"word{i}")] += 1
    assert 0.88 < counts["train"] / 20000 < 0.92
    assert 0.04 < counts["dev"] / 20000 < 0.06


def test_cmudict_split_is_disjoint_and_keeps_pronunciations_together():
    splits = load_cmudict()
    words = {k: {p.src for p in v} for k, v in splits.items()}
    assert not words["test"] & words["train"]
    assert not words["test"] & words["dev"]
    assert not words["dev"] & words["train"]
    assert len(words["train"]) > 100_000 and len(words["test"]) > 5_000
    # "read" has two pronunciations (R IY D / R EH D); both stay on one side.
    read = [p for split in splits.values() for p in split if p.src == tuple("read")]
    assert len(read) >= 2 and len({split_of("read")}) == 1
    assert all(CMUDICT_WORD_RE.match("".join(p.src)) for p in splits["test"])
    assert all(not any(ch.isdigit() for ph in p.tgt for ch in ph) for p in splits["test"][:500])


def test_strip_stress():
    assert strip_stress(["AH0", "T", "EH1"]) == ("AH", "T", "EH")


def test_tsv_corpus_with_word_tokens(tmp_path):
    f = tmp_path / "c.tsv"
    f.write_text("hello world\tbonjour le monde\nabc\tx y\n", encoding="utf-8")
    splits = load_tsv(f, "words", "words")
    pairs = [p for v in splits.values() for p in v]
    assert {p.src for p in pairs} == {("hello", "world"), ("abc",)}
    assert (("bonjour", "le", "monde")) in {p.tgt for p in pairs}


def test_tsv_rejects_lines_without_a_tab(tmp_path):
    f = tmp_path / "bad.tsv"
    f.write_text("no tab here\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bad.tsv:1"):
        load_tsv(f, "chars", "chars")


def test_vocab_maps_unknown_symbols_to_unk():
    v = Vocab.build([("a", "b"), ("b",)])
    assert v.encode(["a", "z"])[1] == UNK_ID
    assert v.decode(v.encode(["a", "b"])) == ["a", "b"]


def test_references_group_all_pronunciations():
    from training.data import Pair

    refs = references([Pair(("r",), ("R", "IY")), Pair(("r",), ("R", "EH"))])
    assert refs == {("r",): [("R", "IY"), ("R", "EH")]}


def test_stress_stripped_scores_merge_references_that_differ_only_in_stress():
    from training.evaluate import stress_stripped

    refs = {tuple("record"): [("R", "EH1", "K", "ER0", "D"), ("R", "EH0", "K", "ER1", "D")],
            tuple("a"): [("AH0",), ("EY1",)]}
    hyps = {tuple("record"): ["R", "EH2", "K", "ER0", "D"], tuple("a"): ["EY0"]}  # wrong stress, right phonemes
    s = stress_stripped(hyps, refs)
    assert s.wer == 0.0 and s.per == 0.0 and s.words == 2
