"""The HTTP port: the Open Inference Protocol's REST binding, Prometheus /metrics and the attention
page, served by aiohttp in the server's own event loop.

    GET  /v2/health/live  /v2/health/ready  /v2
    GET  /v2/models/{name}[/versions/{version}][/ready]
    POST /v2/models/{name}[/versions/{version}]/infer
    POST /v2/repository/index
    GET  /metrics         GET /  (the page, service/transport/web/)

Inference goes through the same answerer as both gRPC services; what a call may ask and what comes
back is oip.py's, shared with the gRPC binding. JSON tensors, and Triton's binary tensor extension
(`Inference-Header-Content-Length`), which tritonclient.http uses by default. Errors are
`{"error": "..."}` with the status Triton gives: 400 bad input, 404 unknown model or version,
503 not ready or overloaded, 504 deadline (the `timeout` parameter, in microseconds, as Triton).

TLS covers the whole port. The bearer token and, with mutual TLS, a client certificate are asked of
every path but /metrics, the health paths and the page's own files (none of which carries data; the
page asks for the token when the API needs one), as gRPC's health service is exempt.
"""
from __future__ import annotations

import hmac
import json
import logging
import math
import ssl
import time
from pathlib import Path

import grpc
from aiohttp import hdrs, web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from attnserve.bundle.languages import language_name
from service.config import ServerConfig
from service.metrics import Metrics
from service.domain import BadRequest, UnknownModel
from service.repository.repository import ModelRepository
from service.transport import oip
from service.transport.convert import check_version
from service.transport.kserve import PLATFORM, server_version
from service.transport.servicer import begin, record, status_of

log = logging.getLogger("attnserve")
WEB = Path(__file__).resolve().parent / "web"
HEADER_LENGTH = "Inference-Header-Content-Length"
OPEN_PATHS = ("/metrics", "/v2/health/live", "/v2/health/ready", "/")  # and /web/*: no token or client cert
HTTP_STATUS = {grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.FAILED_PRECONDITION: 400,
               grpc.StatusCode.UNAUTHENTICATED: 401, grpc.StatusCode.PERMISSION_DENIED: 403,
               grpc.StatusCode.NOT_FOUND: 404, grpc.StatusCode.CANCELLED: 499, grpc.StatusCode.INTERNAL: 500,
               grpc.StatusCode.UNAVAILABLE: 503, grpc.StatusCode.RESOURCE_EXHAUSTED: 503,
               grpc.StatusCode.DEADLINE_EXCEEDED: 504}


def _is_open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith("/web/")


def error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


# Headers of aiohttp's own error that describe its plain-text body, not the error.
_BODY_HEADERS = (hdrs.CONTENT_TYPE, hdrs.CONTENT_LENGTH, hdrs.CONTENT_ENCODING)


@web.middleware
async def protocol_errors(request: web.Request, handler):
    """The errors aiohttp raises itself (no such route, a method the route does not take, a body past
    client_max_size) in the protocol's form, a JSON object with `error`, where aiohttp's own are
    plain text ("404: Not Found"); their other headers (a 405's Allow) stay."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:  # a redirect is not an error
            raise
        if isinstance(e, web.HTTPMethodNotAllowed):
            allowed = ", ".join(sorted(e.allowed_methods))
            message = f"{e.method} is not allowed on {request.path}; allowed: {allowed}"
        elif isinstance(e, web.HTTPNotFound):
            message = f"no such route: {request.path}"
        else:
            message = e.reason
        response = error(e.status, message)
        response.headers.extend((k, v) for k, v in e.headers.items() if k not in _BODY_HEADERS)
        return response


def ssl_context(cfg: ServerConfig) -> ssl.SSLContext | None:
    """The port's TLS; with a client CA a certificate is optional at the handshake and asked of every
    path but the open ones (Prometheus and kubelet probes rarely hold one)."""
    if not cfg.tls_cert_file:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cfg.tls_cert_file, cfg.tls_key_file)  # checked already by server_credentials
    if cfg.tls_client_ca_file:
        context.load_verify_locations(cafile=cfg.tls_client_ca_file)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def _json_values(values) -> list:
    """An output's values as the JSON binding carries them: flat, row-major; text as strings and
    non-finite scores (a missing n-best hypothesis) as null."""
    if isinstance(values, list):
        return [v.decode("utf-8") for v in values]
    return [None if isinstance(v, float) and not math.isfinite(v) else v for v in values.reshape(-1).tolist()]


def _flatten(data) -> list:
    if not isinstance(data, list):
        return [data]
    return [x for item in data for x in _flatten(item)]


def parse_infer(body: dict, binary: bytes, limits: ServerConfig, bundle) -> tuple[oip.InferCall, set[str], dict]:
    """A JSON inference request -> (the call, the outputs wanted as binary, the raw parameters)."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    inputs = body.get("inputs")
    if not isinstance(inputs, list) or not inputs or not all(isinstance(t, dict) for t in inputs):
        raise BadRequest(f"inputs must be a list of tensors: {oip.INPUT}, or {oip.INPUT} and {oip.TARGET}")
    tensors, offset = {}, 0
    for tensor in inputs:
        name = tensor.get("name")
        if name not in (oip.INPUT, oip.TARGET) or name in tensors:
            raise BadRequest(f"inputs must be {oip.INPUT}, or {oip.INPUT} and {oip.TARGET}; got "
                             f"{[t.get('name') for t in inputs]}")
        if tensor.get("datatype") != "BYTES":
            raise BadRequest(f"{name} has datatype {tensor.get('datatype') or '(none)'}; expected BYTES")
        shape = tensor.get("shape")
        if not (isinstance(shape, list) and len(shape) == 1 and type(shape[0]) is int and shape[0] >= 1):
            raise BadRequest(f"{name} has shape {shape}; expected [B] with B >= 1")
        if shape[0] > limits.max_inputs_per_request:
            raise BadRequest(f"{name} has {shape[0]} elements; at most {limits.max_inputs_per_request} per request")
        size = (tensor.get("parameters") or {}).get("binary_data_size")
        if size is not None:  # the binary extension: this tensor's bytes follow the previous ones'
            if type(size) is not int or not 0 <= size <= len(binary) - offset or "data" in tensor:
                raise BadRequest(f"{name}: binary_data_size {size!r} does not fit the {len(binary) - offset} binary "
                                 "bytes left (and then the tensor may not carry data)")
            tensors[name] = oip.split_bytes_tensor(binary[offset:offset + size], shape[0])
            offset += size
        else:
            items = _flatten(tensor.get("data"))
            if len(items) != shape[0] or not all(isinstance(x, str) for x in items):
                raise BadRequest(f"{name} data must hold {shape[0]} strings (its shape)")
            tensors[name] = items
    params = body.get("parameters") or {}
    outputs = body.get("outputs") or []
    if not isinstance(params, dict) or not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
        raise BadRequest("parameters must be an object and outputs a list of objects")
    texts, targets = oip.check_inputs(tensors, limits, params)
    call = oip.check_call(texts, params, [o.get("name") for o in outputs], bundle, targets)
    binary_all = params.get("binary_data_output") is True
    wanted = {o.get("name"): (o.get("parameters") or {}).get("binary_data", binary_all) for o in outputs}
    binary_out = {n for n in call.outputs if wanted.get(n, binary_all) is True}
    return call, binary_out, params


def infer_response(call: oip.InferCall, hyps, joiner: str, bundle, request_id, binary_out: set[str],
                   readers: list[list[str] | None] | None = None) -> web.Response:
    outputs, blobs = [], []
    for name in call.outputs:
        shape, values = oip.output_of(call, name, hyps, joiner, readers)
        tensor = {"name": name, "datatype": oip.datatype_of(name), "shape": shape}
        if name in binary_out:
            blobs.append(oip.raw_of(values))
            tensor["parameters"] = {"binary_data_size": len(blobs[-1])}
        else:
            tensor["data"] = _json_values(values)
        outputs.append(tensor)
    reply = {"model_name": bundle.name, "model_version": bundle.version, "outputs": outputs}
    if request_id:
        reply["id"] = request_id
    head = json.dumps(reply, separators=(",", ":")).encode()
    if not blobs:
        return web.Response(body=head, content_type="application/json")
    return web.Response(body=head + b"".join(blobs), content_type="application/octet-stream",
                        headers={HEADER_LENGTH: str(len(head))})


class HttpFront:
    """One aiohttp application and its listening site."""

    def __init__(self, cfg: ServerConfig, metrics: Metrics, repository: ModelRepository, token: bytes | None):
        self.cfg, self.metrics, self.repository, self.token = cfg, metrics, repository, token
        self.mutual_tls = bool(cfg.tls_client_ca_file)
        self.draining = False  # from start_draining() on: ready says 503 while in-flight calls finish
        self.port = -1
        self.app = web.Application(client_max_size=cfg.max_message_bytes, middlewares=[protocol_errors, self._gate])
        model = "/v2/models/{name}"
        versioned = model + "/versions/{version}"
        self.app.add_routes([
            web.get("/v2/health/live", self.live), web.get("/v2/health/ready", self.ready),
            web.get("/v2", self.server_metadata),
            web.get(model, self.model_metadata), web.get(versioned, self.model_metadata),
            web.get(model + "/ready", self.model_ready), web.get(versioned + "/ready", self.model_ready),
            web.post(model + "/infer", self.infer), web.post(versioned + "/infer", self.infer),
            web.post("/v2/repository/index", self.index),
            web.get("/metrics", self.prometheus),
            web.get("/", self.page)])
        if WEB.is_dir():
            self.app.router.add_static("/web/", WEB)
        self._runner: web.AppRunner | None = None

    async def start(self, host: str, port: int) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=self.cfg.grace_period_s)
        await self._runner.setup()
        # Several worker processes share the port (service/supervisor.py); one process needs no sharing.
        site = web.TCPSite(self._runner, host, port, ssl_context=ssl_context(self.cfg),
                           reuse_port=self.cfg.workers != 1)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    def start_draining(self) -> None:
        """Shutting down: readiness says 503 from now on, while calls are still served."""
        self.draining = True

    async def stop(self) -> None:
        """Stop listening; in-flight requests get the grace period to finish."""
        self.start_draining()
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _gate(self, request: web.Request, handler):
        if not _is_open(request.path):
            if self.mutual_tls and not request.transport.get_extra_info("peercert"):
                return error(401, "a client certificate is required (mutual TLS)")
            if self.token is not None:
                scheme, _, given = request.headers.get("Authorization", "").partition(" ")
                if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token):
                    self.metrics.auth_failures.inc()
                    return error(401, "missing bearer token" if not given else "wrong bearer token")
        return await handler(request)

    async def _answer(self, rpc: str, work, model: list[str]) -> web.StreamResponse:
        """Await a handler's work with the metrics every RPC gets (rpc label "http.<name>") and
        the status its domain error maps to; model[0] is the label once the model is known."""
        started, code = begin(self.metrics), grpc.StatusCode.OK
        try:
            return await work
        except Exception as e:  # keep serving
            code, message = status_of(e, f"http.{rpc}", self.repository)
            return error(HTTP_STATUS.get(code, 500), message)
        finally:
            record(self.metrics, f"http.{rpc}", model[0], code, started)

    def _model(self, request: web.Request, model: list[str]):
        name, version = request.match_info["name"], request.match_info.get("version", "")
        answerer, bundle = self.repository.ready(name) if name else (None, None)
        if bundle is None:
            raise UnknownModel("the model name is empty")
        model[0] = bundle.name
        check_version(version, bundle.name, bundle.version)
        return answerer, bundle

    async def live(self, request):
        return web.json_response({"live": True})

    async def ready(self, request):
        ready = self.repository.all_ready() and not self.draining
        return web.json_response({"ready": ready}, status=200 if ready else 503)

    async def server_metadata(self, request):
        return web.json_response({"name": "attnserve", "version": server_version(), "extensions": []})

    async def model_metadata(self, request):
        async def work():
            answerer, bundle = self._model(request, model)
            return web.json_response({
                "name": bundle.name, "versions": [bundle.version], "platform": PLATFORM,
                "parameters": {"precision": answerer.precision},
                "inputs": [{"name": oip.INPUT, "datatype": "BYTES", "shape": [-1]}],
                "outputs": [{"name": n, "datatype": dt, "shape": s} for n, (dt, s) in oip.outputs_of(bundle).items()]})
        model = [""]
        return await self._answer("ModelMetadata", work(), model)

    async def model_ready(self, request):
        name, version = request.match_info["name"], request.match_info.get("version", "")
        if name not in {s.name for s in self.repository.index()}:
            return error(404, f"unknown model {name!r}")
        ready = self.repository.is_ready(name, version) and not self.draining
        return web.json_response({"name": name, "ready": ready}, status=200 if ready else 503)

    async def infer(self, request: web.Request):
        async def work():
            answerer, bundle = self._model(request, model)
            body, binary = await _read_body(request)
            call, binary_out, params = parse_infer(body, binary, self.cfg, bundle)
            timeout_us = params.get("timeout")
            if timeout_us is not None and (type(timeout_us) is not int or timeout_us <= 0):
                raise BadRequest(f"parameter timeout must be a positive int (microseconds), got {timeout_us!r}")
            deadline_s = None if timeout_us is None else time.perf_counter() + timeout_us / 1e6
            hyps = await oip.run(answerer, call, deadline_s)
            readers = oip.readers_of(hyps, self.repository) if call.text and "TOKENS" in call.outputs else None
            return infer_response(call, hyps, answerer.tgt_joiner, bundle, body.get("id"), binary_out, readers)
        model = [""]
        return await self._answer("ModelInfer", work(), model)

    async def index(self, request: web.Request):
        async def work():
            try:
                body = json.loads(await request.read() or b"{}")
            except (ValueError, UnicodeDecodeError):
                raise BadRequest("the request body is not JSON") from None
            ready_only = isinstance(body, dict) and body.get("ready") is True
            # Beyond Triton's fields (its clients ignore others): what the page picks a model by.
            return web.json_response([{"name": s.name, "version": s.version, "state": s.state, "reason": s.reason,
                                       "default": s.name == self.repository.default,
                                       "language_name": language_name(self.repository.language_of(s.name))}
                                      for s in self.repository.index() if s.state == "READY" or not ready_only])
        return await self._answer("RepositoryIndex", work(), [""])

    async def prometheus(self, request):
        return web.Response(body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def page(self, request):
        if not (WEB / "index.html").is_file():
            return error(404, "this installation has no page")
        return web.FileResponse(WEB / "index.html")


async def _read_body(request: web.Request) -> tuple[dict, bytes]:
    raw = await request.read()
    length = request.headers.get(HEADER_LENGTH)
    if length is not None:
        if not length.isdigit() or int(length) > len(raw):
            raise BadRequest(f"{HEADER_LENGTH} {length!r} does not fit the {len(raw)}-byte body")
        raw, binary = raw[:int(length)], raw[int(length):]
    else:
        binary = b""
    try:
        return json.loads(raw), binary
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("the request body is not JSON") from None
