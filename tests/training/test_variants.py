"""Every variant of the design, end to end: trained a few steps, exported with parity, served.

Cells rnn/gru/lstm, uni- and bidirectional encoders, every attention score, the two
attention-free baselines, encoder self-attention, the mixture and monotonic outputs (hard attention marginalized
in training), and hard / top-k attention at inference
(asked of every soft-trained attention model through the API).
"""
import asyncio

import grpc
import onnx
import numpy as np
import pytest

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from service.engine.bundle import load_bundle
from service.config import BatcherConfig, Config, EngineConfig, ServerConfig
from service.engine.engine import Engine, Running
from service.engine.loop_graph import soft_only
from service.server import build_server
from training import train
from training.export import build_bundle, parity_ok

VARIANTS = {  # name: (model flags, batching mode)
    "lstm-bi-general": (dict(cell="lstm", bidirectional=True, attention="general"), "continuous"),
    "gru-uni-dot": (dict(cell="gru", bidirectional=False, attention="dot"), "request"),
    "rnn-bi-scaled_dot": (dict(cell="rnn", bidirectional=True, attention="scaled_dot"), "continuous"),
    "lstm-uni-additive": (dict(cell="lstm", bidirectional=False, attention="additive"), "request"),
    "gru-bi-cosine": (dict(cell="gru", bidirectional=True, attention="cosine"), "continuous"),
    "lstm-bi-general-self_attention": (dict(cell="lstm", bidirectional=True, attention="general",
                                            self_attention_heads=2), "continuous"),
    "lstm-bi-general-mixture": (dict(cell="lstm", bidirectional=True, attention="general", output="mixture"),
                                "request"),
    "lstm-bi-general-monotonic": (dict(cell="lstm", bidirectional=True, attention="general", output="monotonic"),
                                  "continuous"),
    "gru-bi-none-init": (dict(cell="gru", bidirectional=True, attention="none", context="init"), "continuous"),
    "lstm-uni-none-every_step": (dict(cell="lstm", bidirectional=False, attention="none",
                                      context="every_step"), "request"),
}
WORDS = ["knight", "phoenix", "exit"]


def train_and_export(name: str, flags: dict, corpus, tmp_path):
    """One epoch of ~18 steps on a tiny model, then the real export with its parity checks."""
    argv = ["--corpus", "tsv", "--tsv", str(corpus), "--out", str(tmp_path / "run"), "--hidden-size", "16",
            "--enc-layers", "1", "--emb-dim", "8", "--batch-size", "64", "--max-epochs", "1", "--lr", "0.01",
            "--dropout", "0.0", "--seed", "1", "--threads", "1", "--device", "cpu"]
    argv += [f"--{k.replace('_', '-')}={v}" for k, v in flags.items()]
    train.main(argv)
    model_dir = tmp_path / "models" / name
    return model_dir, build_bundle(tmp_path / "run" / "best.pt", model_dir / "1", name, "1", parity_words=300)


def request(**options) -> pb.TransduceRequest:
    return pb.TransduceRequest(inputs=WORDS, options=pb.DecodeOptions(**options))


async def serve(model_dir, mode: str, calls: dict):
    """Start the real server on a free port, make the calls concurrently over one real channel."""
    server = build_server(Config(model_dir=model_dir,
                                 server=ServerConfig(host="127.0.0.1", port=0, metrics_port=-1),
                                 batcher=BatcherConfig(mode=mode, max_batch_size=16, max_wait_ms=5)))
    await server.start()
    await server.load()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = pbg.TransducerStub(channel)
            info = await stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)

            async def call(req):
                try:
                    return await stub.Transduce(req, timeout=20)
                except grpc.aio.AioRpcError as e:
                    return e

            replies = await asyncio.gather(*(call(r) for r in calls.values()))
    finally:
        await server.stop(0)
    return info, dict(zip(calls, replies))


def matrix(result) -> np.ndarray:
    a = result.attention
    return np.array(a.weights, dtype=np.float32).reshape(a.rows, a.cols)


@pytest.mark.parametrize("name", list(VARIANTS))
async def test_variant_trains_exports_with_parity_and_serves(name, small_corpus, tmp_path):
    flags, mode = VARIANTS[name]
    model_dir, manifest = train_and_export(name, flags, small_corpus, tmp_path)
    par = manifest["parity"]
    assert parity_ok(par) and par["words"] > 0, par
    has_attention = flags["attention"] != "none"
    assert ("hard" in par) == has_attention  # hard attention's parity, through the same step graph
    assert par["onnx_loop"]["words"] == par["words"]  # and through the ONNX Loop graph

    calls = {"soft": request(), "beam": request(beam_size=3, n_best=2, return_attention=True),
             "hard": request(attention_mode=pb.ATTENTION_MODE_HARD),
             "topk": request(attention_mode=pb.ATTENTION_MODE_TOP_K, top_k=2)}
    info, replies = await serve(model_dir, mode, calls)
    assert info.has_attention == has_attention
    assert list(info.attention_modes) == (["soft", "hard", "topk"] if has_attention else [])
    for r in replies["soft"].results:
        assert r.output_text == " ".join(r.output_tokens)
        assert r.HasField("attention") == has_attention
        if has_attention:
            assert np.allclose(matrix(r).sum(axis=1), 1.0, atol=1e-5)
    for r in replies["beam"].results:  # beam search, alternatives included, with or without attention
        assert len(r.alternatives) == 1 and r.HasField("attention") == has_attention
        assert not r.alternatives[0].HasField("attention") or has_attention
    if not has_attention:
        for mode_name in ("hard", "topk"):
            assert replies[mode_name].code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "attention_mode" in replies[mode_name].details()
        return
    for r in replies["hard"].results:  # one-hot rows (a tie would share the row: not with these floats)
        m = matrix(r)
        assert np.allclose(m.sum(axis=1), 1.0, atol=1e-5) and np.allclose(m.max(axis=1), 1.0, atol=1e-6)
    for r in replies["topk"].results:
        m = matrix(r)
        assert np.allclose(m.sum(axis=1), 1.0, atol=1e-5) and ((m > 0).sum(axis=1) <= 2).all()

    # The greedy Loop for soft rows leaves every hard / top-k node out, whichever way the variant cuts its weights.
    assert soft_only(onnx.load(model_dir / "1" / "decoder_step.onnx")) is not None

    if flags.get("output") == "monotonic":  # the alignment state through the Loop, the step loop and batching
        for r in replies["hard"].results:
            where = matrix(r).argmax(axis=1)
            assert (np.diff(where) >= 0).all(), where  # hard monotonic attention never moves back
        for greedy_loop in ("onnx", "python"):
            engine = Engine(load_bundle(model_dir), EngineConfig(greedy_loop=greedy_loop))
            together = engine.decode([list(w) for w in WORDS])
            for word, d in zip(WORDS, together):
                alone = engine.decode([list(word)])[0]
                assert alone.output_tokens == d.output_tokens and np.isclose(alone.log_prob, d.log_prob, atol=1e-5)
                assert np.allclose(alone.attn, d.attn, atol=1e-5)
        # Continuous batching: a row joins another mid-word (its alignment padded to the longer source) and
        # leaves (trimmed back); each step's log-probabilities are the row's own, as if it ran alone.
        short, long = engine.encode([list("exit")]), engine.encode([list("phoenix")])
        lp, _, short = engine.step(short)
        short.y_prev = lp.argmax(axis=-1)
        lp_both, _, both = engine.step(Running.concat(short, long))
        lp_short, _, short = engine.step(short)
        assert np.allclose(lp_both, np.concatenate([lp_short, engine.step(long)[0]]), atol=1e-5)
        both.y_prev = lp_both.argmax(axis=-1)
        short.y_prev = lp_short.argmax(axis=-1)
        assert np.allclose(engine.step(both.select(np.array([0])))[0], engine.step(short)[0], atol=1e-5)

    if flags.get("self_attention_heads"):  # the engine keeps the encoder's self-attention per source
        engine = Engine(load_bundle(model_dir), EngineConfig())
        for word, d in zip(WORDS, engine.decode([list(w) for w in WORDS])):
            assert d.self_attn.shape == (2, len(word), len(word))
            assert np.allclose(d.self_attn.sum(axis=-1), 1.0, atol=1e-5)


def test_api_edge_attention_modes_and_models_without_attention():
    from service.transport import convert
    from service.domain import BadRequest, Decoded

    limits = ServerConfig()
    raw = request(attention_mode=pb.ATTENTION_MODE_TOP_K, top_k=3).SerializeToString()
    assert convert.parse_transduce(raw, limits).options.attention_top_k == 3
    raw = request(attention_mode=pb.ATTENTION_MODE_HARD).SerializeToString()
    assert convert.parse_transduce(raw, limits).options.attention_top_k == 1
    for options, message in [(dict(top_k=2), "options.top_k is for attention_mode 'topk' only"),
                             (dict(attention_mode=pb.ATTENTION_MODE_TOP_K), "options.top_k must be in 1..64"),
                             (dict(attention_mode=7), "options.attention_mode must be one of")]:
        with pytest.raises(BadRequest, match=message):
            convert.parse_transduce(request(**options).SerializeToString(), limits)
    d = Decoded(src_tokens=list("ab"), output_ids=[5], output_tokens=["X"], log_prob=-1.0, attn=None, finished=True)
    assert d.steps == 2 and not convert.to_result([d], " ", return_attention=True).HasField("attention")
    from attnserve.bundle import as_manifest  # format 1, migrated (attnserve/bundle/migrate.py)

    old = {"name": "m", "version": "1", "graphs": {}, "src_vocab": [], "tgt_vocab": [],
           "data": {"src_tokens": "chars", "tgt_tokens": "words"}, "model_config": {"attention": "general"}}
    info = convert.to_model_info(as_manifest(old))  # a bundle from before these variants: attention, soft only
    assert info.has_attention and list(info.attention_modes) == ["soft"]
    info = convert.to_model_info(as_manifest({**old, "model_config": {"attention": "none"}}))
    assert not info.has_attention and list(info.attention_modes) == []
