"""The README's quick tour, run as written against a real server serving the shipped models/, and
every relative link of README.md and docs/*.md pointing at something that exists.

The server is the one `make serve` starts: its flags are read from the Makefile's serve recipe, and
only its ports are changed (to free ones). The commands run as written, in a scratch directory whose
.venv is this venv, with ATTNSERVE_SERVER (which attnserve-client reads) naming the server; curl and
page URLs get the HTTP port in place of 9090. What the README shows under a command must be what the
command prints: words and symbols exactly, numbers to within 0.02 (a different CPU's int8 kernels may
move the last digits of a score, never a phoneme).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shlex
import subprocess
import urllib.request
from pathlib import Path

import pytest

from service.config import parse_config
from tests.conftest import REPO
from tests.live import VENV_BIN, ThreadServer

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
CLIENT = "$ .venv/bin/attnserve-client "
CURL = "$ curl "
README_PORTS = {"grpc": 50051, "http": 9090}  # what the README's commands and URLs assume
WORDS = ["knight", "phoenix", "", "attention"]  # words.txt of the bulk commands; the blank line is skipped
NUMBER = re.compile(r"^([a-z]+=)?(-?\d+\.\d+(?:e-?\d+)?)$")
TOLERANCE = 0.02


# --- reading the README -------------------------------------------------------------------------

def console_blocks(text: str) -> list[list[str]]:
    blocks, current = [], None
    for line in text.splitlines():
        if current is None and line.strip() == "```console":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append(current)
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def _complete(command: str) -> bool:
    if command.endswith("\\"):
        return False
    try:
        shlex.split(command, comments=True)
    except ValueError:  # an open quote: the command goes on on the next line (the curl call)
        return False
    return True


def commands(block: list[str]) -> list[tuple[str, list[str]]]:
    """(command, the output shown under it) for each `$ ` line of a console block."""
    found, i = [], 0
    while i < len(block):
        if not block[i].startswith("$ "):
            i += 1
            continue
        command = block[i]
        i += 1
        while not _complete(command) and i < len(block):
            command += "\n" + block[i]
            i += 1
        shown = []
        while i < len(block) and not block[i].startswith("$ "):
            shown.append(block[i])
            i += 1
        found.append((command, shown))
    return found


def quick_tour() -> list[tuple[str, list[str]]]:
    return [(c, shown) for block in console_blocks(README.read_text(encoding="utf-8")) for c, shown in commands(block)
            if c.startswith((CLIENT, CURL))]


TOUR = quick_tour()


def make_serve_argv() -> list[str]:
    """The attnserve-server flags of the Makefile's serve recipe, its variables filled in."""
    makefile = (REPO / "Makefile").read_text()
    variables = dict(re.findall(r"^(\w+) \?= (.*)$", makefile, re.M))
    recipe = re.search(r"^serve:.*\n\t(.*)$", makefile, re.M).group(1)
    recipe = re.sub(r"\$\((\w+)\)", lambda m: variables.get(m.group(1), m.group(0)), recipe)
    words = shlex.split(recipe)  # as the shell reads the recipe: quotes and all
    return words[[w.endswith("/attnserve-server") for w in words].index(True) + 1:]


# --- comparing what is shown with what is printed -----------------------------------------------

def _close(shown: str, got: str) -> bool:
    a, b = NUMBER.match(shown), NUMBER.match(got)
    if a and b and a.group(1) == b.group(1):
        return math.isclose(float(a.group(2)), float(b.group(2)), rel_tol=0.01, abs_tol=TOLERANCE)
    return shown == got


def assert_prints_as_shown(shown: list[str], stdout: str) -> None:
    want = [line.split() for line in shown if line.strip()]
    got = [line.split() for line in stdout.splitlines() if line.strip()]
    assert len(got) == len(want), f"shown:\n{chr(10).join(shown)}\nprinted:\n{stdout}"
    for w, g in zip(want, got):
        assert len(w) == len(g) and all(map(_close, w, g)), f"shown: {' '.join(w)}\nprinted: {' '.join(g)}"


def assert_same_json(shown, got, where="$") -> None:
    if isinstance(shown, dict):
        assert isinstance(got, dict) and shown.keys() == got.keys(), f"{where}: {shown} against {got}"
        for key in shown:
            assert_same_json(shown[key], got[key], f"{where}.{key}")
    elif isinstance(shown, list):
        assert isinstance(got, list) and len(shown) == len(got), f"{where}: {shown} against {got}"
        for k, (s, g) in enumerate(zip(shown, got)):
            assert_same_json(s, g, f"{where}[{k}]")
    elif isinstance(shown, float):
        assert math.isclose(shown, got, rel_tol=0.01, abs_tol=TOLERANCE), f"{where}: {shown} against {got}"
    else:
        assert shown == got, f"{where}: {shown!r} against {got!r}"


# --- the server and the commands ----------------------------------------------------------------

@pytest.fixture(scope="module")
def make_serve():
    cfg = parse_config(make_serve_argv(), environ={})
    assert (cfg.server.port, cfg.server.metrics_port) == (README_PORTS["grpc"], README_PORTS["http"])
    cfg = dataclasses.replace(cfg, model_repository=REPO / cfg.model_repository,
                              server=dataclasses.replace(cfg.server, host="127.0.0.1", port=0, metrics_port=0))
    with ThreadServer(cfg) as s:
        yield s.server


def http_url(text: str, server) -> str:
    return text.replace(f"localhost:{README_PORTS['http']}", f"127.0.0.1:{server.metrics_port}")


def run(command: str, server, cwd: Path) -> subprocess.CompletedProcess:
    (cwd / ".venv").symlink_to(VENV_BIN.parent, target_is_directory=True)
    (cwd / "words.txt").write_text("".join(w + "\n" for w in WORDS), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    env["ATTNSERVE_SERVER"] = f"127.0.0.1:{server.port}"
    return subprocess.run(["bash", "-c", http_url(command[2:], server)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_readme_has_a_quick_tour_to_run():
    # the parametrized test below must not pass by finding nothing to run
    clients = [c for c, _ in TOUR if c.startswith(CLIENT)]
    assert len(clients) >= 10 and sum(c.startswith(CURL) for c, _ in TOUR) >= 1
    assert any(line.split()[:5] == ["knight", "->", "N", "AY", "T"] for _, shown in TOUR for line in shown)
    assert any("--png attention.png" in c for c in clients) and any("words.txt" in c for c in clients)


@pytest.mark.parametrize("command,shown", TOUR, ids=[c[2:].splitlines()[0].split("#")[0].strip()[:70] for c, _ in TOUR])
def test_a_readme_command_works_as_shown(command, shown, make_serve, tmp_path):
    out = run(command, make_serve, tmp_path)
    assert out.returncode == 0, f"{command}\n{out.stdout}\n{out.stderr}"
    if command.startswith(CURL):
        assert_same_json(json.loads("\n".join(shown)), json.loads(out.stdout))
    elif shown:
        assert_prints_as_shown(shown, out.stdout)
    words = [w for w in WORDS if w]
    if m := re.search(r"--png (\S+)", command):
        assert (tmp_path / m.group(1)).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if m := re.search(r"--file words\.txt > (\S+)", command):  # bulk: one line per word, in order
        lines = (tmp_path / m.group(1)).read_text(encoding="utf-8").splitlines()
        assert [line.split("\t")[0] for line in lines] == words and all(line.split("\t")[1] for line in lines)
    elif "--json" in command and "< words.txt" in command:  # one JSON object per input line
        assert [json.loads(line)["input"] for line in out.stdout.splitlines()] == words
    elif "--json" in command:
        assert json.loads(out.stdout)["results"]
    elif not shown:
        assert out.stdout.strip(), command


def test_the_page_the_readme_points_at_is_served(make_serve):
    urls = set(re.findall(rf"<(http://localhost:{README_PORTS['http']}/[^>]*)>", README.read_text(encoding="utf-8")))
    assert urls
    for url in urls:
        with urllib.request.urlopen(http_url(url, make_serve), timeout=10) as reply:
            assert reply.status == 200 and b"<html" in reply.read().lower(), url


def test_every_make_target_the_readme_runs_exists():
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.M))
    run_here = {shlex.split(c, comments=True)[2] for block in console_blocks(README.read_text(encoding="utf-8"))
                for c, _ in commands(block) if c.startswith("$ make ")}
    assert {"serve", "test"} <= run_here and run_here <= targets, run_here - targets


# --- links --------------------------------------------------------------------------------------

FENCE = re.compile(r"^```.*?^```", re.M | re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def anchors(markdown: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", markdown.read_text(encoding="utf-8")), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_points_at_something_that_exists(page):
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(REPO)}: {broken}"


def test_the_docs_pages_exist_and_the_frontier_is_not_copied():
    assert {p.name for p in DOCS} >= {"models.md", "api.md", "g2p.md", "operations.md", "performance.md",
                                      "training.md", "RESULTS.md"}
    assert not (REPO / "docs" / "frontier.png").exists()  # bench/results/frontier.png is the one make bench writes
