"""Build, start and stop the attnserve gRPC server.

    attnserve-server --model-dir models/g2p-en          (or `make serve`)

Start-up order: the transport binds first with health NOT_SERVING, then the
bundle is verified, loaded and warmed, and only then does health say SERVING,
so an orchestrator never routes traffic to a cold server.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from attnserve.inference import grpc_service_pb2_grpc as kserve_grpc
from service.control import FD_ENV, INDEX_ENV, WorkerLink
from service.transport.admin import AdminServicer, admin_handler
from service.answering.answerer import Answerer
from service.domain import BundleError
from service.scheduling.batcher import Batcher
from service.config import Config, ServerConfig, parse_config, worker_core
from service.transport.guard import GuardInterceptor
from service.transport.http import HttpFront
from service.transport.kserve import KServeServicer
from service.metrics import Metrics
from service.repository import heap
from service.repository.repository import Fanout, ModelRepository
from service.transport.security import (AdminClosedInterceptor, BearerTokenInterceptor, SecurityError, load_auth_token,
                              server_credentials)
from service.transport.servicer import SERVICE_NAME, TransducerServicer, handler
from service.transport.shedding import SheddingInterceptor

log = logging.getLogger("attnserve")
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


def grpc_options(cfg: ServerConfig) -> list[tuple[str, int]]:
    options = [("grpc.max_receive_message_length", cfg.max_message_bytes),
               ("grpc.max_send_message_length", cfg.max_message_bytes),
               ("grpc.server.max_pending_requests", cfg.max_pending_calls),
               ("grpc.server.max_pending_requests_hard_limit", cfg.max_pending_calls_hard),
               ("grpc.server_max_unrequested_time_in_server", cfg.max_pending_age_s)]
    if cfg.max_streams_per_connection > 0:
        # Counted as HTTP/2 counts them (open streams), not as gRPC core does by default (streams not
        # yet freed by this process, which lag behind the answers when the event loop is busy): else a
        # client that keeps under the advertised limit is still refused now and then (REFUSED_STREAM,
        # UNAVAILABLE). Calls the process holds are bounded by max_inflight_calls instead.
        options += [("grpc.max_concurrent_streams", cfg.max_streams_per_connection),
                    ("grpc.http.overload_protection", 0)]
    if cfg.max_connection_age_s > 0:
        options += [("grpc.max_connection_age_ms", round(cfg.max_connection_age_s * 1000)),
                    ("grpc.max_connection_age_grace_ms", round(cfg.max_connection_age_grace_s * 1000))]
    return options


class HealthServicer(health.aio.HealthServicer):
    """grpcio-health-checking's servicer, with the List method its aio class leaves unimplemented."""

    async def List(self, request: health_pb2.HealthListRequest, context) -> health_pb2.HealthListResponse:
        return health_pb2.HealthListResponse(statuses={
            name: health_pb2.HealthCheckResponse(status=status) for name, status in self._server_status.items()})


class ServiceRecorder:
    """Stands in for the gRPC server in the add_*_to_server functions and records each service's
    name, so that reflection (and the fuzz test, which finds every method through it) lists
    exactly what is registered."""

    def __init__(self, server: grpc.aio.Server):
        self.server = server
        self.names: list[str] = []

    def _record(self, name: str) -> None:
        if name not in self.names:
            self.names.append(name)

    def add_generic_rpc_handlers(self, handlers) -> None:
        for h in handlers:
            self._record(h.service_name())
        self.server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service_name: str, method_handlers) -> None:
        self._record(service_name)
        self.server.add_registered_method_handlers(service_name, method_handlers)


class AttnServer:
    """One server: gRPC transport, health, reflection, metrics endpoint, and the model repository
    (each model with its answerer, batcher and engine)."""

    def __init__(self, cfg: Config, metrics: Metrics | None = None, fanout: Fanout | None = None):
        """fanout: a worker process's way to every worker of its supervisor (service/control.py), None
        for the whole server in one process. Raises SecurityError when a TLS file or the auth token
        cannot be used."""
        self.cfg = cfg
        self.metrics = metrics or Metrics()
        self.repository = ModelRepository(cfg, self.metrics, on_change=self._update_health, fanout=fanout)
        self.servicer = TransducerServicer(cfg.server, self.metrics, self.repository)
        self.health = HealthServicer()
        self.port = 0
        self.metrics_port = -1
        self._credentials = server_credentials(cfg.server)
        token = load_auth_token(cfg.server, os.environ)
        self.auth = token is not None
        # REST, /metrics and the page on one HTTP port (service/transport/http.py)
        self.http = HttpFront(cfg.server, self.metrics, self.repository, token)
        self.kserve = KServeServicer(cfg.server, self.metrics, self.repository)  # Open Inference Protocol, same port
        # Shedding outermost, so that a refused call costs the least (service/transport/shedding.py); then the
        # guard: it wraps whatever handler the others return (service/transport/guard.py). Admin calls
        # need the token where there is one, else the operator's explicit --admin-without-token.
        self.shedding = SheddingInterceptor(
            cfg.server.max_inflight_calls, on_shed=self.metrics.admission_refusals.labels("", "inflight").inc)
        interceptors = [self.shedding, GuardInterceptor()]
        if self.auth:
            interceptors.append(BearerTokenInterceptor(token, self.metrics))
        elif not cfg.server.admin_without_token:
            interceptors.append(AdminClosedInterceptor())
        self.grpc = grpc.aio.server(interceptors=interceptors, options=grpc_options(cfg.server))
        services = ServiceRecorder(self.grpc)
        services.add_generic_rpc_handlers((handler(self.servicer),
                                           admin_handler(AdminServicer(self.repository, self.metrics))))
        kserve_grpc.add_GRPCInferenceServiceServicer_to_server(self.kserve, services)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, services)
        reflection.enable_server_reflection(services.names + [reflection.SERVICE_NAME], self.grpc)

    async def start(self) -> None:
        """Bind the ports; the model is not loaded yet (health NOT_SERVING)."""
        for service in ("", SERVICE_NAME):
            await self.health.set(service, NOT_SERVING)
        address = f"{self.cfg.server.host}:{self.cfg.server.port}"
        if self._credentials is None:
            self.port = self.grpc.add_insecure_port(address)
        else:
            self.port = self.grpc.add_secure_port(address, self._credentials)
        await self.grpc.start()
        if self.cfg.server.metrics_port >= 0:
            await self.http.start(self.cfg.server.host, self.cfg.server.metrics_port)
            self.metrics_port = self.http.port

    @property
    def answerer(self) -> Answerer:
        """The default model's answerer (tests of one model)."""
        return self.repository.ready("")[0]

    @property
    def batcher(self) -> Batcher:
        """The default model's batcher (tests of one model)."""
        return self.answerer.batcher

    async def load(self) -> None:
        """Verify, load and warm every model, then report health: each model's own name is SERVING once
        loaded, and the server ("" and the Transducer service) once every model it was asked to
        serve is. Raises BundleError when no model could be loaded."""
        await self.repository.load_all()
        await self._update_health()
        self.repository.start_polling()
        served = ", ".join(f"{s.name} version {s.version}" if s.version else f"{s.name} (not loaded)"
                           for s in self.repository.statuses())
        log.info("serving %s on port %d (%s%s; metrics on %d)", served, self.port,
                 "mutual TLS" if self.cfg.server.tls_client_ca_file else "TLS" if self._credentials else "plaintext",
                 ", bearer token required" if self.auth else "", self.metrics_port)

    async def peers_loaded(self) -> None:
        """A worker of a supervisor: every worker has loaded, so this one may say SERVING too."""
        self.repository.peers_loaded()
        await self._update_health()

    async def _update_health(self) -> None:
        """Each model's name SERVING once loaded; the server once every model it serves is."""
        for status in self.repository.statuses():
            await self.health.set(status.name, SERVING if status.state == "READY" else NOT_SERVING)
        for service in ("", SERVICE_NAME):
            await self.health.set(service, SERVING if self.repository.all_ready() else NOT_SERVING)

    async def lame_duck(self, cut_short: asyncio.Event | None = None) -> None:
        """Say NOT_SERVING but go on serving for lame_duck_s (or until cut_short is set), so that
        calls already on their way are taken and traffic moves elsewhere before stop()."""
        await self.health.enter_graceful_shutdown()
        self.http.start_draining()
        try:
            await asyncio.wait_for((cut_short or asyncio.Event()).wait(), self.cfg.server.lame_duck_s)
        except TimeoutError:
            pass

    async def stop(self, grace_s: float | None = None) -> None:
        """NOT_SERVING, refuse new calls, let in-flight calls finish within the grace period."""
        await self.health.enter_graceful_shutdown()
        self.http.start_draining()
        # Both ports drain at once; the models stop only once neither has a call left for them.
        await asyncio.gather(self.grpc.stop(self.cfg.server.grace_period_s if grace_s is None else grace_s),
                             self.http.stop())
        await self.repository.stop()


def build_server(cfg: Config, metrics: Metrics | None = None, fanout: Fanout | None = None) -> AttnServer:
    return AttnServer(cfg, metrics, fanout)


async def serve(cfg: Config, supervisor_fd: int | None = None) -> int:
    """One server process: the whole server, or with supervisor_fd one worker of a supervisor's
    (service/supervisor.py), which says when every worker has loaded and carries admin operations
    to every worker."""
    link = None if supervisor_fd is None else await WorkerLink.inherited(supervisor_fd)
    try:
        server = build_server(cfg, fanout=None if link is None else link.fanout)
    except SecurityError as e:
        log.error("refusing to start: %s", e)
        return 2
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.load()
        heap.freeze_loaded()  # service/repository/heap.py: the collector off the models' objects
    except BundleError as e:
        log.error("refusing to serve: %s", e)
        await server.stop(0)
        return 2
    if link is not None:
        link.ready()
        channel = loop.create_task(link.run(server.repository.apply, server.peers_loaded), name="attnserve-control")
        channel.add_done_callback(lambda _: stop.set())  # the supervisor has gone: shut down as on SIGTERM
    await stop.wait()
    stop.clear()
    log.info("shutting down: NOT_SERVING but still serving for %.1f s (a second signal cuts it short), then "
             "draining in-flight calls for up to %.1f s", cfg.server.lame_duck_s, cfg.server.grace_period_s)
    await server.lame_duck(cut_short=stop)
    await server.stop()
    return 0


def pin_worker(cfg: Config, index: int) -> None:
    """Worker `index`: run on its own core (ServerConfig.pin_workers). Each thread has its own mask and a
    new one inherits its creator's, so every thread started so far (at import, by the libraries) is set."""
    if not cfg.server.pin_workers or cfg.engine.intra_op_threads != 1:
        return
    core = worker_core(index, cfg.server.worker_count())
    if core >= 0:
        for thread in os.listdir("/proc/self/task"):
            with contextlib.suppress(ProcessLookupError):  # a thread that has ended since
                os.sched_setaffinity(int(thread), {core})
        log.info("kept to core %d", core)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    worker = os.environ.get(INDEX_ENV)
    name = "%(name)s" if worker is None else f"%(name)s[worker {worker}]"
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)s {name}: %(message)s")
    cfg = parse_config(argv)
    if FD_ENV in os.environ:
        pin_worker(cfg, int(os.environ[INDEX_ENV]))
        sys.exit(asyncio.run(serve(cfg, int(os.environ[FD_ENV]))))
    count = cfg.server.worker_count()
    if count > 1:
        from service.supervisor import supervise

        sys.exit(supervise(argv, cfg, count))
    sys.exit(asyncio.run(serve(cfg)))


if __name__ == "__main__":
    main()
