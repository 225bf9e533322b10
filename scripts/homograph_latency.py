"""What reading a homograph by its sentence costs a running server: the unloaded latency of a 15-word
sentence with one homograph against the same sentence with a plain word in its place.

    .venv/bin/python scripts/homograph_latency.py --server localhost:50051 --model g2p-en-stress

One call at a time, the two sentences alternating. "repeated": the same two sentences every call (the
words' answers and the homograph's choice kept by the server, as running text repeats itself);
"fresh": each call's sentence differs from every one before in one word (a word the lexicon has), so the
context model reads a new sentence every time. One JSON line: p50 and p90 in ms of each, and the
difference of the p50s.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg  # noqa: E402

# 15 words; {0} the homograph or its plain stand-in, {1} and {2} words that change call by call ("fresh").
SENTENCE = "After the meeting the {2} {1} said she would {0} the letter aloud to us."
HOMOGRAPH, PLAIN = "read", "send"
FILLERS = ["teacher", "doctor", "farmer", "painter", "writer", "singer", "driver", "lawyer", "player", "baker",
           "sailor", "soldier", "banker", "builder", "dancer", "hunter", "keeper", "leader", "manager", "miner"]
ADJECTIVES = ["old", "young", "tall", "quiet", "happy", "tired", "angry", "kind", "proud", "brave", "calm", "busy",
              "clever", "gentle", "honest", "lucky", "polite", "shy", "strong", "wise"]


def timed(stub, model: str, text: str) -> float:
    started = time.perf_counter()
    stub.TransduceText(pb.TransduceTextRequest(texts=[text], model_name=model,
                                               options=pb.TextOptions(return_attention=False)), timeout=30)
    return (time.perf_counter() - started) * 1000


def run(stub, model: str, n: int, fresh: bool) -> dict:
    times = {HOMOGRAPH: [], PLAIN: []}
    for i in range(n):
        noun, adjective = (FILLERS[i % len(FILLERS)], ADJECTIVES[i // len(FILLERS)]) if fresh else ("teacher", "old")
        for word in (HOMOGRAPH, PLAIN):
            times[word].append(timed(stub, model, SENTENCE.format(word, noun, adjective)))
    out = {}
    for word, ts in times.items():
        q = statistics.quantiles(ts, n=10)
        out[word] = {"p50_ms": round(statistics.median(ts), 3), "p90_ms": round(q[8], 3)}
    out["p50_difference_ms"] = round(out[HOMOGRAPH]["p50_ms"] - out[PLAIN]["p50_ms"], 3)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default="localhost:50051")
    ap.add_argument("--model", default="g2p-en-stress")
    ap.add_argument("--calls", type=int, default=300, help="calls of each sentence [300]")
    args = ap.parse_args(argv)
    with grpc.insecure_channel(args.server) as channel:
        stub = pbg.TransducerStub(channel)
        for _ in range(20):  # the first calls load what the rest find ready
            timed(stub, args.model, SENTENCE.format(HOMOGRAPH, "teacher", "old"))
            timed(stub, args.model, SENTENCE.format(PLAIN, "teacher", "old"))
        result = {"repeated": run(stub, args.model, args.calls, False),
                  "fresh": run(stub, args.model, min(args.calls, len(FILLERS) * len(ADJECTIVES)), True)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
