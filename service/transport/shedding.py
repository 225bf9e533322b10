"""Shedding at the door: past `max_inflight_calls` calls in this process, a new model call is
answered RESOURCE_EXHAUSTED before its request is even parsed.

gRPC core's own backlog bounds (`grpc.server.max_pending_requests`, `..._hard_limit` and
`grpc.server_max_unrequested_time_in_server`) shed by resetting the stream, which a client
hears as CANCELLED: the status of a call *it* gave up on, which no retry policy retries. So
the server leaves those bounds loose and sheds here instead, with the status grpcio's own
`maximum_concurrent_rpcs` gives (in its synchronous server; the asyncio one only waits).

Every call this interceptor lets in is counted from the moment it is let in until its handler
returns, so the count is the calls the event loop holds (parsing, queued for the engine,
decoding, answering), and a burst cannot slip past the bound between check and count.
Health, reflection and admin calls are never shed: a probe must hear the truth, and an
operator must be able to act, under any load.
"""
from __future__ import annotations

import weakref

import grpc

from service.transport.security import refusal

# Never shed: gRPC health (probes, balancers), reflection (tools), and the admin methods.
EXEMPT_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")
EXEMPT_METHODS = ("/attnserve.v1.Transducer/ReloadModel", "/inference.GRPCInferenceService/RepositoryModelLoad",
                  "/inference.GRPCInferenceService/RepositoryModelUnload")


class _Admitted:
    """One admitted call's place in the count, given back exactly once: when its behaviour ends, or,
    for a call whose behaviour never runs (cancelled before its request arrived, a request that
    does not parse), when grpc drops the handler that holds this object."""

    def __init__(self, shed: "SheddingInterceptor"):
        shed._count_in()
        self._finalizer = weakref.finalize(self, SheddingInterceptor._release, shed)

    def release(self) -> None:
        self._finalizer()  # runs _release once; later calls, and the collection, do nothing


class SheddingInterceptor(grpc.aio.ServerInterceptor):
    """Install before every other interceptor, so that a shed call costs the least."""

    def __init__(self, max_inflight_calls: int, on_shed=lambda: None):
        self.max_inflight_calls = max_inflight_calls
        self.inflight = 0
        self._on_shed = on_shed

    def _count_in(self) -> None:
        self.inflight += 1

    def _release(self) -> None:
        self.inflight -= 1

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        if handler is None or details.method.startswith(EXEMPT_PREFIXES) or details.method in EXEMPT_METHODS:
            return handler
        if self.inflight >= self.max_inflight_calls:
            self._on_shed()
            return refusal(handler, grpc.StatusCode.RESOURCE_EXHAUSTED,
                           f"overloaded: {self.inflight} calls in flight, the most this server process takes; "
                           "retry later or elsewhere")
        return _counted(handler, _Admitted(self))  # counted from admission, so the bound holds


def _counted(handler: grpc.RpcMethodHandler, admitted: _Admitted) -> grpc.RpcMethodHandler:
    """The same handler, which gives its place back when its behaviour returns or raises."""

    def unary(behavior):
        async def run(request, context):
            try:
                return await behavior(request, context)
            finally:
                admitted.release()
        return run

    def streaming(behavior):
        async def run(request, context):
            try:
                result = behavior(request, context)
                if hasattr(result, "__aiter__"):
                    async for response in result:
                        yield response
                else:
                    await result
            finally:
                admitted.release()
        return run

    deserialize, serialize = handler.request_deserializer, handler.response_serializer
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(unary(handler.unary_unary), deserialize, serialize)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(unary(handler.stream_unary), deserialize, serialize)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(streaming(handler.unary_stream), deserialize, serialize)
    return grpc.stream_stream_rpc_method_handler(streaming(handler.stream_stream), deserialize, serialize)
