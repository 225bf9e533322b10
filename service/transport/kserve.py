"""The Open Inference Protocol (KServe v2 / Triton gRPC) beside the native API.

An edge module like servicer.py and convert.py: it parses `inference.*` messages
into domain values, sends the texts through the same batcher (so KServe and
native requests share engine batches) and builds the response tensors.

The model as KServe clients see it:
  input   TEXT           BYTES [B]        UTF-8 words, in `contents.bytes_contents` or `raw_input_contents`
  outputs OUTPUT         BYTES [B]        the output text (e.g. space-separated phonemes)
          SCORE          FP32  [B]        log-probability of each output
          ATTENTION      FP32  [B, T, S]  attention weights, zero-padded to the batch's longest T and S
          OUTPUT_LENGTH  INT32 [B]        T of each item: its real attention rows (decoder steps)
          INPUT_LENGTH   INT32 [B]        S of each item: its real attention columns (source tokens)
  parameters max_output_len (int64_param, 0 = the server's limit), return_attention (bool_param)

Triton's ModelConfig says the same (max_batch_size 0: TEXT's one dimension is the batch), so that
perf_analyzer, which reads it before anything else, can drive the server.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

import numpy as np

from inference import grpc_service_pb2 as pb
from service.engine.bundle import Bundle
from service.repository.repository import UnknownModel
from service.config import ServerConfig
from service.transport.convert import BadRequest, check_version, has_attention
from service.engine.engine import Decoded, DecodeOptions
from service.transport.servicer import ModelServicer, Served, deadline_of, observe

KSERVE_SERVICE_NAME = "inference.GRPCInferenceService"
INPUT = "TEXT"
# name -> (datatype, shape); -1 marks a dimension that varies per request.
OUTPUTS = {
    "OUTPUT": ("BYTES", [-1]),
    "SCORE": ("FP32", [-1]),
    "ATTENTION": ("FP32", [-1, -1, -1]),
    "OUTPUT_LENGTH": ("INT32", [-1]),
    "INPUT_LENGTH": ("INT32", [-1]),
}
# The inference API's datatypes as Triton's model configuration names them.
_CONFIG_TYPE = {"BYTES": pb.TYPE_STRING, "FP32": pb.TYPE_FP32, "INT32": pb.TYPE_INT32}
PLATFORM = "onnxruntime"
_LENGTH_PREFIX = struct.Struct("<I")  # BYTES raw format: a 4-byte little-endian length before each element


@dataclass(frozen=True)
class InferCall:
    texts: list[str]
    outputs: list[str]  # in the order they go into the response
    max_output_len: int  # 0 = the engine's limit


def _server_version() -> str:
    try:
        return version("attnserve")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def split_bytes_tensor(raw: bytes, count: int) -> list[bytes]:
    """Split a raw BYTES tensor into its `count` elements (each length-prefixed)."""
    items, offset = [], 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise BadRequest(f"raw_input_contents for {INPUT} ends inside a length prefix")
        (n,), offset = _LENGTH_PREFIX.unpack_from(raw, offset), offset + 4
        if offset + n > len(raw):
            raise BadRequest(f"raw_input_contents for {INPUT}: element {len(items)} claims {n} bytes, "
                             f"only {len(raw) - offset} left")
        items.append(raw[offset:offset + n])
        offset += n
    if len(items) != count:
        raise BadRequest(f"raw_input_contents for {INPUT} holds {len(items)} elements; shape says {count}")
    return items


def _param(params, key: str, kind: str, default):
    if key not in params:
        return default
    if params[key].WhichOneof("parameter_choice") != kind:
        raise BadRequest(f"parameter {key} must be a {kind}")
    return getattr(params[key], kind)


def _outputs(bundle: Bundle) -> dict:
    """The model's outputs: a model without attention has no ATTENTION."""
    return {n: v for n, v in OUTPUTS.items() if n != "ATTENTION" or has_attention(bundle.manifest)}


def parse_infer(req: pb.ModelInferRequest, limits: ServerConfig, bundle: Bundle) -> InferCall:
    """Validate a ModelInferRequest against the model's signature and the server's limits (its model
    and version were found and checked by the servicer)."""
    names = [t.name for t in req.inputs]
    if names != [INPUT]:
        raise BadRequest(f"inputs must be exactly one tensor named {INPUT}, got {names}")
    tensor = req.inputs[0]
    if tensor.datatype != "BYTES":
        raise BadRequest(f"{INPUT} has datatype {tensor.datatype or '(none)'}; expected BYTES")
    if len(tensor.shape) != 1 or tensor.shape[0] < 1:
        raise BadRequest(f"{INPUT} has shape {list(tensor.shape)}; expected [B] with B >= 1")
    count = tensor.shape[0]
    if count > limits.max_inputs_per_request:
        raise BadRequest(f"{INPUT} has {count} elements; at most {limits.max_inputs_per_request} per request")
    if req.raw_input_contents:
        if len(req.raw_input_contents) != 1 or tensor.HasField("contents"):
            raise BadRequest("raw_input_contents needs one entry per input, and then no input may set contents")
        items = split_bytes_tensor(req.raw_input_contents[0], count)
    else:
        items = list(tensor.contents.bytes_contents)
        if len(items) != count:
            raise BadRequest(f"{INPUT} contents.bytes_contents has {len(items)} elements; shape says {count}")
    texts = []
    for i, item in enumerate(items):
        try:
            text = item.decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest(f"{INPUT}[{i}] is not valid UTF-8") from None
        if not text.strip():
            raise BadRequest(f"{INPUT}[{i}] is empty")
        if len(text) > limits.max_input_len:
            raise BadRequest(f"{INPUT}[{i}] has {len(text)} characters; the limit is {limits.max_input_len}")
        texts.append(text)
    max_output_len = _param(req.parameters, "max_output_len", "int64_param", 0)
    if max_output_len < 0:
        raise BadRequest(f"parameter max_output_len must be >= 0, got {max_output_len}")
    # A model without attention (ModelInfo.has_attention false) has no ATTENTION output.
    return_attention = _param(req.parameters, "return_attention", "bool_param", True) and has_attention(bundle.manifest)
    outputs = [o.name for o in req.outputs] or [n for n in OUTPUTS if return_attention or n != "ATTENTION"]
    for name in outputs:
        if name not in OUTPUTS:
            raise BadRequest(f"unknown output {name!r}; the model has {list(OUTPUTS)}")
    if "ATTENTION" in outputs and not has_attention(bundle.manifest):
        raise BadRequest(f"output ATTENTION was requested but model {bundle.name!r} has no attention")
    if "ATTENTION" in outputs and not return_attention:
        raise BadRequest("output ATTENTION was requested but parameter return_attention is false")
    return InferCall(texts=texts, outputs=outputs, max_output_len=max_output_len)


def _tensor(name: str, results: list[Decoded], joiner: str) -> tuple[list[int], bytes]:
    """One output as (shape, raw little-endian row-major bytes)."""
    B = len(results)
    if name == "OUTPUT":
        texts = [joiner.join(d.output_tokens).encode("utf-8") for d in results]
        return [B], b"".join(_LENGTH_PREFIX.pack(len(t)) + t for t in texts)
    if name == "SCORE":
        return [B], np.array([d.score for d in results], dtype="<f4").tobytes()
    if name == "OUTPUT_LENGTH":
        return [B], np.array([d.steps for d in results], dtype="<i4").tobytes()
    if name == "INPUT_LENGTH":
        return [B], np.array([len(d.src_tokens) for d in results], dtype="<i4").tobytes()
    # ATTENTION: one dense tensor needs one T and S, so shorter items are zero-padded;
    # OUTPUT_LENGTH and INPUT_LENGTH tell a client where each item's real matrix ends.
    T, S = max(d.attn.shape[0] for d in results), max(d.attn.shape[1] for d in results)
    attn = np.zeros((B, T, S), dtype="<f4")
    for b, d in enumerate(results):
        attn[b, :d.attn.shape[0], :d.attn.shape[1]] = d.attn
    return [B, T, S], attn.tobytes()


def to_infer_response(req: pb.ModelInferRequest, call: InferCall, results: list[Decoded], joiner: str,
                      bundle: Bundle) -> pb.ModelInferResponse:
    # Raw contents rather than typed ones: stock clients (tritonclient's as_numpy) read raw.
    reply = pb.ModelInferResponse(model_name=bundle.name, model_version=bundle.version, id=req.id)
    for name in call.outputs:
        shape, raw = _tensor(name, results, joiner)
        reply.outputs.add(name=name, datatype=OUTPUTS[name][0], shape=shape)
        reply.raw_output_contents.append(raw)
    return reply


def _check_repository(name: str) -> None:
    if name:  # Triton can have several repositories; this server has one, and it has no name
        raise UnknownModel(f"repository_name {name!r}: this server has one model repository; leave it empty")


class KServeServicer(ModelServicer):
    """inference.GRPCInferenceService: register with add_GRPCInferenceServiceServicer_to_server."""

    async def ServerLive(self, request, context):
        return await self._observe("ServerLive", context, self._value(pb.ServerLiveResponse(live=True)))

    async def ServerReady(self, request, context):
        ready = pb.ServerReadyResponse(ready=self.repository.all_ready())
        return await self._observe("ServerReady", context, self._value(ready))

    async def ModelReady(self, request, context):
        # An unknown model is simply not ready: readiness probes want a yes or no, not an error.
        ready = pb.ModelReadyResponse(ready=self.repository.is_ready(request.name, request.version))
        return await self._observe("ModelReady", context, self._value(ready))

    async def ServerMetadata(self, request, context):
        reply = pb.ServerMetadataResponse(name="attnserve", version=_server_version(), extensions=[])
        return await self._observe("ServerMetadata", context, self._value(reply))

    async def ModelMetadata(self, request, context):
        served = Served()
        return await self._observe("ModelMetadata", context, self._model_metadata(request, served), served)

    async def ModelInfer(self, request, context):
        served = Served()
        return await self._observe("ModelInfer", context, self._infer(request, deadline_of(context), served), served)

    async def ModelConfig(self, request, context):
        # Triton's extension; perf_analyzer reads it (and refuses to run without it).
        served = Served()
        return await self._observe("ModelConfig", context, self._model_config(request, served), served)

    def _observe(self, rpc: str, context, work, served: Served | None = None):
        return observe(self.metrics, rpc, served or Served(), context, work)

    @staticmethod
    async def _value(reply):
        # observe() awaits the RPC's work; these answers need none, but get the same metrics.
        return reply

    async def _model_metadata(self, request: pb.ModelMetadataRequest, served: Served) -> pb.ModelMetadataResponse:
        _, bundle = self._named(request.name, request.version, served)
        meta = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=bundle.name, versions=[bundle.version], platform=PLATFORM,
            inputs=[meta(name=INPUT, datatype="BYTES", shape=[-1])],
            outputs=[meta(name=n, datatype=dt, shape=shape) for n, (dt, shape) in _outputs(bundle).items()])

    async def _model_config(self, request: pb.ModelConfigRequest, served: Served) -> pb.ModelConfigResponse:
        _, bundle = self._named(request.name, request.version, served)
        # max_batch_size 0: the batch is the TEXT dimension itself, batched again across calls by our batcher.
        config = pb.ModelConfig(
            name=bundle.name, platform=PLATFORM, max_batch_size=0,
            input=[pb.ModelInput(name=INPUT, data_type=pb.TYPE_STRING, dims=[-1])],
            output=[pb.ModelOutput(name=n, data_type=_CONFIG_TYPE[dt], dims=shape)
                    for n, (dt, shape) in _outputs(bundle).items()])
        return pb.ModelConfigResponse(config=config)

    async def RepositoryIndex(self, request: pb.RepositoryIndexRequest, context):
        return await self._observe("RepositoryIndex", context, self._index(request))

    async def RepositoryModelLoad(self, request: pb.RepositoryModelLoadRequest, context):
        served = Served()
        return await self._observe("RepositoryModelLoad", context, self._load(request, served), served)

    async def RepositoryModelUnload(self, request: pb.RepositoryModelUnloadRequest, context):
        served = Served()
        return await self._observe("RepositoryModelUnload", context, self._unload(request, served), served)

    async def _index(self, request: pb.RepositoryIndexRequest) -> pb.RepositoryIndexResponse:
        _check_repository(request.repository_name)
        index = pb.RepositoryIndexResponse.ModelIndex
        return pb.RepositoryIndexResponse(models=[
            index(name=s.name, version=s.version, state=s.state, reason=s.reason)
            for s in self.repository.index() if s.state == "READY" or not request.ready])

    async def _load(self, request: pb.RepositoryModelLoadRequest, served: Served) -> pb.RepositoryModelLoadResponse:
        _check_repository(request.repository_name)
        status = await self.repository.load_model(request.model_name)
        served.model = status.name
        return pb.RepositoryModelLoadResponse()

    async def _unload(self, request: pb.RepositoryModelUnloadRequest,
                      served: Served) -> pb.RepositoryModelUnloadResponse:
        _check_repository(request.repository_name)
        await self.repository.unload_model(request.model_name)
        served.model = request.model_name  # a name it served a moment ago: still a bounded label
        return pb.RepositoryModelUnloadResponse()

    def _named(self, name: str, version: str, served: Served):
        """The Open Inference Protocol names the model in every model call."""
        if not name:
            raise UnknownModel("the model name is empty: the Open Inference Protocol names the model of every call")
        batcher, bundle = self._ready(name, served)
        check_version(version, bundle.name, bundle.version)
        return batcher, bundle

    async def _infer(self, request: pb.ModelInferRequest, deadline_s: float | None,
                     served: Served) -> pb.ModelInferResponse:
        batcher, bundle = self._named(request.model_name, request.model_version, served)
        call = parse_infer(request, self.limits, bundle)
        hyps = await batcher.transduce(call.texts, DecodeOptions(max_output_len=call.max_output_len), deadline_s)
        return to_infer_response(request, call, [h[0] for h in hyps], batcher.engine.tgt_joiner, bundle)

