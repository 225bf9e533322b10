"""Transport security: TLS / mutual TLS credentials and an optional shared-secret bearer token.

Server side: `server_credentials()` for the listening port, `BearerTokenInterceptor`,
which refuses every RPC but the health checks unless it carries
`authorization: Bearer <token>`, and, on a server without a token, `AdminClosedInterceptor`. Client side: `channel_credentials()` builds what the
CLI client, tests and scripts connect with.

The token is a secret: it is read from a file (`--auth-token-file`) or from the
environment (ATTNSERVE_AUTH_TOKEN), never from a flag (flags show in `ps`), and never logged.
"""
from __future__ import annotations

import hmac
import logging
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

import grpc

if TYPE_CHECKING:  # the CLI client imports this module: keep onnxruntime (via config) out of its start-up
    from service.config import ServerConfig
    from service.metrics import Metrics

log = logging.getLogger("attnserve")
TOKEN_ENV = "ATTNSERVE_AUTH_TOKEN"
# Orchestrators probe health without credentials; everything else (reflection and the
# admin ReloadModel included) needs the token.
EXEMPT_PREFIXES = ("/grpc.health.v1.Health/",)


class SecurityError(ValueError):
    """A credential file or token that cannot be used; the server refuses to start."""


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise SecurityError(f"{what} {path!r} cannot be read: {e.strerror}") from None


def load_auth_token(cfg: ServerConfig, environ: Mapping[str, str]) -> bytes | None:
    """The bearer token the server expects, or None when auth is off."""
    from_env = environ.get(TOKEN_ENV)
    if cfg.auth_token_file and from_env is not None:
        raise SecurityError(f"both auth_token_file ({cfg.auth_token_file!r}) and {TOKEN_ENV} are set; use one")
    if cfg.auth_token_file:
        token, where = _read(cfg.auth_token_file, "auth_token_file").strip(), f"auth_token_file {cfg.auth_token_file!r}"
    elif from_env is not None:
        token, where = from_env.strip().encode(), TOKEN_ENV
    else:
        return None
    if not token:
        raise SecurityError(f"{where} holds an empty token")
    if len(token) < 16:  # the length only, never the value
        log.warning("the auth token from %s is only %d bytes; use 16 or more random bytes", where, len(token))
    return token


def server_credentials(cfg: ServerConfig) -> grpc.ServerCredentials | None:
    """TLS credentials for the port (mutual TLS when a client CA is set), or None for plaintext."""
    if not cfg.tls_cert_file:
        return None
    # gRPC itself only says "failed to bind" for a bad PEM file: check with the stdlib first.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cfg.tls_cert_file, cfg.tls_key_file)
    except (ssl.SSLError, OSError) as e:
        raise SecurityError(f"tls_cert_file {cfg.tls_cert_file!r} and tls_key_file {cfg.tls_key_file!r} are not a "
                            f"PEM certificate chain and its private key: {e}") from None
    if cfg.tls_client_ca_file:
        try:
            context.load_verify_locations(cafile=cfg.tls_client_ca_file)
        except (ssl.SSLError, OSError) as e:
            raise SecurityError(f"tls_client_ca_file {cfg.tls_client_ca_file!r} is not a PEM CA certificate: {e}") \
                from None
    key, cert = _read(cfg.tls_key_file, "tls_key_file"), _read(cfg.tls_cert_file, "tls_cert_file")
    ca = _read(cfg.tls_client_ca_file, "tls_client_ca_file") if cfg.tls_client_ca_file else None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


def bearer_token_of(metadata) -> bytes | None:
    for key, value in metadata or ():
        if key == "authorization":
            value = value.encode() if isinstance(value, str) else value
            scheme, _, token = value.partition(b" ")
            return token.strip() if scheme.lower() == b"bearer" else None
    return None


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """UNAUTHENTICATED for any call but the health checks without the right bearer token."""

    def __init__(self, token: bytes, metrics: Metrics):
        self._token = token
        self._metrics = metrics

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        if details.method.startswith(EXEMPT_PREFIXES):
            return await continuation(details)
        given = bearer_token_of(details.invocation_metadata)
        # compare_digest: the time taken does not tell how much of a guess was right.
        if given is not None and hmac.compare_digest(given, self._token):
            return await continuation(details)
        self._metrics.auth_failures.inc()
        handler = await continuation(details)
        return refusal(handler, grpc.StatusCode.UNAUTHENTICATED,
                       "missing bearer token" if given is None else "wrong bearer token")


# Admin calls change what the server serves; without a bearer token they are closed unless the
# operator opens them (--admin-without-token), as Triton refuses its repository API unless started
# in explicit model-control mode.
ADMIN_METHODS = ("/attnserve.v1.Transducer/ReloadModel",
                 "/inference.GRPCInferenceService/RepositoryModelLoad",
                 "/inference.GRPCInferenceService/RepositoryModelUnload")
ADMIN_CLOSED = ("admin calls are closed on this server: configure a bearer token (--auth-token-file or "
                f"{TOKEN_ENV}) or start it with --admin-without-token true")


class AdminClosedInterceptor(grpc.aio.ServerInterceptor):
    """PERMISSION_DENIED for the admin methods; installed only on a server without a token whose
    operator did not open them."""

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        if handler is None or details.method not in ADMIN_METHODS:
            return handler

        async def refuse(request, context):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, ADMIN_CLOSED)

        # The admin methods are unary. Their deserializer stays, so the guard still answers bytes that
        # do not parse with INVALID_ARGUMENT, as on every method.
        return grpc.unary_unary_rpc_method_handler(refuse, handler.request_deserializer, handler.response_serializer)


def refusal(handler: grpc.RpcMethodHandler | None, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same shape as the real one (so streaming calls end at once) that aborts
    without reading the request (no deserializer: the request is never parsed)."""

    async def refuse(request_or_iterator, context):
        await context.abort(code, message)

    if handler is not None and handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse)
    if handler is not None and handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse)
    if handler is not None and handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)  # unknown methods too: no probing without a token


def channel_credentials(tls_ca_file: str = "", tls_cert_file: str = "", tls_key_file: str = "",
                        token: str = "") -> grpc.ChannelCredentials | None:
    """Client credentials: TLS when a CA or client certificate is given; None means a plaintext channel.

    A token without TLS is only sent over a local (loopback) connection: gRPC's local
    credentials refuse other peers, so the token never crosses a network in the clear.
    """
    if bool(tls_cert_file) != bool(tls_key_file):
        raise SecurityError("--tls-cert-file and --tls-key-file go together (mutual TLS)")
    if tls_ca_file or tls_cert_file:
        creds = grpc.ssl_channel_credentials(
            root_certificates=_read(tls_ca_file, "--tls-ca-file") if tls_ca_file else None,  # None: system roots
            private_key=_read(tls_key_file, "--tls-key-file") if tls_key_file else None,
            certificate_chain=_read(tls_cert_file, "--tls-cert-file") if tls_cert_file else None)
    elif token:
        creds = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
    else:
        return None
    if token:
        creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(token))
    return creds
