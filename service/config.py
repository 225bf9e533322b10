"""Server configuration: frozen dataclasses, built once at start-up from flags and env.

Every flag `--max-wait-ms` has the environment equivalent `ATTNSERVE_MAX_WAIT_MS`;
a flag given on the command line wins over the environment. Each field's documentation is
what `attnserve-server --help` shows (attnserve/config.py reads and checks them all alike).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from attnserve.config import ArgumentParser, add_fields, setting, values

ENV_PREFIX = "ATTNSERVE_"


@dataclass(frozen=True)
class ServerConfig:
    """The transport (service/transport/, service/server.py): ports, limits per call, shutdown, security."""

    host: str = setting("0.0.0.0", "the address to listen on")
    port: int = setting(50051, "the gRPC port; 0 picks a free port (tests)")
    metrics_port: int = setting(9090, "the HTTP port: Prometheus /metrics, the Open Inference Protocol's REST "
                                "binding and the attention page; 0 picks a free port, -1 disables")
    max_inputs_per_request: int = setting(256, "inputs one call may carry")
    max_input_len: int = setting(64, "characters per input")
    max_text_len: int = setting(2000, "characters per text of a text call (TransduceText, the Open Inference "
                                "Protocol's `text: true`): a paragraph, read into words that are each decoded as "
                                "a short sequence of its own")
    lame_duck_s: float = setting(3.0, "on SIGTERM, first a lame duck: health says NOT_SERVING at once (probes, "
                                 "balancers and clients that health-check move on) while calls are still taken "
                                 "and served; only then does the server stop taking calls and drain. Calls that "
                                 "reach a stopping gRPC server before a handler takes them are CANCELLED, so "
                                 "stopping at once loses the calls that arrived just before the signal")
    grace_period_s: float = setting(10.0, "then the drain: time for in-flight calls to finish")
    max_connection_age_s: float = setting(300.0, "a connection is closed (GOAWAY) after this long, so long-lived "
                                          "clients re-resolve DNS and spread onto new replicas; in-flight calls "
                                          "get the grace to finish. 0 = never")
    max_connection_age_grace_s: float = setting(30.0, "the grace of a connection closed for its age")
    # Shedding answers with a status a client can act on: RESOURCE_EXHAUSTED or UNAVAILABLE, never
    # CANCELLED, which a client reads as its own giving up and no retry policy retries.
    max_streams_per_connection: int = setting(
        256, "HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS: gRPC core refuses a connection's calls past this many "
        "at once (REFUSED_STREAM, which the client hears as UNAVAILABLE: the server never saw the call, so it "
        "may go elsewhere) before any Python runs for them, so a burst on one connection costs nothing to "
        "refuse. 0 = no limit")
    max_inflight_calls: int = setting(
        1024, "calls this process holds at once (parsed, queued, decoding, answering), over every connection; "
        "past it a model call is refused RESOURCE_EXHAUSTED before its request is parsed "
        "(service/transport/shedding.py). Health, reflection and admin calls are never refused")
    max_pending_calls: int = setting(
        100000, "gRPC core's own backlog: calls received but not yet taken in by the event loop. Past "
        "max_pending_calls core sheds arrivals with a probability rising to 1 at max_pending_calls_hard, and "
        "calls older than max_pending_age_s, by resetting the stream, which the client hears as CANCELLED. So "
        "the three are loose backstops (bounds on memory and on a call's wait), past what the two limits above "
        "let in on any ordinary number of connections; tighten them only for clients that retry CANCELLED")
    max_pending_calls_hard: int = setting(100000, "see max_pending_calls")
    max_pending_age_s: int = setting(30, "see max_pending_calls")
    max_message_bytes: int = setting(16 * 1024 * 1024, "the largest gRPC message sent or received")
    # Transport security: service/transport/security.py.
    tls_cert_file: str = setting("", "a PEM certificate; with tls_key_file it turns TLS on")
    tls_key_file: str = setting("", "the certificate's PEM private key")
    tls_client_ca_file: str = setting("", "on top of TLS, mutual TLS: clients must present a certificate "
                                      "signed by this CA (PEM)")
    auth_token_file: str = setting("", "a file holding the shared-secret bearer token (or env "
                                   "ATTNSERVE_AUTH_TOKEN; never a flag)")
    admin_without_token: bool = setting(
        False, "admin RPCs (ReloadModel) answer PERMISSION_DENIED unless a bearer token is configured (then "
        "they need it, like every call) or this opens them explicitly, for a server only trusted callers can "
        "reach: anyone who reaches the port could otherwise switch the served version")
    workers: int = setting(
        0, "server processes on the one pair of ports (SO_REUSEPORT), each with its own event loop and "
        "engines, under a supervisor (service/supervisor.py): one interpreter lock per process, so the "
        "transport and the engine of different calls run on different cores. 0 = one per core the process may "
        "run on; 1 = the single process, no supervisor (docs/operations.md#worker-processes)")
    pin_workers: bool = setting(
        True, "with a worker per core and the cores its own (worker_core), each worker process runs on the core "
        "its number names, its event loop, engine and gRPC threads together: a thread woken for a call finds "
        "the model's weights and the call's data in that core's cache. false, or an onnxruntime pool of several "
        "threads (intra_op_threads): the OS places every thread")

    def __post_init__(self):
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if not -1 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics_port must be in -1..65535, got {self.metrics_port}")
        if not 0 <= self.max_pending_calls <= self.max_pending_calls_hard:
            raise ValueError(f"max_pending_calls ({self.max_pending_calls}) must be in 0..max_pending_calls_hard "
                             f"({self.max_pending_calls_hard})")
        if self.workers < 0:
            raise ValueError(f"workers must be >= 0 (0 = one per core), got {self.workers}")
        if self.max_streams_per_connection < 0:
            raise ValueError("max_streams_per_connection must be >= 0 (0 = no limit), "
                             f"got {self.max_streams_per_connection}")
        for name in ("max_inputs_per_request", "max_input_len", "max_text_len", "max_message_bytes", "max_pending_age_s",
                     "max_inflight_calls"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("lame_duck_s", "grace_period_s", "max_connection_age_s", "max_connection_age_grace_s"):
            if not getattr(self, name) >= 0:  # `not >=` also refuses NaN
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError(f"tls_cert_file ({self.tls_cert_file!r}) and tls_key_file ({self.tls_key_file!r}) "
                             "go together")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ValueError(f"tls_client_ca_file ({self.tls_client_ca_file!r}) needs tls_cert_file and "
                             "tls_key_file: mutual TLS is TLS first")
        for name in ("tls_cert_file", "tls_key_file", "tls_client_ca_file", "auth_token_file"):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise ValueError(f"{name} {path!r} is not a file")

    def worker_count(self) -> int:
        """The server processes `workers` asks for: 0 is one per core this process may run on."""
        return self.workers or usable_cores()


def usable_cores() -> int:
    """The cores this process may run on, and no more than its cgroup's CPU quota allows (a container's
    CPU limit, which the affinity mask does not show: a pod limited to 2 cores on a 64-core node)."""
    cores = len(os.sched_getaffinity(0))
    for quota_file, period_file in (("/sys/fs/cgroup/cpu.max", None),
                                    ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us")):
        try:
            fields = Path(quota_file).read_text().split()
            quota, period = fields[0], fields[1] if period_file is None else Path(period_file).read_text().strip()
            if quota not in ("max", "-1"):
                cores = min(cores, max(1, -(-int(quota) // int(period))))
        except (OSError, IndexError, ValueError):
            continue
    return cores


def worker_core(index: int, workers: int, cores: list[int] | None = None, usable: int | None = None) -> int:
    """The core worker `index` of `workers` runs on: the index-th of the cores this process may run on, where
    there is a worker per core and those cores are its own (its affinity mask no larger than its CPU quota);
    else -1, the OS's choice. A pod with 2 cores' quota on a 64-core node shares
    every core with others, and a worker kept to one could not move off it when a neighbour is busy there."""
    cores = sorted(os.sched_getaffinity(0)) if cores is None else cores
    usable = usable_cores() if usable is None else usable
    return cores[index] if workers == len(cores) == usable and 0 <= index < workers else -1


BATCHING_MODES = ("auto", "continuous", "request")


@dataclass(frozen=True)
class BatcherConfig:
    """Scheduling (service/scheduling/batcher.py): the queue, admission and how batches are formed."""

    mode: str = setting("request", "request: whole batches, greedy-decoded in one ONNX Loop call; continuous: "
                        "sequences join and leave between decoder steps; auto: the mode measured the faster, "
                        "request (service/scheduling/batcher.py says why). The mode serving and why: a log line "
                        "at start and attnserve_batching_mode. `python -m bench.modes` compares the two "
                        "(docs/performance.md)", choices=BATCHING_MODES)
    max_batch_size: int = setting(64, "sources decoded together")
    max_wait_ms: float = setting(0.0, "request mode: how long a first arrival waits for company. Batches run one "
                                 "at a time, so under load arrivals gather while the engine is busy anyway, and an "
                                 "idle engine should not wait")
    company_wait_ms: float = setting(
        0.0, "request mode: when each of the last two batches had company (several sources), a first arrival "
        "waits up to this long for as many sources as the smaller had: the callers just answered are likely back "
        "within a round trip, and without the wait each batch takes only those who queued while the engine ran. "
        "A lone caller's batches have no company, so it never waits")
    max_join_wait_ms: float = setting(
        0.0, "continuous mode: while sequences decode, new arrivals may wait up to this long to join together, so "
        "one encoder run serves several (an idle engine admits at once); rows waiting do not decode")
    length_grouping: bool = setting(
        True, "request mode: a batch is decoded as length-sorted groups, shortest first, each answered as it ends, "
        "where a cost model says the smaller batches cost less than the steps of rows that had ended "
        "(service/scheduling/lengths.py): a greedy batch runs until its longest row ends. false: every batch is "
        "decoded as it was popped (`python -m bench.lengths` compares)")
    max_queue_size: int = setting(4096, "queued sources; beyond it new requests are refused (the bound on memory)")
    max_queue_wait_ms: float = setting(
        2000.0, "the queue's bound in time (service/scheduling/admission.py): a call whose expected wait, at the "
        "measured service rate, exceeds this (or its own deadline) is refused at once. 0 = only deadlines bound it")

    def __post_init__(self):
        if self.mode not in BATCHING_MODES:
            raise ValueError(f"mode must be one of {BATCHING_MODES}, got {self.mode!r}")
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {self.max_wait_ms}")
        if not self.company_wait_ms >= 0:
            raise ValueError(f"company_wait_ms must be >= 0, got {self.company_wait_ms}")
        if self.max_join_wait_ms < 0:
            raise ValueError(f"max_join_wait_ms must be >= 0, got {self.max_join_wait_ms}")
        if not self.max_queue_wait_ms >= 0:
            raise ValueError(f"max_queue_wait_ms must be >= 0 (0 = no bound), got {self.max_queue_wait_ms}")
        if self.max_queue_size < 1:
            raise ValueError(f"max_queue_size must be >= 1, got {self.max_queue_size}")


@dataclass(frozen=True)
class AnswerConfig:
    """Answering (service/answering/answerer.py): what a call is answered with before the model."""

    cache_entries: int = setting(20000, "answers kept per model version (service/answering/cache.py), keyed by "
                                 "the tokenized input and every option; emptied when the overrides change. 0 = no "
                                 "cache")
    lexicon: bool = setting(True, "answer an input the bundle's lexicon or the model's overrides have from them "
                            "(forced through the model for score and attention); false: every input is decoded (a "
                            "request can also bypass)")

    def __post_init__(self):
        if self.cache_entries < 0:
            raise ValueError(f"cache_entries must be >= 0 (0 = off), got {self.cache_entries}")


@dataclass(frozen=True)
class EngineConfig:
    """The engine (service/engine/engine.py): onnxruntime and the decoding limits."""

    intra_op_threads: int = setting(
        1, "the process's onnxruntime intra-op pool (0 = one thread per physical core). 1 by default so that the "
        "gRPC transport keeps a core of its own on a small machine: with the engine on every core the event loop "
        "falls behind the arrivals past capacity (`make overload` measures both)")
    max_output_len: int = setting(40, "hard cap on decoder steps per sequence")
    precision: str = setting(
        "auto", "fp32 | int8 (the bundle's per-row int8 graphs, `make quantize`) | auto: int8 when the bundle has "
        "it, its dev WER is within INT8_WER_TOLERANCE of fp32's, make quantize found its answers independent of "
        "the batch and it no slower than fp32 (a lone word and a full batch), else fp32 "
        "(service/engine/engine.py served_precision)", choices=("auto", "fp32", "int8"))
    greedy_loop: str = setting(
        "onnx", "how decode() (request-level batching) runs greedy steps: onnx in one call to an ONNX Loop around "
        "the decoder-step graph (service/engine/loop_graph.py), python one call per step",
        choices=("onnx", "python"))

    def __post_init__(self):
        if self.precision not in ("auto", "fp32", "int8"):
            raise ValueError(f"precision must be 'auto', 'fp32' or 'int8', got {self.precision!r}")
        if self.greedy_loop not in ("onnx", "python"):
            raise ValueError(f"greedy_loop must be 'onnx' or 'python', got {self.greedy_loop!r}")
        if self.intra_op_threads < 0:
            raise ValueError(f"intra_op_threads must be >= 0 (0 = onnxruntime default), got {self.intra_op_threads}")
        if self.max_output_len < 1:
            raise ValueError(f"max_output_len must be >= 1, got {self.max_output_len}")


@dataclass(frozen=True)
class RepositoryConfig:
    """The repository (service/repository/): which version of the model directory (`models/<name>/<version>/`) is served."""

    model_version: str = setting("", "pin a version directory; \"\" = the highest numeric version")
    model_poll_s: float = setting(0.0, "look for a newer version this often and hot-reload it; 0 = off")
    overrides_poll_s: float = setting(2.0, "models/<name>/overrides.tsv, a model's own words, is read at load, on "
                                      "ReloadModel and when this often its mtime has changed; 0 = only at load "
                                      "and on ReloadModel")
    overrides_dir: str = setting("", "where the overrides live instead, as <dir>/<model name>.tsv (a mounted "
                                 "Kubernetes ConfigMap); \"\" = beside the versions")

    def __post_init__(self):
        if self.model_version and not (self.model_version.isascii() and self.model_version.isdigit()):
            raise ValueError(f"model_version must be a version directory name (digits), got {self.model_version!r}")
        if self.model_poll_s < 0:
            raise ValueError(f"model_poll_s must be >= 0 (0 = off), got {self.model_poll_s}")
        if self.overrides_poll_s < 0:
            raise ValueError(f"overrides_poll_s must be >= 0 (0 = off), got {self.overrides_poll_s}")


@dataclass(frozen=True)
class Config:
    model_repository: Path = setting(Path("models"), "serve every <name>/<version>/ model in this directory "
                                     "(service/repository/repository.py)")
    model_dir: Path | None = setting(None, "serve only this model directory or bundle instead")
    default_model: str = setting("", "the model of requests that name none; \"\" = the only one")
    server: ServerConfig = field(default_factory=ServerConfig)
    answering: AnswerConfig = field(default_factory=AnswerConfig)
    batcher: BatcherConfig = field(default_factory=BatcherConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    repository: RepositoryConfig = field(default_factory=RepositoryConfig)


SECTIONS = {"server": ServerConfig, "answering": AnswerConfig, "batcher": BatcherConfig, "engine": EngineConfig,
            "repository": RepositoryConfig}
WHERE = ("model_repository", "model_dir")  # one or the other


def parse_config(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> Config:
    """Flags, then ATTNSERVE_* environment variables, then defaults."""
    environ = os.environ if environ is None else environ
    p = ArgumentParser(prog="attnserve-server", description="Serve an attnserve model bundle over gRPC.")
    add_fields(p.add_mutually_exclusive_group(), Config, env_prefix=ENV_PREFIX, skip=("default_model", *SECTIONS))
    add_fields(p, Config, env_prefix=ENV_PREFIX, skip=(*WHERE, *SECTIONS))
    for section, cls in SECTIONS.items():
        add_fields(p.add_argument_group(section, cls.__doc__), cls, env_prefix=ENV_PREFIX, dest_prefix=f"{section}.")
    given = vars(p.parse_args(argv))
    try:
        top = values(Config, given, environ=environ, env_prefix=ENV_PREFIX, skip=tuple(SECTIONS))
        if "model_repository" in given and "model_dir" not in given:
            top.pop("model_dir", None)  # a --model-repository flag wins over ATTNSERVE_MODEL_DIR
        built = {section: cls(**values(cls, given, dest_prefix=f"{section}.", environ=environ, env_prefix=ENV_PREFIX))
                 for section, cls in SECTIONS.items()}
        return Config(**top, **built)
    except ValueError as e:
        p.error(str(e))
