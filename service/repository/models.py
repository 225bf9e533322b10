"""One served model and its hot reload, from a model directory `models/<name>/<version>/`.

A version is served by three parts built here: its engine (the bundle's graphs), its batcher
(queue and batches) and its answerer (lexicon, overrides, cache; it holds the batcher).
A reload never drops a request: the new version's bundle is verified, its engine
built and warmed and its batcher started off to the side while the old one keeps
serving; then the servicers are pointed at the new answerer in one step on the event
loop (a call picks its answerer and enqueues without an await in between, so each call
lands wholly on one version), and the old batcher drains what it had admitted before
it stops. A bundle that fails verification or will not load is refused and the
current version keeps serving.

Knows nothing of gRPC: the servicers find the current answerer and bundle through the
repository (service/repository/repository.py), which holds one ModelManager per model.
"""
from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Callable

from attnserve.bundle.homographs import read_table
from service.answering.answerer import Answerer
from service.answering.context import ContextChooser
from service.answering.lexicon import Lexicon, read_entries, read_tsv
from service.answering.textrules import TextRules, read_rules
from service.config import Config, EngineConfig
from service.domain import BundleError, LexiconError
from service.engine.bundle import MANIFEST, Bundle, load_bundle, resolve
from service.engine.engine import Engine
from service.metrics import ModelMetrics
from service.repository import heap
from service.scheduling.batcher import make_batcher
from service.tasks import cancel_and_wait

log = logging.getLogger("attnserve")
WARMUP_WORDS = ["warmup", "a", "attention"]
OVERRIDES = "overrides.tsv"  # a model's own words, next to its versions: models/<name>/overrides.tsv
TEXT_RULES = "text.tsv"  # how the model's own texts are read (abbreviations, ...), beside them: models/<name>/text.tsv


def warm_engine(bundle: Bundle, cfg: EngineConfig) -> Engine:
    """Load the bundle's graphs and run a first batch through each (the first run is the slow one)."""
    engine = Engine(bundle, cfg)
    engine.warm_up([engine.tokenize(w) for w in WARMUP_WORDS])
    return engine


def read_lexicon(bundle: Bundle, engine: Engine) -> Lexicon:
    """The bundle's lexicon (manifest `lexicon.file`), checked against the model's vocabulary."""
    spec = bundle.manifest.lexicon
    if spec is None:
        return Lexicon()
    try:
        return Lexicon(read_entries(bundle.path / spec.file, engine.tokenize, engine.tokenize_target,
                                    engine.target_ids))
    except LexiconError as e:
        raise BundleError(bundle.path, f"its lexicon is refused: {e}") from None


def context_chooser(bundle: Bundle, engine: Engine, peer: Callable[[str], "ModelManager | None"]) -> ContextChooser | None:
    """The bundle's homographs read by context (manifest `homographs`): its table in the model's output ids,
    and the context model reached through `peer` at each call (it may load later, or be reloaded)."""
    spec = bundle.manifest.homographs
    if spec is None:
        return None

    def current() -> tuple | None:
        manager = peer(spec.model)
        if manager is None or manager.answerer is None or manager.bundle.manifest.context is None:
            return None
        return manager.answerer, manager.bundle.manifest.context.window

    try:
        table = read_table(bundle.path / spec.file)
        return ContextChooser.of(spec.model, table, lambda p: engine.target_ids(engine.tokenize_target(p)), current)
    except (OSError, ValueError) as e:
        raise BundleError(bundle.path, f"its homographs table is refused: {e}") from None


def read_overrides(path: Path, engine: Engine) -> dict:
    """A model's overrides file; {} when there is none; LexiconError naming file:line when bad."""
    if not path.is_file():
        return {}
    return read_tsv(path, engine.tokenize, engine.tokenize_target, engine.target_ids)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _manifest_mtime(path: Path) -> float | None:
    try:
        return (path / MANIFEST).stat().st_mtime
    except OSError:
        return None


class ModelManager:
    def __init__(self, name: str, model_dir: Path, cfg: Config, metrics: ModelMetrics,
                 peer: Callable[[str], "ModelManager | None"] = lambda name: None):
        self.name = name  # the repository's name for it: its directory's
        self.peer = peer  # another served model by name (a context model), None where it is not served
        self.model_dir = Path(model_dir)
        self.cfg = cfg
        self.metrics = metrics
        self.answerer: Answerer | None = None  # the current version's (it holds its batcher)
        self.bundle: Bundle | None = None
        self._lock = asyncio.Lock()  # one load at a time
        self._poller: asyncio.Task | None = None
        # Polling reacts to a new latest version appearing, so an admin's explicit rollback
        # to an older version is not undone at the next poll.
        self._seen_latest: Path | None = None
        # path -> its manifest's mtime when refused: not tried again until the manifest changes
        self._refused: dict[Path, float | None] = {}
        self.overrides_path = (Path(cfg.repository.overrides_dir) / f"{name}.tsv" if cfg.repository.overrides_dir
                               else self.model_dir / OVERRIDES)
        self._overrides_seen: float | None = None  # the overrides file's mtime when last read
        self.text_rules_path = (Path(cfg.repository.overrides_dir) / f"{name}.text.tsv" if cfg.repository.overrides_dir
                                else self.model_dir / TEXT_RULES)
        self._text_rules_seen: float | None = None
        self._overrides_poller: asyncio.Task | None = None

    async def load(self, version: str = "") -> Bundle:
        """Serve `version` (default: the configured pin, else the highest version) and return its bundle.

        Raises BundleError (VersionNotFound for a missing version) and keeps serving the
        current model when the new one cannot be used.
        """
        async with self._lock:
            try:
                bundle = await self._load(version or self.cfg.repository.model_version)
            except BundleError:
                self.metrics.model_reloads.labels("refused").inc()
                raise
            self.metrics.model_reloads.labels("ok").inc()
            return bundle

    async def _load(self, version: str) -> Bundle:
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        bundle = await loop.run_in_executor(None, load_bundle, self.model_dir, version)
        if bundle.name != self.name:
            raise BundleError(bundle.path, f"its manifest names model {bundle.name!r}, not {self.name!r} (its directory)")
        current = self.bundle
        if current is not None and bundle.path == current.path and bundle.manifest == current.manifest:
            await self.refresh_overrides()  # ReloadModel re-reads the overrides too
            return current  # already serving exactly these files
        try:
            engine = await loop.run_in_executor(None, warm_engine, bundle, self.cfg.engine)
        except Exception as e:  # onnxruntime's own exceptions for a broken graph, or a broken vocabulary
            log.error("%s: onnxruntime cannot load or run its graphs: %s: %s", bundle.path, type(e).__name__, e)
            raise BundleError(bundle.path, "cannot load or run its ONNX graphs, refusing it") from e
        lexicon = await loop.run_in_executor(None, read_lexicon, bundle, engine)
        chooser = await loop.run_in_executor(None, context_chooser, bundle, engine, self.peer)
        overrides = self.answerer.lexicon.overrides if self.answerer is not None else {}
        stamp = _mtime(self.overrides_path)
        try:
            overrides = await loop.run_in_executor(None, read_overrides, self.overrides_path, engine)
            self._overrides_taken(overrides, stamp)
        except LexiconError as e:
            self._overrides_refused(e, stamp)
        rules = await loop.run_in_executor(None, self._read_text_rules, bundle)
        batcher = make_batcher(engine, self.cfg.batcher, self.metrics)
        batcher.start()
        answerer = Answerer(engine, batcher, self.cfg.answering, self.metrics, lexicon.with_overrides(overrides), rules,
                            chooser)
        old = self.answerer.batcher if self.answerer is not None else None
        self.answerer, self.bundle = answerer, bundle  # the swap: new calls go to the new version from here on
        self.metrics.model_load_seconds.set(time.perf_counter() - started)
        self.metrics.model_info.labels(bundle.name, bundle.version).set(1)
        for precision in ("fp32", "int8"):  # one series at 1: the precision served now
            self.metrics.model_precision.labels(precision).set(1 if precision == engine.precision else 0)
        if current is not None and (current.name, current.version) != (bundle.name, bundle.version):
            self.metrics.drop_model_info(current.name, current.version)
        if self._seen_latest is None:
            self._seen_latest = self._latest()
        if current is None:
            log.info("loaded %s version %s from %s", bundle.name, bundle.version, bundle.path)
        else:
            log.info("swapped %s version %s for version %s (%s); draining the old one", current.name,
                     current.version, bundle.version, bundle.path)
        if old is not None:
            if not await old.drain(self.cfg.server.grace_period_s):
                log.warning("version %s did not drain within %.1f s; failing what is left", current.version,
                            self.cfg.server.grace_period_s)
            await old.stop()
            heap.released()
        return bundle

    def _read_text_rules(self, bundle: Bundle) -> TextRules:
        """The bundle's language's rules under the model's own file; a bad own file is refused (logged)
        and the language's shipped rules serve alone."""
        language, stamp = bundle.manifest.language, _mtime(self.text_rules_path)
        self._text_rules_seen = stamp
        try:
            return read_rules(language, self.text_rules_path)
        except LexiconError as e:
            log.error("%s: text rules refused, the language's own serve: %s", self.name, e)
            return read_rules(language)

    async def refresh_text_rules(self) -> None:
        """Re-read the model's own text rules if the file changed; a bad one is refused, the previous stay."""
        answerer, bundle, stamp = self.answerer, self.bundle, _mtime(self.text_rules_path)
        if answerer is None or stamp == self._text_rules_seen:
            return
        self._text_rules_seen = stamp
        try:
            rules = await asyncio.to_thread(read_rules, bundle.manifest.language, self.text_rules_path)
        except LexiconError as e:
            log.error("%s: text rules refused, the previous stay in force: %s", self.name, e)
            return
        answerer.set_text_rules(rules)
        log.info("%s: text rules %s in force", self.name, self.text_rules_path)

    async def refresh_overrides(self) -> None:
        """Re-read the overrides file if it changed; a bad one is refused and the previous stay."""
        await self.refresh_text_rules()
        answerer, stamp = self.answerer, _mtime(self.overrides_path)
        if answerer is None or stamp == self._overrides_seen:
            return
        try:
            overrides = await asyncio.to_thread(read_overrides, self.overrides_path, answerer.engine)
        except LexiconError as e:
            self._overrides_refused(e, stamp)
            return
        # One step on the event loop: a call sees the old overrides or the new, whole.
        answerer.set_overrides(overrides)
        self._overrides_taken(overrides, stamp)
        log.info("%s: overrides %s in force (%d sources)", self.name, self.overrides_path, len(overrides))

    def _overrides_taken(self, overrides: dict, stamp) -> None:
        self._overrides_seen = stamp
        self.metrics.overrides_entries.set(len(overrides))
        if stamp is not None:
            self.metrics.overrides_loads.labels("ok").inc()

    def _overrides_refused(self, e: LexiconError, stamp) -> None:
        self._overrides_seen = stamp  # not tried again until the file changes
        self.metrics.overrides_loads.labels("refused").inc()
        log.error("%s: overrides refused, the previous stay in force: %s", self.name, e)

    async def _poll_overrides(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.repository.overrides_poll_s)
            await self.refresh_overrides()

    def _latest(self) -> Path | None:
        try:
            return resolve(self.model_dir, self.cfg.repository.model_version)
        except BundleError:
            return None

    def start_polling(self) -> None:
        if self.cfg.repository.model_poll_s > 0 and self._poller is None:
            self._poller = asyncio.get_running_loop().create_task(self._poll(), name="attnserve-model-poll")
        if self.cfg.repository.overrides_poll_s > 0 and self._overrides_poller is None:
            self._overrides_poller = asyncio.get_running_loop().create_task(self._poll_overrides(),
                                                                            name="attnserve-overrides-poll")

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.repository.model_poll_s)
            path = await asyncio.to_thread(self._latest)
            if path is None or path == self._seen_latest:
                continue
            stamp = _manifest_mtime(path)
            if path in self._refused and self._refused[path] == stamp:
                continue  # refused before and unchanged since: do not log it every poll
            try:
                await self.load()
            except BundleError as e:
                self._refused[path] = stamp
                log.error("not reloading: %s; still serving version %s", e, self.bundle.version if self.bundle else "-")
                continue
            self._seen_latest = path

    async def stop(self) -> None:
        await cancel_and_wait(self._poller)
        await cancel_and_wait(self._overrides_poller)
        self._poller = self._overrides_poller = None
        if self.answerer is not None:
            await self.answerer.batcher.stop()
