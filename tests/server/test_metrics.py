import pytest

from training.metrics import score


def test_word_is_right_if_it_matches_any_reference():
    refs = {("r", "e", "a", "d"): [("R", "IY", "D"), ("R", "EH", "D")], ("a",): [("AH",)]}
    s = score({("r", "e", "a", "d"): ["R", "EH", "D"], ("a",): ["EY"]}, refs)
    assert s.wer == pytest.approx(0.5)
    # PER: 0 edits on "read" (closest reference), 1 substitution of 1 phoneme on "a".
    assert s.per == pytest.approx(1 / 4)


def test_per_uses_the_closest_reference():
    refs = {("x",): [("A", "B", "C", "D"), ("A", "B")]}
    s = score({("x",): ["A", "B", "C"]}, refs)
    assert s.wer == 1.0
    # One edit to either; on a tie the shorter reference counts (the stricter PER).
    assert s.per == pytest.approx(1 / 2)


def test_empty_references_are_an_error():
    with pytest.raises(ValueError):
        score({}, {})
