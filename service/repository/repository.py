"""The model repository: every model the server serves, by name, each with its own manager.

    models/                      --model-repository models (the default)
      g2p-en/1/ ...              a model directory: its versions, each a bundle
      g2p-en-stress/1/ ...

A model's name is its directory's name (its manifest must agree). Each model has its own
ModelManager (service/repository/models.py): its own version state, hot reload, answerer, queue, batcher and
limits; all of them share the process's one onnxruntime thread pool. A model that fails to
load is recorded with its reason and logged, and never stops the others from serving.
`--model-dir DIR` is the one-model shorthand: DIR is a model directory or a single bundle.

Knows nothing of gRPC: the servicers ask it for a model's answerer and bundle.
"""
from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

from service.answering.answerer import Answerer
from service.config import Config
from service.domain import BundleError, NotReady, UnknownModel
from service.engine.bundle import MANIFEST, Bundle, is_version
from service.metrics import Metrics
from service.repository import heap
from service.repository.models import ModelManager
from service.tasks import cancel_and_wait

log = logging.getLogger("attnserve")


@dataclass(frozen=True)
class ModelStatus:
    name: str
    state: str  # LOADING, READY or UNAVAILABLE (failed to load or unloaded; `reason` says why)
    version: str = ""  # the version served
    reason: str = ""


def versions_on_disk(model_dir: Path) -> list[str]:
    try:
        return sorted((p.name for p in model_dir.iterdir() if p.is_dir() and is_version(p.name)), key=int)
    except OSError:
        return []


def is_model_dir(path: Path) -> bool:
    """A bundle, or a directory of numeric version directories."""
    return (path / MANIFEST).is_file() or any(p.is_dir() and is_version(p.name) for p in path.iterdir())


def single_model_name(model_dir: Path) -> str:
    """--model-dir's model name: a single bundle's manifest name, else the directory's name."""
    try:
        return json.loads((model_dir / MANIFEST).read_text(encoding="utf-8"))["name"]
    except (OSError, ValueError, KeyError, TypeError):
        return model_dir.name


def model_dirs(root: Path) -> dict[str, Path]:
    """Name -> directory of the repository's models (a dot-name is one being copied in)."""
    return {p.name: p for p in sorted(root.iterdir()) if p.is_dir() and not p.name.startswith(".") and is_model_dir(p)}


def discover(cfg: Config) -> dict[str, Path]:
    """Name -> model directory of every model the configuration asks to serve."""
    if cfg.model_dir is not None:
        return {single_model_name(cfg.model_dir): cfg.model_dir}
    root = cfg.model_repository
    if not root.is_dir():
        raise BundleError(root, "the model repository is not a directory")
    models = model_dirs(root)
    if not models:
        raise BundleError(root, "the model repository holds no model directory (<name>/<version>/)")
    return models


# An admin operation (op, name, version) applied in every worker process; returns once each has
# applied it, or raises the first failure.
Fanout = Callable[[str, str, str], Awaitable[None]]


async def _nothing() -> None:
    pass


class ModelRepository:
    def __init__(self, cfg: Config, metrics: Metrics, on_change: Callable[[], Awaitable[None]] = _nothing,
                 fanout: Fanout | None = None):
        """on_change: awaited after a model is loaded or unloaded while running (health).
        fanout: in a worker process of a supervisor (service/supervisor.py), how an admin operation
        reaches every worker; None when this process is the whole server and applies it here."""
        self.cfg = cfg
        self.metrics = metrics
        # A model the server knows of is in exactly one of these three.
        self.models: dict[str, ModelManager] = {}
        self.failed: dict[str, str] = {}  # name -> why it did not load
        self.unloaded: set[str] = set()  # unloaded while running (RepositoryModelUnload)
        self.default = ""
        self.loaded = False  # load_all() has run
        self._on_change = on_change
        self._fanout = fanout
        # A worker is ready only once every worker has loaded (the supervisor says so: peers_loaded()),
        # so that each answers health alike: a probe never sees SERVING from one process while another
        # still loads.
        self._peers_ready = fanout is None
        self._poller: asyncio.Task | None = None

    async def load_all(self) -> None:
        """Load every model; raises BundleError when none could be loaded (nothing to serve)."""
        found = discover(self.cfg)
        for name, path in found.items():
            try:
                await self._start(name, path)
            except BundleError as e:
                log.error("model %s did not load, the others serve on: %s", name, e)
                if len(found) == 1:
                    raise
        if not self.models:
            raise BundleError(self.cfg.model_repository, f"no model of the repository could be loaded "
                                                         f"({'; '.join(f'{n}: {r}' for n, r in self.failed.items())})")
        self.default = self._default_of(found)
        self.loaded = True

    def peers_loaded(self) -> None:
        """A worker of a supervisor: every worker has loaded."""
        self._peers_ready = True

    def _default_of(self, found: dict[str, Path]) -> str:
        wanted = self.cfg.default_model
        if wanted:
            if wanted not in found:
                raise BundleError(self.cfg.model_dir or self.cfg.model_repository,
                                  f"default_model {wanted!r} is not in the repository (has {sorted(found)})")
            return wanted
        return next(iter(self.models)) if len(found) == 1 else ""

    async def load_model(self, name: str) -> ModelStatus:
        """Serve a model of the repository directory (a new one copied in while running, or one
        unloaded before); a model already served reloads its latest version. Raises UnknownModel
        for a name the repository does not hold and BundleError for a bundle it cannot serve.
        Every worker process does it before this returns."""
        if self._fanout is not None:
            await self._fanout("load", name, "")
            return ModelStatus(name, "READY", self.manager(name).bundle.version)
        return await self._load_here(name)

    async def unload_model(self, name: str) -> None:
        """Stop serving a model: new calls answer NOT_FOUND at once, admitted ones finish first; in
        every worker process before this returns."""
        if self._fanout is not None:
            await self._fanout("unload", name, "")
        else:
            await self._unload_here(name)

    async def reload_model(self, name: str, version: str) -> Bundle:
        """ReloadModel: serve `version` of a served model (default: the pin, else the highest) and
        return its bundle, in every worker process before this returns."""
        if self._fanout is not None:
            await self._fanout("reload", name, version)
            return self.manager(name).bundle
        return await self.manager(name).load(version)

    async def apply(self, op: str, name: str, version: str) -> None:
        """One admin operation in this process only: what a worker does when its supervisor tells it."""
        if op == "load":
            await self._load_here(name)
        elif op == "unload":
            await self._unload_here(name)
        elif op == "reload":
            await self.manager(name).load(version)
        else:
            raise ValueError(f"unknown admin operation {op!r}")

    async def _load_here(self, name: str) -> ModelStatus:
        if name in self.models:
            bundle = await self.models[name].load()
            return ModelStatus(name, "READY", bundle.version)
        manager = await self._start(name, self._dir_of(name))
        manager.start_polling()
        log.info("loaded model %s version %s", name, manager.bundle.version)
        await self._changed()
        return ModelStatus(name, "READY", manager.bundle.version)

    async def _start(self, name: str, path: Path) -> ModelManager:
        """Load a model not served yet; it is served from here on, or recorded as failed (and raises)."""
        manager = ModelManager(name, path, self.cfg, self.metrics.for_model(name), self.models.get)
        self.unloaded.discard(name)
        try:
            await manager.load()
        except BundleError as e:
            self.failed[name] = e.reason
            self.metrics.model_load_failures.labels(name).inc()
            raise
        self.failed.pop(name, None)
        self.models[name] = manager
        return manager

    async def _unload_here(self, name: str) -> None:
        manager = self.models.pop(name, None)
        if manager is None:
            raise UnknownModel(f"model {name!r} is not loaded (loaded: {sorted(self.models)})")
        self.unloaded.add(name)
        await self._changed()
        if manager.answerer is not None and not await manager.answerer.batcher.drain(self.cfg.server.grace_period_s):
            log.warning("model %s did not drain within %.1f s; failing what is left", name,
                        self.cfg.server.grace_period_s)
        await manager.stop()
        heap.released()
        log.info("unloaded model %s", name)

    async def _changed(self) -> None:
        """A model was loaded or unloaded while running."""
        await self._on_change()

    def _dir_of(self, name: str) -> Path:
        if self.cfg.model_dir is not None:
            raise UnknownModel(f"this server serves one model ({sorted(self.models)}), not a repository")
        path = self.cfg.model_repository / name
        if name in ("", ".", "..") or "/" in name or not path.is_dir() or not is_model_dir(path):
            raise UnknownModel(f"the model repository has no model {name!r}")
        return path

    def manager(self, name: str) -> ModelManager:
        """The model's manager; "" is the default model. Raises UnknownModel (NotReady before load_all)."""
        if not self.loaded:
            raise NotReady("the models are still loading; retry when health reports SERVING")
        key = name or self.default
        if key in self.models:
            return self.models[key]
        if not name and not self.default:
            raise UnknownModel(f"this server serves several models {sorted(self.models)} and no default: "
                               f"name one (model_name)")
        if key in self.failed:
            raise NotReady(f"model {key!r} is not loaded: {self.failed[key]}")
        raise UnknownModel(f"model {name!r} is not served here (serving {sorted(self.models)})")

    def ready(self, name: str) -> tuple[Answerer, Bundle]:
        """The answerer and bundle that serve `name` now (no await in between, so a call lands wholly
        on one version). Raises UnknownModel or NotReady."""
        m = self.manager(name)
        if m.answerer is None or m.bundle is None:
            raise NotReady(f"model {m.name!r} is still loading")
        return m.answerer, m.bundle

    def language_of(self, name: str) -> str:
        """The language tag a served model's manifest declares ("" when none, or not served)."""
        m = self.models.get(name)
        return m.bundle.manifest.language if m is not None and m.bundle is not None else ""

    def readers(self, text: str) -> list[str]:
        """The served models that read `text` (each by its own normalization and alphabet), by name. A
        context model (its manifest's `context`: it reads a homograph's sentence, docs/homographs.md)
        pronounces nothing, so it is never named."""
        return [n for n, m in sorted(self.models.items()) if m.answerer is not None and m.bundle is not None
                and m.bundle.manifest.context is None and m.answerer.reads(text)]

    def suggestion(self, text: str) -> str:
        """What a refusal of `text` for its symbols adds: the served models that read it."""
        names = self.readers(text)
        return f"models that read it: {', '.join(names)}" if names else "no served model reads it"

    def all_ready(self) -> bool:
        """Every model the server was asked to serve is loaded."""
        return self.loaded and not self.failed and self._peers_ready

    def is_ready(self, name: str, version: str = "") -> bool:
        m = self.models.get(name) if self.loaded else None
        return m is not None and m.bundle is not None and version in ("", m.bundle.version)

    def statuses(self) -> list[ModelStatus]:
        """Every model the server knows of: served, failed, or unloaded."""
        out = [ModelStatus(n, "READY", m.bundle.version, "") if m.bundle else ModelStatus(n, "LOADING")
               for n, m in self.models.items()]
        out += [ModelStatus(n, "UNAVAILABLE", "", why) for n, why in self.failed.items()]
        out += [ModelStatus(n, "UNAVAILABLE", "", "unloaded") for n in self.unloaded]
        return sorted(out, key=lambda s: s.name)

    def dir_of(self, name: str) -> Path | None:
        """The model directory of a model the server knows of (None for --model-dir's single bundle)."""
        if name in self.models:
            return self.models[name].model_dir
        return None if self.cfg.model_dir is not None else self.cfg.model_repository / name

    def index(self) -> list[ModelStatus]:
        """statuses(), and the repository directory's models never loaded (copied in since start-up)."""
        known = self.statuses()
        names = {s.name for s in known}
        if self.cfg.model_dir is None and self.cfg.model_repository.is_dir():
            known += [ModelStatus(n, "UNAVAILABLE", "", "not loaded")
                      for n in model_dirs(self.cfg.model_repository) if n not in names]
        return sorted(known, key=lambda s: s.name)

    def start_polling(self) -> None:
        """Each model polls for its new versions; the repository, for model directories copied in."""
        for m in self.models.values():
            m.start_polling()
        if self.cfg.repository.model_poll_s > 0 and self.cfg.model_dir is None and self._poller is None:
            self._poller = asyncio.get_running_loop().create_task(self._poll_new_models(), name="attnserve-repo-poll")

    async def _poll_new_models(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.repository.model_poll_s)
            # Unloaded and failed models stay as they are until an explicit load. Each worker
            # process polls for itself, so what it finds it loads here only.
            for status in await asyncio.to_thread(self.index):
                if status.reason == "not loaded":
                    try:
                        await self._load_here(status.name)
                    except (BundleError, UnknownModel) as e:
                        log.error("model %s was copied in but did not load: %s", status.name, e)

    async def stop(self) -> None:
        await cancel_and_wait(self._poller)
        self._poller = None
        for m in self.models.values():
            await m.stop()
