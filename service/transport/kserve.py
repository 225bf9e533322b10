"""The Open Inference Protocol (KServe v2 / Triton gRPC) beside the native API.

An edge module like servicer.py and convert.py: it parses `inference.*` messages into plain
values, which oip.py checks (the model as both of the protocol's bindings show it: inputs,
outputs, parameters), sends the texts through the same answerer (so KServe and native requests
share engine batches) and builds the response tensors.

Triton's ModelConfig says the same (max_batch_size 0: TEXT's one dimension is the batch), so that
perf_analyzer, which reads it before anything else, can drive the server.
"""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from attnserve.inference import grpc_service_pb2 as pb
from service.domain import BadRequest, Decoded, UnknownModel
from service.engine.bundle import Bundle
from service.transport import oip
from service.transport.convert import check_version
from service.transport.oip import INPUT, InferCall, raw_of, split_bytes_tensor
from service.transport.servicer import ModelServicer, Served, deadline_of, observe

KSERVE_SERVICE_NAME = "inference.GRPCInferenceService"
# The inference API's datatypes as Triton's model configuration names them.
_CONFIG_TYPE = {"BYTES": pb.TYPE_STRING, "FP32": pb.TYPE_FP32, "INT32": pb.TYPE_INT32}
PLATFORM = "onnxruntime"
# InferParameter's oneof -> the Python value oip.check_call expects
_PARAM_KINDS = ("bool_param", "int64_param", "double_param", "string_param")


def server_version() -> str:
    try:
        return version("attnserve")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def _params(params) -> dict:
    out = {}
    for key, p in params.items():
        kind = p.WhichOneof("parameter_choice")
        if kind in _PARAM_KINDS:
            out[key] = getattr(p, kind)
    return out


def parse_infer(req: pb.ModelInferRequest, limits, bundle: Bundle) -> InferCall:
    """Validate a ModelInferRequest against the model's signature and the server's limits (its model
    and version were found and checked by the servicer)."""
    if req.raw_input_contents and len(req.raw_input_contents) != len(req.inputs):
        raise BadRequest("raw_input_contents needs one entry per input")
    tensors = {}
    for k, tensor in enumerate(req.inputs):
        if tensor.name not in (INPUT, oip.TARGET) or tensor.name in tensors:
            raise BadRequest(f"inputs must be {INPUT}, or {INPUT} and {oip.TARGET}; got {[t.name for t in req.inputs]}")
        if tensor.datatype != "BYTES":
            raise BadRequest(f"{tensor.name} has datatype {tensor.datatype or '(none)'}; expected BYTES")
        if len(tensor.shape) != 1 or tensor.shape[0] < 1:
            raise BadRequest(f"{tensor.name} has shape {list(tensor.shape)}; expected [B] with B >= 1")
        count = tensor.shape[0]
        if count > limits.max_inputs_per_request:
            raise BadRequest(f"{tensor.name} has {count} elements; at most {limits.max_inputs_per_request} per request")
        if req.raw_input_contents:
            if tensor.HasField("contents"):
                raise BadRequest("with raw_input_contents no input may set contents")
            items = split_bytes_tensor(req.raw_input_contents[k], count)
        else:
            items = list(tensor.contents.bytes_contents)
            if len(items) != count:
                raise BadRequest(f"{tensor.name} contents.bytes_contents has {len(items)} elements; shape says {count}")
        tensors[tensor.name] = items
    params = _params(req.parameters)
    texts, targets = oip.check_inputs(tensors, limits, params)
    return oip.check_call(texts, params, [o.name for o in req.outputs], bundle, targets)


def to_infer_response(req: pb.ModelInferRequest, call: InferCall, hyps: list[list[Decoded]], joiner: str,
                      bundle: Bundle, readers: list[list[str] | None] | None = None) -> pb.ModelInferResponse:
    # Raw contents rather than typed ones: stock clients (tritonclient's as_numpy) read raw.
    reply = pb.ModelInferResponse(model_name=bundle.name, model_version=bundle.version, id=req.id)
    for name in call.outputs:
        shape, values = oip.output_of(call, name, hyps, joiner, readers)
        reply.outputs.add(name=name, datatype=oip.datatype_of(name), shape=shape)
        reply.raw_output_contents.append(raw_of(values))
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
        reply = pb.ServerMetadataResponse(name="attnserve", version=server_version(), extensions=[])
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
        return observe(self.metrics, rpc, served or Served(), context, work, self.repository)

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
            outputs=[meta(name=n, datatype=dt, shape=shape) for n, (dt, shape) in oip.outputs_of(bundle).items()])

    async def _model_config(self, request: pb.ModelConfigRequest, served: Served) -> pb.ModelConfigResponse:
        _, bundle = self._named(request.name, request.version, served)
        # max_batch_size 0: the batch is the TEXT dimension itself, batched again across calls by our batcher.
        config = pb.ModelConfig(
            name=bundle.name, platform=PLATFORM, max_batch_size=0,
            input=[pb.ModelInput(name=INPUT, data_type=pb.TYPE_STRING, dims=[-1])],
            output=[pb.ModelOutput(name=n, data_type=_CONFIG_TYPE[dt], dims=shape)
                    for n, (dt, shape) in oip.outputs_of(bundle).items()])
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
        answerer, bundle = self._ready(name, served)
        check_version(version, bundle.name, bundle.version)
        return answerer, bundle

    async def _infer(self, request: pb.ModelInferRequest, deadline_s: float | None,
                     served: Served) -> pb.ModelInferResponse:
        answerer, bundle = self._named(request.model_name, request.model_version, served)
        call = parse_infer(request, self.limits, bundle)
        hyps = await oip.run(answerer, call, deadline_s)
        readers = oip.readers_of(hyps, self.repository) if call.text and "TOKENS" in call.outputs else None
        return to_infer_response(request, call, hyps, answerer.tgt_joiner, bundle, readers)

