"""The non-English lexicons from WikiPron (data/wikipron/, training/wikipron.py) over a real server:
a frequent word the task's files lack is read from the lexicon, in running text and as a word, even
where the model's alphabet lacks one of its letters (Romanian ș); the files parse, each bundle's
lexicon.tsv holds its language's file and its manifest's hash covers it; the task's conventions.
"""
import json

import pytest

from attnserve.bundle.manifest import sha256_file
from attnserve.v1 import attnserve_pb2 as pb
from tests.answering.test_text import check_cover, read
from tests.conftest import REPO
from tests.live import ServerSetup, loopback_config, shipped_repository
from training.wikipron import ENGLISH, FREQUENT_DIR, LANGUAGES, OUT_DIR, by_sound, read_frequent, read_tsv, to_task

# a frequent word outside its task's train and dev files, its WikiPron pronunciation
# (Romanian și, whose ș g2p-ron cannot read, is said by its text rule: textdata/ro.tsv; așa has no rule)
WORDS = {"g2p-fra": ("a", "a"), "g2p-ron": ("așa", "a ʃ a")}


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return shipped_repository(tmp_path_factory.mktemp("wikipron-models"), WORDS)


@pytest.fixture(scope="module")
def server_setup(repository):
    return ServerSetup(loopback_config(model_repository=repository, default_model="g2p-fra",
                                       server={"metrics_port": 0}, answering={"cache_entries": 1000}))


def task_words(model: str) -> set[str]:
    manifest = json.loads((REPO / "models" / model / "1" / "manifest.json").read_text())
    return {w for s in ("train", "dev") for w, _ in read_tsv(REPO / manifest["data"]["files"][s]["path"])}


@pytest.mark.parametrize("model", sorted(WORDS))
async def test_a_frequent_word_is_read_from_the_lexicon_in_running_text(stub, model):
    word, said = WORDS[model]
    assert word not in task_words(model)  # the lexicon has it from WikiPron alone
    text = f"{word.capitalize()}, {word}."
    (r,) = await read(stub, text, model=model)
    check_cover(text, r)
    words = [t.words[0] for t in r.tokens if t.words]
    assert r.complete and not [t.text for t in r.tokens if t.unread]
    assert [w.result.output_text for w in words] == [said, said]
    assert all(w.result.origin == pb.ORIGIN_LEXICON for w in words)


@pytest.mark.parametrize("model", sorted(WORDS))
async def test_a_frequent_word_is_read_from_the_lexicon_as_a_word(stub, model):
    word, said = WORDS[model]
    reply = await stub.Transduce(pb.TransduceRequest(inputs=[word], model_name=model), timeout=30)
    (result,) = reply.results
    assert result.output_text == said and result.origin == pb.ORIGIN_LEXICON


async def test_a_word_outside_the_alphabet_and_the_lexicon_is_still_refused(stub):
    # ș is outside g2p-ron's alphabet: only the lexicon's words that have it are read
    (r,) = await read(stub, "șșș", model="g2p-ron")
    assert [t.text for t in r.tokens if t.unread] == ["șșș"]


def test_every_file_parses_and_is_in_its_bundles_lexicon():
    for code, language in LANGUAGES.items():
        entries = read_tsv(OUT_DIR / f"{code}.tsv")
        bundle = REPO / "models" / language.model / "1"
        manifest = json.loads((bundle / "manifest.json").read_text())
        vocab = set(manifest["tgt_vocab"])
        assert entries and all(w and set(p.split()) <= vocab for w, p in entries), code
        lexicon = set((bundle / "lexicon.tsv").read_text(encoding="utf-8").splitlines())
        assert {f"{w}\t{p}" for w, p in entries} <= lexicon, code
        assert manifest["lexicon"]["wikipron"]["file"] == f"data/wikipron/{code}.tsv"
        assert manifest["files"]["lexicon.tsv"] == sha256_file(bundle / "lexicon.tsv")


def test_the_frequent_words_files_parse():
    scored = {code for code, language in {**LANGUAGES, **ENGLISH}.items() if language.wordfreq}
    assert {p.stem for p in FREQUENT_DIR.glob("*.tsv")} == scored
    for code in scored:
        words = read_frequent(FREQUENT_DIR / f"{code}.tsv")
        assert words and all(w.word and w.frequency > 0 and all(w.right) for w in words), code
        frequencies = [w.frequency for w in words]
        assert frequencies == sorted(frequencies, reverse=True), code  # most frequent first


def test_the_tasks_conventions():
    # Georgian: WikiPron's two segments tied where the spelling has the affricate's letter
    assert to_task("geo", "ცა", "t s ɑ") == "t͡s ɑ"
    assert to_task("geo", "წერა", "t sʼ ɛ r ɑ") == "t͡sʼ ɛ r ɑ"
    assert to_task("geo", "ტსა", "tʼ s ɑ") == "tʼ s ɑ"  # no affricate: nothing to tie
    # Bulgarian: ties as spelt, and the segments the task never writes
    assert to_task("bul", "чело", "t ʃ ɛ l o") == "t͡ʃ ɛ ɫ o"
    assert to_task("bul", "тс", "t s") is None  # a pair the spelling does not spell as one: unsure
    assert to_task("fre", "a", "a") == "a"  # verbatim elsewhere
    assert by_sound("t͡s ɑ") == by_sound("t s ɑ") == "tsɑ"
