"""Every Prometheus metric of the server, in one place.

Each server owns a `Metrics` with its own registry, so tests can run several
servers in one process and read exactly their own numbers.

Under a supervisor (service/supervisor.py) every worker process records into files of the directory
PROMETHEUS_MULTIPROC_DIR names (prometheus-client's multiprocess mode, chosen when the module is
imported), and `registry` then reads every worker's files: /metrics on any worker shows the whole
server, counters and histograms summed, each gauge as its `multiprocess_mode` says.
"""
from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.multiprocess import MultiProcessCollector

# From 0.1 ms to 10 s: a lone word decodes near the low end, a full batch under load towards the high end.
LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                     0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def multiprocess() -> bool:
    """Whether this process records into a multiprocess directory (a supervisor's worker)."""
    return "PROMETHEUS_MULTIPROC_DIR" in os.environ


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        if multiprocess():
            # The metrics below write to this process's files; what is read is every process's.
            MultiProcessCollector(self.registry)
            r = CollectorRegistry()
        # Gauges across worker processes: the ones counting work add up (livesum: a worker that has
        # exited no longer counts); the ones every worker sets alike show the highest (livemax).
        summed, same = {"multiprocess_mode": "livesum"}, {"multiprocess_mode": "livemax"}
        # `model` is the served model's name (never a client's string), so the label set stays bounded.
        self.requests = Counter("attnserve_requests", "RPCs handled, by RPC, model and gRPC status code.",
                                ["rpc", "model", "code"], registry=r)
        self.request_seconds = Histogram("attnserve_request_duration_seconds", "RPC latency seen by the server.",
                                         ["rpc", "model", "code"], buckets=LATENCY_BUCKETS_S, registry=r)
        # Stream messages count one each, as in attnserve_requests_total.
        self.inflight_requests = Gauge("attnserve_inflight_requests", "RPCs being handled right now.", registry=r,
                                       **summed)
        # Per model from here on (see ModelMetrics): `model` is the repository's name for it.
        m = ["model"]
        self.inputs = Counter("attnserve_inputs", "Inputs (e.g. words) transduced.", m, registry=r)
        self.batch_size = Histogram("attnserve_batch_size", "Sources decoded together in one engine batch.", m,
                                    buckets=BATCH_BUCKETS, registry=r)
        self.batch_seconds = Histogram("attnserve_batch_duration_seconds", "Engine time per batch.", m,
                                       buckets=LATENCY_BUCKETS_S, registry=r)
        self.queue_wait_seconds = Histogram("attnserve_queue_wait_seconds", "Time a source waits before decoding.",
                                            m, buckets=LATENCY_BUCKETS_S, registry=r)
        self.queue_depth = Gauge("attnserve_queue_depth", "Sources waiting to be batched.", m, registry=r, **summed)
        # Refused at admission (service/scheduling/admission.py), by why: the expected wait did not fit the
        # call's deadline, or max_queue_wait_ms; or the queue held max_queue_size sources.
        self.admission_refusals = Counter("attnserve_admission_refusals",
                                          "Calls refused RESOURCE_EXHAUSTED at admission, by reason.",
                                          ["model", "reason"], registry=r)
        self.decode_steps = Counter("attnserve_decode_steps", "Decoder steps run (one per batch step).", m,
                                    registry=r)
        self.generated_tokens = Counter("attnserve_generated_tokens", "Output tokens generated.", m, registry=r)
        self.model_load_seconds = Gauge("attnserve_model_load_seconds", "Time to verify, load and warm the model.",
                                        m, registry=r, **same)
        self.model_info = Gauge("attnserve_model_info", "The served model (value 1).", ["name", "version"],
                                registry=r, **same)
        self.model_precision = Gauge("attnserve_model_precision", "The precision the model is served in (value 1).",
                                     ["model", "precision"], registry=r, **same)
        # One series at 1: the batching mode serving and why (service/scheduling/batcher.py REASONS); both
        # labels take the code's own few values.
        self.batching_mode = Gauge("attnserve_batching_mode", "The batching mode serving and why (value 1).",
                                   ["model", "mode", "reason"], registry=r, **same)
        # Decoder work per sequence: one row-step is one sequence going through one decoder step.
        # The second counts row-steps run for a sequence whose caller had already gone (cancelled,
        # deadline passed) - continuous batching keeps it to at most one per such sequence.
        self.decode_row_steps = Counter("attnserve_decode_row_steps",
                                        "Greedy decoder row-steps run (sequences x steps; beam search not counted).",
                                        m, registry=r)
        # The row-steps of sequences that had not yet ended (their own outputs, and </s> when emitted):
        # decode_row_steps minus this is the work spent on rows that had ended and wait, in a
        # request-level batch, for its longest; continuous batching retires a row as it ends (~0).
        self.decode_row_steps_useful = Counter(
            "attnserve_decode_row_steps_useful",
            "Greedy decoder row-steps of sequences that had not yet ended (of attnserve_decode_row_steps_total).",
            m, registry=r)
        self.decode_row_steps_after_cancel = Counter(
            "attnserve_decode_row_steps_after_cancel",
            "Decoder row-steps run for sequences whose caller had cancelled or whose deadline had passed.",
            m, registry=r)
        self.auth_failures = Counter("attnserve_auth_failures", "RPCs refused UNAUTHENTICATED (no or wrong token).",
                                     registry=r)
        self.model_reloads = Counter("attnserve_model_reloads",
                                     "Model loads (the first and every reload), by result (ok, refused).",
                                     ["model", "result"], registry=r)

        self.model_load_failures = Counter("attnserve_model_load_failures",
                                           "Models of the repository that failed to load (at start-up, on a load, or when polling found them).", ["model"],
                                           registry=r)

        # Where inputs were answered from: the model, the bundle's lexicon or the model's overrides.
        self.answers = Counter("attnserve_answers", "Inputs answered, by origin (MODEL, LEXICON, OVERRIDE).",
                               ["model", "origin"], registry=r)
        self.overrides_loads = Counter("attnserve_overrides_loads",
                                       "Overrides files read, by result (ok, refused: the previous stay in force).",
                                       ["model", "result"], registry=r)
        self.overrides_entries = Gauge("attnserve_overrides_entries", "Sources in the model's overrides in force.",
                                       m, registry=r, **same)

        self.cache_lookups = Counter("attnserve_cache_lookups", "Response cache lookups, by result (hit, miss).",
                                     ["model", "result"], registry=r)
        self.cache_evictions = Counter("attnserve_cache_evictions", "Answers evicted from a full response cache.",
                                       m, registry=r)
        self.cache_entries = Gauge("attnserve_cache_entries", "Answers in the response cache of the served version.",
                                   m, registry=r, **summed)

    def for_model(self, model: str) -> ModelMetrics:
        return ModelMetrics(self, model)

    def drop_model_info(self, name: str, version: str) -> None:
        """A version no longer served leaves attnserve_model_info: removed, or at 0 across processes,
        where a series lives on in its process's file (prometheus-client cannot remove it there)."""
        if multiprocess():
            self.model_info.labels(name, version).set(0)
        else:
            self.model_info.remove(name, version)


class _WithModel:
    """A metric with more labels than `model`, with `model` given: `.labels(reason)`."""

    def __init__(self, metric, model: str):
        self._metric, self._model = metric, model

    def labels(self, *values: str):
        return self._metric.labels(self._model, *values)


class ModelMetrics:
    """One model's metrics, `model` already set: what its batcher and manager record into, by the
    same attribute names as Metrics, so that they need not know which model they serve."""

    PER_MODEL = ("inputs", "batch_size", "batch_seconds", "queue_wait_seconds", "queue_depth", "decode_steps",
                 "generated_tokens", "model_load_seconds", "decode_row_steps", "decode_row_steps_useful",
                 "decode_row_steps_after_cancel",
                 "overrides_entries", "cache_evictions", "cache_entries")

    def __init__(self, metrics: Metrics, model: str):
        for name in self.PER_MODEL:
            setattr(self, name, getattr(metrics, name).labels(model))
        self.admission_refusals = _WithModel(metrics.admission_refusals, model)
        self.model_reloads = _WithModel(metrics.model_reloads, model)
        self.answers = _WithModel(metrics.answers, model)
        self.cache_lookups = _WithModel(metrics.cache_lookups, model)
        self.overrides_loads = _WithModel(metrics.overrides_loads, model)
        self.model_info = metrics.model_info
        self.drop_model_info = metrics.drop_model_info
        self.model_precision = _WithModel(metrics.model_precision, model)
        self.batching_mode = _WithModel(metrics.batching_mode, model)
