"""service.client.phonemize over a real server (the shipped g2p-en, g2p-en-stress and g2p-fra): phonemizer's
documented behaviours, and where phonemizer and espeak-ng are installed, the same output shape as
phonemizer's for the same call (separators, punctuation, lines), not the same phonemes."""
import logging
import re

import pytest

from service.client import phonemize as module
from service.client.phonemize import Separator, phonemize
from tests.conftest import REPO
from tests.live import ThreadServer, loopback_config, shipped_repository

MODELS = ("g2p-en", "g2p-en-stress", "g2p-fra")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The server's address; the environment's ATTNSERVE_SERVER is never read here but where a test sets it."""
    root = shipped_repository(tmp_path_factory.mktemp("phonemize-models"), MODELS)
    with ThreadServer(loopback_config(model_repository=root, default_model="g2p-en",
                                      server={"metrics_port": -1})) as s:
        yield s.address


@pytest.fixture
def ph(server, monkeypatch):
    """phonemize() aimed at the test server through the environment, as a pipeline would configure it."""
    monkeypatch.setenv("ATTNSERVE_SERVER", server)
    return phonemize


def test_str_in_str_out_list_in_list_out(ph):
    assert ph("hello world") == "həloʊ wɝld "
    assert ph(["hello world", "about"]) == ["həloʊ wɝld ", "əbaʊt "]
    assert ph(("about",)) == ["əbaʊt "]  # any sequence of texts: a list back, as phonemizer
    # A str is one utterance a line: each line phonemized, joined by newlines again.
    assert ph("hello world\nabout\n") == "həloʊ wɝld \nəbaʊt "


def test_separators_at_phone_and_word_level(ph):
    sep = Separator(phone="-", word="|")
    assert ph("hello world", separator=sep) == "h-ə-l-oʊ-|w-ɝ-l-d-|"
    assert ph("hello world", separator=sep, strip=True) == "h-ə-l-oʊ|w-ɝ-l-d"
    assert ph("hello world", strip=True) == "həloʊ wɝld"
    assert ph("hello world", separator=None) == "həloʊ wɝld "  # None: the default, as phonemizer
    # The syllable separator is ignored, as phonemizer's espeak backend ignores it.
    assert ph("about", separator=Separator(phone=" ", syllable="/", word="_")) == "ə b aʊ t _"
    with pytest.raises(ValueError, match="must be all differents"):
        Separator(phone="|", word="|")


def test_preserve_punctuation_keeps_marks_in_place(ph):
    assert ph("Hello, world.", strip=True) == "həloʊ wɝld"
    assert ph("Hello, world.", strip=True, preserve_punctuation=True) == "həloʊ, wɝld."
    assert ph("Hello, world.", preserve_punctuation=True) == "həloʊ, wɝld. "
    # The spaces around a mark are the word separator; a phone separator stays on the word before it.
    assert ph("Hello , world", preserve_punctuation=True, separator=Separator(phone="-", word="|")) == \
        "h-ə-l-oʊ-|,|w-ɝ-l-d-|"
    # Only the marks asked for: "-" is not one of phonemizer's default marks, "," is not in ".".
    assert ph("well-known, (hello)", preserve_punctuation=True, strip=True) == "wɛl noʊn, (həloʊ)"
    assert ph("Hello, world.", preserve_punctuation=True, strip=True, punctuation_marks=".") == "həloʊ wɝld."
    assert ph("Hello, world.", preserve_punctuation=True, strip=True, punctuation_marks=re.compile(r"[,]")) == \
        "həloʊ, wɝld"


def test_numbers_and_currency_are_read_as_the_server_reads_them(ph):
    assert ph("$5.50", strip=True) == "faɪv dɑlɚz fɪfti sɛnts"
    assert ph("1066", strip=True, separator=Separator(word="|")) == "tɛn|sɪksti|sɪks"


def test_prepend_text_gives_pairs(ph):
    assert ph("hello world\n\nabout", prepend_text=True) == [("hello world", "həloʊ wɝld "), ("about", "əbaʊt ")]
    assert ph(["about"], prepend_text=True, strip=True) == [("about", "əbaʊt")]
    assert ph(["about", ""], prepend_text=True, preserve_empty_lines=True) == [("about", "əbaʊt "), ("", "")]


def test_empty_lines_dropped_unless_preserved(ph):
    assert ph(["hello", "", "  ", "about"]) == ["həloʊ ", "əbaʊt "]
    assert ph(["hello", "", "about"], preserve_empty_lines=True) == ["həloʊ ", "", "əbaʊt "]
    assert ph("hello\n\nabout", preserve_empty_lines=True) == "həloʊ \n\nəbaʊt "
    assert ph("") == "" and ph([]) == [] and ph([""]) == []


def test_a_list_of_texts_keeps_its_order_across_calls_in_flight(ph, monkeypatch):
    texts = ["hello world", "about", "one two three", "$5.50", "Hello, world.", "judge", "yes", "no"] * 3
    alone = [ph(t) for t in texts]
    monkeypatch.setattr(module, "TEXTS_PER_CALL", 2)  # 12 calls, 4 in flight at a time
    assert ph(texts) == alone
    assert ph(texts, njobs=4) == alone  # njobs is accepted and changes nothing


def test_languages_map_to_models_and_model_overrides(ph, server):
    assert ph("chat", language="fr-fr") == "ʃa "
    assert ph("« Bonjour », ça va ?", language="fr", preserve_punctuation=True, strip=True,
              separator=Separator(phone=" ", word=" | ")) == "« | b ɔ̃ ʒ u ʁ | », | s a | v a | ?"
    # g2p-en answers ARPAbet without stress; asked for IPA, as the stress model is.
    assert ph("about", model="g2p-en", strip=True) == ph("about", model="", strip=True)
    assert ph("chat", language="en-us", model="g2p-fra", server=server) == "ʃa "
    with pytest.raises(RuntimeError, match='language "xx-yy" is not supported'):
        ph("chat", language="xx-yy")
    with pytest.raises(RuntimeError, match="not served here"):
        ph("chat", model="g2p-ita")


def test_with_stress_and_tie(ph):
    assert ph("about", strip=True) == "əbaʊt"
    assert ph("about", strip=True, with_stress=True) == "əˈbaʊt"
    assert ph("about", strip=True, with_stress=True, separator=Separator(phone="-", word=" ")) == "ə-ˈb-aʊ-t"
    assert ph("judge chair", strip=True, tie=True) == "d͡ʒʌd͡ʒ t͡ʃɛɹ"
    assert ph("judge", strip=True, tie="z") == "d\u200dʒʌd\u200dʒ"
    with pytest.raises(RuntimeError, match="incompatible with phone separator"):
        ph("judge", tie=True, separator=Separator(phone="-"))
    with pytest.raises(RuntimeError, match="single character"):
        ph("judge", tie="ab")


def test_words_mismatch_is_a_token_left_unread(ph, caplog):
    with caplog.at_level(logging.WARNING, logger="attnserve.phonemize"):
        assert ph(["a ☃ b", "about"], strip=True) == ["ə bi", "əbaʊt"]
    assert "words count mismatch on 50.0% of the lines (1/2)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attnserve.phonemize"):
        assert ph(["a ☃ b", "about"], strip=True, words_mismatch="warn") == ["ə bi", "əbaʊt"]
    assert "line 1: 1 token(s) unread by model g2p-en-stress: '☃'" in caplog.text
    assert ph(["a ☃ b", "about"], strip=True, words_mismatch="remove") == ["", "əbaʊt"]


def test_options_without_meaning_here_accepted_or_refused(ph):
    assert ph("about", language_switch="remove-flags") == "əbaʊt "
    for bad in (dict(backend="festival"), dict(backend="espeak-mbrola"), dict(backend="segments"),
                dict(language_switch="drop"), dict(words_mismatch="skip"), dict(njobs=0)):
        with pytest.raises(RuntimeError):
            ph("about", **bad)


def test_an_unreachable_server_is_a_runtime_error(monkeypatch):
    monkeypatch.delenv("ATTNSERVE_SERVER", raising=False)
    with pytest.raises(RuntimeError, match="127.0.0.1:1"):
        phonemize("about", server="127.0.0.1:1", timeout_s=5)


# --- the same shape as phonemizer's ------------------------------------------------------------------

def shape(out, sep_phone: str, sep_word: str, marks: str):
    """An output with each word's phones as W (their phone separators inside it too), the separators
    and marks as they are: what must agree with phonemizer's, the phonemes themselves aside."""
    if isinstance(out, list):
        return [shape(o, sep_phone, sep_word, marks) if isinstance(o, str) else
                (o[0], shape(o[1], sep_phone, sep_word, marks)) for o in out]
    kept = re.escape(marks + sep_phone + sep_word + "\n")
    s = re.sub(f"[^{kept}]+", "X", out)
    return re.sub(f"X(?:{re.escape(sep_phone)}X)*", "W", s) if sep_phone else s


SHAPE_CALLS = [
    dict(text="Hello, my world! Is it raining? No, it is not."),
    dict(text="Hello, my world! Is it raining? No, it is not.", preserve_punctuation=True),
    dict(text=["Hello, my world!", "", "(quiet) words; end"], preserve_punctuation=True, strip=True),
    dict(text=["Hello , my world !", "the end."], preserve_punctuation=True, separator=("-", "|")),
    dict(text=["Hello , my world !", "the end."], preserve_punctuation=True, separator=("-", "|"), strip=True),
    dict(text="one line\n\nanother line\n", preserve_empty_lines=True, separator=(" ", " | ")),
    dict(text=["one line", "", "another line"], prepend_text=True, preserve_empty_lines=True),
    dict(text=["« Bonjour », dit Marie. Ça va ?"], language="fr-fr", preserve_punctuation=True,
         separator=(" ", " | ")),
]


@pytest.mark.parametrize("call", SHAPE_CALLS, ids=range(len(SHAPE_CALLS)))
def test_the_output_shape_is_phonemizers(ph, call):
    import phonemizer  # the dev extra's; `make system-deps` installs the espeak-ng it drives
    from phonemizer.backend import EspeakBackend
    from phonemizer.separator import Separator as TheirSeparator

    assert EspeakBackend.is_available(), "espeak-ng is missing: run `make system-deps` (Debian's espeak-ng)"
    call = dict(call)
    phone, word = call.pop("separator", ("", " "))
    theirs = phonemizer.phonemize(**call, separator=TheirSeparator(phone=phone, word=word))
    ours = ph(**call, separator=Separator(phone=phone, word=word))
    assert type(ours) is type(theirs)
    # A pipeline that changed only its phonemize import still passes phonemizer's own Separator.
    assert ph(**call, separator=TheirSeparator(phone=phone, word=word)) == ours
    assert shape(ours, phone, word, module.DEFAULT_MARKS) == shape(theirs, phone, word, module.DEFAULT_MARKS)


def test_it_needs_only_the_base_install():
    """grpcio and protobuf: no torch, numpy, onnxruntime, rich or phonemizer is imported with it."""
    import subprocess
    import sys

    heavy = ("torch", "numpy", "onnxruntime", "rich", "phonemizer")
    code = f"import sys, service.client.phonemize; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"
