"""make bench-text: running English text through the server's text call, beside the peers that take
running text here: espeak-ng through phonemizer, and gruut.

    python -m bench.text --bundle models/g2p-en --loadgen build/attnserve-loadgen

The workload is bench/corpus/english.txt (its README names the sources), one sentence per call,
words counted as the sentence's whitespace-separated words for all three. The server: the shipped
model with its lexicon and response cache on (the defaults), and the context model it names for its
homographs (docs/homographs.md), so every homograph is read by its sentence, in its own process; the load: the C++
load generator (bench/cpp/loadgen.cc) with 16 calls outstanding on 8 connections, so that the
client's CPU stays small beside the server's on a small machine. The peers run in this process, one sentence at a
time over the same corpus (espeak-ng as phonemizer calls it: a list of sentences in one call, the
way it is fastest). Also: the unloaded p50 of one 15-word sentence (calls one at a time), and a
check that every sentence's spans cover it and its punctuation comes back in place.
Results: bench/results/text.json and text.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from bench.harness import BIN, Server, server_cpu_seconds, write_messages

CORPUS = Path(__file__).resolve().parent / "corpus" / "english.txt"
RESULTS = Path(__file__).resolve().parent / "results"
CONCURRENCY = 16
# The load generator's connections. The kernel gives each worker whole connections (SO_REUSEPORT), at
# random: with 4 connections one worker took all four in about one run in eight (seen: one worker idle),
# with 8 in one in 128. Each outstanding call keeps its connection, so a worker with fewer connections
# still gets calls as fast as it answers them. More connections than this cost more per call (each
# connection's reads and writes carry fewer calls).
CHANNELS = 8
WARM_CHANNELS = 32
METHOD = "/attnserve.v1.Transducer/TransduceText"
# Targets: a text front end that keeps up with the peers TTS users run today.
ESPEAK_RATIO, GRUUT_RATIO = 0.3, 80.0


def corpus() -> list[str]:
    return [line.strip() for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]


def words_in(sentences: list[str]) -> int:
    return sum(len(s.split()) for s in sentences)


def served_with_context(bundle: Path, repository: Path) -> str:
    """A model repository of the bundle (its name) and the context model its manifest names for its
    homographs (docs/homographs.md), side by side as the server finds them in models/: so that the text
    is read with everything on. The bundle's name is returned (the requests' default model)."""
    bundle = bundle.resolve()
    (repository / bundle.name).symlink_to(bundle)
    versions = sorted((p for p in bundle.iterdir() if (p / "manifest.json").is_file()), key=lambda p: p.name)
    spec = json.loads((versions[-1] / "manifest.json").read_text()).get("homographs")
    if spec:
        (repository / spec["model"]).symlink_to(bundle.parent / spec["model"])
    return bundle.name


def requests_file(sentences: list[str], path: Path, attention: bool) -> Path:
    """Each sentence as a serialized TransduceTextRequest after its 4-byte length: what the load
    generator sends, cycling."""
    from attnserve.v1 import attnserve_pb2 as pb

    return write_messages(path, (pb.TransduceTextRequest(texts=[s], options=pb.TextOptions(return_attention=attention))
                                 for s in sentences))


def closed_loop(server: Server, loadgen: str, requests: Path, sentences: list[str], seconds: float,
                channels: int = CHANNELS) -> dict:
    cpu0 = server_cpu_seconds(server.proc.pid)
    out = subprocess.run([loadgen, "--target", server.addr, "--method", METHOD, "--requests", str(requests),
                          "--concurrency", str(CONCURRENCY), "--seconds", str(seconds), "--deadline-ms", "10000",
                          "--channels", str(channels)],
                         capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    ok = r["codes"].get("OK", 0)
    words_per_call = words_in(sentences) / len(sentences)
    return {"calls_ok": ok, "errors": sum(r["codes"].values()) - ok, "seconds": r["seconds"],
            "sentences_per_s": r["goodput_per_s"], "words_per_s": r["goodput_per_s"] * words_per_call,
            "p50_ms": r["latency_ms"].get("OK", {}).get("p50_ms"), "p99_ms": r["latency_ms"].get("OK", {}).get("p99_ms"),
            "server_cpu_util": round((server_cpu_seconds(server.proc.pid) - cpu0) / r["seconds"], 3),
            "client_cpu_s": r["client_cpu_s"]}


def unloaded_p50(addr: str, sentence: str, calls: int) -> dict:
    """One call at a time: the latency a lone caller sees for one sentence (its words cached after the first)."""
    import grpc

    from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg

    with grpc.insecure_channel(addr) as channel:
        stub = pbg.TransducerStub(channel)
        request = pb.TransduceTextRequest(texts=[sentence], options=pb.TextOptions(return_attention=False))
        first = time.perf_counter()
        stub.TransduceText(request, timeout=30)
        first = time.perf_counter() - first
        times = []
        for _ in range(calls):
            t = time.perf_counter()
            stub.TransduceText(request, timeout=30)
            times.append(time.perf_counter() - t)
    return {"sentence": sentence, "words": len(sentence.split()), "calls": calls,
            "first_call_ms": round(first * 1000, 3), "p50_ms": round(statistics.median(times) * 1000, 3)}


def nothing_lost(addr: str, sentences: list[str]) -> dict:
    """Every sentence: spans in order with no gap but whitespace, its punctuation in the pronunciation in order."""
    import grpc

    from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg

    bad = []
    with grpc.insecure_channel(addr) as channel:
        reply = pbg.TransducerStub(channel).TransduceText(pb.TransduceTextRequest(
            texts=sentences, options=pb.TextOptions(return_attention=False)), timeout=60)
    for text, r in zip(sentences, reply.results):
        at, found = 0, 0
        for t in r.tokens:
            if text[at:t.start].strip() or text[t.start:t.end] != t.text:
                bad.append(text)
                break
            at = t.end
            if t.kind == pb.TOKEN_KIND_PUNCTUATION:
                found = r.pronunciation.find(t.text, found)
                if found < 0:
                    bad.append(text)
                    break
                found += len(t.text)
        else:
            if text[at:].strip():
                bad.append(text)
    return {"sentences": len(sentences), "lost": len(bad), "examples": bad[:3]}


def espeak(sentences: list[str], rounds: int) -> dict:
    from phonemizer.backend import EspeakBackend

    backend = EspeakBackend("en-us", preserve_punctuation=True, with_stress=True)
    backend.phonemize(sentences[:2], strip=True)  # its first call loads the voice
    best = None
    for _ in range(rounds):
        t = time.perf_counter()
        backend.phonemize(sentences, strip=True)
        elapsed = time.perf_counter() - t
        best = elapsed if best is None else min(best, elapsed)
    return {"words_per_s": words_in(sentences) / best, "seconds": best, "version": version("phonemizer"),
            "espeak": str(backend.version()) if hasattr(backend, "version") else ""}


def gruut(sentences: list[str]) -> dict:
    from gruut import sentences as gruut_sentences

    list(gruut_sentences(sentences[0], lang="en-us"))  # loads its lexicon and models
    t = time.perf_counter()
    for s in sentences:
        for sentence in gruut_sentences(s, lang="en-us"):
            for word in sentence:
                word.phonemes
    elapsed = time.perf_counter() - t
    return {"words_per_s": words_in(sentences) / elapsed, "seconds": elapsed, "version": version("gruut")}


def markdown(r: dict) -> str:
    s, e, g = r["server"], r["espeak_ng"], r["gruut"]
    rows = [("attnserve TransduceText, no attention", s["no_attention"]),
            ("attnserve TransduceText, with attention", s["attention"])]
    lines = [f"# Running text: {r['corpus']['sentences']} sentences, {r['corpus']['words']} words",
             "", f"`make bench-text` on {r['machine']} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(r['unix']))}); "
             f"server: `{' '.join(r['server_argv'])}` (repository: "
             f"{', '.join(f'{k} = {v}' for k, v in r.get('repository', {}).items())}), sentence per call, {CONCURRENCY} calls outstanding "
             f"on {CHANNELS} connections (the C++ load generator), lexicon and cache on.", "",
             "| | words/s | sentences/s | p50 ms | p99 ms | server CPU |", "|---|---:|---:|---:|---:|---:|"]
    for name, x in rows:
        lines.append(f"| {name} | {x['words_per_s']:,.0f} | {x['sentences_per_s']:,.1f} | {x['p50_ms']:.2f} | "
                     f"{x['p99_ms']:.2f} | {x['server_cpu_util']:.2f} |")
    lines += [f"| espeak-ng (phonemizer {e['version']}, in process, the corpus in one call) | {e['words_per_s']:,.0f} | | | | |",
              f"| gruut {g['version']} (in process, sentence by sentence) | {g['words_per_s']:,.0f} | | | | |", "",
              "| target | needed | measured | met |", "|---|---:|---:|---|"]
    for t in r["targets"]:
        lines.append(f"| {t['name']} | {t['needed']:,.0f} | {t['measured']:,.0f} | {'yes' if t['met'] else 'no'} |")
    u = r["unloaded"]
    lines += ["", f"Unloaded p50 of one {u['words']}-word sentence, calls one at a time, its words cached after the "
              f"first: **{u['p50_ms']:.2f} ms** (the first call: {u['first_call_ms']:.2f} ms): \"{u['sentence']}\"", "",
              f"Nothing lost: {r['nothing_lost']['sentences'] - r['nothing_lost']['lost']} of "
              f"{r['nothing_lost']['sentences']} sentences have spans that cover them and their punctuation in place.", ""]
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", default="models/g2p-en")
    p.add_argument("--loadgen", default="build/attnserve-loadgen")
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--workers", type=int, default=0, help="server processes (--workers; 0: one per core, the default)")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    sentences = corpus()
    fifteen = next(s for s in sentences if len(s.split()) == 15)
    workdir = tempfile.TemporaryDirectory()
    repository = Path(workdir.name) / "models"
    repository.mkdir()
    served = served_with_context(Path(args.bundle), repository)
    argv = [str(BIN / "attnserve-server"), "--model-repository", str(repository), "--default-model", served,
            "--host", "127.0.0.1", "--metrics-port", "-1", "--workers", str(args.workers)]
    result = {"unix": int(time.time()), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
              "server_argv": [Path(argv[0]).name] + [a if a != str(repository) else "<repository>" for a in argv[1:]],
              "repository": {p.name: str(p.resolve().relative_to(Path.cwd().resolve())) if p.resolve().is_relative_to(
                  Path.cwd().resolve()) else str(p.resolve()) for p in sorted(repository.iterdir())},
              "corpus": {"file": str(CORPUS.relative_to(CORPUS.parents[2])), "sentences": len(sentences),
                         "words": words_in(sentences)}, "server": {}}
    with workdir as d, Server(argv) as server:
        result["nothing_lost"] = nothing_lost(server.addr, sentences)
        result["unloaded"] = unloaded_p50(server.addr, fifteen, 200)
        for name, attention in (("no_attention", False), ("attention", True)):
            requests = requests_file(sentences, Path(d) / f"{name}.bin", attention)
            # Warm: every word in every worker's cache. Each worker has its own cache and the kernel spreads
            # connections over the workers, so the warm-up opens many (with 4, a worker can get none).
            closed_loop(server, args.loadgen, requests, sentences, 3.0, channels=WARM_CHANNELS)
            result["server"][name] = closed_loop(server, args.loadgen, requests, sentences, args.seconds)
            print(f"  server {name}: {result['server'][name]['words_per_s']:,.0f} words/s", flush=True)
    result["espeak_ng"] = espeak(sentences, rounds=5)
    print(f"  espeak-ng: {result['espeak_ng']['words_per_s']:,.0f} words/s", flush=True)
    result["gruut"] = gruut(sentences)
    print(f"  gruut: {result['gruut']['words_per_s']:,.0f} words/s", flush=True)
    served = result["server"]["no_attention"]["words_per_s"]
    result["targets"] = [
        {"name": f">= {ESPEAK_RATIO} x espeak-ng's words/s", "needed": ESPEAK_RATIO * result["espeak_ng"]["words_per_s"],
         "measured": served, "met": served >= ESPEAK_RATIO * result["espeak_ng"]["words_per_s"]},
        {"name": f">= {GRUUT_RATIO:.0f} x gruut's words/s", "needed": GRUUT_RATIO * result["gruut"]["words_per_s"],
         "measured": served, "met": served >= GRUUT_RATIO * result["gruut"]["words_per_s"]}]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "text.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "text.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
