"""Build, start and stop the attnserve gRPC server.

    attnserve-server --model-dir models/g2p-en          (or `make serve`)

Start-up order: the transport binds first with health NOT_SERVING, then the
bundle is verified, loaded and warmed, and only then does health say SERVING,
so an orchestrator never routes traffic to a cold server.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import start_http_server

from attnserve.v1 import attnserve_pb2 as pb
from inference import grpc_service_pb2_grpc as kserve_grpc
from service.batcher import Batcher, make_batcher
from service.bundle import BundleError, load_bundle
from service.config import Config, parse_config
from service.engine import Engine
from service.kserve import KSERVE_SERVICE_NAME, KServeServicer
from service.metrics import Metrics
from service.servicer import SERVICE_NAME, TransducerServicer, handler

log = logging.getLogger("attnserve")
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
WARMUP_WORDS = ["warmup", "a", "attention"]


class AttnServer:
    """One server: gRPC transport, health, reflection, metrics endpoint, batcher and engine."""

    def __init__(self, cfg: Config, metrics: Metrics | None = None):
        self.cfg = cfg
        self.metrics = metrics or Metrics()
        self.servicer = TransducerServicer(cfg.server, self.metrics)
        self.kserve = KServeServicer(cfg.server, self.metrics)  # Open Inference Protocol, same port
        self.health = health.aio.HealthServicer()
        self.batcher: Batcher | None = None
        self.port = 0
        self.metrics_port = -1
        self._metrics_http = None
        limit = cfg.server.max_message_bytes
        self.grpc = grpc.aio.server(options=[("grpc.max_receive_message_length", limit),
                                             ("grpc.max_send_message_length", limit)])
        self.grpc.add_generic_rpc_handlers((handler(self.servicer),))
        kserve_grpc.add_GRPCInferenceServiceServicer_to_server(self.kserve, self.grpc)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
        reflection.enable_server_reflection(
            (SERVICE_NAME, KSERVE_SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self.grpc)

    async def start(self) -> None:
        """Bind the ports; the model is not loaded yet (health NOT_SERVING)."""
        for service in ("", SERVICE_NAME):
            await self.health.set(service, NOT_SERVING)
        self.port = self.grpc.add_insecure_port(f"{self.cfg.server.host}:{self.cfg.server.port}")
        await self.grpc.start()
        if self.cfg.server.metrics_port >= 0:
            self._metrics_http, _ = start_http_server(self.cfg.server.metrics_port, addr=self.cfg.server.host,
                                                      registry=self.metrics.registry)
            self.metrics_port = self._metrics_http.server_port

    async def load(self) -> None:
        """Verify, load and warm the model, then report SERVING. Raises BundleError on a bad bundle."""
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        bundle = await loop.run_in_executor(None, load_bundle, self.cfg.model_dir)
        engine = await loop.run_in_executor(None, Engine, bundle, self.cfg.engine)
        await loop.run_in_executor(None, engine.decode, [engine.tokenize(w) for w in WARMUP_WORDS])
        self.batcher = make_batcher(engine, self.cfg.batcher, self.metrics)
        self.batcher.start()
        self.servicer.attach(self.batcher, bundle)
        self.kserve.attach(self.batcher, bundle)
        self.metrics.model_load_seconds.set(time.perf_counter() - started)
        self.metrics.model_info.labels(bundle.name, bundle.version).set(1)
        for service in ("", SERVICE_NAME):
            await self.health.set(service, SERVING)
        log.info("serving %s version %s from %s on port %d (metrics on %d)", bundle.name, bundle.version,
                 bundle.path, self.port, self.metrics_port)

    async def stop(self, grace_s: float | None = None) -> None:
        """NOT_SERVING, refuse new calls, let in-flight calls finish within the grace period."""
        await self.health.enter_graceful_shutdown()
        await self.grpc.stop(self.cfg.server.grace_period_s if grace_s is None else grace_s)
        if self.batcher is not None:
            await self.batcher.stop()
        if self._metrics_http is not None:
            self._metrics_http.shutdown()
            self._metrics_http.server_close()


def build_server(cfg: Config, metrics: Metrics | None = None) -> AttnServer:
    return AttnServer(cfg, metrics)


async def serve(cfg: Config) -> int:
    server = build_server(cfg)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.load()
    except BundleError as e:
        log.error("refusing to serve: %s", e)
        await server.stop(0)
        return 2
    await stop.wait()
    log.info("shutting down: draining in-flight calls for up to %.1f s", cfg.server.grace_period_s)
    await server.stop()
    return 0


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = parse_config(argv)
    sys.exit(asyncio.run(serve(cfg)))


if __name__ == "__main__":
    main()
