"""Several models in one server (service/repository/repository.py): routing by name, a default, a broken model
beside good ones, per-model health, readiness and metrics, and one model reloaded while another
is under load."""
import asyncio
import functools
import multiprocessing
import shutil
from concurrent.futures import ProcessPoolExecutor

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from attnserve.inference import grpc_service_pb2 as kpb, grpc_service_pb2_grpc as kpbg
from service.config import Config, RepositoryConfig, ServerConfig
from tests import triton_calls
from tests.live import Calls, ServerSetup, add_version, copy_bundle, copy_model, held, loopback_config, serving


@pytest.fixture(scope="module")
def repository(tiny_bundle, tmp_path_factory):
    root = tmp_path_factory.mktemp("repository")
    for name in ("tiny", "other"):
        copy_model(tiny_bundle, root, name)
    copy_model(tiny_bundle, root, "broken", break_onnx=True)  # passes its hashes, fails in onnxruntime
    return root


@pytest.fixture(scope="module")
def server_setup(repository):
    return ServerSetup(loopback_config(model_repository=repository, default_model="tiny",
                                       server={"metrics_port": -1, "admin_without_token": True},
                                       answering={"cache_entries": 0}, batcher={"max_batch_size": 16}))


class Callers:
    """Closed-loop callers of one model while a test does something else; counts answers and failures."""

    def __init__(self, stub, model: str, n: int = 8):
        self.stub, self.model, self.n = stub, model, n
        self.done, self.failed, self._stop = 0, [], asyncio.Event()

    async def _call(self):
        while not self._stop.is_set():
            try:
                reply = await self.stub.Transduce(pb.TransduceRequest(inputs=["attention", "knight"],
                                                                      model_name=self.model), timeout=10)
                assert reply.model_name == self.model
                self._answered()
            except grpc.aio.AioRpcError as e:
                self.failed.append(e.code().name)

    def _answered(self) -> None:
        self.done += 1

    async def __aenter__(self):
        self.answers = Calls().of(self, "_answered")  # a test waits on these: load.answers.until(...)
        self._tasks = [asyncio.create_task(self._call()) for _ in range(self.n)]
        return self

    async def __aexit__(self, *exc):
        self._stop.set()
        await asyncio.gather(*self._tasks)


async def health_of(channel, service: str) -> int:
    return (await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service),
                                                            timeout=5)).status


async def test_requests_pick_their_model_and_a_broken_one_is_reported(server):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pbg.TransducerStub(channel)
        default = await stub.Transduce(pb.TransduceRequest(inputs=["hello"]), timeout=10)
        other = await stub.Transduce(pb.TransduceRequest(inputs=["hello"], model_name="other"), timeout=10)
        assert (default.model_name, other.model_name) == ("tiny", "other")
        assert default.results[0].output_tokens == other.results[0].output_tokens  # the same weights
        with pytest.raises(grpc.aio.AioRpcError) as broken:
            await stub.Transduce(pb.TransduceRequest(inputs=["hello"], model_name="broken"), timeout=10)
        assert broken.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "cannot load or run its ONNX graphs" in broken.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await stub.Transduce(pb.TransduceRequest(inputs=["hello"], model_name="nope"), timeout=10)
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND and "'other'" in unknown.value.details()
        info = await stub.GetModelInfo(pb.GetModelInfoRequest(model_name="other"), timeout=10)
        assert info.name == "other"

        # Health: each model by its name; the server as a whole only once every model loaded.
        SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
        assert [await health_of(channel, n) for n in ("tiny", "other", "broken", "")] == \
            [SERVING, SERVING, NOT_SERVING, NOT_SERVING]
        kserve = kpbg.GRPCInferenceServiceStub(channel)
        ready = [(await kserve.ModelReady(kpb.ModelReadyRequest(name=n), timeout=5)).ready
                 for n in ("tiny", "other", "broken")]
        assert ready == [True, True, False]
        assert not (await kserve.ServerReady(kpb.ServerReadyRequest(), timeout=5)).ready
    statuses = {s.name: s for s in server.repository.statuses()}
    assert statuses["broken"].state == "UNAVAILABLE" and "ONNX" in statuses["broken"].reason
    sample = server.metrics.registry.get_sample_value
    assert sample("attnserve_model_load_failures_total", {"model": "broken"}) == 1
    assert sample("attnserve_inputs_total", {"model": "other"}) >= 1  # per-model metrics by repository name
    assert sample("attnserve_requests_total", {"rpc": "Transduce", "model": "other", "code": "OK"}) >= 1


async def test_one_model_reloads_while_the_other_is_under_load_without_a_failure(server, repository):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pbg.TransducerStub(channel)
        async with Callers(stub, "tiny") as load:
            await load.answers.until(lambda: load.done >= 8)  # the load is running
            before = load.done
            add_version(repository / "other", "2")
            info = await stub.ReloadModel(pb.ReloadModelRequest(model_name="other"), timeout=60)
            await load.answers.until(lambda: load.done >= before + 8)  # and goes on
    assert (info.name, info.version) == ("other", "2")
    assert load.failed == [] and load.done > before


async def test_stock_tritonclient_lists_loads_and_unloads_models_while_another_is_under_load(server, repository,
                                                                                             tiny_bundle):
    """Triton's repository extension through tritonclient: the index names every model (and why the
    broken one is not served); a model copied in while running serves after a load; an unload lets
    admitted work finish, then the name answers NOT_FOUND; the other model's callers never fail."""
    url = f"127.0.0.1:{server.port}"
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as worker:
        async def triton(action, model=""):
            return await asyncio.get_running_loop().run_in_executor(
                worker, functools.partial(triton_calls.repository, url, action, model))

        shutil.rmtree(repository / "late", ignore_errors=True)
        copy_model(tiny_bundle, repository, "late")  # copied in while the server runs
        index = {m["name"]: m for m in await triton("index")}
        assert index["tiny"]["state"] == "READY" and index["broken"]["state"] == "UNAVAILABLE"
        assert "ONNX" in index["broken"]["reason"] and index["late"]["reason"] == "not loaded"
        async with grpc.aio.insecure_channel(url) as channel:
            stub = pbg.TransducerStub(channel)
            async with Callers(stub, "tiny") as load:
                assert await triton("load", "late") is None
                late = await stub.Transduce(pb.TransduceRequest(inputs=["hello"], model_name="late"), timeout=10)
                late_batcher = server.repository.models["late"].answerer.batcher
                queued = Calls().of(late_batcher, "_notify")  # the batcher's wake-up, once per call queued
                changed = Calls().of(server.repository, "_changed")  # after each load and unload
                with held(late_batcher.engine) as release:  # the calls below stay admitted until the unload
                    in_flight = [asyncio.ensure_future(stub.Transduce(
                        pb.TransduceRequest(inputs=["queued"] * 8, model_name="late"), timeout=60)) for _ in range(4)]
                    await queued.until(lambda: len(late_batcher.intake.pending) == 32)  # all 32 sources queued or decoding
                    unloading = asyncio.ensure_future(triton("unload", "late"))
                    await changed.until(lambda: "late" not in server.repository.models)  # new calls: NOT_FOUND
                    release.set()
                    assert await unloading is None
                admitted = await asyncio.gather(*in_flight, return_exceptions=True)
                with pytest.raises(grpc.aio.AioRpcError) as gone:
                    await stub.Transduce(pb.TransduceRequest(inputs=["hello"], model_name="late"), timeout=10)
                models = {m.name: m for m in (await stub.ListModels(pb.ListModelsRequest(), timeout=10)).models}
                assert await triton("load", "late") is None  # and back again, still beside the load
                again = await stub.Transduce(pb.TransduceRequest(inputs=["hello"], model_name="late"), timeout=10)
        missing = await triton("load", "no-such-model")
        print(f"tritonclient load/unload/load of 'late' while 'tiny' was under load: {load.done} calls to tiny, "
              f"{len(load.failed)} failed; {len(admitted)} calls admitted to 'late' before its unload all answered")
    assert late.model_name == "late" and again.model_name == "late"
    assert all(not isinstance(a, Exception) for a in admitted), admitted  # admitted work finished
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND
    assert load.failed == [] and load.done > 0  # the other model's callers
    assert models["tiny"].is_default and models["tiny"].served_version == "1" and list(models["tiny"].versions) == ["1"]
    assert models["late"].state == "UNAVAILABLE" and models["late"].reason == "unloaded"
    assert "NOT_FOUND" in missing.status


async def test_loading_and_unloading_are_closed_without_a_token_or_the_flag(repository):
    cfg = Config(model_repository=repository, default_model="tiny",
                 server=ServerConfig(host="127.0.0.1", port=0, metrics_port=-1))
    async with serving(cfg) as closed, grpc.aio.insecure_channel(f"127.0.0.1:{closed.port}") as channel:
        kserve = kpbg.GRPCInferenceServiceStub(channel)
        for call in (kserve.RepositoryModelLoad(kpb.RepositoryModelLoadRequest(model_name="other"), timeout=10),
                     kserve.RepositoryModelUnload(kpb.RepositoryModelUnloadRequest(model_name="other"), timeout=10)):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        index = await kserve.RepositoryIndex(kpb.RepositoryIndexRequest(ready=True), timeout=10)
        assert {m.name for m in index.models} >= {"tiny", "other"} and all(m.state == "READY" for m in index.models)


async def test_a_model_is_never_queued_behind_another_models_backlog(server):
    """Each model has its own queue and engine thread: with model tiny's queue deep, a call to
    model other is answered while tiny's backlog is still there."""
    tiny_queue = server.repository.models["tiny"].answerer.batcher.metrics.queue_depth
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pbg.TransducerStub(channel)
        words = ["internationalization", "characteristically", "photosynthesis", "counterproductive"] * 4
        queued = Calls().of(server.repository.models["tiny"].answerer.batcher, "_notify")
        with held(server.repository.models["tiny"].answerer.batcher.engine) as release:  # tiny's queue stays
            backlog = [asyncio.ensure_future(stub.Transduce(pb.TransduceRequest(inputs=words), timeout=60))
                       for _ in range(48)]  # 768 sources for a batch of 16
            await queued.until(lambda: tiny_queue._value.get() >= 200)
            depth_before = tiny_queue._value.get()
            reply = await stub.Transduce(pb.TransduceRequest(inputs=["hello"], model_name="other"), timeout=10)
            depth_after = tiny_queue._value.get()
            release.set()
            await asyncio.gather(*backlog)
    assert reply.model_name == "other" and reply.results[0].output_tokens
    assert depth_after >= depth_before >= 200, (depth_before, depth_after)  # tiny's backlog still queued


async def test_polling_serves_a_model_directory_copied_in(tiny_bundle, tmp_path):
    """With --model-poll-s, a model directory that appears in the repository is loaded and served
    (copied under a dot-name first and renamed into place, so it is never seen half-written)."""
    root = tmp_path / "models"
    copy_model(tiny_bundle, root, "tiny")
    cfg = Config(model_repository=root, server=ServerConfig(host="127.0.0.1", port=0, metrics_port=-1),
                 repository=RepositoryConfig(model_poll_s=0.2))
    async with serving(cfg) as s, grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
        stub = pbg.TransducerStub(channel)
        changed = Calls().of(s.repository, "_changed")  # the repository's poll loads what it finds: a change
        copy_bundle(tiny_bundle / "1", root / ".arriving" / "1", name="arrived")
        (root / ".arriving").rename(root / "arrived")
        await changed.until(lambda: s.repository.is_ready("arrived"))
        reply = await stub.Transduce(pb.TransduceRequest(inputs=["hello"], model_name="arrived"), timeout=10)
        status = {m.name: m.state for m in (await stub.ListModels(pb.ListModelsRequest(), timeout=10)).models}
    assert reply.model_name == "arrived" and status == {"tiny": "READY", "arrived": "READY"}
