"""Helpers for tests against live servers: certificates, extra model versions, server processes
(free ports and waiting for SERVING: tests/helpers.py, which scripts/ share)."""
from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from service.engine.bundle import MANIFEST, load_bundle, write_manifest

VENV_BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]


# --- certificates ------------------------------------------------------------------------------

def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key, issuer: str, issuer_key, *, ca: bool, server: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                          content_commitment=False, key_encipherment=False, data_encipherment=False,
                                          key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server:
        b = b.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _write(path: Path, key, cert: x509.Certificate) -> tuple[str, str]:
    key_path, cert_path = path.with_suffix(".key"), path.with_suffix(".pem")
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(cert_path), str(key_path)


@dataclass(frozen=True)
class Pki:
    ca: str  # CA certificate (PEM path)
    server_cert: str
    server_key: str
    client_cert: str  # signed by `ca`
    client_key: str
    rogue_cert: str  # a client certificate from another CA
    rogue_key: str


def make_pki(directory: Path) -> Pki:
    """A CA, a server certificate for 127.0.0.1/localhost, a client certificate, and a rogue one."""
    directory.mkdir(parents=True, exist_ok=True)
    new_key = lambda: ec.generate_private_key(ec.SECP256R1())  # noqa: E731
    ca_key, rogue_ca_key = new_key(), new_key()
    ca = _cert("attnserve test CA", ca_key, "attnserve test CA", ca_key, ca=True)
    (directory / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    server_key, client_key, rogue_key = new_key(), new_key(), new_key()
    server = _write(directory / "server", server_key,
                    _cert("127.0.0.1", server_key, "attnserve test CA", ca_key, ca=False, server=True))
    client = _write(directory / "client", client_key,
                    _cert("client", client_key, "attnserve test CA", ca_key, ca=False))
    rogue = _write(directory / "rogue", rogue_key, _cert("rogue", rogue_key, "rogue CA", rogue_ca_key, ca=False))
    return Pki(str(directory / "ca.pem"), *server, *client, *rogue)


# --- model versions ----------------------------------------------------------------------------

def shipped_repository(root: Path, names) -> Path:
    """A model repository at `root` of the shipped bundles `names` (models/<name>/1), by links: what a
    test's server over real models reads, without copying their weights."""
    for name in names:
        (root / name).mkdir()
        (root / name / "1").symlink_to(REPO / "models" / name / "1")
    return root


def copy_bundle(src: Path, dst: Path, *, break_onnx: bool = False, bad_hash: bool = False, **changes) -> Path:
    """A copy of bundle `src` at `dst` with `changes` in its manifest, hashed again.

    break_onnx: the encoder is garbage but the manifest hashes match it (it passes the hash
    check and fails in onnxruntime). bad_hash: a graph is changed after hashing.
    """
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    manifest = {**json.loads((dst / MANIFEST).read_text()), **changes}
    if break_onnx:
        (dst / manifest["graphs"]["encoder"]).write_bytes(b"this is not an ONNX graph")
    write_manifest(dst, {k: v for k, v in manifest.items() if k not in ("files", "format_version")})
    if bad_hash:
        with (dst / manifest["graphs"]["encoder"]).open("ab") as f:
            f.write(b"tampered")
    return dst


def add_version(model_dir: Path, version: str, *, break_onnx: bool = False, bad_hash: bool = False) -> Path:
    """Copy version 1 of model_dir to `version` with that version in its manifest."""
    staging = model_dir / f".{version}.tmp"  # a non-numeric name: a poller never sees a half-copied version
    copy_bundle(load_bundle(model_dir, "1").path, staging, break_onnx=break_onnx, bad_hash=bad_hash, version=version)
    return staging.rename(model_dir / version)


def copy_model(model_dir: Path, repository: Path, name: str, *, break_onnx: bool = False) -> Path:
    """Version 1 of model_dir as model `name` of a repository (its manifest renamed to match)."""
    copy_bundle(load_bundle(model_dir, "1").path, repository / name / "1", break_onnx=break_onnx, name=name)
    return repository / name


# --- servers -----------------------------------------------------------------------------------

@contextlib.contextmanager
def held(engine, timeout_s: float = 120):
    """Within: the in-process engine's encoder runs (every decode and step starts with one) wait
    until the yielded event is set, so calls are provably queued or in flight on any machine.
    tests/held_server.py does the same to a server process."""
    release, encode = threading.Event(), engine.encode

    def held_encode(*args, **kwargs):
        if not release.wait(timeout_s):
            raise TimeoutError(f"the test never released the engine ({timeout_s} s)")
        return encode(*args, **kwargs)

    engine.encode = held_encode
    try:
        yield release
    finally:
        release.set()
        del engine.encode  # the class's own again


class Calls:
    """Counts the calls of the methods it wraps and wakes the waiters after each (on the event loop), so
    that a test waits for the state those calls change instead of polling it on a timer. The wrapper stays
    on the object (it only counts and wakes)."""

    def __init__(self):
        self.count = 0
        self._changed = asyncio.Condition()
        self._loop = asyncio.get_running_loop()

    def of(self, obj, name: str) -> "Calls":
        real = getattr(obj, name)

        def counted(*args, **kwargs):
            try:
                return real(*args, **kwargs)
            finally:
                self.count += 1
                self._loop.call_soon_threadsafe(self._loop.create_task, self._wake())

        setattr(obj, name, counted)
        return self

    async def _wake(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def until(self, predicate, timeout_s: float = 60) -> None:
        """Until predicate() holds, checked after each counted call; the deadline only bounds a hang."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout_s)


class LogLines:
    """Another process's output (its stdout, a pipe) read line by line in a thread as it is written, kept
    in `path` too: a test waits for the line a state change logs instead of polling the file on a timer."""

    def __init__(self, proc: subprocess.Popen, path: Path):
        self.path, self.lines, self.ended = path, [], False
        proc.log_path = path  # wait_serving ends its error with the log
        self._changed = threading.Condition()  # re-entrant: matches() is called under it
        threading.Thread(target=self._read, args=(proc.stdout,), name="log-lines", daemon=True).start()

    def _read(self, stream) -> None:
        with open(self.path, "wb") as out:
            for raw in stream:
                out.write(raw)
                out.flush()
                with self._changed:
                    self.lines.append(raw.decode(errors="replace"))
                    self._changed.notify_all()
        with self._changed:
            self.ended = True
            self._changed.notify_all()

    def matches(self, pattern: str) -> list[re.Match]:
        with self._changed:
            return [m for m in map(re.compile(pattern).search, self.lines) if m]

    async def until(self, pattern: str, count: int = 1, timeout_s: float = 120) -> list[re.Match]:
        """The lines matching `pattern` once there are `count` of them (waiting for each line written);
        AssertionError if the process ends first. The deadline only bounds a hang."""
        def wait():
            with self._changed:
                self._changed.wait_for(lambda: self.ended or len(self.matches(pattern)) >= count, timeout_s)
            found = self.matches(pattern)
            assert len(found) >= count, f"{len(found)} of {count} lines like {pattern!r}:\n" + "".join(self.lines)
            return found
        return await asyncio.to_thread(wait)

    async def whole(self, timeout_s: float = 60) -> str:
        """Everything the process wrote, once it has closed its output (exited)."""
        def wait():
            with self._changed:
                assert self._changed.wait_for(lambda: self.ended, timeout_s), "the process never closed its output"
                return "".join(self.lines)
        return await asyncio.to_thread(wait)


async def start_loaded(cfg):
    """A real server on loopback (build, bind, load and warm): what every in-process test serves."""
    from service.server import build_server

    s = build_server(cfg)
    await s.start()
    await s.load()
    return s


def loopback_config(model_dir: Path | None = None, *, server: dict | None = None, answering: dict | None = None,
                    batcher: dict | None = None, repository: dict | None = None, engine: dict | None = None,
                    **fields):
    """A Config for a test's server on 127.0.0.1, port 0: `fields` are Config's own (model_repository,
    default_model, ...), each other argument the fields of that section changed from its defaults."""
    from service.config import AnswerConfig, BatcherConfig, Config, EngineConfig, RepositoryConfig, ServerConfig

    return Config(model_dir=model_dir, server=ServerConfig(**{"host": "127.0.0.1", "port": 0, **(server or {})}),
                  answering=AnswerConfig(**(answering or {})), batcher=BatcherConfig(**(batcher or {})),
                  engine=EngineConfig(**(engine or {})), repository=RepositoryConfig(**(repository or {})), **fields)


@dataclass(frozen=True)
class ServerSetup:
    """What a module's `server_setup` fixture returns, and tests/conftest.py's `server` serves: the
    config, whether each test gets a fresh server (counters from zero) or the module's tests share one,
    and what to do to each server once it is loaded (e.g. pace its engine)."""
    config: object  # service.config.Config
    per_test: bool = False
    prepare: Callable[[object], None] = lambda server: None


@contextlib.asynccontextmanager
async def serving(cfg):
    """`start_loaded`, stopped without a grace period on exit."""
    s = await start_loaded(cfg)
    try:
        yield s
    finally:
        await s.stop(0)


class ThreadServer:
    """An AttnServer on its own event loop in a background thread, for synchronous clients."""

    def __init__(self, cfg):
        self._cfg = cfg
        self.server = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="test-server", daemon=True)

    def __enter__(self):
        self._thread.start()
        self.server = self._call(start_loaded(self._cfg))
        return self

    def _call(self, coro, timeout_s: float = 120):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def __exit__(self, *exc):
        self._call(self.server.stop(0))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.port}"


def spawn_server(model_dir: Path, port: int, *args: str, log_path: Path | None = None,
                 held: bool = False) -> subprocess.Popen:
    """`attnserve-server` from the venv as a child process (stdout/stderr to log_path). held: the
    same server whose engine, once warmed up, holds every call until release() (tests/held_server.py)."""
    server = [sys.executable, "-m", "tests.held_server"] if held else [str(VENV_BIN / "attnserve-server")]
    cmd = [*server, "--model-dir", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
           "--metrics-port", "-1", *args]
    out = open(log_path, "wb") if log_path else subprocess.DEVNULL
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO if held else None,
                            stdin=subprocess.PIPE if held else None)
    proc.log_path = log_path  # wait_serving ends its error with the log
    return proc


def release(proc: subprocess.Popen) -> None:
    """A held server's engine takes its calls from now on."""
    proc.stdin.write(b"\n")
    proc.stdin.flush()


def terminate(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
