"""Source hints (attnserve/bundle/hints.py): a word read with an outside dictionary's transcription after it, the
same way in training, in the export's parity check and served; a symbol only hints bring is not one a served
word may have; the attention returned covers the word's own characters."""
import grpc
import numpy as np
import pytest
import torch

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from service.config import Config, EngineConfig, ServerConfig
from service.domain import DecodeOptions
from attnserve.bundle import hints
from service.engine.bundle import load_bundle
from service.engine.engine import Engine
from training import train
from training.data import file_record
from training.evaluate import engine_hyps
from training.export import build_bundle, parity_ok
from tests.live import ThreadServer
from tests.training.test_splits import corpus, given_args, pron  # noqa: F401 (corpus: the tiny given-splits fixture)

HINTED = "PQRS"  # the hints' own alphabet: in no word of the tiny corpus


def hint_of(word: str) -> str:
    return "".join(HINTED[ord(c) % len(HINTED)] for c in word if c != " ")


@pytest.fixture(scope="module")
def hinted(corpus, tmp_path_factory):
    """A model trained with hints for every other word of each split (so some words have none)."""
    root = tmp_path_factory.mktemp("hints")
    words = [w for split in ("train", "dev", "test") for w in corpus["words"][split]]
    by_word = {w: hint_of(w) for w in words[::2] if " " not in w}
    path = root / "hints.tsv"
    path.write_text("".join(f"{w}\t{h}\n" for w, h in by_word.items()), encoding="utf-8")
    train.main(given_args(corpus, root / "run") + ["--source-hints", str(path)])
    model_dir = root / "models" / "tiny-hinted"
    manifest = build_bundle(root / "run" / "best.pt", model_dir / "1", "tiny-hinted", "1", parity_words=100)
    engine = Engine(load_bundle(model_dir / "1"), EngineConfig(intra_op_threads=1))
    return {"path": path, "by_word": by_word, "model_dir": model_dir, "manifest": manifest, "engine": engine,
            "checkpoint": torch.load(root / "run" / "best.pt", weights_only=False)}


def test_a_word_is_extended_by_its_hint_and_a_word_without_one_is_left_alone():
    h = hints.SourceHints({"knight": "naɪt"})
    assert h.extend(list("knight")) == [*"knight", "|", *"naɪt"]
    assert h.extend(("k", "n")) == ["k", "n"]
    assert h.symbols() == {"|", *"naɪt"}


@pytest.mark.parametrize("line", ["word", "word\t", "\thint", "wo|rd\thint", "word\thi nt", "word\thint\textra"])
def test_a_malformed_hints_line_is_refused_with_its_place(tmp_path, line):
    path = tmp_path / "hints.tsv"
    path.write_text(f"good\tgood\n{line}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"hints.tsv:2: want word<TAB>hint"):
        hints.read(path)


def test_training_reads_every_split_with_its_hints_and_records_the_file(hinted):
    ckpt = hinted["checkpoint"]
    assert ckpt["data"]["source_hints"] == {**file_record(hinted["path"]), "separator": "|",
                                            "words": len(hinted["by_word"])}
    assert {"|", *HINTED} <= set(ckpt["src_vocab"])  # the hints' symbols were trained on


def test_the_bundle_carries_the_hints_and_names_the_symbols_only_they_bring(hinted):
    m = hinted["manifest"]
    assert (hinted["model_dir"] / "1" / hints.FILE).read_bytes() == hinted["path"].read_bytes()
    assert m["source_hints"]["hint_only_symbols"] == sorted({"|", *HINTED})
    assert parity_ok(m["parity"])  # PyTorch and the engine read the same hinted sources
    engine = hinted["engine"]
    assert not ({"|", *HINTED} & engine.alphabet) and set("abcdefgh") <= engine.alphabet


def test_the_engine_reads_a_hinted_word_with_its_hint_and_returns_attention_over_the_word(hinted, corpus):
    engine, by_word = hinted["engine"], hinted["by_word"]
    with_hint = next(w for w in corpus["words"]["test"] if w in by_word)
    without = next(w for w in corpus["words"]["test"] if w not in by_word and " " not in w)
    index = {t: i for i, t in enumerate(engine.src_vocab)}
    assert engine.source_ids(list(with_hint)) == [index[c] for c in [*with_hint, "|", *by_word[with_hint]]]
    assert engine.source_ids(list(without)) == [index[c] for c in without]
    for options in (DecodeOptions(), DecodeOptions(beam_size=3)):  # greedy and beam: both through Engine.encode
        assert engine_hyps(engine, [tuple(with_hint)], options)
    hinted_result, plain_result = engine.decode([list(with_hint), list(without)])
    assert hinted_result.attn.shape[1] == len(with_hint) and plain_result.attn.shape[1] == len(without)
    assert np.allclose(plain_result.attn.sum(axis=1), 1, atol=1e-5)
    assert (hinted_result.attn.sum(axis=1) < 1 - 1e-6).all()  # the rest of each row went to the hint


def test_served_a_hinted_word_answers_as_the_engine_does_and_a_hint_only_symbol_is_unknown(hinted, corpus):
    cfg = Config(model_dir=hinted["model_dir"], server=ServerConfig(host="127.0.0.1", port=0, metrics_port=-1))
    word = next(w for w in corpus["words"]["test"] if w in hinted["by_word"])
    expected = hinted["engine"].decode([list(word)])[0]
    with ThreadServer(cfg) as server, grpc.insecure_channel(server.address) as channel:
        stub = pbg.TransducerStub(channel)
        reply = stub.Transduce(pb.TransduceRequest(inputs=[word]), timeout=60)
        assert list(reply.results[0].output_tokens) == expected.output_tokens
        assert reply.results[0].score == pytest.approx(expected.log_prob, abs=1e-5)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Transduce(pb.TransduceRequest(inputs=[f"a|{HINTED[0]}"]), timeout=60)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'|'" in refused.value.details() and "position 1" in refused.value.details()


def test_hints_need_char_sources(corpus, tmp_path):
    with pytest.raises(SystemExit):
        train.main(given_args(corpus, tmp_path / "run") + ["--source-hints", str(tmp_path / "h.tsv"),
                                                            "--src-tokens", "words"])
