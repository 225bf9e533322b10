"""Steps 1-4 of scripts/container_check.py: podman, runc and debootstrap installed when missing, this
machine's podman settings, a Debian base debootstrapped from the machine's own mirror (cached), and
deploy/Dockerfile built on it into IMAGE. The checks of the running image stay in container_check.py.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "build" / "container"

IMAGE = "localhost/attnserve:container-check"
APT_PACKAGES = {"podman": "podman", "runc": "runc", "debootstrap": "debootstrap"}  # command -> package
# What the Dockerfile needs of its base: python (and venv, whose ensurepip brings pip), CA certificates
# for pip; minbase already has /bin/sh and groupadd/useradd (passwd).
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
# Debian's podman 4.3 in this sandbox: without `default_ulimits = []` every container fails to start
# ("error setting rlimit type 7: operation not permitted": podman raises RLIMIT_NOFILE, which is not
# allowed here). crun, podman's first choice when installed, refuses (cgroups in hybrid mode): runc.
# No systemd and no journald: cgroupfs and a file for events (what podman falls back to here anyway).
CONTAINERS_CONF = """\
# Written by scripts/container_image.py: podman settings for this machine (CONTAINERS_CONF).
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""
# The machine's CA bundle is mounted over the base's own during RUN steps (a mount point that
# already exists leaves nothing behind in the image; the runtime stage keeps the base's bundle).
HOST_CA_IN_BUILD = "/etc/ssl/certs/ca-certificates.crt"
UID = 10001  # the Dockerfile's USER


def log(msg: str) -> None:
    print(f"[container-check] {msg}", flush=True)


def run(cmd: list[str], *, check: bool = True, capture: bool = True, timeout: float | None = None,
        **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, check=False, text=True, capture_output=capture, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}... exited {r.returncode}:\n{(r.stderr or '')[-3000:]}")
    return r


# ------------------------------------------------------------------------------------ tools --

def ensure_tools() -> dict:
    t0 = time.monotonic()
    missing = [pkg for cmd, pkg in APT_PACKAGES.items() if shutil.which(cmd) is None]
    if missing:
        log(f"apt-get install {' '.join(missing)}")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
        if subprocess.run(install, check=False, env=env).returncode != 0:  # stale package lists: refresh once
            run(["apt-get", "update", "-q"], capture=False, env=env)
            run(install, capture=False, env=env)
    version = run(["podman", "--version"]).stdout.strip()
    return {"installed": missing, "seconds": round(time.monotonic() - t0, 1), "podman": version,
            "runc": run(["runc", "--version"]).stdout.splitlines()[0]}


def podman_env() -> dict:
    WORK.mkdir(parents=True, exist_ok=True)
    conf = WORK / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    os.environ["CONTAINERS_CONF"] = str(conf)
    return {"containers_conf": str(conf.relative_to(REPO))}


def podman(*args: str, **kw) -> subprocess.CompletedProcess:
    return run(["podman", *args], **kw)


# ------------------------------------------------------------------------------------- base --

def debian_mirror() -> tuple[str, str]:
    """(mirror URL, suite) of the machine's own Debian sources: deb822 *.sources first, then *.list."""
    sources = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    for path in sources:
        for stanza in re.split(r"\n\s*\n", path.read_text()):
            fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.MULTILINE))
            uris, suites = fields.get("URIs", "").split(), fields.get("Suites", "").split()
            if "deb" in fields.get("Types", "").split() and uris and suites and "security" not in uris[0] \
                    and "main" in fields.get("Components", "").split() and "debian" in uris[0]:
                return uris[0], suites[0]
    lists = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    for path in lists:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            m = re.match(r"\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s+(.*)", line)
            if m and "debian" in m.group(1) and "security" not in m.group(1) and "main" in m.group(3).split():
                return m.group(1), m.group(2)
    codename = re.search(r"^VERSION_CODENAME=(\w+)", Path("/etc/os-release").read_text(), re.MULTILINE)
    return "http://deb.debian.org/debian", codename.group(1) if codename else "bookworm"


def mounts_below(path: Path) -> list[str]:
    prefix = str(path.resolve()) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point.startswith(prefix):
            points.append(point)
    return sorted(points, key=len, reverse=True)


def unmount_below(path: Path) -> None:
    """debootstrap can leave the target's /proc mounted: unmount all below `path`, or refuse to go on."""
    for point in mounts_below(path):
        if subprocess.run(["umount", point], check=False).returncode != 0:
            subprocess.run(["umount", "-l", point], check=False)
    left = mounts_below(path)
    if left:
        raise RuntimeError(f"still mounted below {path}: {left}; not removing it")


def remove_tree(path: Path) -> None:
    if path.exists():
        unmount_below(path)
        shutil.rmtree(path)


def trim_rootfs(root: Path) -> None:
    """What Debian's slim images leave out too: package caches and lists, manuals, docs but copyright."""
    for pattern in ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*",
                    "usr/share/man/*", "usr/share/info/*", "var/log/*.log", "var/log/apt/*"):
        for p in root.glob(pattern):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.name != "lock":
                p.unlink()
    for p in (root / "usr/share/doc").rglob("*"):
        if not p.is_dir() and p.name != "copyright":
            p.unlink()
    for p in (root / "usr/share/locale").glob("*"):
        if p.name not in ("locale.alias",) and p.is_dir():
            shutil.rmtree(p)


def ensure_base(args) -> dict:
    """The local Debian base image (debootstrap once, cached as a tarball; imported when podman lacks it)."""
    own_mirror, own_suite = debian_mirror()
    mirror, suite = args.mirror or own_mirror, args.suite or own_suite
    key_doc = {"suite": suite, "mirror": mirror, "variant": "minbase", "include": sorted(BASE_PACKAGES)}
    key = hashlib.sha256(json.dumps(key_doc, sort_keys=True).encode()).hexdigest()[:12]
    tarball, stamp = WORK / f"base-{suite}.tar", WORK / f"base-{suite}.json"
    tag = f"localhost/attnserve-base:{suite}-{key}"
    info = {"image": tag, **key_doc, "tarball": str(tarball.relative_to(REPO))}
    cached = tarball.is_file() and stamp.is_file() and json.loads(stamp.read_text()).get("key") == key \
        and not args.fresh_base
    info["cached"] = cached
    if not cached:
        root = WORK / "rootfs.tmp"
        remove_tree(root)
        log(f"debootstrap --variant=minbase {suite} from {mirror} (once; cached in {tarball.relative_to(REPO)})")
        t0 = time.monotonic()
        with open(WORK / "debootstrap.log", "w") as out:
            r = subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
                                suite, str(root), mirror], check=False, stdout=out, stderr=subprocess.STDOUT)
        unmount_below(root)
        if r.returncode != 0:
            raise RuntimeError(f"debootstrap exited {r.returncode}: see {WORK / 'debootstrap.log'}:\n"
                               + (WORK / "debootstrap.log").read_text()[-2000:])
        info["debootstrap_s"] = round(time.monotonic() - t0, 1)
        trim_rootfs(root)
        partial = tarball.with_suffix(".tar.tmp")
        run(["tar", "--numeric-owner", "--one-file-system", "-C", str(root), "-cf", str(partial), "."])
        partial.replace(tarball)
        stamp.write_text(json.dumps({"key": key, **key_doc}, indent=2) + "\n")
        remove_tree(root)
        podman("rmi", "-f", tag, check=False)
    info["tarball_mb"] = round(tarball.stat().st_size / 1e6, 1)
    if podman("image", "exists", tag, check=False).returncode != 0:
        t0 = time.monotonic()
        podman("import", "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "--change", "ENV LANG=C.UTF-8", "--change", 'CMD ["/bin/bash"]', str(tarball), tag)
        info["import_s"] = round(time.monotonic() - t0, 1)
    return info


# ------------------------------------------------------------------------------------ build --

def pip_settings() -> dict[str, str]:
    """How this machine's pip reaches the index: its CA bundle (a TLS-intercepting proxy's CA may be
    in it) and its index URL if one is configured. Local file:// indexes stay outside the build."""
    config: dict[str, str] = {}
    r = subprocess.run([sys.executable, "-m", "pip", "config", "list"], check=False, capture_output=True, text=True)
    for line in r.stdout.splitlines():
        name, _, value = line.partition("=")
        config[name.split(".", 1)[-1]] = value.strip().strip("'\"")
    out = {}
    index = os.environ.get("PIP_INDEX_URL") or config.get("index-url", "")
    if index.startswith(("http://", "https://")):
        out["PIP_INDEX_URL"] = index
    cert = os.environ.get("PIP_CERT") or config.get("cert") or "/etc/ssl/certs/ca-certificates.crt"
    if Path(cert).is_file():
        out["PIP_CERT"] = str(Path(cert).resolve())
    return out


def build_context(git_ref: str | None) -> tuple[Path, str]:
    """The working tree (what a clean clone is on CI), or a commit's files exported from git."""
    if not git_ref:
        return REPO, "working tree"
    rev = run(["git", "rev-parse", "--verify", f"{git_ref}^{{commit}}"], cwd=REPO).stdout.strip()
    context = WORK / "context"
    remove_tree(context)
    context.mkdir(parents=True)
    archive = subprocess.Popen(["git", "archive", "--format=tar", rev], cwd=REPO, stdout=subprocess.PIPE)
    run(["tar", "-x", "-C", str(context)], stdin=archive.stdout)
    if archive.wait() != 0:
        raise RuntimeError(f"git archive {rev} failed")
    return context, f"git {git_ref} ({rev[:10]})"


def build(base: str, args) -> dict:
    pip = pip_settings()
    context, what = build_context(args.git_ref)
    cmd = ["podman", "build", "--format", "docker",  # docker format: the OCI format drops HEALTHCHECK
           "--network=host", "-f", "deploy/Dockerfile", "-t", IMAGE, "--build-arg", f"BASE_IMAGE={base}"]
    if "PIP_CERT" in pip:
        cmd += ["--volume", f"{pip['PIP_CERT']}:{HOST_CA_IN_BUILD}:ro", "--build-arg", f"PIP_CERT={HOST_CA_IN_BUILD}"]
    if "PIP_INDEX_URL" in pip:
        cmd += ["--build-arg", f"PIP_INDEX_URL={pip['PIP_INDEX_URL']}"]
    if args.no_cache:
        cmd.append("--no-cache")
    cmd.append(".")
    log(f"podman build (log: {(WORK / 'build.log').relative_to(REPO)}): {' '.join(cmd[2:])}")
    t0 = time.monotonic()
    with open(WORK / "build.log", "w") as out:
        r = subprocess.run(cmd, check=False, cwd=context, stdout=out, stderr=subprocess.STDOUT)
    seconds = round(time.monotonic() - t0, 1)
    text = (WORK / "build.log").read_text()
    if r.returncode != 0:
        raise RuntimeError(f"podman build exited {r.returncode} after {seconds} s:\n{text[-3000:]}")
    size = int(podman("image", "inspect", IMAGE, "--format", "{{.Size}}").stdout.strip())
    steps = len(re.findall(r"^\[\d+/\d+\] STEP \d+/\d+: (?!FROM )", text, re.MULTILINE))  # FROM: never cached
    return {"seconds": seconds, "context": what, "no_cache": args.no_cache, "steps": steps,
            "steps_from_cache": text.count("--> Using cache"), "image": IMAGE, "image_size_mb": round(size / 1e6, 1),
            "pip": {k: (HOST_CA_IN_BUILD + " (host bundle " + v + ")" if k == "PIP_CERT" else v)
                    for k, v in pip.items()}}
