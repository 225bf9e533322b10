"""Each bundle's text policy, applied by the server before the lexicon, cache and model.

Two tiny models of given splits, trained a few steps, served by one real server:
- `accents`, a language written without case but with accents (é, ç): its policy is NFC and lower
  case, so `Garçon`, and ç typed decomposed (c + U+0327), are the ç it learned;
- `cased`, a language that writes case and spaces (`Ab cd`): its policy is NFC without lower
  case, so `ab` and `Ab` are different sources, an upper-case letter it never saw is refused by
  symbol and position, and the space is a symbol the model reads, not a word break.
- `hangul`, trained with `--source-form nfd`: its sources are Hangul syllables decomposed into their
  jamo, so a syllable no training word has is letters it has seen, and its policy is NFD.
The answer to an input does not depend on how it was typed once normalized: NFD and NFC inputs get
the same output and score.
"""
import unicodedata

import grpc
import pytest

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from service.config import AnswerConfig, Config, ServerConfig
from tests.live import ThreadServer

ACCENTS = ["garçon", "café", "été", "çà", "déjà", "façade", "élève", "reçu", "caché", "gâté", "arçon", "leçon"]
CASED = ["Ab cd", "ab", "Ab", "cd ab", "Cd", "abc", "Abc d", "dc ba", "bad", "Dab", "cab", "ba dc"]
HANGUL = ["가나", "나다", "다가", "각", "난", "닥나", "가다", "나가", "다나", "낙", "각나", "난다"]  # never 간


def phones(word: str) -> str:
    return " ".join(f"P{ord(c):x}" for c in unicodedata.normalize("NFD", word) if c != " ")


def write_splits(root, name: str, words: list[str]) -> list[str]:
    """The same words in train and dev (a few steps must learn them), two in test."""
    files = {}
    for split, ws in (("train", words), ("dev", words), ("test", words[:2])):
        files[split] = root / f"{name}_{split}.tsv"
        files[split].write_text("".join(f"{w}\t{phones(w)}\n" for w in ws), encoding="utf-8")
    return ["--train-tsv", str(files["train"]), "--dev-tsv", str(files["dev"]), "--test-tsv", str(files["test"])]


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    from training import train
    from training.export import build_bundle

    root = tmp_path_factory.mktemp("policy")
    repo = root / "models"
    for name, words, form in (("accents", ACCENTS, "none"), ("cased", CASED, "none"),
                              ("hangul", HANGUL, "nfd")):
        run = root / f"run-{name}"
        train.main(["--corpus", "tsv", *write_splits(root, name, words), "--source-form", form, "--out", str(run),
                    "--hidden-size", "16",
                    "--enc-layers", "1", "--emb-dim", "8", "--batch-size", "16", "--max-epochs", "2", "--lr", "0.01",
                    "--dropout", "0.0", "--seed", "1", "--threads", "1", "--device", "cpu"])
        build_bundle(run / "best.pt", repo / name / "1", name, "1", parity_words=20)
    return repo


@pytest.fixture(scope="module")
def stub(repository):
    cfg = Config(model_repository=repository, server=ServerConfig(host="127.0.0.1", port=0, metrics_port=-1),
                 answering=AnswerConfig(cache_entries=0))
    with ThreadServer(cfg) as s, grpc.insecure_channel(s.address) as channel:
        yield pbg.TransducerStub(channel)


def transduce(stub, model: str, *texts: str, bypass: bool = True) -> list:
    options = pb.DecodeOptions(bypass_lexicon=bypass, return_attention=True)
    return list(stub.Transduce(pb.TransduceRequest(inputs=list(texts), model_name=model, options=options),
                               timeout=20).results)


def test_the_manifests_declare_each_policy(repository):
    import json

    accents = json.loads((repository / "accents" / "1" / "manifest.json").read_text())
    cased = json.loads((repository / "cased" / "1" / "manifest.json").read_text())
    assert accents["source_normalization"] == "nfc-lower" and cased["source_normalization"] == "nfc"
    assert not accents["text_policy"]["space_is_a_source_symbol"] and cased["text_policy"]["space_is_a_source_symbol"]
    assert " " in cased["src_vocab"] and " " not in accents["src_vocab"]


def test_nfd_input_is_the_nfc_word_it_learned(stub):
    nfd = unicodedata.normalize("NFD", "garçon")
    assert nfd != "garçon" and len(nfd) == len("garçon") + 1
    composed, decomposed, upper = transduce(stub, "accents", "garçon", nfd, "Garçon")
    assert decomposed.output_text == composed.output_text == upper.output_text
    assert decomposed.log_prob == pytest.approx(composed.log_prob, abs=1e-6)
    assert list(decomposed.attention.source_labels) == list("garçon")  # what the model read
    for lexicon_answer in transduce(stub, "accents", nfd, "GARÇON", bypass=False):  # the lexicon sees it too
        assert lexicon_answer.origin == pb.ORIGIN_LEXICON and lexicon_answer.output_text == phones("garçon")


def test_a_cased_language_keeps_case_and_names_an_unknown_symbol(stub):
    lower, upper = transduce(stub, "cased", "ab", "Ab", bypass=False)
    assert lower.output_text == phones("ab") and upper.output_text == phones("Ab")  # two words, two entries
    assert list(upper.attention.source_labels) == ["A", "b"]  # not lower-cased
    with pytest.raises(grpc.RpcError) as refused:
        transduce(stub, "cased", "aB")  # B: never in a training word
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'B' at position 1" in refused.value.details()


def test_the_space_is_a_symbol_where_the_language_has_it(stub):
    (r,) = transduce(stub, "cased", "Ab cd")
    assert list(r.attention.source_labels) == list("Ab cd")  # one source, the space a column of its own
    assert r.attention.cols == 5
    (answer,) = transduce(stub, "cased", "Ab cd", bypass=False)
    assert answer.origin == pb.ORIGIN_LEXICON and answer.output_text == phones("Ab cd")


def test_without_the_space_in_its_alphabet_a_space_separates_words(stub):
    (r,) = transduce(stub, "accents", "café été", bypass=False)  # answered word by word, joined
    assert r.output_text == f"{phones('café')} {phones('été')}" and r.origin == pb.ORIGIN_LEXICON


def test_a_decomposed_language_reads_a_syllable_it_never_saw_as_its_letters(repository, stub):
    import json

    m = json.loads((repository / "hangul" / "1" / "manifest.json").read_text())
    assert m["source_normalization"] == "nfd-lower" and m["data"]["source_form"] == "nfd"
    assert "가" not in m["src_vocab"] and {"\u1100", "\u1161", "\u11ab"} <= set(m["src_vocab"])  # ㄱ ㅏ final ㄴ
    (r,) = transduce(stub, "hangul", "간")  # no training word has the syllable; each of its letters is seen
    assert list(r.attention.source_labels) == list(unicodedata.normalize("NFD", "간")) and r.attention.cols == 3
    (answer,) = transduce(stub, "hangul", "닥나", bypass=False)  # typed composed, found in the lexicon
    assert answer.origin == pb.ORIGIN_LEXICON and answer.output_text == phones("닥나")
