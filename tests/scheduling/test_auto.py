"""`--mode auto` and the mode's reason (service/scheduling/batcher.py): auto serves in the mode measured
the faster, request, and every server says at start which mode serves and why, in a log line and in
attnserve_batching_mode (one series at 1)."""
import logging

import pytest

from service.config import BatcherConfig
from service.metrics import Metrics
from service.scheduling.batcher import REASONS, Batcher, make_batcher
from service.scheduling.continuous import ContinuousBatcher
from service.scheduling.request import RequestBatcher
from tests.batching import FakeEngine


def gauge(metrics: Metrics) -> dict[tuple[str, str], float]:
    return {(s.labels["mode"], s.labels["reason"]): s.value for f in metrics.registry.collect()
            if f.name == "attnserve_batching_mode" for s in f.samples}


@pytest.mark.parametrize("asked,cls,reason", [("auto", RequestBatcher, "auto_measured"),
                                              ("request", RequestBatcher, "configured"),
                                              ("continuous", ContinuousBatcher, "configured")])
def test_the_mode_serving_and_why_are_logged_and_exported(asked, cls, reason, caplog):
    caplog.set_level(logging.INFO, logger="attnserve")
    metrics = Metrics()
    b = make_batcher(FakeEngine(), BatcherConfig(mode=asked), metrics.for_model("m"))
    assert type(b) is cls and isinstance(b, Batcher) and not b.running
    mode = "continuous" if cls is ContinuousBatcher else "request"
    assert f"m: {mode} batching, {REASONS[reason]}" in caplog.text
    series = gauge(metrics)
    assert series[(mode, reason)] == 1 and sum(series.values()) == 1 and len(series) == 2 * len(REASONS)


def test_an_unknown_mode_is_refused_when_configured():
    with pytest.raises(ValueError, match="mode must be one of"):
        BatcherConfig(mode="fastest")
