"""The dictionary first, the user's own words, and scoring of given outputs (teacher forcing).

Score's numbers are checked against the PyTorch model's teacher-forced log-probabilities, and its
attention against the decoder's own when the candidate is the greedy output. The lexicon and the
overrides are checked end to end over gRPC on a real server, an overrides change under load too.
"""
import asyncio
import shutil

import grpc
import numpy as np
import pytest
import pytest_asyncio
import torch

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from service.engine.bundle import load_bundle, write_manifest
from service.config import EngineConfig
from service.engine.engine import Engine
from service.engine.forced import force
from service.answering.lexicon import Packed, read_entries, read_tsv
from service.domain import LexiconError
from tests.live import Calls, ServerSetup, serving
from tests.server.test_server import config
from training.data import load_tsv
from training.export import load_checkpoint
from training.lexicon import write_lexicon
from training.train import collate


@pytest.fixture(scope="module")
def lexicon_model(tiny_corpus_bundle, tmp_path_factory):
    """The tiny model with its corpus as its lexicon, as export ships it."""
    model_dir = tmp_path_factory.mktemp("lex") / "tiny"
    shutil.copytree(tiny_corpus_bundle, model_dir)
    bundle = load_bundle(model_dir)
    write_manifest(bundle.path, write_lexicon(bundle.path, {k: v for k, v in bundle.manifest.items() if k != "files"}))
    return model_dir


@pytest.fixture(scope="module")
def corpus(lexicon_model):
    manifest = load_bundle(lexicon_model).manifest
    splits = load_tsv(manifest.data["path"], manifest.src_tokenization, manifest.tgt_tokenization)
    by_word = {}
    for split in ("train", "dev", "test"):
        for p in splits[split]:
            by_word.setdefault("".join(p.src), []).append(" ".join(p.tgt))
    return by_word


def test_forced_scores_equal_pytorch_teacher_forcing_and_greedy_attention(trained_bundle, tiny_checkpoint):
    bundle = load_bundle(trained_bundle)
    engine = Engine(bundle, EngineConfig(intra_op_threads=1, greedy_loop="python"))
    model, ckpt = load_checkpoint(tiny_checkpoint)  # the run's checkpoint the bundle was exported from
    model.eval()
    words = ["knight", "attention", "a", "phoenix"]
    sources = [engine.tokenize(w) for w in words]
    greedy = engine.decode(sources)
    candidates = [d.output_ids for d in greedy] + [engine.target_ids(["N", "AY", "T"])] * 4
    forced = force(engine, sources + sources, candidates)
    # PyTorch: logits for <s> + target, log_softmax, the log-probability of target + </s>
    src_index = {t: i for i, t in enumerate(ckpt["src_vocab"])}
    src, src_len, tgt_in, tgt_out = collate([([src_index[c] for c in s], list(c))
                                             for s, c in zip(sources + sources, candidates)])
    with torch.no_grad():
        log_probs = torch.log_softmax(model(src, src_len, tgt_in), dim=-1)  # (B, T, V)
    for b, d in enumerate(forced):
        n = len(candidates[b]) + 1
        ref = log_probs[b, torch.arange(n), tgt_out[b, :n]].double().numpy()
        assert np.allclose(d.token_log_probs, ref, atol=1e-4), (b, d.token_log_probs, ref)
        assert d.log_prob == pytest.approx(float(ref.sum()), abs=1e-4)
    for b, g in enumerate(greedy):  # the greedy output forced back: the decoder's own attention and score
        assert forced[b].output_ids == g.output_ids and forced[b].attn.shape == g.attn.shape
        assert np.allclose(forced[b].attn, g.attn, atol=1e-5)
        assert forced[b].log_prob == pytest.approx(g.log_prob, abs=1e-4)


def test_bad_lexicon_lines_name_file_and_line(tmp_path, tiny_bundle):
    engine = Engine(load_bundle(tiny_bundle), EngineConfig(intra_op_threads=1))
    args = (engine.tokenize, engine.tokenize_target, engine.target_ids)
    cases = {"knight\tN AY T\nfoo\tF XX\n": "2: symbol 'XX' at position 1",
             "knight\tN AY T\nknight\tN IH T\n": "2: 'knight' is listed twice",
             "knight\n": "1: expected source<TAB>target",
             "knight\t \n": "1: expected source<TAB>target",
             "\tN\n": "1: expected"}
    for i, (text, message) in enumerate(cases.items()):
        path = tmp_path / f"o{i}.tsv"
        path.write_text(text)
        with pytest.raises(LexiconError, match=message) as e:
            read_tsv(path, *args)
        assert f"o{i}.tsv:" in str(e.value)
    path = tmp_path / "lex.tsv"
    path.write_text("# comment\n\nknight\tN AY T\nknight\tK N AY T\n")
    lexicon = read_entries(path, *args)
    assert len(lexicon) == 1 and lexicon.get(list("knight")) == [engine.target_ids("N AY T".split()),
                                                                 engine.target_ids("K N AY T".split())]
    assert lexicon.get(list("knigh")) is None and lexicon.get(list("knights")) is None
    path.write_text("knight\tN AY T\nknight\tK N AY T\nknight\tN AY T\n")
    with pytest.raises(LexiconError, match="3: 'knight' is listed twice with the same target"):
        read_entries(path, *args)


def test_a_packed_lexicon_keeps_ids_past_one_byte_and_tells_sources_apart():
    lexicon = Packed()
    assert lexicon.add(["a", "b"], [300, 4]) and lexicon.add(["ab"], [5]) and lexicon.add(["a", "b"], [6])
    assert not lexicon.add(["a", "b"], [300, 4])
    assert lexicon.get(("a", "b")) == [[300, 4], [6]] and lexicon.get(["ab"]) == [[5]] and len(lexicon) == 2


@pytest.fixture(scope="module")
def server_setup(lexicon_model):
    cfg = config(lexicon_model)
    return ServerSetup(type(cfg)(model_dir=cfg.model_dir, server=cfg.server, answering=cfg.answering,
                                 batcher=cfg.batcher, repository=type(cfg.repository)(overrides_poll_s=0.1)))


async def test_dictionary_words_come_back_as_the_dictionary_has_them(stub, corpus):
    words = [w for w, prons in corpus.items() if len(prons) >= 2][:3] + [next(iter(corpus))]
    reply = await stub.Transduce(pb.TransduceRequest(inputs=words, options=pb.DecodeOptions(n_best=4, beam_size=4)))
    for word, r in zip(words, reply.results):
        hyps = [r, *r.alternatives]
        assert [h.output_text for h in hyps] == corpus[word][:4]  # every pronunciation, in the corpus's order
        for h in hyps:
            assert h.origin == pb.ORIGIN_LEXICON
            assert h.attention.rows == len(h.output_tokens) + 1 and h.attention.cols == len(word)
            assert len(h.token_log_probs) == h.attention.rows
            assert h.log_prob == pytest.approx(sum(h.token_log_probs), abs=1e-6)
    bypass = await stub.Transduce(pb.TransduceRequest(inputs=words, options=pb.DecodeOptions(bypass_lexicon=True)))
    assert all(r.origin == pb.ORIGIN_MODEL and not r.token_log_probs for r in bypass.results)
    unknown = await stub.Transduce(pb.TransduceRequest(inputs=["zzqxv"]))
    assert unknown.results[0].origin == pb.ORIGIN_MODEL


async def test_score_ranks_given_candidates_with_their_attention(stub):
    reply = await stub.Score(pb.ScoreRequest(items=[
        pb.ScoreItem(source="knight", candidates=["N AY T", "K N IH G T"]), pb.ScoreItem(source="a", candidates=["AH"])]))
    assert [len(item.candidates) for item in reply.results] == [2, 1]
    good, bad = reply.results[0].candidates
    assert good.output_text == "N AY T" and good.log_prob > bad.log_prob
    assert bad.attention.rows == 6 and bad.attention.cols == 6 and len(bad.token_log_probs) == 6
    for request, message in [
            (pb.ScoreRequest(), "items is empty"),
            (pb.ScoreRequest(items=[pb.ScoreItem(source="a")]), "candidates is empty"),
            (pb.ScoreRequest(items=[pb.ScoreItem(source="a", candidates=["AH QQ"])]), "symbol 'QQ' at position 1"),
            (pb.ScoreRequest(items=[pb.ScoreItem(source="a", candidates=["<s>"])]), "'<s>'"),
            (pb.ScoreRequest(items=[pb.ScoreItem(source="", candidates=["AH"])]), "source is empty"),
            (pb.ScoreRequest(items=[pb.ScoreItem(source="a", candidates=["AH"] * 9)]), "at most 8")]:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.Score(request)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in e.value.details(), e.value.details()


async def test_overrides_win_are_refused_when_bad_and_change_under_load(server, stub, lexicon_model, corpus):
    word = next(w for w in corpus if len(w) > 3)
    overrides = lexicon_model / "overrides.tsv"
    stop, counts = asyncio.Event(), {"ok": 0, "failed": 0, "texts": set()}

    async def load():
        while not stop.is_set():
            try:
                r = await stub.Transduce(pb.TransduceRequest(inputs=[word, "knight"]), timeout=10)
                counts["ok"] += 1
                counts["texts"].add((r.results[0].output_text, r.results[0].origin))
            except grpc.aio.AioRpcError:
                counts["failed"] += 1

    async def answer():
        return (await stub.Transduce(pb.TransduceRequest(inputs=[word]))).results[0]

    def refused() -> float:
        return server.metrics.registry.get_sample_value(
            "attnserve_overrides_loads_total", {"model": "tiny", "result": "refused"}) or 0

    # The server polls the file itself; each read of it ends in a take or a refusal (counted here).
    manager = server.repository.manager("")
    reads = Calls().of(manager, "_overrides_taken").of(manager, "_overrides_refused")

    async def until(predicate, answered=True):
        """Until predicate(the server's answer), or predicate() with answered=False, checked after each
        read of the file (a write can be read half done: then the next read)."""
        while True:
            seen = reads.count
            if predicate(await answer()) if answered else predicate():
                return
            await reads.until(lambda: reads.count > seen)

    callers = [asyncio.create_task(load()) for _ in range(4)]
    try:
        overrides.write_text(f"{word}\tAH B AH\n")
        await until(lambda r: r.output_text == "AH B AH" and r.origin == pb.ORIGIN_OVERRIDE)
        overrides.write_text(f"{word}\tAH B AH\n{word}\tAH\n")  # a duplicate: refused, the previous stay
        await until(lambda: refused() == 1, answered=False)
        assert (await answer()).output_text == "AH B AH"
        overrides.write_text(f"{word}\tEH\n")
        await until(lambda r: r.output_text == "EH")
        overrides.unlink()
        await until(lambda r: r.origin == pb.ORIGIN_LEXICON)
    finally:
        stop.set()
        await asyncio.gather(*callers)
    print(f"overrides under load: {counts['ok']} calls ok, {counts['failed']} failed, "
          f"answers seen {sorted(counts['texts'])}")
    assert counts["failed"] == 0 and counts["ok"] > 0
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for fam in server.metrics.registry.collect()
               for s in fam.samples if s.name == "attnserve_overrides_loads_total"}
    assert samples[("attnserve_overrides_loads_total", (("model", "tiny"), ("result", "refused")))] == 1


# ------------------------------------------------------------ inputs outside the alphabet --

@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def normalizing(tiny_bundle, tmp_path_factory):
    """The tiny model declaring the G2P normalization (accents removed, lower case), no lexicon."""
    from tests.live import copy_bundle

    model_dir = tmp_path_factory.mktemp("norm") / "tiny"
    copy_bundle(tiny_bundle / "1", model_dir / "1", source_normalization="nfkd-strip-accents-lower")
    async with serving(config(model_dir)) as s, grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
        yield pbg.TransducerStub(channel)


async def transduce(stub, *texts, **options):
    return (await stub.Transduce(pb.TransduceRequest(inputs=list(texts), options=pb.DecodeOptions(**options)))).results


async def test_accents_and_case_are_normalized_as_the_bundle_declares(normalizing):
    plain, accented, upper = await transduce(normalizing, "cafe", "café", "CAFÉ")
    assert plain.output_text == accented.output_text == upper.output_text
    assert list(accented.attention.source_labels) == list("cafe")


async def test_a_symbol_outside_the_alphabet_is_refused_naming_it_or_flagged_on_request(normalizing):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await transduce(normalizing, "knight", "2nd")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "inputs[1] '2nd'" in e.value.details() and "'2' at position 0" in e.value.details(), e.value.details()
    (r,) = await transduce(normalizing, "2nd", allow_unknown_symbols=True)
    assert list(r.unknown_positions) == [0] and r.output_tokens
    (r,) = await transduce(normalizing, "second", allow_unknown_symbols=True)
    assert not r.unknown_positions


async def test_several_words_are_converted_each_and_joined(normalizing):
    new, york, both, hyphen = await transduce(normalizing, "new", "york", "New York", "new-york")
    for r in (both, hyphen):
        assert r.output_text == f"{new.output_text} {york.output_text}"
        assert r.log_prob == pytest.approx(new.log_prob + york.log_prob, abs=1e-5)
        a = np.array(r.attention.weights).reshape(r.attention.rows, r.attention.cols)
        assert a.shape == (len(new.output_tokens) + len(york.output_tokens) + 1, 8)
        assert np.allclose(a.sum(axis=1), 1, atol=1e-4)  # each row still a distribution
        assert not a[:, 3].any()  # the separator's column
        assert not a[:len(new.output_tokens), 4:].any() and not a[len(new.output_tokens):, :3].any()  # blocks
    (r,) = await transduce(normalizing, "new 2", allow_unknown_symbols=True)
    assert list(r.unknown_positions) == [4]
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await transduce(normalizing, "new 2")
    assert "'2' at position 4" in e.value.details()


async def test_overrides_from_a_mounted_directory(lexicon_model, tmp_path):
    """--overrides-dir: <dir>/<model>.tsv, as a Kubernetes ConfigMap volume provides it."""
    (tmp_path / "tiny.tsv").write_text("knight\tK N IH G T\n")
    cfg = config(lexicon_model)
    cfg = type(cfg)(model_dir=cfg.model_dir, server=cfg.server, answering=cfg.answering, batcher=cfg.batcher,
                    repository=type(cfg.repository)(overrides_dir=str(tmp_path)))
    async with serving(cfg) as s, grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
        (r,) = await transduce(pbg.TransducerStub(channel), "knight")
    assert (r.output_text, r.origin) == ("K N IH G T", pb.ORIGIN_OVERRIDE)


async def test_evaluation_over_grpc_measures_the_model_not_the_lexicon(server, lexicon_model, corpus):
    """attnserve-eval --server must report the model's WER: with the lexicon, dictionary words
    would score as right by construction."""
    from training.evaluate import hyps_from_bundle, hyps_from_server

    words = [w for w in corpus if len(w) <= 20][:64]
    sources = [tuple(w) for w in words]
    via_server = await asyncio.to_thread(hyps_from_server, f"127.0.0.1:{server.port}", sources, "chars", 8, 30.0, 1, 0.0)
    in_process = hyps_from_bundle(str(lexicon_model / "1"), sources, 64, 1, 0.0, "fp32")
    assert via_server == in_process
    as_dictionary = {tuple(w): corpus[w][0].split() for w in words}
    assert sum(via_server[s] != as_dictionary[s] for s in sources) > 0  # the tiny model is often wrong
