"""Given splits (a shared task's train, dev and test files), end to end: trained a few steps, exported,
served and scored, with the hash split provably unused and no test word in the lexicon.

The tiny corpus marks its words with letters of their own: `q` only in a training word that the hash
split would put in test, `x` only in a dev word the hash split would put in train, `z` only in test
words. A vocabulary is built from the training pairs alone, so `q` in it and `x`, `z` out of it show
which words were trained on.
"""
import json
import random

import grpc
import pytest

from attnserve.bundle.normalization import lowercases
from attnserve.bundle.text_policy import text_policy
from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from service.config import Config, EngineConfig, ServerConfig
from service.engine.bundle import load_bundle
from service.engine.engine import Engine
from training import evaluate, train
from training.data import GIVEN_SPLIT_RULE, SPLIT_RULE, Pair, file_record, load_described, split_of
from training.export import build_bundle, parity_ok
from tests.live import ThreadServer

PHONES = {"a": "A", "b": "B", "c": "K", "d": "D", "e": "E", "f": "F", "g": "G", "h": "H", "q": "Q", "x": "X",
          "z": "Z", " ": None}


def pron(word: str) -> str:
    return " ".join(PHONES[c] for c in word if PHONES[c])


def first_word(prefix: str, split: str, taken: set) -> str:
    """The first word prefix + abc... letters whose hash split is `split`."""
    rng = random.Random(prefix)
    while True:
        word = prefix + "".join(rng.choice("abcdefgh") for _ in range(4))
        if split_of(word) == split and word not in taken:
            return word


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = random.Random(7)
    words = sorted({"".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 7))) for _ in range(400)})
    train_words, dev_words, test_words = words[:240], words[240:270], words[270:300]
    marked = {"hash_test_in_train": first_word("q", "test", set(words)),
              "hash_train_in_dev": first_word("x", "train", set(words)),
              "test_only": "zz" + test_words[0]}
    train_words += [marked["hash_test_in_train"], "ab cd"]  # a source with a space, as Vietnamese has
    dev_words += [marked["hash_train_in_dev"]]
    test_words += [marked["test_only"]]
    root = tmp_path_factory.mktemp("given")
    files = {}
    for split, ws in (("train", train_words), ("dev", dev_words), ("test", test_words)):
        files[split] = root / f"tiny_{split}.tsv"
        files[split].write_text("".join(f"{w}\t{pron(w)}\n" for w in ws), encoding="utf-8")
    return {"files": files, "words": {"train": train_words, "dev": dev_words, "test": test_words}, **marked}


def given_args(corpus, out) -> list[str]:
    f = corpus["files"]
    return ["--corpus", "tsv", "--train-tsv", str(f["train"]), "--dev-tsv", str(f["dev"]), "--test-tsv",
            str(f["test"]), "--out", str(out), "--hidden-size", "16", "--enc-layers", "1", "--emb-dim", "8",
            "--batch-size", "64", "--max-epochs", "2", "--lr", "0.01", "--dropout", "0.0", "--seed", "1",
            "--threads", "1", "--device", "cpu", "--lr-schedule", "cosine", "--warmup-steps", "2"]


@pytest.fixture(scope="module")
def bundle(corpus, tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    train.main(given_args(corpus, run))
    model_dir = tmp_path_factory.mktemp("models") / "tiny-given"
    manifest = build_bundle(run / "best.pt", model_dir / "1", "tiny-given", "1", parity_words=100)
    return {"model_dir": model_dir, "path": model_dir / "1", "manifest": manifest}


def test_the_given_files_are_used_as_they_are_and_named_relative_with_their_sha256(corpus, bundle):
    data = bundle["manifest"]["data"]
    assert data["split"] == GIVEN_SPLIT_RULE
    for split, path in corpus["files"].items():
        record = data["files"][split]
        assert not record["path"].startswith("/") and record == file_record(path)
        assert data["pairs"][split] == len(corpus["words"][split])
    assert parity_ok(bundle["manifest"]["parity"])


def test_the_hash_split_is_not_used(corpus, bundle):
    m = bundle["manifest"]
    assert split_of(corpus["hash_test_in_train"]) == "test" and split_of(corpus["hash_train_in_dev"]) == "train"
    assert "q" in m["src_vocab"] and "Q" in m["tgt_vocab"]  # the hash split's test word was trained on
    assert "x" not in m["src_vocab"] and "X" not in m["tgt_vocab"]  # the hash split's train word was not
    assert "z" not in m["src_vocab"] and "Z" not in m["tgt_vocab"]  # nor any test word
    splits = load_described(m["data"])
    assert {"".join(p.src) for p in splits["dev"]} == set(corpus["words"]["dev"])


def test_the_lexicon_holds_train_and_dev_words_and_no_test_word(corpus, bundle):
    lines = (bundle["path"] / "lexicon.tsv").read_text(encoding="utf-8").splitlines()
    sources = {line.split("\t")[0] for line in lines}
    # ...but for the dev word with a phoneme (X) that no training word has: the model cannot emit it
    assert sources == set(corpus["words"]["train"]) | set(corpus["words"]["dev"]) - {corpus["hash_train_in_dev"]}
    assert not sources & set(corpus["words"]["test"])
    lexicon = bundle["manifest"]["lexicon"]
    assert lexicon["splits"] == ["train", "dev"] and lexicon["left_out"]["entries"] == 1
    assert bundle["manifest"]["data"]["files"]["dev"]["path"] in lexicon["from"]


def test_the_manifest_states_the_text_policy(bundle):
    m = bundle["manifest"]
    assert m["source_normalization"] == "nfc-lower" and lowercases(m["source_normalization"])  # no upper case in the files
    assert " " in m["src_vocab"] and m["text_policy"]["space_is_a_source_symbol"] is True


def test_the_text_policy_keeps_case_where_the_sources_have_it_and_nfc_only_where_they_are_nfc():
    data = {"corpus": "tsv", "files": {}, "src_tokens": "chars"}

    def policy(*words):
        splits = {"train": [Pair(tuple(w), ("A",)) for w in words], "dev": []}
        return text_policy(data, splits, ["<pad>", *sorted(set("".join(words)))])["source_normalization"]

    assert policy("ábc", "dé") == "nfc-lower"
    assert policy("Ábc", "dé") == "nfc"
    assert policy("a\u0301bc") == "lower"  # decomposed: NFC would give inputs forms the model never saw
    assert text_policy({"corpus": "cmudict"}, {}, [])["source_normalization"] == "nfkd-strip-accents-lower"


def test_the_bundle_serves_train_words_from_the_lexicon_and_test_words_from_the_model(corpus, bundle):
    cfg = Config(model_dir=bundle["model_dir"], server=ServerConfig(host="127.0.0.1", port=0, metrics_port=-1))
    word, unseen = corpus["hash_test_in_train"], corpus["words"]["test"][1]
    with ThreadServer(cfg) as server, grpc.insecure_channel(server.address) as channel:
        reply = pbg.TransducerStub(channel).Transduce(pb.TransduceRequest(inputs=[word, unseen]), timeout=60)
    lexicon_answer, model_answer = reply.results
    assert lexicon_answer.origin == pb.ORIGIN_LEXICON and " ".join(lexicon_answer.output_tokens) == pron(word)
    assert model_answer.origin == pb.ORIGIN_MODEL


def test_evaluate_split_test_scores_the_given_test_file(corpus, bundle, capsys):
    evaluate.main(["--bundle", str(bundle["path"]), "--split", "test"])
    report = json.loads(capsys.readouterr().out)
    assert report["words"] == len(corpus["words"]["test"])
    assert report["wer"] == bundle["manifest"]["metrics"]["test"]["wer"]


def test_distillation_targets_work_with_given_splits_and_may_hold_no_test_word(corpus, tmp_path):
    good = tmp_path / "targets.tsv"
    good.write_text("".join(f"{w}\t{pron(w)}\n" for w in corpus["words"]["train"]), encoding="utf-8")
    train.main(given_args(corpus, tmp_path / "student") + ["--train-targets", str(good), "--max-epochs", "1"])
    import torch

    data = torch.load(tmp_path / "student" / "best.pt", weights_only=False)["data"]
    assert data["train_targets"] == {**file_record(good), "pairs": len(corpus["words"]["train"])}
    leaky = tmp_path / "leaky.tsv"
    leaky.write_text(good.read_text(encoding="utf-8") + f"{corpus['test_only']}\tZ Z\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="targets for test sources"):
        train.main(given_args(corpus, tmp_path / "leak") + ["--train-targets", str(leaky)])


def test_a_changed_corpus_file_is_refused(corpus, tmp_path):
    copy = tmp_path / "train.tsv"
    copy.write_bytes(corpus["files"]["train"].read_bytes())
    record = file_record(copy)
    copy.write_text(copy.read_text(encoding="utf-8") + "hh\tH H\n", encoding="utf-8")
    with pytest.raises(ValueError, match="the corpus changed since the model was trained"):
        load_described({"corpus": "tsv", "files": {"train": record}, "src_tokens": "chars", "tgt_tokens": "words"})


def test_one_tsv_is_still_hash_split(corpus, tmp_path):
    whole = tmp_path / "whole.tsv"
    whole.write_text("".join(p.read_text(encoding="utf-8") for p in corpus["files"].values()), encoding="utf-8")
    args = given_args(corpus, tmp_path / "run")
    args[args.index("--train-tsv"):args.index("--test-tsv") + 2] = ["--tsv", str(whole)]
    train.main(args)
    import torch

    data = torch.load(tmp_path / "run" / "best.pt", weights_only=False)["data"]
    assert data["split"] == SPLIT_RULE and "files" not in data
    assert data["pairs"]["test"] == sum(split_of(w) == "test" for ws in corpus["words"].values() for w in ws)


def gold_file(path, rows) -> str:
    path.write_text("".join(f"{w}\t{' '.join(t)}\n" for w, t in rows), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("beam", [1, 5])
def test_gold_scoring_counts_the_known_errors_of_a_hand_made_gold_file(corpus, bundle, tmp_path, capsys, beam):
    """Gold = the bundle's own outputs, two lines of four altered: WER 50% through the bundle and through a
    server, where a training word's gold is the model's output, not the lexicon's (so the lexicon is bypassed)."""
    from service.domain import DecodeOptions

    engine = Engine(load_bundle(bundle["path"]), EngineConfig(intra_op_threads=1))
    words = [corpus["hash_test_in_train"], *corpus["words"]["test"][:3]]
    hyps = evaluate.engine_hyps(engine, [tuple(w) for w in words], DecodeOptions(beam_size=beam))
    outputs = [list(hyps[tuple(w)]) for w in words]
    assert " ".join(outputs[0]) != pron(words[0]), "the lexicon's answer must differ from the model's"
    rows = [(words[0], outputs[0]), (words[1], outputs[1] + ["A"]), (words[2], outputs[2]),
            (words[3], ["Q"] + outputs[3])]
    gold = gold_file(tmp_path / "gold.tsv", rows)
    evaluate.main(["--bundle", str(bundle["path"]), "--gold", gold, "--beam-size", str(beam)])
    local = json.loads(capsys.readouterr().out)
    assert (local["wer_percent"], local["wrong"], local["words"]) == (50.0, 2, 4)
    cfg = Config(model_dir=bundle["model_dir"], server=ServerConfig(host="127.0.0.1", port=0, metrics_port=-1))
    with ThreadServer(cfg) as server:
        evaluate.main(["--server", server.address, "--gold", gold, "--beam-size", str(beam)])
    served = json.loads(capsys.readouterr().out)
    assert (served["wer_percent"], served["wrong"], served["words"]) == (50.0, 2, 4)


def test_the_cosine_schedule_warms_up_then_falls_to_min_lr_at_its_last_step():
    from training.train import TrainConfig, cosine_lr

    cfg = TrainConfig(lr=1e-2, min_lr=1e-4, lr_schedule="cosine", warmup_steps=10)
    assert cosine_lr(cfg, 0, 100) == pytest.approx(1e-3) and cosine_lr(cfg, 9, 100) == pytest.approx(1e-2)
    falling = [cosine_lr(cfg, s, 100) for s in range(10, 101)]
    assert all(a > b for a, b in zip(falling, falling[1:])) and falling[-1] == pytest.approx(1e-4)
    assert cosine_lr(cfg, 150, 100) == pytest.approx(1e-4)  # past its last step (a re-projected budget): the floor


def test_save_last_keeps_the_final_epoch_beside_the_best_one(corpus, tmp_path):
    import torch

    train.main([*given_args(corpus, tmp_path), "--max-epochs", "3", "--save-last", "true"])
    best, last = (torch.load(tmp_path / name, weights_only=False) for name in ("best.pt", "last.pt"))
    assert last["epoch"] == len(last["history"]) == 3  # the schedule's end, whatever dev said
    dev_wers = [row["dev_wer"] for row in last["history"]]
    assert best["epoch"] == 1 + dev_wers.index(min(dev_wers))  # the first epoch at the lowest dev WER
    same = all(torch.equal(best["state_dict"][k], last["state_dict"][k]) for k in best["state_dict"])
    assert same == (best["epoch"] == 3)


def test_train_on_dev_trains_on_the_dev_words_too_and_never_on_a_test_word(corpus, tmp_path):
    import torch

    train.main([*given_args(corpus, tmp_path), "--train-on-dev", "true", "--save-last", "true"])
    last = torch.load(tmp_path / "last.pt", weights_only=False)
    assert "x" in last["src_vocab"] and "X" in last["tgt_vocab"]  # the dev-only letter was trained on
    assert "z" not in last["src_vocab"] and "Z" not in last["tgt_vocab"]  # no test word was
    data = last["data"]
    assert data["train_on_dev"] is True
    assert data["pairs"]["train"] == len(corpus["words"]["train"]) + len(corpus["words"]["dev"])
    assert data["files"]["train"] == file_record(corpus["files"]["train"])  # the files as given, named as such
    # dev would pick an epoch from words it trained on: the run's last epoch is the model, so save_last is asked
    with pytest.raises(SystemExit):
        train.main([*given_args(corpus, tmp_path / "refused"), "--train-on-dev", "true"])


def test_train_on_dev_adds_the_dev_pairs_after_a_targets_file(corpus, tmp_path):
    import torch

    targets = tmp_path / "targets.tsv"  # the train words, then an extra source of the targets file's own
    targets.write_text("".join(f"{w}\t{pron(w)}\n" for w in corpus["words"]["train"]) + "^q\tQ\n", encoding="utf-8")
    train.main([*given_args(corpus, tmp_path / "run"), "--train-targets", str(targets), "--max-epochs", "1",
                "--train-on-dev", "true", "--save-last", "true"])
    data = torch.load(tmp_path / "run" / "last.pt", weights_only=False)["data"]
    assert data["train_on_dev"] is True and data["train_targets"]["pairs"] == len(corpus["words"]["train"]) + 1
    assert data["pairs"]["train"] == len(corpus["words"]["train"]) + 1 + len(corpus["words"]["dev"])


def test_init_from_another_corpus_carries_the_shared_symbols_rows_over(corpus, tmp_path):
    """--init-vocab by-symbol: a model trained on another corpus (another language, with letters and
    phones of its own) starts this one's training. Shared symbols keep their trained embedding and
    output rows, symbols new here start fresh, every other weight is the trained one; without the flag
    differing vocabularies are refused, as before."""
    import torch

    from training import init_from
    from training.data import Vocab
    from training.model import ModelConfig, Seq2Seq

    rng = random.Random(3)
    other_phones = {"a": "A", "b": "B", "y": "Y", "w": "W"}  # a, b shared; y, w its own; no c..h, q, x, z
    words = sorted({"".join(rng.choice("abyw") for _ in range(rng.randint(2, 6))) for _ in range(200)})
    files = {}
    for split, ws in (("train", words[:150]), ("dev", words[150:])):
        files[split] = tmp_path / f"other_{split}.tsv"
        files[split].write_text("".join(f"{w}\t{' '.join(other_phones[c] for c in w)}\n" for w in ws))
    pre = tmp_path / "pre"
    flags = given_args(corpus, pre)[10:]  # the tiny model and schedule, without the corpus and --out
    train.main(["--corpus", "tsv", "--train-tsv", str(files["train"]), "--dev-tsv", str(files["dev"]),
                "--out", str(pre), *flags])
    with pytest.raises(SystemExit, match="vocabularies differ.*--init-vocab by-symbol"):
        train.main([*given_args(corpus, tmp_path / "refused"), "--init-from", str(pre / "best.pt")])

    ckpt = torch.load(pre / "best.pt", weights_only=False)
    src = Vocab.build(list(w) for w in corpus["words"]["train"])
    tgt = Vocab.build(pron(w).split() for w in corpus["words"]["train"])
    torch.manual_seed(0)
    model = Seq2Seq(ModelConfig(**{**ckpt["model_config"], "src_vocab_size": len(src), "tgt_vocab_size": len(tgt)}))
    carried = init_from.carry_by_symbol(model, ckpt, src.itos, tgt.itos)
    state, old, fresh = carried["state_dict"], ckpt["state_dict"], model.state_dict()
    old_src, old_tgt = Vocab(ckpt["src_vocab"][4:]), Vocab(ckpt["tgt_vocab"][4:])
    for name, new_vocab, old_vocab in (("encoder.embed.weight", src, old_src), ("decoder.generator.weight", tgt, old_tgt),
                                       ("decoder.generator.bias", tgt, old_tgt)):
        for t in ("a", "b") if new_vocab is src else ("A", "B", "</s>"):
            assert torch.equal(state[name][new_vocab.stoi[t]], old[name][old_vocab.stoi[t]]), (name, t)
        for t in ("c", "h") if new_vocab is src else ("K", "H"):
            assert torch.equal(state[name][new_vocab.stoi[t]], fresh[name][new_vocab.stoi[t]]), (name, t)
    assert all(torch.equal(state[k], old[k]) for k in old if k not in init_from.VOCAB_ROWS)
    assert carried["symbols_carried"] == {"src": [4 + 2, len(src)], "tgt": [4 + 2, len(tgt)]}

    run = tmp_path / "run"
    train.main([*given_args(corpus, run), "--init-from", str(pre / "best.pt"), "--init-vocab", "by-symbol"])
    continued = torch.load(run / "best.pt", weights_only=False)["data"]["continued_from"]
    assert continued["symbols_carried"] == carried["symbols_carried"]
