"""Running text end to end over a real server: the shipped g2p-en (CMUdict lexicon), g2p-en-stress and
the SIGMORPHON Italian model, and the tiny model declared French. Every normalization class with its spoken form written by hand,
punctuation in place, spans that cover the text, the attention mapped onto the text's characters,
what the alphabet cannot read (flagged, nothing dropped), IPA, homographs, the length limit, the
Open Inference Protocol's `text` parameter with a stock tritonclient call and over REST, the client.
"""
import asyncio
import functools
import json
import multiprocessing
import sys
import urllib.request
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest

from attnserve.v1 import attnserve_pb2 as pb
from service.engine.bundle import load_bundle
from tests import triton_calls
from tests.conftest import REPO
from tests.live import ServerSetup, copy_bundle, loopback_config, shipped_repository

# (text, the words it is read as, written by hand): every normalization class.
SPOKEN = [
    ("In 1066, 3 kings met on the 14th.", "in ten sixty-six three kings met on the fourteenth"),  # year, cardinal, ordinal
    ("I read 2 books in 2019.", "i read two books in twenty nineteen"),
    ("It was built in 1835 and sold 1,000,000 copies.", "it was built in eighteen thirty-five and sold one million copies"),
    ("the 2nd, 3rd and 21st", "the second third and twenty-first"),  # ordinals
    ("music of the 1990s and '80s", "music of the nineteen nineties and eighties"),  # decades
    ("pi is 3.14 and e is 2.718", "pi is three point one four and e is two point seven one eight"),  # decimals
    ("it fell to -5 degrees", "it fell to minus five degrees"),  # negatives
    ("a 50% cut", "a fifty percent cut"),  # percentages
    ("it costs $5.50, not €3 or £1", "it costs five dollars fifty cents not three euro or one pound"),  # currency
    ("at 10:30, 7:05 and 9:00", "at ten thirty seven oh five and nine o'clock"),  # times
    ("Dr. Smith met Mr. and Mrs. Jones on St. James St.",
     "doctor smith met mister and misses jones on saint james street"),  # titles and abbreviations
    ("J. R. R. Tolkien wrote it", "j r r tolkien wrote it"),  # initials
    ("the FBI, NASA and the NTSB", "the fbi nasa and the ntsb"),  # acronyms: the lexicon, then the rule (shown as written)
    ("Smith's car isn\u2019t here", "smith's car isn't here"),  # apostrophes
    ("a well-known fact", "a well known fact"),  # hyphens: two words and the hyphen
    ("apples, pears, etc.", "apples pears et cetera"),  # an abbreviation that ends the sentence
]


@pytest.fixture(scope="module")
def repository(tiny_bundle, tmp_path_factory):
    """The shipped English models (their version directories linked, not copied) and the tiny
    model declared French, in one repository."""
    root = shipped_repository(tmp_path_factory.mktemp("text-models"), ("g2p-en", "g2p-en-stress", "g2p-ita"))
    copy_bundle(load_bundle(tiny_bundle, "1").path, root / "tiny-fr" / "1", name="tiny-fr", language="fr")
    # The model's own text rules win over the language's: Dr. is a street here, and a line is bad.
    (root / "g2p-en-stress" / "text.tsv").write_text("abbreviation\tDr.\tdrive\n")
    return root


@pytest.fixture(scope="module")
def server_setup(repository):
    return ServerSetup(loopback_config(model_repository=repository, default_model="g2p-en",
                                       server={"metrics_port": 0, "max_text_len": 400},
                                       answering={"cache_entries": 1000}))


async def read(stub, *texts, model="", **options):
    reply = await stub.TransduceText(pb.TransduceTextRequest(texts=texts, model_name=model,
                                                             options=pb.TextOptions(**options)), timeout=30)
    return reply.results


def words_of(result) -> str:
    """The words a text was read as, lower case, without punctuation: the issue's way of writing them."""
    return " ".join(t.spoken.lower() for t in result.tokens if t.words)


def check_cover(text: str, result) -> None:
    """Spans in order, no overlap, no gap but whitespace; every token's text is its span."""
    at = 0
    for t in result.tokens:
        assert t.start >= at and text[at:t.start].strip() == "", (text, at, t.start)
        assert text[t.start:t.end] == t.text and t.end > t.start
        at = t.end
    assert text[at:].strip() == ""


def check_punctuation_kept(text: str, result) -> None:
    """Every punctuation token of the text is in the pronunciation, in the text's order."""
    marks = [t.text for t in result.tokens if t.kind == pb.TOKEN_KIND_PUNCTUATION]
    at = 0
    for mark in marks:
        found = result.pronunciation.find(mark, at)
        assert found >= 0, (mark, result.pronunciation)
        at = found + len(mark)


async def test_every_normalization_class_is_read_as_written_by_hand(stub):
    results = await read(stub, *[text for text, _ in SPOKEN])
    for (text, spoken), r in zip(SPOKEN, results):
        assert words_of(r) == spoken, text
        check_cover(text, r)
        check_punctuation_kept(text, r)
        assert r.complete
        for t in r.tokens:
            assert bool(t.words) == (t.kind != pb.TOKEN_KIND_PUNCTUATION), (text, t.text)
            for w in t.words:
                assert w.result.output_tokens and w.result.log_prob <= 0
    by_text = dict(zip([t for t, _ in SPOKEN], results))
    kinds = {t.text: t.kind for r in results for t in r.tokens}
    assert kinds["1066"] == kinds["14th"] == kinds["$5.50"] == kinds["10:30"] == pb.TOKEN_KIND_NUMBER
    assert kinds["Dr."] == kinds["J."] == kinds["NASA"] == kinds["NTSB"] == pb.TOKEN_KIND_ABBREVIATION
    assert kinds["%"] == pb.TOKEN_KIND_SYMBOL and kinds[","] == pb.TOKEN_KIND_PUNCTUATION
    fbi = next(t for t in by_text["the FBI, NASA and the NTSB"].tokens if t.text == "FBI")
    assert [w.result.output_text for w in fbi.words] == ["EH F B IY AY"]  # the lexicon spells it
    nasa = next(t for t in by_text["the FBI, NASA and the NTSB"].tokens if t.text == "NASA")
    assert nasa.words[0].result.output_text == "N AE S AH"  # and reads this one
    etc = by_text["apples, pears, etc."]
    assert [t.text for t in etc.tokens[-2:]] == ["etc", "."]  # the sentence's full stop stays punctuation
    assert by_text["In 1066, 3 kings met on the 14th."].spoken == "In ten sixty-six, three kings met on the fourteenth."


async def test_punctuation_in_place_and_spans_over_odd_text(stub):
    texts = ['"Hello," she said -- (really?!) yes... 100%; ok: [a] {b} \u00abc\u00bb \u2026 end.',
             "Wait\u2014what? It\u2019s 5:30 p.m.",
             "  leading and trailing spaces  ", "!!!", "a\tb\nc"]
    for text, r in zip(texts, await read(stub, *texts)):
        check_cover(text, r)
        check_punctuation_kept(text, r)
    r = (await read(stub, '"Hello," she said.'))[0]
    assert r.pronunciation == '"HH AH L OW," | SH IY | S EH D.'


async def test_attention_is_mapped_onto_the_texts_characters(stub):
    text = "Knight's caf\u00e9 paid 1066 to Dr. X"
    r = (await read(stub, text))[0]
    for t in r.tokens:
        for w in t.words:
            a, c = w.result.attention, w.char_attention
            word_attn = np.array(a.weights).reshape(a.rows, a.cols)
            char_attn = np.array(c.weights).reshape(c.rows, c.cols)
            assert (c.rows, c.cols) == (a.rows, w.end - w.start) and list(c.source_labels) == list(text[w.start:w.end])
            assert np.allclose(char_attn.sum(axis=1), word_attn.sum(axis=1), atol=1e-5)  # no weight lost or made
            if t.kind == pb.TOKEN_KIND_WORD:  # a word read as written: each letter's column on its own character
                assert np.allclose(char_attn, word_attn, atol=1e-6)
    cafe = next(t for t in r.tokens if t.text == "caf\u00e9").words[0]
    assert cafe.char_attention.source_labels[-1] == "\u00e9"  # the accent's column is the written é's
    number = next(t for t in r.tokens if t.text == "1066")
    assert [w.text for w in number.words] == ["ten", "sixty", "six"]
    for w in number.words:  # a number's words read the whole number: each row spread over its digits
        m = np.array(w.char_attention.weights).reshape(w.char_attention.rows, 4)
        assert (w.start, w.end) == (number.start, number.end) and np.allclose(m, m[:, :1], atol=1e-7)


async def test_what_the_alphabet_cannot_read_is_flagged_and_kept(stub):
    text = "The \u65e5\u672c team won \u2603 gold, said \u0417\u043e\u044f."
    r = (await read(stub, text))[0]
    check_cover(text, r)
    assert not r.complete
    unread = {t.text: list(t.unread) for t in r.tokens if t.unread}
    at = {w: text.index(w) for w in ("\u65e5\u672c", "\u2603", "\u0417\u043e\u044f")}
    assert unread == {w: list(range(i, i + len(w))) for w, i in at.items()}
    for t in r.tokens:
        assert (not t.words) == (bool(t.unread) or t.kind == pb.TOKEN_KIND_PUNCTUATION)
    for shown in ("\u65e5\u672c", "\u2603", "\u0417\u043e\u044f"):
        assert shown in r.pronunciation  # in place, as written
    assert words_of(r) == "the team won gold said"
    # decoded all the same when asked, each unknown symbol flagged
    flagged = (await read(stub, "the \u65e5 team", allow_unknown_symbols=True))[0]
    kanji = next(t for t in flagged.tokens if t.text == "\u65e5")
    assert kanji.words and list(kanji.words[0].result.unknown_positions) == [0]


async def test_ipa_with_stress_marks_and_without(stub):
    r = (await read(stub, "attention, about extra", model="g2p-en-stress", alphabet="ipa"))[0]
    assert r.pronunciation == "\u0259\u02c8t\u025bn\u0283\u0259n, \u0259\u02c8ba\u028at \u02c8\u025bkst\u0279\u0259"
    word = r.tokens[0].words[0]
    assert list(word.result.output_tokens) == ["\u0259", "t", "\u025b", "n", "\u0283", "\u0259", "n"]  # one per row
    assert word.result.attention.rows == len(word.result.output_tokens) + 1
    plain = (await read(stub, "knight", alphabet="ipa"))[0]
    assert plain.pronunciation == "na\u026at"
    arpabet = (await read(stub, "knight", alphabet="arpabet", word_separator="/"))[0]
    assert arpabet.pronunciation == "N AY T"
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await read(stub, "un", model="tiny-fr", alphabet="klingon")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "klingon" in e.value.details()


async def test_homographs_say_which_pronunciation_and_why(stub):
    r = (await read(stub, "I read the record, live."))[0]
    by_word = {t.text: t.words[0] for t in r.tokens if t.words}
    assert by_word["read"].result.output_text == "R EH D" and list(by_word["read"].alternatives) == ["R IY D"]
    # g2p-en reads homographs by its context model, which this server does not serve: the primary one, saying so
    assert by_word["read"].choice == "lexicon: the primary pronunciation (the context model 'homograph-en' is not served)"
    assert "first of its 2 pronunciations" in by_word["the"].choice and "does not cover it" in by_word["the"].choice
    assert len(by_word["record"].alternatives) == 2 and by_word["live"].alternatives
    assert by_word["I"].choice == "lexicon: its only pronunciation" and not by_word["I"].alternatives
    model = (await read(stub, "zyxwab", bypass_lexicon=True))[0].tokens[0].words[0]
    assert model.result.origin == pb.ORIGIN_MODEL and model.choice.startswith("model:")


async def test_the_models_own_text_rules_and_the_french_decimal_mark(stub):
    own = (await read(stub, "Dr. Smith", model="g2p-en-stress"))[0]
    assert words_of(own) == "drive smith"  # models/<name>/text.tsv over the language's file
    fr = (await read(stub, "il a 4,16 et 3 000 000, le 1er.", model="tiny-fr"))[0]  # the tiny model reads lower case only
    assert words_of(fr) == "il a quatre virgule seize et trois millions le premier"  # after the comma: a number


async def test_a_sigmorphon_model_reads_numbers_in_its_own_language(stub):
    """models/g2p-ita declares `ita`: numbers in Italian words, the decimal comma, the thousands point."""
    r = (await read(stub, "costa 4,16 euro, il 50% di 1.000.000.", model="g2p-ita"))[0]
    assert words_of(r) == "costa quattro virgola uno sei euro il cinquanta per cento di un milione"
    assert r.complete and all(w.result.output_tokens for t in r.tokens for w in t.words)


async def test_a_paragraph_passes_and_a_longer_text_is_refused_naming_the_limit(stub):
    paragraph = ("The quick brown fox, 3 years old, jumped over 12 lazy dogs on May 5th. " * 5).strip()
    assert 64 < len(paragraph) <= 400
    r = (await read(stub, paragraph))[0]
    check_cover(paragraph, r)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await read(stub, "x" * 401)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "401 characters; the limit is max_text_len (400)" in e.value.details()


@pytest.fixture(scope="module")
def worker():
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


async def test_open_inference_protocol_text_parameter_with_a_stock_tritonclient(server, worker, stub):
    texts = ["Dr. Smith paid $5.50 on the 14th.", "Hello, world!"]
    data = np.array([t.encode() for t in texts], dtype=np.object_)
    call = functools.partial(triton_calls.infer, f"127.0.0.1:{server.port}", "g2p-en", data,
                             parameters={"text": True, "word_separator": " / "})
    out = await asyncio.get_running_loop().run_in_executor(worker, call)
    native = await read(stub, *texts, word_separator=" / ")
    assert set(out) == {"_id", "OUTPUT", "SCORE", "SPOKEN", "TOKENS"}
    for b, r in enumerate(native):
        assert out["OUTPUT"][b].decode() == r.pronunciation and out["SPOKEN"][b].decode() == r.spoken
        assert out["SCORE"][b] == pytest.approx(r.log_prob, abs=1e-4)
        tokens = json.loads(out["TOKENS"][b])["tokens"]
        assert [(t["text"], t["start"], t["end"]) for t in tokens] == [(t.text, t.start, t.end) for t in r.tokens]
    assert out["OUTPUT"][1].decode() == "HH AH L OW, / W ER L D!"
    # over REST too, in IPA
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["Hello, world!"]}],
            "parameters": {"text": True, "alphabet": "ipa"}, "outputs": [{"name": "OUTPUT"}]}
    request = urllib.request.Request(f"http://127.0.0.1:{server.metrics_port}/v2/models/g2p-en/infer",
                                     data=json.dumps(body).encode())
    reply = json.loads(await asyncio.to_thread(lambda: urllib.request.urlopen(request, timeout=20).read()))
    assert reply["outputs"] == [{"name": "OUTPUT", "datatype": "BYTES", "shape": [1], "data": ["h\u0259lo\u028a, w\u025dld!"]}]
    for params, message in (({"text": True, "n_best": 2}, "n_best is for words"),
                            ({"text": True, "alphabet": "x"}, "alphabet 'x'")):
        body = {"inputs": body["inputs"], "parameters": params}
        request = urllib.request.Request(f"http://127.0.0.1:{server.metrics_port}/v2/models/g2p-en/infer",
                                         data=json.dumps(body).encode())
        with pytest.raises(urllib.error.HTTPError) as e:
            await asyncio.to_thread(lambda: urllib.request.urlopen(request, timeout=20))
        assert e.value.code == 400 and message in e.value.read().decode()


async def test_the_client_reads_texts_from_stdin(server):
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "attnserve-client"), "text", "-", "--server", f"127.0.0.1:{server.port}",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate("Hello, world!\n\nIn 1066.\n".encode())
    assert proc.returncode == 0, err.decode()
    assert out.decode().splitlines() == ["Hello, world!\tHH AH L OW, | W ER L D!",
                                         "In 1066.\tIH N | T EH N | S IH K S T IY | S IH K S."]



async def test_the_bench_corpus_loses_nothing(stub):
    """Every sentence of bench/corpus/english.txt: spans cover it, its punctuation comes back in place."""
    sentences = [s.strip() for s in (REPO / "bench" / "corpus" / "english.txt").read_text().splitlines() if s.strip()]
    for start in range(0, len(sentences), 50):
        batch = sentences[start:start + 50]
        for text, r in zip(batch, await read(stub, *batch, return_attention=False)):
            check_cover(text, r)
            check_punctuation_kept(text, r)
            assert r.complete, text
