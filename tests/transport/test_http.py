"""The Open Inference Protocol's HTTP/REST binding end to end: the stock tritonclient.http against a
real server on loopback, equal to the gRPC bindings; plain HTTP requests for every error path; and
every hypothesis's attention (n_best) over both bindings.

tritonclient.http is synchronous: its calls run in a thread while the server runs in this loop.
(It shares no protobuf module with the server, unlike tritonclient.grpc: see tests/triton_calls.py.)
"""
import asyncio
import json

import aiohttp
import numpy as np
import pytest
import pytest_asyncio

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from attnserve.inference import grpc_service_pb2 as kpb, grpc_service_pb2_grpc as kpbg
from service.transport.oip import OUTPUTS
from tests.live import ServerSetup, copy_model, serving
from tests.server.test_server import config

WORDS = ["attention", "knight", "a"]


@pytest.fixture(scope="module")
def server_setup(tiny_bundle, tmp_path_factory):
    # a repository: the tiny model, and a broken one (not ready: 503)
    repository = tmp_path_factory.mktemp("http-repo")
    copy_model(tiny_bundle, repository, "tiny")
    copy_model(tiny_bundle, repository, "broken", break_onnx=True)
    cfg = config(None)
    return ServerSetup(type(cfg)(model_repository=repository, server=cfg.server, answering=cfg.answering,
                                 batcher=cfg.batcher))


@pytest_asyncio.fixture(loop_scope="session")
async def http(server):
    async with aiohttp.ClientSession(f"http://127.0.0.1:{server.metrics_port}") as session:
        yield session


def triton_http(port: int):
    import tritonclient.http as triton

    return triton.InferenceServerClient(f"127.0.0.1:{port}")


def _triton_infer(port: int, texts: list[str], binary: bool, **kwargs) -> dict:
    import tritonclient.http as triton

    client = triton_http(port)
    text = triton.InferInput("TEXT", [len(texts)], "BYTES")
    text.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_), binary_data=binary)
    outputs = [triton.InferRequestedOutput(n, binary_data=binary) for n in OUTPUTS] if not binary else None
    result = client.infer("tiny", [text], outputs=outputs, request_id="r-7", **kwargs)
    out = {n: result.as_numpy(n) for n in OUTPUTS}
    out["_id"] = result.get_response()["id"]
    return out


def _triton_meta(port: int) -> dict:
    client = triton_http(port)
    return {"live": client.is_server_live(), "ready": client.is_server_ready(),
            "model_ready": client.is_model_ready("tiny"), "broken_ready": client.is_model_ready("broken"),
            "server": client.get_server_metadata(), "model": client.get_model_metadata("tiny", "1"),
            "index": client.get_model_repository_index()}


async def test_stock_tritonclient_http_health_metadata_and_index(server):
    meta = await asyncio.to_thread(_triton_meta, server.metrics_port)
    # the server is not ready: it was asked to serve "broken", which did not load
    assert (meta["live"], meta["ready"], meta["model_ready"], meta["broken_ready"]) == (True, False, True, False)
    assert meta["server"]["name"] == "attnserve"
    assert meta["model"]["name"] == "tiny" and meta["model"]["versions"] == ["1"]
    assert meta["model"]["inputs"] == [{"name": "TEXT", "datatype": "BYTES", "shape": [-1]}]
    assert [o["name"] for o in meta["model"]["outputs"]] == list(OUTPUTS)
    index = {m["name"]: m for m in meta["index"]}
    assert index["tiny"]["state"] == "READY" and index["broken"]["state"] == "UNAVAILABLE" and index["broken"]["reason"]


@pytest.mark.parametrize("binary", [True, False], ids=["binary-extension", "json"])
async def test_tritonclient_http_infer_equals_both_grpc_bindings(server, channel, binary):
    out = await asyncio.to_thread(_triton_infer, server.metrics_port, WORDS, binary)
    assert out["_id"] == "r-7"
    native = await pbg.TransducerStub(channel).Transduce(pb.TransduceRequest(inputs=WORDS, model_name="tiny"))
    kserve = await kpbg.GRPCInferenceServiceStub(channel).ModelInfer(_kserve_request(WORDS))
    grpc_out = {o.name: (list(o.shape), raw) for o, raw in zip(kserve.outputs, kserve.raw_output_contents)}
    attn, rows, cols = out["ATTENTION"], out["OUTPUT_LENGTH"], out["INPUT_LENGTH"]
    assert list(attn.shape) == grpc_out["ATTENTION"][0]
    assert np.array_equal(attn, np.frombuffer(grpc_out["ATTENTION"][1], "<f4").reshape(attn.shape))
    for b, r in enumerate(native.results):
        text = out["OUTPUT"][b]  # bytes from the binary extension, str from JSON
        assert (text.decode() if isinstance(text, bytes) else text) == r.output_text
        assert out["SCORE"][b] == pytest.approx(r.log_prob, rel=1e-6, abs=1e-6)
        assert (rows[b], cols[b]) == (r.attention.rows, r.attention.cols)
        m = np.array(r.attention.weights, dtype=np.float32).reshape(r.attention.rows, r.attention.cols)
        assert np.allclose(attn[b, :rows[b], :cols[b]], m, atol=1e-6, rtol=0)


def _kserve_request(texts, **params) -> kpb.ModelInferRequest:
    req = kpb.ModelInferRequest(model_name="tiny")
    tensor = req.inputs.add(name="TEXT", datatype="BYTES", shape=[len(texts)])
    tensor.contents.bytes_contents.extend(t.encode() for t in texts)
    for key, value in params.items():
        kind = {bool: "bool_param", int: "int64_param", float: "double_param", str: "string_param"}[type(value)]
        setattr(req.parameters[key], kind, value)
    return req


async def test_every_hypothesis_and_its_attention_over_both_bindings(http, channel):
    texts, n = ["knight", "a"], 3
    native = await pbg.TransducerStub(channel).Transduce(pb.TransduceRequest(
        inputs=texts, model_name="tiny", options=pb.DecodeOptions(beam_size=n, n_best=n)))
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": texts}],
            "parameters": {"beam_size": n, "n_best": n}}
    async with http.post("/v2/models/tiny/infer", json=body) as r:
        assert r.status == 200, await r.text()
        rest = {o["name"]: o for o in (await r.json())["outputs"]}
    kserve = await kpbg.GRPCInferenceServiceStub(channel).ModelInfer(_kserve_request(texts, beam_size=n, n_best=n))
    grpc_out = {o.name: (list(o.shape), raw) for o, raw in zip(kserve.outputs, kserve.raw_output_contents)}
    assert set(rest) == set(grpc_out) == set(OUTPUTS) | {"HYPOTHESIS_COUNT"}
    N = rest["OUTPUT"]["shape"][1]
    assert rest["OUTPUT"]["shape"] == grpc_out["OUTPUT"][0] == [2, N]
    T, S = rest["ATTENTION"]["shape"][2:]
    assert rest["ATTENTION"]["shape"] == grpc_out["ATTENTION"][0] == [2, N, T, S]
    attn = np.array(rest["ATTENTION"]["data"], dtype=np.float32).reshape(2, N, T, S)
    assert np.array_equal(attn, np.frombuffer(grpc_out["ATTENTION"][1], "<f4").reshape(2, N, T, S))
    lengths = np.array(rest["OUTPUT_LENGTH"]["data"]).reshape(2, N)
    scores = np.array(rest["SCORE"]["data"], dtype=object).reshape(2, N)
    for b, result in enumerate(native.results):
        hyps = [result, *result.alternatives]  # the native API's n-best, best first
        count = rest["HYPOTHESIS_COUNT"]["data"][b]
        assert count == len(hyps) and 1 <= count <= N
        cols = rest["INPUT_LENGTH"]["data"][b]
        for k, hyp in enumerate(hyps):
            rows = lengths[b, k]
            assert rest["OUTPUT"]["data"][b * N + k] == hyp.output_text
            assert scores[b, k] == pytest.approx(hyp.log_prob, rel=1e-6, abs=1e-6)
            assert (rows, cols) == (hyp.attention.rows, hyp.attention.cols)
            m = np.array(hyp.attention.weights, dtype=np.float32).reshape(rows, cols)
            assert np.allclose(attn[b, k, :rows, :cols], m, atol=1e-6, rtol=0)  # its own attention
            padding = attn[b, k].copy()
            padding[:rows, :cols] = 0
            assert not padding.any()
        for k in range(count, N):  # missing hypotheses: "", null score, length 0
            assert (rest["OUTPUT"]["data"][b * N + k], scores[b, k], lengths[b, k]) == ("", None, 0)


async def _status(http, method: str, path: str, **kwargs) -> tuple[int, dict]:
    async with http.request(method, path, **kwargs) as r:
        return r.status, json.loads(await r.read() or b"{}")


def _infer(data=("a",), **tensor) -> dict:
    t = {"name": "TEXT", "datatype": "BYTES", "shape": [len(data)], "data": list(data)} | tensor
    return {"inputs": [t]}


@pytest.mark.parametrize("path, body, status, message", [
    ("/v2/models/nope/infer", _infer(), 404, "nope"),
    ("/v2/models/tiny/versions/7/infer", _infer(), 404, "7"),
    ("/v2/models/broken/infer", _infer(), 503, "broken"),
    ("/v2/models/tiny/infer", b"{not json", 400, "not JSON"),
    ("/v2/models/tiny/infer", [1, 2], 400, "JSON object"),
    ("/v2/models/tiny/infer", {"inputs": [{"name": "X", "datatype": "BYTES", "shape": [1], "data": ["a"]}]}, 400, "TEXT"),
    ("/v2/models/tiny/infer", _infer(datatype="INT32"), 400, "datatype INT32"),
    ("/v2/models/tiny/infer", _infer(shape=[2]), 400, "2 strings"),
    ("/v2/models/tiny/infer", _infer(shape=["1"]), 400, "shape"),
    ("/v2/models/tiny/infer", _infer(data=[""]), 400, "TEXT[0] is empty"),
    ("/v2/models/tiny/infer", _infer(data=["x" * 21]), 400, "the limit is 20"),
    ("/v2/models/tiny/infer", _infer(data=["a"] * 9), 400, "at most 8"),
    ("/v2/models/tiny/infer", _infer() | {"parameters": {"max_output_len": "2"}}, 400, "max_output_len"),
    ("/v2/models/tiny/infer", _infer() | {"parameters": {"n_best": 3, "beam_size": 2}}, 400, "n_best"),
    ("/v2/models/tiny/infer", _infer() | {"parameters": {"return_attention": 1}}, 400, "return_attention"),
    ("/v2/models/tiny/infer", _infer() | {"outputs": [{"name": "NOPE"}]}, 400, "NOPE"),
    ("/v2/models/tiny/infer", _infer() | {"parameters": {"timeout": -5}}, 400, "timeout"),
    ("/v2/models/tiny/infer", _infer() | {"parameters": {"timeout": 1}}, 504, "deadline"),
    ("/v2/repository/index", b"[", 400, "not JSON"),
])
async def test_error_paths_answer_json_with_the_protocols_status(http, path, body, status, message):
    kwargs = {"data": body} if isinstance(body, bytes) else {"json": body}
    got, reply = await _status(http, "POST", path, **kwargs)
    assert got == status, reply
    assert message in reply["error"], reply
    assert set(reply) == {"error"}


async def test_binary_extension_errors_and_unknown_routes(http):
    raw = b"\x05\x00\x00\x00ab"  # claims 5 bytes, holds 2
    head = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1],
                                   "parameters": {"binary_data_size": len(raw)}}]}).encode()
    got, reply = await _status(http, "POST", "/v2/models/tiny/infer", data=head + raw,
                               headers={"Inference-Header-Content-Length": str(len(head))})
    assert got == 400 and "claims 5 bytes" in reply["error"]
    got, reply = await _status(http, "POST", "/v2/models/tiny/infer", data=head,
                               headers={"Inference-Header-Content-Length": "99999"})
    assert got == 400 and "Inference-Header-Content-Length" in reply["error"]
    assert (await _status(http, "GET", "/v2/models/nope"))[0] == 404
    assert (await _status(http, "GET", "/v2/models/nope/ready"))[0] == 404
    assert (await _status(http, "GET", "/v2/models/broken/ready"))[0] == 503
    assert (await _status(http, "GET", "/v2/models/tiny/versions/1/ready"))[0] == 200
    async with http.get("/v2/nothing-here") as r:
        assert r.status == 404
    async with http.get("/v2/models/tiny/infer") as r:
        assert r.status == 405  # infer is a POST


async def test_unknown_routes_and_wrong_methods_answer_the_protocols_json_error(http):
    """aiohttp's own 404 and 405 are plain text ("404: Not Found"); the protocol's every error is a
    JSON object with `error`, and a 405 still says which methods the route takes."""
    for method, path in (("GET", "/v2/nothing-here"), ("POST", "/nope"), ("GET", "/v2/models/tiny/infer/more")):
        async with http.request(method, path) as r:
            assert (r.status, r.content_type) == (404, "application/json"), await r.text()
            reply = await r.json()
            assert set(reply) == {"error"} and path in reply["error"]
    async with http.get("/v2/models/tiny/infer") as r:  # infer is a POST
        assert (r.status, r.content_type) == (405, "application/json"), await r.text()
        assert r.headers["Allow"] == "POST"
        reply = await r.json()
        assert set(reply) == {"error"} and "GET is not allowed" in reply["error"] and "POST" in reply["error"]
    async with http.delete("/metrics") as r:
        assert r.status == 405 and set((await r.json())) == {"error"} and "GET" in r.headers["Allow"]
    # The routes that are not the protocol's still answer in their own form.
    async with http.get("/metrics") as r:
        assert r.status == 200 and "attnserve_requests_total" in await r.text()
    async with http.get("/") as r:
        assert r.status == 200 and r.content_type == "text/html"


async def test_metrics_on_the_same_port_count_http_calls(http):
    async with http.post("/v2/models/tiny/infer", json=_infer(["knight"])) as r:
        assert r.status == 200
    async with http.post("/v2/models/no-such-model/infer", json=_infer(["knight"])) as r:
        assert r.status == 404  # counted without a model name: labels stay bounded whatever clients send
    async with http.get("/metrics") as r:
        assert r.status == 200 and r.content_type == "text/plain"
        text = await r.text()
    assert 'attnserve_requests_total{code="OK",model="tiny",rpc="http.ModelInfer"}' in text
    assert 'attnserve_requests_total{code="NOT_FOUND",model="",rpc="http.ModelInfer"}' in text


async def test_token_guards_everything_but_metrics_health_and_the_page(tiny_bundle, monkeypatch):
    monkeypatch.setenv("ATTNSERVE_AUTH_TOKEN", "s3cret-token-of-16+")
    async with serving(config(tiny_bundle)) as s, aiohttp.ClientSession(f"http://127.0.0.1:{s.metrics_port}") as h:
        for path in ("/metrics", "/v2/health/live", "/v2/health/ready"):
            async with h.get(path) as r:
                assert r.status == 200, path
        got, reply = await _status(h, "POST", "/v2/models/tiny/infer", json=_infer())
        assert got == 401 and reply["error"] == "missing bearer token"
        got, reply = await _status(h, "GET", "/v2/models/tiny", headers={"Authorization": "Bearer nope"})
        assert got == 401 and reply["error"] == "wrong bearer token"
        got, _ = await _status(h, "POST", "/v2/models/tiny/infer", json=_infer(),
                               headers={"Authorization": "Bearer s3cret-token-of-16+"})
        assert got == 200


async def test_scoring_over_both_bindings_equals_the_native_score_rpc(http, channel):
    texts, targets = ["knight", "knight", "a"], ["N AY T", "K N IH G T", "AH"]
    native = await pbg.TransducerStub(channel).Score(pb.ScoreRequest(model_name="tiny", items=[
        pb.ScoreItem(source=s, candidates=[t]) for s, t in zip(texts, targets)]))
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [3], "data": texts},
                       {"name": "TARGET", "datatype": "BYTES", "shape": [3], "data": targets}]}
    async with http.post("/v2/models/tiny/infer", json=body) as r:
        assert r.status == 200, await r.text()
        rest = {o["name"]: o for o in (await r.json())["outputs"]}
    req = _kserve_request(texts)
    target = req.inputs.add(name="TARGET", datatype="BYTES", shape=[3])
    target.contents.bytes_contents.extend(t.encode() for t in targets)
    kserve = await kpbg.GRPCInferenceServiceStub(channel).ModelInfer(req)
    grpc_out = {o.name: (list(o.shape), raw) for o, raw in zip(kserve.outputs, kserve.raw_output_contents)}
    assert set(rest) == set(grpc_out) == set(OUTPUTS) | {"TOKEN_LOG_PROBS"}
    assert rest["OUTPUT"]["data"] == targets
    T = rest["TOKEN_LOG_PROBS"]["shape"][1]
    token_lp = np.array(rest["TOKEN_LOG_PROBS"]["data"]).reshape(3, T)
    assert np.array_equal(token_lp.astype("<f4"), np.frombuffer(grpc_out["TOKEN_LOG_PROBS"][1], "<f4").reshape(3, T))
    for b, item in enumerate(native.results):
        (c,) = item.candidates
        assert rest["SCORE"]["data"][b] == pytest.approx(c.log_prob, abs=1e-5)
        assert np.allclose(token_lp[b, :len(c.token_log_probs)], c.token_log_probs, atol=1e-5)
    assert rest["SCORE"]["data"][0] > rest["SCORE"]["data"][1]
    bad = {"inputs": body["inputs"][:1] + [{"name": "TARGET", "datatype": "BYTES", "shape": [1], "data": ["AH"]}]}
    got, reply = await _status(http, "POST", "/v2/models/tiny/infer", json=bad)
    assert got == 400 and "one candidate each" in reply["error"]
    bad = {"inputs": body["inputs"][:1] + [{"name": "TARGET", "datatype": "BYTES", "shape": [3],
                                             "data": ["N AY T", "QQ", "AH"]}]}
    got, reply = await _status(http, "POST", "/v2/models/tiny/infer", json=bad)
    assert got == 400 and "'QQ'" in reply["error"], reply
