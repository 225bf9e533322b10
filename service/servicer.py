"""The gRPC transport: attnserve.v1.Transducer handlers -> batcher.

Maps domain errors to status codes and records per-RPC metrics. Decoding
itself happens behind the batcher.
"""
from __future__ import annotations

import asyncio
import logging
import time

import grpc

from attnserve.v1 import attnserve_pb2 as pb
from service import convert
from service.batcher import Batcher, InvalidInput, NotReady, Overloaded
from service.bundle import Bundle
from service.config import ServerConfig
from service.metrics import Metrics

SERVICE_NAME = "attnserve.v1.Transducer"
log = logging.getLogger("attnserve")

# Domain error -> status code; anything else is INTERNAL.
STATUS_OF = {
    convert.BadRequest: grpc.StatusCode.INVALID_ARGUMENT,
    InvalidInput: grpc.StatusCode.INVALID_ARGUMENT,
    convert.UnknownModel: grpc.StatusCode.NOT_FOUND,
    Overloaded: grpc.StatusCode.RESOURCE_EXHAUSTED,
    NotReady: grpc.StatusCode.UNAVAILABLE,
}


def status_of(e: Exception, rpc: str) -> tuple[grpc.StatusCode, str]:
    """The status code and message a domain error maps to; anything unexpected is INTERNAL."""
    if type(e) in STATUS_OF:
        return STATUS_OF[type(e)], str(e)
    log.error("%s failed", rpc, exc_info=e)  # the client sees INTERNAL, the log has the cause
    return grpc.StatusCode.INTERNAL, f"internal error: {type(e).__name__}: {e}"


def record(metrics: Metrics, rpc: str, code: grpc.StatusCode, started: float) -> None:
    metrics.requests.labels(rpc, code.name).inc()
    metrics.request_seconds.labels(rpc, code.name).observe(time.perf_counter() - started)


async def observe(metrics: Metrics, rpc: str, context, work):
    """Await one RPC's work: record its metrics and turn a domain error into its status code.

    Shared by every service on the server so that all map errors and label metrics alike.
    """
    started = time.perf_counter()
    code = grpc.StatusCode.OK
    try:
        return await work
    except asyncio.CancelledError:  # the client cancelled or its deadline passed
        code = grpc.StatusCode.CANCELLED
        raise
    except Exception as e:  # keep serving
        code, message = status_of(e, rpc)
    finally:
        record(metrics, rpc, code, started)
    await context.abort(code, message)


class TransducerServicer:
    def __init__(self, limits: ServerConfig, metrics: Metrics):
        self.limits = limits
        self.metrics = metrics
        self.batcher: Batcher | None = None
        self.bundle: Bundle | None = None

    def attach(self, batcher: Batcher, bundle: Bundle) -> None:
        """Start answering with this model (called once it is loaded and warm)."""
        self.batcher, self.bundle = batcher, bundle

    async def Transduce(self, raw: bytes, context: grpc.aio.ServicerContext) -> pb.TransduceResponse:
        return await observe(self.metrics, "Transduce", context, self._transduce(raw))

    async def TransduceStream(self, raw_requests, context: grpc.aio.ServicerContext):
        """Every request message is decoded concurrently; responses go out as they finish.

        A failing message gets a response with `error` set; the stream goes on.
        """
        done: asyncio.Queue[pb.TransduceResponse | None] = asyncio.Queue()

        async def one(raw: bytes) -> None:
            started, code = time.perf_counter(), grpc.StatusCode.OK
            try:
                response = await self._transduce(raw)
            except Exception as e:
                code, message = status_of(e, "TransduceStream")
                response = convert.to_error_response(code.name, message, convert.request_id_of(raw))
            record(self.metrics, "TransduceStream", code, started)
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
        finally:  # the client went away: stop its work in the batcher too
            reader.cancel()
            for task in tasks:
                task.cancel()

    async def GetModelInfo(self, request: pb.GetModelInfoRequest, context) -> pb.ModelInfo:
        return await observe(self.metrics, "GetModelInfo", context, self._model_info())

    async def _transduce(self, raw: bytes) -> pb.TransduceResponse:
        batcher, bundle = self._ready()
        call = convert.parse_transduce(raw, self.limits, bundle.name, bundle.version)
        results = await batcher.transduce(call.texts, call.options)
        return convert.to_response(results, call, batcher.engine.tgt_joiner, bundle.name, bundle.version)

    async def _model_info(self) -> pb.ModelInfo:
        _, bundle = self._ready()
        return convert.to_model_info(bundle.manifest)

    def _ready(self) -> tuple[Batcher, Bundle]:
        if self.batcher is None or self.bundle is None:
            raise NotReady("model is still loading; retry when health reports SERVING")
        return self.batcher, self.bundle


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
    })
