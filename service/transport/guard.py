"""One gate every RPC passes through: bytes that do not parse are INVALID_ARGUMENT, and an
unexpected exception is INTERNAL with no internal text in its details.

grpcio's own handling is to answer UNKNOWN with the exception's class and message
("Unexpected <class 'google.protobuf.message.DecodeError'>: Error parsing message ..."),
which both misleads clients (UNKNOWN reads as "maybe retry") and leaks internals. So
`GuardInterceptor` takes over deserialization for every method the server registers,
services added later included: it swaps each handler for one that receives the raw bytes,
parses them with the handler's own deserializer, and aborts INVALID_ARGUMENT when that
fails. Handlers that parse raw bytes themselves (request_deserializer None) are left
to do so. It must be the first interceptor, so that it wraps whatever the others return.
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, Callable

import grpc

log = logging.getLogger("attnserve")


def internal_error(rpc: str, e: BaseException) -> str:
    """The details of an INTERNAL status: an id to find the cause in the log, never its text."""
    error_id = uuid.uuid4().hex[:12]
    log.error("%s failed (error id %s)", rpc, error_id, exc_info=e)
    return f"internal error (error id {error_id}; the server log has the cause)"


async def _parse(deserialize: Callable[[bytes], Any] | None, raw: bytes, rpc: str, context) -> Any:
    if deserialize is None:
        return raw
    try:
        return deserialize(raw)
    except Exception:  # DecodeError, or a UnicodeDecodeError from a string field
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"the request is not a valid {rpc} request message")


async def _fail(rpc: str, context, e: Exception):
    """An exception no layer mapped: INTERNAL (or UNIMPLEMENTED, grpcio's servicer base classes'
    NotImplementedError) without its text."""
    if isinstance(e, NotImplementedError):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{rpc} is not implemented by this server")
    await context.abort(grpc.StatusCode.INTERNAL, internal_error(rpc, e))


async def _guarded(rpc: str, context, work):
    try:
        return await work
    except (asyncio.CancelledError, grpc.aio.AbortError):  # cancelled, or already answered with a status
        raise
    except Exception as e:
        await _fail(rpc, context, e)


async def _guarded_stream(rpc: str, context, responses):
    try:
        async for response in responses:
            yield response
    except (asyncio.CancelledError, grpc.aio.AbortError):
        raise
    except Exception as e:
        await _fail(rpc, context, e)


def _results(behavior, request, context):
    """A handler's result as an async iterator of responses: an async generator's, or none for
    a coroutine that writes with context.write()."""
    result = behavior(request, context)
    if hasattr(result, "__aiter__"):
        return result

    async def written():
        await result
        return
        yield  # never reached: the yield makes this an async generator
    return written()


def guard_handler(handler: grpc.RpcMethodHandler, rpc: str) -> grpc.RpcMethodHandler:
    """The same method, taking raw bytes and parsing them under the rules above."""
    deserialize, serialize = handler.request_deserializer, handler.response_serializer

    async def requests(raw_iterator, context):
        async for raw in raw_iterator:
            yield await _parse(deserialize, raw, rpc, context)

    if handler.unary_unary:
        async def unary_unary(raw, context):
            request = await _parse(deserialize, raw, rpc, context)
            return await _guarded(rpc, context, handler.unary_unary(request, context))
        return grpc.unary_unary_rpc_method_handler(unary_unary, None, serialize)
    if handler.unary_stream:
        async def unary_stream(raw, context):
            request = await _parse(deserialize, raw, rpc, context)
            async for response in _guarded_stream(rpc, context, _results(handler.unary_stream, request, context)):
                yield response
        return grpc.unary_stream_rpc_method_handler(unary_stream, None, serialize)
    if handler.stream_unary:
        async def stream_unary(raw_iterator, context):
            return await _guarded(rpc, context, handler.stream_unary(requests(raw_iterator, context), context))
        return grpc.stream_unary_rpc_method_handler(stream_unary, None, serialize)

    async def stream_stream(raw_iterator, context):
        responses = _results(handler.stream_stream, requests(raw_iterator, context), context)
        async for response in _guarded_stream(rpc, context, responses):
            yield response
    return grpc.stream_stream_rpc_method_handler(stream_stream, None, serialize)


class GuardInterceptor(grpc.aio.ServerInterceptor):
    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        if handler is None:  # an unknown method: grpcio answers UNIMPLEMENTED
            return None
        return guard_handler(handler, details.method.rsplit("/", 1)[-1])
