"""Observability against the real thing: a live /metrics endpoint and a real Prometheus server.

- The Grafana dashboard's metric and label names are checked against what a running server
  exports (not only against service/metrics.py's registry, as tests/deploy/test_deploy.py does).
- A real `prometheus` (the Debian package; `make system-deps` installs it) scrapes a running
  server with a config generated from deploy/prometheus/prometheus.yml, and its HTTP API must
  return the request count and latency quantile the dashboard is built on, and evaluate every
  dashboard query.
"""
from __future__ import annotations

import asyncio
import json
import math
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import grpc
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from tests.helpers import free_port
from tests.deploy.test_deploy import DASHBOARD, PROMETHEUS, _dashboard_queries, promql_metric_names
from tests.live import Calls, ServerSetup
from tests.server.test_server import config

# Added by Prometheus at scrape time, so never on the server's own samples.
TARGET_LABELS = {"instance", "job"}
# Grafana's variables as Prometheus sees them with "All" selected.
GRAFANA_VARIABLES = {"__rate_interval": "1m", "instance": ".*", "rpc": ".*", "model": ".*"}
# Panels that may rightly be empty here: this traffic has no errors.
MAY_BE_EMPTY = {"Error rate", "Errors by status code"}


@pytest.fixture(scope="module")
def server_setup(tiny_bundle):
    """A fresh server per test, so that its counters start at zero."""
    return ServerSetup(config(tiny_bundle), per_test=True)


async def transduce(server, words: list[str]) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pbg.TransducerStub(channel)
        await asyncio.gather(*(stub.Transduce(pb.TransduceRequest(inputs=[w]), timeout=10) for w in words))


def scrape(server) -> str:
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    return urllib.request.urlopen(url, timeout=5).read().decode()


def dashboard_exprs() -> dict[str, list[str]]:
    panels, variables = _dashboard_queries(json.loads(DASHBOARD.read_text()))
    return {**panels, "(template variables)": variables}


def label_names_used(expr: str) -> dict[str, set[str]]:
    """Metric name -> the label names its matchers in `expr` use (e.g. rpc, model, code)."""
    used: dict[str, set[str]] = {}
    for m in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}", expr):
        names = set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", m.group(2)))
        used.setdefault(m.group(1), set()).update(names)
    return used


# ------------------------------------------------- the dashboard vs live /metrics --

async def test_dashboard_metrics_and_labels_exist_on_a_live_metrics_endpoint(server):
    await transduce(server, ["attention", "knight", "a"])  # so that labelled series and histograms exist
    labels_of: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(await asyncio.to_thread(scrape, server)):
        for sample in family.samples:
            labels_of.setdefault(sample.name, set()).update(sample.labels)

    checked = set()
    for title, exprs in dashboard_exprs().items():
        for expr in exprs:
            names = promql_metric_names(expr)
            assert names, f"{title}: no metric in {expr!r}"
            for name in names:
                assert name in labels_of, f"{title}: {name} is not on the live /metrics ({expr!r})"
            for name, used in label_names_used(expr).items():
                missing = used - TARGET_LABELS - labels_of[name]
                assert not missing, f"{title}: {name} has no label {sorted(missing)} on the live /metrics"
            if m := re.fullmatch(r"\s*([\w:]+)\s*", expr):  # a template variable: label_values(metric, LABEL)
                checked.add(m.group(1))
            checked |= names
    # Every kind the dashboard shows was really checked: counters, histogram series, gauges.
    assert {"attnserve_requests_total", "attnserve_request_duration_seconds_bucket", "attnserve_batch_size_sum",
            "attnserve_batch_size_count", "attnserve_queue_depth", "attnserve_inflight_requests"} <= checked
    assert {"rpc", "model", "code"} <= labels_of["attnserve_requests_total"]


def test_label_names_used():
    assert label_names_used('sum by (le) (rate(a_bucket{code!="OK", model=~"$m"}[1m])) / b{x="1"}') == \
        {"a_bucket": {"code", "model"}, "b": {"x"}}


# ------------------------------------------------------------ a real Prometheus --

def prometheus_config(metrics_port: int) -> dict:
    """deploy/prometheus/prometheus.yml's attnserve job, scraping the test server every second."""
    cfg = yaml.safe_load(PROMETHEUS.read_text())
    (job,) = [j for j in cfg["scrape_configs"] if j["job_name"] == "attnserve"]
    (static,) = job["static_configs"]
    assert len(static["targets"]) == 1, "one target to rewrite"
    static["targets"] = [f"127.0.0.1:{metrics_port}"]
    job.update(scrape_interval="1s", scrape_timeout="1s")
    cfg["global"].update(scrape_interval="1s", evaluation_interval="1s")
    cfg["scrape_configs"] = [job]  # the others (Prometheus scraping itself) have no target here
    return cfg


@pytest.fixture
def prometheus(server, tmp_path):
    """A real Prometheus on a free loopback port; yields its base URL and kills it afterwards."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("`prometheus` is not installed: `make system-deps` installs the Debian package "
                    "(apt-get install prometheus)", pytrace=False)
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(prometheus_config(server.metrics_port)))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen([binary, f"--config.file={config_file}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60  # bounds a hang only: a busy machine starts it slowly
        while True:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited with {proc.returncode}:\n{(tmp_path / 'prometheus.log').read_text()}")
            try:
                if urllib.request.urlopen(f"{base}/-/ready", timeout=1).status == 200:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.monotonic() < deadline, "prometheus not ready in 60 s"
            time.sleep(0.1)
        yield base
    finally:
        proc.kill()
        proc.wait(timeout=10)
        log.close()


def query(base: str, promql: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        doc = json.load(urllib.request.urlopen(url, timeout=5))
    except urllib.error.HTTPError as e:  # a bad query answers 400 with the parser's error
        raise AssertionError(f"{promql!r}: {e.read().decode()}") from None
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def scrapes_of(monkeypatch) -> Calls:
    """Counts the scrapes the in-process server answers (each renders the registry once)."""
    from service.transport import http

    monkeypatch.setattr(http, "generate_latest", http.generate_latest)  # put back after the test
    return Calls().of(http, "generate_latest")


async def until(base: str, promql: str, ok, scrapes: Calls, timeout_s: float = 60.0) -> list[dict]:
    """An instant query, asked again after each scrape the server answers until ok(result): Prometheus
    stores a scrape before it starts the next one, so by then every earlier one is in (the deadline
    only bounds a hang)."""
    while True:
        result = await asyncio.to_thread(query, base, promql)
        if ok(result):
            return result
        seen = scrapes.count
        try:
            await scrapes.until(lambda: scrapes.count > seen, timeout_s)
        except asyncio.TimeoutError:
            raise AssertionError(f"{promql!r} stayed {result}: no scrape in {timeout_s} s") from None


def value(result: list[dict]) -> float | None:
    return float(result[0]["value"][1]) if len(result) == 1 else None


async def test_prometheus_scrapes_the_server_and_answers_the_dashboard_queries(server, prometheus, monkeypatch):
    scrapes = scrapes_of(monkeypatch)
    await until(prometheus, 'up{job="attnserve"}', lambda r: value(r) == 1.0, scrapes)
    requests = 'sum(attnserve_requests_total{rpc="Transduce"})'
    # Two rounds: rate() counts increases between samples, so the series must exist in
    # Prometheus before the second round for the latency quantile to be a number.
    first, second = [f"first{c}" for c in "abcd"], [f"second{c}" for c in "abcdef"]
    await transduce(server, first)
    await until(prometheus, requests, lambda r: value(r) == len(first), scrapes)
    await transduce(server, second)
    n = len(first) + len(second)
    await until(prometheus, requests, lambda r: value(r) == n, scrapes)
    by_model = 'sum(attnserve_requests_total{rpc="Transduce", model="tiny", code="OK"})'
    assert value(await asyncio.to_thread(query, prometheus, by_model)) == n

    p99 = "histogram_quantile(0.99, sum(rate(attnserve_request_duration_seconds_bucket[1m])) by (le))"
    result = await until(prometheus, p99, lambda r: value(r) is not None and math.isfinite(value(r)), scrapes)
    assert 0 < value(result) <= 10, result  # seconds, within the histogram's buckets

    # Every dashboard query parses and evaluates in a real Prometheus, and has data where traffic makes some.
    for title, exprs in dashboard_exprs().items():
        for expr in exprs:
            concrete = re.sub(r"\$\{?(\w+)\}?", lambda m: GRAFANA_VARIABLES[m.group(1)], expr)
            result = await asyncio.to_thread(query, prometheus, concrete)
            assert result or title in MAY_BE_EMPTY, f"{title}: no data for {concrete!r}"
