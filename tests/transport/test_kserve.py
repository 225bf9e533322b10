"""The Open Inference Protocol (KServe v2) API end to end: the stock tritonclient against a real server.

tritonclient runs in a worker process (see tests/triton_calls.py for why); the
native-API comparisons and the requests a stock client cannot build (typed
bytes_contents, bad shapes) use the server's own generated stubs in this process.
"""
import asyncio
import functools
import multiprocessing
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from attnserve.inference import grpc_service_pb2 as kpb, grpc_service_pb2_grpc as kpbg
from service.transport.kserve import KSERVE_SERVICE_NAME
from service.transport.oip import OUTPUTS
from service.server import build_server
from tests import triton_calls
from tests.live import ServerSetup
from tests.server.test_server import config, metric_samples

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kserve_client.py"
WORDS = ["attention", "knight", "a"]


@pytest.fixture(scope="module")
def server_setup(tiny_bundle):
    return ServerSetup(config(tiny_bundle))


@pytest.fixture(scope="module")
def worker():
    # spawn, not fork: a forked child would inherit this process's protobuf pool (and grpc state).
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


@pytest.fixture
def triton(server, worker):
    """await triton(fn, *args): a tests/triton_calls function, in the worker, against the server."""
    url = f"127.0.0.1:{server.port}"

    async def call(fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(worker, functools.partial(fn, url, *args, **kwargs))
    return call


def words(*texts: str | bytes) -> np.ndarray:
    return np.array([t.encode() if isinstance(t, str) else t for t in texts], dtype=np.object_)


async def test_live_ready_and_metadata(triton):
    assert await triton(triton_calls.health, "tiny") == {"live": True, "ready": True, "model_ready": True}
    assert (await triton(triton_calls.health, "tiny", "1"))["model_ready"] is True
    assert (await triton(triton_calls.health, "nope"))["model_ready"] is False
    meta = await triton(triton_calls.metadata, "tiny")
    assert meta["server"]["name"] == "attnserve" and meta["server"]["version"]
    model = meta["model"]
    assert model["name"] == "tiny" and model["versions"] == ["1"] and model["platform"] == "onnxruntime"
    assert model["inputs"] == [{"name": "TEXT", "datatype": "BYTES", "shape": ["-1"]}]  # int64 -> JSON string
    assert [(o["name"], o["datatype"], len(o["shape"])) for o in model["outputs"]] == [
        ("OUTPUT", "BYTES", 1), ("SCORE", "FP32", 1), ("ATTENTION", "FP32", 3), ("OUTPUT_LENGTH", "INT32", 1),
        ("INPUT_LENGTH", "INT32", 1)]
    failed = await triton(triton_calls.metadata, "nope")
    assert failed.status == "StatusCode.NOT_FOUND" and "nope" in failed.message


async def test_triton_model_config_matches_the_metadata(triton):
    # perf_analyzer reads this first; Triton's field names and numbers, decoded by the stock client.
    config = await triton(triton_calls.model_config, "tiny")
    assert config["name"] == "tiny" and config["platform"] == "onnxruntime"
    assert config.get("max_batch_size", 0) == 0  # proto3 JSON leaves a zero out
    assert config["input"] == [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": ["-1"]}]
    assert [(o["name"], o["data_type"], len(o["dims"])) for o in config["output"]] == [
        ("OUTPUT", "TYPE_STRING", 1), ("SCORE", "TYPE_FP32", 1), ("ATTENTION", "TYPE_FP32", 3),
        ("OUTPUT_LENGTH", "TYPE_INT32", 1), ("INPUT_LENGTH", "TYPE_INT32", 1)]
    assert (await triton(triton_calls.model_config, "tiny", "1"))["name"] == "tiny"
    for args in (("nope",), ("tiny", "7")):
        failed = await triton(triton_calls.model_config, *args)
        assert failed.status == "StatusCode.NOT_FOUND", failed


async def test_infer_matches_the_native_api(triton, channel):
    out = await triton(triton_calls.infer, "tiny", words(*WORDS))
    native = await pbg.TransducerStub(channel).Transduce(pb.TransduceRequest(inputs=WORDS))
    assert out["_id"] == "req-1"
    assert set(out) - {"_id"} == set(OUTPUTS)
    attn, rows, cols = out["ATTENTION"], out["OUTPUT_LENGTH"], out["INPUT_LENGTH"]
    assert attn.dtype == np.float32 and attn.shape == (3, rows.max(), cols.max())
    for b, r in enumerate(native.results):
        assert out["OUTPUT"][b].decode() == r.output_text
        assert out["SCORE"][b] == pytest.approx(r.log_prob, rel=1e-6, abs=1e-6)
        assert (rows[b], cols[b]) == (r.attention.rows, r.attention.cols)
        m = np.array(r.attention.weights, dtype=np.float32).reshape(r.attention.rows, r.attention.cols)
        assert np.allclose(attn[b, :rows[b], :cols[b]], m, atol=1e-6, rtol=0)
        padding = attn[b].copy()
        padding[:rows[b], :cols[b]] = 0
        assert not padding.any(), "ATTENTION is zero beyond each item's lengths"


async def test_parameters_and_requested_outputs(triton):
    out = await triton(triton_calls.infer, "tiny", words("internationalization"), outputs=["OUTPUT_LENGTH", "OUTPUT"],
                       parameters={"max_output_len": 2})
    assert list(out) == ["_id", "OUTPUT_LENGTH", "OUTPUT"]  # in the requested order
    assert out["OUTPUT_LENGTH"][0] == 2 and len(out["OUTPUT"][0].split()) <= 2
    out = await triton(triton_calls.infer, "tiny", words("knight"), parameters={"return_attention": False})
    assert "ATTENTION" not in out and out["OUTPUT"].shape == (1,)


async def test_bad_requests_fail_and_the_server_keeps_serving(triton):
    failed = await triton(triton_calls.infer, "nope", words("a"))
    assert failed.status == "StatusCode.NOT_FOUND" and "nope" in failed.message
    failed = await triton(triton_calls.infer, "tiny", words("a"), version="7")
    assert failed.status == "StatusCode.NOT_FOUND"
    failed = await triton(triton_calls.infer, "tiny", np.array([1, 2], dtype=np.int32), datatype="INT32")
    assert failed.status == "StatusCode.INVALID_ARGUMENT" and "TEXT has datatype INT32" in failed.message
    failed = await triton(triton_calls.infer, "tiny", words(b"ok", b"\xff\xfe"))
    assert failed.status == "StatusCode.INVALID_ARGUMENT" and "TEXT[1] is not valid UTF-8" in failed.message
    failed = await triton(triton_calls.infer, "tiny", words("a"), parameters={"max_output_len": "2"})
    assert failed.status == "StatusCode.INVALID_ARGUMENT" and "max_output_len" in failed.message
    out = await triton(triton_calls.infer, "tiny", words("still"))
    assert out["INPUT_LENGTH"][0] == 5


async def test_typed_contents_give_the_same_result_as_raw(channel, triton):
    stub = kpbg.GRPCInferenceServiceStub(channel)
    request = kpb.ModelInferRequest(model_name="tiny", outputs=[kpb.ModelInferRequest.InferRequestedOutputTensor(
        name="OUTPUT")])
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[3],
                       contents=kpb.InferTensorContents(bytes_contents=[w.encode() for w in WORDS]))
    reply = await stub.ModelInfer(request)
    assert [o.name for o in reply.outputs] == ["OUTPUT"] and len(reply.raw_output_contents) == 1
    raw = await triton(triton_calls.infer, "tiny", words(*WORDS), outputs=["OUTPUT"])
    expected = b"".join(len(o).to_bytes(4, "little") + o for o in raw["OUTPUT"])
    assert reply.raw_output_contents[0] == expected


def _request(texts=(b"ok",), shape=None, datatype="BYTES", name="TEXT", raw=None, outputs=(), params=None):
    req = kpb.ModelInferRequest(model_name="tiny", parameters=params or {})
    req.inputs.add(name=name, datatype=datatype, shape=[len(texts)] if shape is None else shape,
                   contents=None if raw is not None else kpb.InferTensorContents(bytes_contents=list(texts)))
    if raw is not None:
        req.raw_input_contents.append(raw)
    req.outputs.extend(kpb.ModelInferRequest.InferRequestedOutputTensor(name=n) for n in outputs)
    return req


@pytest.mark.parametrize("request_,message", [
    (kpb.ModelInferRequest(model_name="tiny"), r"inputs must be TEXT, or TEXT and TARGET; got \[\]"),
    (_request(name="WORDS"), r"inputs must be TEXT, or TEXT and TARGET; got \['WORDS'\]"),
    (_request(shape=[1, 1]), r"TEXT has shape \[1, 1\]; expected \[B\]"),
    (_request(shape=[2]), "bytes_contents has 1 elements; shape says 2"),
    (_request(texts=[b"ok", b"  "]), r"TEXT\[1\] is empty"),
    (_request(texts=[b"x" * 21]), r"TEXT\[0\] has 21 characters; the limit is 20"),
    (_request(texts=[b"a"] * 9), "TEXT has 9 elements; at most 8"),
    (_request(shape=[1], raw=b"\x05\x00\x00\x00ab"), "element 0 claims 5 bytes"),
    (_request(outputs=["LOGITS"]), "unknown output 'LOGITS'"),
    (_request(outputs=["ATTENTION"], params={"return_attention": kpb.InferParameter(bool_param=False)}),
     "ATTENTION was requested but parameter return_attention is false"),
])
async def test_invalid_requests_name_the_field(channel, request_, message):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await kpbg.GRPCInferenceServiceStub(channel).ModelInfer(request_)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert re.search(message, e.value.details()), e.value.details()


async def test_metrics_reflection_and_not_ready(server, channel, tiny_bundle):
    stub = kpbg.GRPCInferenceServiceStub(channel)
    await stub.ModelInfer(_request())
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.ModelInfer(_request(texts=[b""]))
    samples = await metric_samples(server, "attnserve_requests")
    assert samples[("attnserve_requests_total", (("code", "OK"), ("model", "tiny"), ("rpc", "ModelInfer")))] >= 1
    assert samples[("attnserve_requests_total", (("code", "INVALID_ARGUMENT"), ("model", "tiny"), ("rpc", "ModelInfer")))] >= 1

    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    def services():
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
            return ProtoReflectionDescriptorDatabase(ch).get_services()
    assert KSERVE_SERVICE_NAME in await asyncio.to_thread(services)

    cold = build_server(config(tiny_bundle))  # bound, model not loaded
    await cold.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{cold.port}") as ch:
            cold_stub = kpbg.GRPCInferenceServiceStub(ch)
            assert (await cold_stub.ServerLive(kpb.ServerLiveRequest())).live
            assert not (await cold_stub.ServerReady(kpb.ServerReadyRequest())).ready
            assert not (await cold_stub.ModelReady(kpb.ModelReadyRequest(name="tiny"))).ready
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await cold_stub.ModelInfer(_request())
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await cold.stop(0)


async def test_the_example_client(server, channel):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE), "--url", f"127.0.0.1:{server.port}", "--model", "tiny", "--alignment",
        "knight", "a", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, stderr.decode()
    native = await pbg.TransducerStub(channel).Transduce(pb.TransduceRequest(inputs=["knight", "a"]))
    lines = stdout.decode().splitlines()
    assert lines[0].startswith("knight  " + native.results[0].output_text + "  (log-prob ")
    assert lines[2].startswith("a       " + native.results[1].output_text + "  (log-prob ")
    assert "<-" in lines[1]
