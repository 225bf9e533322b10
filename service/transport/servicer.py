"""The gRPC transport: attnserve.v1.Transducer handlers -> the model's answerer.

Maps domain errors to status codes and records per-RPC metrics. Answering and decoding
happen behind the answerer (service/answering/answerer.py).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import grpc

from attnserve.v1 import attnserve_pb2 as pb
from service.answering.answerer import Answerer
from service.config import ServerConfig
from service.domain import (BadRequest, BundleError, DeadlineExpired, InvalidInput, NotReady, OutsideAlphabet,
                            Overloaded, UnknownModel, VersionNotFound)
from service.engine.bundle import Bundle
from service.metrics import Metrics
from service.repository.repository import ModelRepository, versions_on_disk
from service.transport import convert
from service.transport.guard import internal_error

SERVICE_NAME = "attnserve.v1.Transducer"
log = logging.getLogger("attnserve")

# Domain error -> status code; anything else is INTERNAL.
STATUS_OF = {
    BadRequest: grpc.StatusCode.INVALID_ARGUMENT,
    InvalidInput: grpc.StatusCode.INVALID_ARGUMENT,
    OutsideAlphabet: grpc.StatusCode.INVALID_ARGUMENT,  # its message names the served models that read the input
    UnknownModel: grpc.StatusCode.NOT_FOUND,
    Overloaded: grpc.StatusCode.RESOURCE_EXHAUSTED,
    NotReady: grpc.StatusCode.UNAVAILABLE,
    VersionNotFound: grpc.StatusCode.NOT_FOUND,  # ReloadModel: no such version directory
    BundleError: grpc.StatusCode.FAILED_PRECONDITION,  # ReloadModel: bundle refused, the old one still serves
    DeadlineExpired: grpc.StatusCode.DEADLINE_EXCEEDED,
}


def deadline_of(context: grpc.aio.ServicerContext) -> float | None:
    """The call's deadline on time.perf_counter()'s clock (what the scheduler admits by), or None."""
    left_s = context.time_remaining()
    return None if left_s is None or left_s > 1e8 else time.perf_counter() + left_s


def status_of(e: Exception, rpc: str, repository: ModelRepository | None = None) -> tuple[grpc.StatusCode, str]:
    """The status code and message a domain error maps to; anything unexpected is INTERNAL.

    Details never carry internal text (exception names, file paths): a refused bundle's
    client hears its reason, the log also where it lies. An input outside the model's alphabet
    also hears which served models read it (the repository knows them; the answerer does not).
    """
    if isinstance(e, OutsideAlphabet) and repository is not None:
        return STATUS_OF[OutsideAlphabet], f"{e}; {repository.suggestion(e.text)}"
    if isinstance(e, VersionNotFound):
        return STATUS_OF[VersionNotFound], e.reason
    if isinstance(e, BundleError):
        log.warning("%s: %s", rpc, e)
        return STATUS_OF[BundleError], f"the bundle was refused, the served version is unchanged: {e.reason}"
    if type(e) in STATUS_OF:
        return STATUS_OF[type(e)], str(e)
    return grpc.StatusCode.INTERNAL, internal_error(rpc, e)


@dataclass
class Served:
    """The `model` label of an RPC's metrics: the served model's name, set once the request has
    named one ("" until then), so the label stays bounded whatever a client asks for."""

    model: str = ""


def begin(metrics: Metrics) -> float:
    """Count a request in flight; returns its start time. Every begin() needs one record()."""
    metrics.inflight_requests.inc()
    return time.perf_counter()


def record(metrics: Metrics, rpc: str, model: str, code: grpc.StatusCode, started: float) -> None:
    metrics.inflight_requests.dec()
    metrics.requests.labels(rpc, model, code.name).inc()
    metrics.request_seconds.labels(rpc, model, code.name).observe(time.perf_counter() - started)


async def observe(metrics: Metrics, rpc: str, served: Served, context, work, repository: ModelRepository | None = None):
    """Await one RPC's work: record its metrics and turn a domain error into its status code
    (status_of; with the repository, a refused input names the models that read it).

    Shared by every service on the server so that all map errors and label metrics alike.
    """
    started = begin(metrics)
    code = grpc.StatusCode.OK
    try:
        return await work
    except asyncio.CancelledError:  # the client cancelled or its deadline passed
        code = grpc.StatusCode.CANCELLED
        raise
    except Exception as e:  # keep serving
        code, message = status_of(e, rpc, repository)
    finally:
        record(metrics, rpc, served.model, code, started)
    await context.abort(code, message)


class ModelServicer:
    """What every servicer shares: its limits and metrics, and the repository it finds each
    request's model in (its current version: a hot reload swaps it between two calls)."""

    def __init__(self, limits: ServerConfig, metrics: Metrics, repository: ModelRepository):
        self.limits = limits
        self.metrics = metrics
        self.repository = repository

    def _ready(self, name: str, served: Served) -> tuple[Answerer, Bundle]:
        answerer, bundle = self.repository.ready(name)
        served.model = bundle.name
        return answerer, bundle


class TransducerServicer(ModelServicer):

    async def Transduce(self, raw: bytes, context: grpc.aio.ServicerContext) -> pb.TransduceResponse:
        served = Served()
        return await observe(self.metrics, "Transduce", served, context,
                             self._transduce(raw, deadline_of(context), served), self.repository)

    async def TransduceStream(self, raw_requests, context: grpc.aio.ServicerContext):
        """Every request message is decoded concurrently; responses go out as they finish.

        A failing message gets a response with `error` set; the stream goes on.
        """
        done: asyncio.Queue[pb.TransduceResponse | None] = asyncio.Queue()

        async def one(raw: bytes) -> None:
            started, code, served = begin(self.metrics), grpc.StatusCode.OK, Served()
            try:
                response = await self._transduce(raw, deadline_of(context), served)
            except asyncio.CancelledError:  # the client went away; still leave the in-flight count
                code = grpc.StatusCode.CANCELLED
                raise
            except Exception as e:
                code, message = status_of(e, "TransduceStream", self.repository)
                response = convert.to_error_response(code.name, message, convert.request_id_of(raw))
            finally:
                record(self.metrics, "TransduceStream", served.model, code, started)
            await done.put(response)

        tasks: set[asyncio.Task] = set()

        async def read_all() -> None:
            async for raw in raw_requests:
                tasks.add(asyncio.create_task(one(raw)))
            await asyncio.gather(*tasks)
            await done.put(None)

        reader = asyncio.create_task(read_all())
        try:
            while (response := await done.get()) is not None:
                yield response
        finally:  # the client went away: stop its work in the queue and the batch too
            reader.cancel()
            for task in tasks:
                task.cancel()

    async def GetModelInfo(self, request: pb.GetModelInfoRequest, context) -> pb.ModelInfo:
        served = Served()
        return await observe(self.metrics, "GetModelInfo", served, context, self._model_info(request.model_name, served))

    async def ListModels(self, request: pb.ListModelsRequest, context) -> pb.ListModelsResponse:
        return await observe(self.metrics, "ListModels", Served(), context, self._list_models())

    async def _list_models(self) -> pb.ListModelsResponse:
        def versions_of(name: str) -> list[str]:
            path = self.repository.dir_of(name)
            return versions_on_disk(path) if path is not None else []
        return convert.to_model_list(self.repository.index(), versions_of, self.repository.default)

    async def _transduce(self, raw: bytes, deadline_s: float | None, served: Served) -> pb.TransduceResponse:
        call = convert.parse_transduce(raw, self.limits)
        # No await between picking the answerer and enqueuing on it: a hot reload (service/repository/models.py)
        # swaps answerers between two event-loop steps, so each call lands wholly on one version.
        answerer, bundle = self._ready(call.model_name, served)
        convert.check_version(call.model_version, bundle.name, bundle.version)
        results = await answerer.transduce(call.texts, call.options, deadline_s)
        return convert.to_response(results, call, answerer.tgt_joiner, bundle.name, bundle.version)

    async def Score(self, request: pb.ScoreRequest, context) -> pb.ScoreResponse:
        served = Served()
        return await observe(self.metrics, "Score", served, context,
                             self._score(request, deadline_of(context), served), self.repository)

    async def _score(self, request: pb.ScoreRequest, deadline_s: float | None, served: Served) -> pb.ScoreResponse:
        call = convert.parse_score(request, self.limits)
        answerer, bundle = self._ready(call.model_name, served)
        convert.check_version(call.model_version, bundle.name, bundle.version)
        scored = await answerer.score(call.pairs, deadline_s=deadline_s)
        return convert.to_score_response(scored, call, answerer.tgt_joiner, bundle.name, bundle.version)

    async def TransduceText(self, request: pb.TransduceTextRequest, context) -> pb.TransduceTextResponse:
        served = Served()
        return await observe(self.metrics, "TransduceText", served, context,
                             self._transduce_text(request, deadline_of(context), served))

    async def _transduce_text(self, request: pb.TransduceTextRequest, deadline_s: float | None,
                              served: Served) -> pb.TransduceTextResponse:
        call = convert.parse_text(request, self.limits)
        answerer, bundle = self._ready(call.model_name, served)  # no await before enqueuing: see _transduce
        convert.check_version(call.model_version, bundle.name, bundle.version)
        answers = await answerer.transduce_text(call.texts, call.options, deadline_s, call.alphabet, call.separator,
                                                call.return_attention)
        return convert.to_text_response(answers, call, bundle.name, bundle.version)

    async def _model_info(self, name: str, served: Served) -> pb.ModelInfo:
        answerer, bundle = self._ready(name, served)
        return convert.to_model_info(bundle.manifest, answerer.precision)


def handler(servicer: TransducerServicer) -> grpc.GenericRpcHandler:
    """Method handlers for the service. Transduce takes raw bytes: see convert.parse_transduce."""
    return grpc.method_handlers_generic_handler(SERVICE_NAME, {
        "Transduce": grpc.unary_unary_rpc_method_handler(
            servicer.Transduce, request_deserializer=None,
            response_serializer=pb.TransduceResponse.SerializeToString),
        "TransduceStream": grpc.stream_stream_rpc_method_handler(
            servicer.TransduceStream, request_deserializer=None,
            response_serializer=pb.TransduceResponse.SerializeToString),
        "GetModelInfo": grpc.unary_unary_rpc_method_handler(
            servicer.GetModelInfo, request_deserializer=pb.GetModelInfoRequest.FromString,
            response_serializer=pb.ModelInfo.SerializeToString),
        "ListModels": grpc.unary_unary_rpc_method_handler(
            servicer.ListModels, request_deserializer=pb.ListModelsRequest.FromString,
            response_serializer=pb.ListModelsResponse.SerializeToString),
        "Score": grpc.unary_unary_rpc_method_handler(
            servicer.Score, request_deserializer=pb.ScoreRequest.FromString,
            response_serializer=pb.ScoreResponse.SerializeToString),
        "TransduceText": grpc.unary_unary_rpc_method_handler(
            servicer.TransduceText, request_deserializer=pb.TransduceTextRequest.FromString,
            response_serializer=pb.TransduceTextResponse.SerializeToString),
    })
