"""Elision over a real server: the shipped SIGMORPHON French and Italian models (their alphabets have
no apostrophe) read an elided clitic as a word of its own, its pronunciation given by the language's
text rules (textdata/fr.tsv, it.tsv), the word it leans on answered as any word; a word answered
with nothing is flagged, never dropped; English reads as before.
"""
import pytest

from attnserve.v1 import attnserve_pb2 as pb
from service.answering.reading import EMPTY_CHOICE, RULE_CHOICE
from service.answering.text import Script, TextReader
from service.answering.textrules import read_rules
from service.domain import LexiconError
from tests.answering.test_text import check_cover, check_punctuation_kept, read
from tests.live import ServerSetup, loopback_config, shipped_repository

FRENCH = "J'ai vu l'homme qu'il aime, c'est beau."
# each clitic as written, its span, its pronunciation in g2p-fra's symbols
CLITICS = [("J'", 0, 2, "ʒ"), ("l'", 8, 10, "l"), ("qu'", 16, 19, "k"), ("c'", 28, 30, "s")]


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return shipped_repository(tmp_path_factory.mktemp("elision-models"), ("g2p-en", "g2p-fra", "g2p-ita"))


@pytest.fixture(scope="module")
def server_setup(repository):
    return ServerSetup(loopback_config(model_repository=repository, default_model="g2p-en",
                                       server={"metrics_port": 0}, answering={"cache_entries": 1000}))


async def test_a_french_elided_sentence_is_read_whole(stub):
    r = (await read(stub, FRENCH, model="g2p-fra"))[0]
    check_cover(FRENCH, r)
    check_punctuation_kept(FRENCH, r)
    assert r.complete and not [t.text for t in r.tokens if t.unread]
    clitics = {t.text: t for t in r.tokens if t.text.endswith("'")}
    assert sorted(clitics) == sorted(c for c, *_ in CLITICS)
    for written, start, end, said in CLITICS:
        t = clitics[written]
        (w,) = t.words
        assert (t.start, t.end, w.start, w.end) == (start, end, start, end)  # the letters and the apostrophe
        assert w.result.output_text == said and w.choice == RULE_CHOICE
        assert w.result.origin == pb.ORIGIN_RULE and w.result.log_prob == 0.0  # a rule's, not scored by the model
        # the attention is on the clitic's letters, none on its apostrophe
        weights = list(w.char_attention.weights)
        assert w.char_attention.cols == end - start and sum(weights[end - start - 1::end - start]) == 0
    hosts = [t for t in r.tokens if t.kind == pb.TOKEN_KIND_WORD and not t.text.endswith("'")]
    assert [t.text for t in hosts] == ["ai", "vu", "homme", "il", "aime", "est", "beau"]
    assert all(t.words[0].result.output_text and t.words[0].choice != RULE_CHOICE for t in hosts)
    assert all(t.words[0].result.origin != pb.ORIGIN_RULE for t in hosts)
    assert r.pronunciation.startswith("ʒ ")


async def test_the_typographic_apostrophe_and_every_clitic(stub):
    text = "d\u2019abord n\u2019est s\u2019il m\u2019a t\u2019es jusqu\u2019à"
    r = (await read(stub, text, model="g2p-fra"))[0]
    check_cover(text, r)
    assert r.complete
    said = [(t.text, t.words[0].result.output_text) for t in r.tokens if t.text.endswith("\u2019")]
    assert said == [("d\u2019", "d"), ("n\u2019", "n"), ("s\u2019", "s"), ("m\u2019", "m"), ("t\u2019", "t"),
                    ("jusqu\u2019", "ʒ y s k")]


async def test_the_verb_a_is_read_by_the_french_rule(stub):
    r = (await read(stub, "Il a payé, à Paris.", model="g2p-fra"))[0]
    for written in ("a", "à"):
        (t,) = [t for t in r.tokens if t.text == written]
        # the lexicon's reading comes first where it has the word (WikiPron's frequent words, data/wikipron/)
        assert t.words[0].result.output_text == "a"
        assert t.words[0].choice == RULE_CHOICE or t.words[0].result.origin == pb.ORIGIN_LEXICON
    assert r.complete


async def test_italian_elision(stub):
    r = (await read(stub, "l'amico", model="g2p-ita"))[0]
    assert [t.text for t in r.tokens] == ["l'", "amico"] and r.complete
    assert r.tokens[0].words[0].result.output_text == "l" and r.tokens[1].words[0].result.output_text


async def test_english_keeps_its_apostrophes(stub):
    r = (await read(stub, "Don't l'homme, it's Smith's.", model="g2p-en"))[0]
    assert [t.text for t in r.tokens] == ["Don't", "l'homme", ",", "it's", "Smith's", "."]


def test_a_word_answered_with_nothing_is_flagged_in_assembly():
    """assemble() flags a word with an empty answer: unread positions, the word kept, the reason."""
    import numpy as np

    from service.answering.reading import Said, assemble
    from service.domain import Decoded

    reader = TextReader(read_rules("fre"))
    text = "x y"
    tokens = reader.read(text)
    keys = {"x": ("x",), "y": ("y",)}
    empty = Said(Decoded(["x"], [], [], -1.0, np.zeros((1, 1), np.float32), True), [], "", (), "model: not in the lexicon")
    full = Said(Decoded(["y"], [5], ["i"], -1.0, np.ones((2, 1), np.float32), True), ["i"], "i", (), "model: not in the lexicon")
    out = assemble(text, tokens, keys, {("x",): empty, ("y",): full}, False, " ", True, str)
    x, y = out.tokens
    assert x.token.unread == (0,) and x.words[0].choice.startswith(EMPTY_CHOICE) and not y.token.unread
    assert out.pronunciation == "x i"


def test_elisions_as_data():
    fr = read_rules("fre")
    assert fr.elisions["qu'"] == ("k",) and fr.words["a"] == ("a",)
    assert not read_rules("eng").elisions  # English's apostrophes are its words' own
    tokens = TextReader(fr).read("Qu\u2019aujourd'hui")
    assert [(t.text, t.start, t.end) for t in tokens] == [("Qu\u2019", 0, 3), ("aujourd'hui", 3, 14)]
    # a model whose symbols lack the rule's reads the clitic as written: its apostrophe unread here
    script = Script(True, frozenset("abcdefghijklmnopqrstuvwxyz"), str, list, frozenset("abc"))
    clitic, host = TextReader(fr).read("j'ai", script)
    assert clitic.unread == (1,) and clitic.words[0].said is None and not host.unread
    with_symbol = Script(True, script.alphabet, str, list, frozenset("ʒ"))
    assert TextReader(fr).read("j'ai", with_symbol)[0].words[0].said == ("ʒ",)


def test_a_bad_elision_line_is_refused(tmp_path):
    own = tmp_path / "text.tsv"
    own.write_text("elision\tl\tl\n")
    with pytest.raises(LexiconError, match="text.tsv:1"):
        read_rules("fre", own)
