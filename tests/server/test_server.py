"""The server end to end: a real grpc.aio server on loopback, real channels, the tiny real model."""
import asyncio
import shutil
import urllib.request

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from service.domain import BundleError
from service.config import AnswerConfig, BatcherConfig, Config, ServerConfig
from service.server import build_server
from service.transport.servicer import SERVICE_NAME
from tests.live import ServerSetup

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def config(model_dir, mode="continuous", **server):
    # The server's event loop is the test's too: on a busy machine a burst of calls can wait past the
    # default second before the loop takes them in, and gRPC would shed them (CANCELLED). Shedding
    # is the overload tests' subject, not these.
    server = {"max_pending_age_s": 60, **server}
    return Config(model_dir=model_dir,
                  server=ServerConfig(host="127.0.0.1", port=0, metrics_port=0, max_inputs_per_request=8,
                                      max_input_len=20, **server),
                  answering=AnswerConfig(cache_entries=0), batcher=BatcherConfig(mode=mode, max_batch_size=32, max_wait_ms=20))


@pytest.fixture(scope="module", params=["continuous", "request"])
def server_setup(tiny_corpus_bundle, request):
    # beside its corpus: attnserve-eval --server reads the test split the manifest names
    return ServerSetup(config(tiny_corpus_bundle, mode=request.param))


async def metric_samples(server, name):
    # in a thread: the server's HTTP port is served by this very event loop
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    text = (await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read())).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples if s.name.startswith(name)}


async def test_outputs_and_attention(stub):
    words = ["attention", "knight", "a"]
    reply = await stub.Transduce(pb.TransduceRequest(inputs=words), timeout=10)
    assert reply.model_name == "tiny" and reply.model_version == "1"
    assert len(reply.results) == 3
    for word, r in zip(words, reply.results):
        a = r.attention
        assert a.cols == len(word) and list(a.source_labels) == list(word)
        assert a.rows == len(a.target_labels) == len(r.output_tokens) + (1 if r.finished else 0)
        m = np.array(a.weights, dtype=np.float32).reshape(a.rows, a.cols)
        assert np.allclose(m.sum(axis=1), 1.0, atol=1e-5)  # every source position is real: no mask here
        assert r.output_text == " ".join(r.output_tokens)
        assert r.log_prob <= 0


async def test_attention_can_be_left_out_and_output_length_capped(stub):
    reply = await stub.Transduce(pb.TransduceRequest(
        inputs=["internationalization"], options=pb.DecodeOptions(return_attention=False, max_output_len=2)))
    r = reply.results[0]
    assert not r.HasField("attention")
    assert len(r.output_tokens) <= 2 and not r.finished


async def test_concurrent_callers_are_batched(server, stub):
    before = await metric_samples(server, "attnserve_batch_size")
    words = [f"word{chr(97 + i % 26)}" for i in range(48)]
    replies = await asyncio.gather(*(stub.Transduce(pb.TransduceRequest(inputs=[w])) for w in words))
    assert all(len(r.results) == 1 for r in replies)
    after = await metric_samples(server, "attnserve_batch_size")
    # One observation per engine batch (request mode) or per decoder step (continuous mode).
    tiny = (("model", "tiny"),)  # per-model metrics carry the repository's name for the model
    batches = after[("attnserve_batch_size_count", tiny)] - before.get(("attnserve_batch_size_count", tiny), 0)
    rows = after[("attnserve_batch_size_sum", tiny)] - before.get(("attnserve_batch_size_sum", tiny), 0)
    assert rows / batches > 1, "concurrent requests should share batches"
    assert (await metric_samples(server, "attnserve_inputs_total"))[("attnserve_inputs_total", tiny)] >= 48


@pytest.mark.parametrize("request_,message", [
    (pb.TransduceRequest(), "inputs is empty"),
    (pb.TransduceRequest(inputs=["ok", ""]), r"inputs\[1\] is empty"),
    (pb.TransduceRequest(inputs=["   "]), r"inputs\[0\] is empty"),
    (pb.TransduceRequest(inputs=["x" * 21]), r"inputs\[0\] has 21 characters; the limit is 20"),
    (pb.TransduceRequest(inputs=["a"] * 9), "inputs has 9 entries; at most 8"),
])
async def test_bad_input_is_invalid_argument(stub, request_, message):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.Transduce(request_)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details() and __import__("re").search(message, e.value.details())


async def test_non_utf8_input_is_invalid_argument_and_server_keeps_serving(server, stub):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        raw = channel.unary_unary(f"/{SERVICE_NAME}/Transduce")  # no serializer: bytes on the wire
        # field 1 (inputs), length 2, bytes 0xff 0xfe: not UTF-8
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await raw(b"\x0a\x02\xff\xfe")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "UTF-8" in e.value.details()
    reply = await stub.Transduce(pb.TransduceRequest(inputs=["still"]))
    assert reply.results[0].attention.cols == 5


async def test_unknown_model_is_not_found(stub):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.Transduce(pb.TransduceRequest(inputs=["a"], model_name="nope"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "nope" in e.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.Transduce(pb.TransduceRequest(inputs=["a"], model_name="tiny", model_version="7"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


async def test_model_info(stub):
    info = await stub.GetModelInfo(pb.GetModelInfoRequest())
    assert info.name == "tiny" and info.version == "1"
    assert "a" in info.source_vocab and "AH" in info.target_vocab
    assert {"dev_wer", "dev_per", "test_wer", "test_per"} <= set(info.metrics)
    assert '"attention": "general"' in info.config_json


async def test_request_metrics_by_rpc_model_and_code(server, stub):
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.Transduce(pb.TransduceRequest())
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.Transduce(pb.TransduceRequest(inputs=["a"], model_name="nope"))
    await stub.Transduce(pb.TransduceRequest(inputs=["ok"]))
    samples = await metric_samples(server, "attnserve_request")
    labels = lambda code, model="tiny": (("code", code), ("model", model), ("rpc", "Transduce"))  # noqa: E731
    assert samples[("attnserve_requests_total", labels("OK"))] >= 1
    assert samples[("attnserve_request_duration_seconds_count", labels("OK"))] >= 1
    # The label is a served model's name, never the client's string: the label set stays bounded.
    # A request that never named a served model (it did not parse, or named none we serve) has "".
    assert samples[("attnserve_requests_total", labels("INVALID_ARGUMENT", ""))] >= 1
    assert samples[("attnserve_requests_total", labels("NOT_FOUND", ""))] >= 1
    assert not any(dict(lbl).get("model") == "nope" for _, lbl in samples)
    assert ("attnserve_queue_depth", (("model", "tiny"),)) in await metric_samples(server, "attnserve_queue")
    assert await metric_samples(server, "attnserve_inflight_requests") == {("attnserve_inflight_requests", ()): 0}


async def test_inflight_gauge_counts_requests_being_handled():
    from service.metrics import Metrics
    from service.transport.servicer import Served, observe

    metrics = Metrics()
    inflight = lambda: metrics.registry.get_sample_value("attnserve_inflight_requests")  # noqa: E731
    release = asyncio.Event()
    entered = asyncio.Semaphore(0)  # one release per call that has begun its work

    async def work():
        entered.release()
        await release.wait()
        return "done"

    async def forever():
        entered.release()
        await asyncio.Event().wait()

    calls = [asyncio.create_task(observe(metrics, "Transduce", Served("m"), None, work())) for _ in range(3)]
    for _ in calls:
        await entered.acquire()
    assert inflight() == 3
    release.set()
    assert await asyncio.gather(*calls) == ["done"] * 3
    assert inflight() == 0
    cancelled = asyncio.create_task(observe(metrics, "Transduce", Served("m"), None, forever()))
    await entered.acquire()
    assert inflight() == 1
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert inflight() == 0
    assert metrics.registry.get_sample_value(
        "attnserve_requests_total", {"rpc": "Transduce", "model": "m", "code": "CANCELLED"}) == 1


async def test_reflection_lists_the_services(server):
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    def services():
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            return ProtoReflectionDescriptorDatabase(channel).get_services()

    names = await asyncio.to_thread(services)
    assert SERVICE_NAME in names and "grpc.health.v1.Health" in names


async def test_health_goes_not_serving_to_serving_to_not_serving(tiny_bundle):
    s = build_server(config(tiny_bundle))
    await s.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE_NAME):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == NOT_SERVING
        with pytest.raises(grpc.aio.AioRpcError) as e:  # no model yet
            await pbg.TransducerStub(channel).Transduce(pb.TransduceRequest(inputs=["a"]))
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        await s.load()
        reply = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME))
        assert reply.status == SERVING
        watch = health.Watch(health_pb2.HealthCheckRequest(service=SERVICE_NAME))
        assert (await watch.read()).status == SERVING
        stopping = asyncio.create_task(s.stop(grace_s=2))
        assert (await watch.read()).status == NOT_SERVING
        watch.cancel()
        await stopping


async def test_a_bundle_with_bad_hashes_is_refused(tiny_bundle, tmp_path):
    from service.engine.bundle import load_bundle

    bad = tmp_path / "tiny" / "1"
    shutil.copytree(load_bundle(tiny_bundle).path, bad)
    with (bad / "encoder.onnx").open("ab") as f:
        f.write(b"tampered")
    s = build_server(config(bad.parent))
    await s.start()
    with pytest.raises(BundleError, match="sha256 mismatch for 'encoder.onnx'"):
        await s.load()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
        assert reply.status == NOT_SERVING
    await s.stop(0)


async def test_beam_search_returns_n_best_each_with_attention(stub):
    reply = await stub.Transduce(pb.TransduceRequest(
        inputs=["phoenix", "a"], options=pb.DecodeOptions(beam_size=5, n_best=3, length_penalty_alpha=1.0)))
    for word, r in zip(["phoenix", "a"], reply.results):
        hyps = [r, *r.alternatives]
        assert len(hyps) == 3
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        assert len({tuple(h.output_tokens) for h in hyps}) == 3
        for h in hyps:
            assert h.attention.cols == len(word) and h.attention.rows == len(h.attention.target_labels)
            m = np.array(h.attention.weights).reshape(h.attention.rows, h.attention.cols)
            assert np.allclose(m.sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("options,field", [(pb.DecodeOptions(beam_size=17), "beam_size"),
                                           (pb.DecodeOptions(beam_size=2, n_best=3), "n_best"),
                                           (pb.DecodeOptions(beam_size=2, length_penalty_alpha=-1), "length_penalty")])
async def test_bad_decode_options_are_invalid_argument(stub, options, field):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.Transduce(pb.TransduceRequest(inputs=["a"], options=options))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in e.value.details()


async def test_streaming_pipelines_many_requests_over_one_call(server, stub):
    words = [f"stream{chr(97 + i % 26)}" for i in range(40)]

    async def requests():
        for i, w in enumerate(words):
            yield pb.TransduceRequest(inputs=[w], request_id=str(i))
        yield pb.TransduceRequest(inputs=[""], request_id="bad")  # fails alone, the stream goes on

    replies = [r async for r in stub.TransduceStream(requests())]
    by_id = {r.request_id: r for r in replies}
    assert len(replies) == 41 and set(by_id) == {*map(str, range(40)), "bad"}
    assert by_id["bad"].error.code == "INVALID_ARGUMENT" and "inputs[0] is empty" in by_id["bad"].error.message
    unary = await stub.Transduce(pb.TransduceRequest(inputs=words[:3]))
    for i in range(3):
        assert by_id[str(i)].results[0].output_tokens == unary.results[i].output_tokens
        assert not by_id[str(i)].HasField("error")
    # One request per message, and none left in flight once the stream is done.
    samples = await metric_samples(server, "attnserve_")
    stream = (("code", "OK"), ("model", "tiny"), ("rpc", "TransduceStream"))
    assert samples[("attnserve_requests_total", stream)] >= 40
    assert samples[("attnserve_inflight_requests", ())] == 0


async def test_evaluation_through_the_server_matches_the_manifest(server, capsys):
    """`attnserve-eval --server` scores the served model; greedy serving equals the export's ONNX run."""
    import json as _json

    from service.engine.bundle import load_bundle
    from training import evaluate

    addr = f"127.0.0.1:{server.port}"
    await asyncio.to_thread(evaluate.main, ["--server", addr, "--split", "test", "--batch", "8"])
    report = _json.loads(capsys.readouterr().out)
    manifest = load_bundle(server.cfg.model_dir).manifest
    assert report["words"] == manifest["metrics"]["test"]["words"]
    assert report["wer"] == pytest.approx(manifest["metrics"]["test"]["wer"], abs=1e-4)
    assert report["per"] == pytest.approx(manifest["metrics"]["test"]["per"], abs=1e-4)
