"""Knowledge distillation: a teacher's outputs become the training targets, never for held-out words."""
import pytest
import torch

from service.engine.bundle import load_bundle
from service.config import EngineConfig
from service.engine.engine import Engine
from training import distill, train
from training.data import split_of


@pytest.fixture(scope="module")
def tiny_bundle(tiny_corpus_bundle):
    """The committed tiny model beside its corpus: the teacher labels that corpus's training words."""
    return tiny_corpus_bundle


@pytest.fixture(scope="module")
def targets(tiny_bundle, tmp_path_factory):
    out = tmp_path_factory.mktemp("distill") / "train.tsv"
    distill.main(["--bundle", str(tiny_bundle / "1"), "--out", str(out)])
    return out


def test_the_teacher_labels_every_training_source_with_its_own_output(targets, tiny_bundle, tiny_corpus):
    lines = [line.split("\t") for line in targets.read_text(encoding="utf-8").splitlines()]
    corpus_train = {line.split("\t")[0] for line in tiny_corpus.read_text(encoding="utf-8").splitlines()
                    if split_of(line.split("\t")[0]) == "train"}
    assert {src for src, _ in lines} <= corpus_train and len(lines) >= 0.95 * len(corpus_train)
    assert all(split_of(src) == "train" for src, _ in lines)
    engine = Engine(load_bundle(tiny_bundle), EngineConfig())
    sample = lines[::97]
    decoded = engine.decode([list(src) for src, _ in sample])
    assert [tgt for _, tgt in sample] == [" ".join(d.output_tokens) for d in decoded]


def test_a_student_trains_on_the_teachers_targets_and_records_them(targets, tiny_corpus, tmp_path):
    out = tmp_path / "student"
    train.main(["--corpus", "tsv", "--tsv", str(tiny_corpus), "--train-targets", str(targets), "--out", str(out),
                "--hidden-size", "16", "--enc-layers", "1", "--emb-dim", "8", "--max-epochs", "1",
                "--batch-size", "128", "--threads", "1", "--device", "cpu"])
    data = torch.load(out / "best.pt", weights_only=False)["data"]
    n = len(targets.read_text(encoding="utf-8").splitlines())
    assert data["train_targets"]["path"] == str(targets) and data["train_targets"]["pairs"] == n
    assert data["pairs"]["train"] == n and len(data["train_targets"]["sha256"]) == 64
    assert data["pairs"]["dev"] > 0  # dev keeps the corpus's references


def test_targets_for_held_out_words_are_refused(tiny_corpus, tmp_path):
    held_out = next(line for line in tiny_corpus.read_text(encoding="utf-8").splitlines()
                    if split_of(line.split("\t")[0]) == "test")
    leaky = tmp_path / "leaky.tsv"
    leaky.write_text(held_out + "\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="test sources"):
        train.main(["--corpus", "tsv", "--tsv", str(tiny_corpus), "--train-targets", str(leaky),
                    "--out", str(tmp_path / "run"), "--max-epochs", "1", "--device", "cpu"])


def test_unlabeled_words_are_frequent_english_words_the_corpus_lacks_all_in_the_training_split():
    known = {"about", "their", "would"}
    words = distill.unlabeled_words(300, known)
    assert len(words) == 300 == len(set(words))
    assert not known & set(words)
    assert all(split_of(w) == "train" and len(w) >= 4 and any(v in w for v in "aeiouy") for w in words)
    import wordfreq

    ranked = {w: i for i, w in enumerate(wordfreq.top_n_list("en", 400_000, wordlist="large"))}
    assert [ranked[w] for w in words] == sorted(ranked[w] for w in words)  # most frequent first
    assert ranked[words[0]] < 100  # from the list's top, not its tail


def test_references_are_kept_and_the_teacher_labels_only_the_unlabeled_words(tiny_bundle, tiny_corpus, tmp_path):
    out = tmp_path / "train.tsv"
    distill.main(["--bundle", str(tiny_bundle / "1"), "--keep-references", "--unlabeled-wordfreq", "40",
                  "--out", str(out)])
    lines = out.read_text(encoding="utf-8").splitlines()
    corpus = tiny_corpus.read_text(encoding="utf-8").splitlines()
    train_refs = {line for line in corpus if split_of(line.split("\t")[0]) == "train"}
    corpus_sources = {line.split("\t")[0] for line in corpus}
    assert train_refs <= set(lines)
    extra = [line.split("\t") for line in lines if line not in train_refs]
    assert 30 <= len(extra) <= 40  # a word the teacher maps to nothing is left out
    assert all(src not in corpus_sources and split_of(src) == "train" for src, _ in extra)
    engine = Engine(load_bundle(tiny_bundle), EngineConfig())
    decoded = engine.decode([list(src) for src, _ in extra])
    assert [tgt for _, tgt in extra] == [" ".join(d.output_tokens) for d in decoded]
