"""How a running server reads homographs: WikipediaHomographData's sentences (data/wikipedia-homographs/)
through the running-text call of a G2P model, each homograph's pronunciation against its bundle's table.

    make serve &
    .venv/bin/python scripts/homographs.py --server localhost:50051                       # the held-out tenth of train
    .venv/bin/python scripts/homographs.py --split eval --card docs/homographs.md         # once, for the final figure

A sentence is right when the word served at the homograph's span is the table's pronunciation of its
labelled wordid (models/<model>/<version>/homographs.tsv, the bundle's). Accuracy is over sentences;
balanced accuracy is the mean, over the readings (wordids) the split has, of each one's share right;
"commoner" is what always answering each homograph's commoner reading in train would score. One JSON
line; --card writes the per-homograph figures as a markdown page. The held-out split is the tenth of
each homograph's train sentences that training/homograph_corpus.py kept out of training.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from attnserve.bundle.homographs import read_table  # noqa: E402
from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg  # noqa: E402
from training.homograph_corpus import DATA, held_out, read_split  # noqa: E402

CHUNK = 32  # sentences per call


def served(stub, model: str, rows: list[dict]) -> list[tuple[str, str]]:
    """Per row, the pronunciation served at the homograph's span ("" where none) and its choice."""
    out = []
    for i in range(0, len(rows), CHUNK):
        part = rows[i:i + CHUNK]
        reply = stub.TransduceText(pb.TransduceTextRequest(texts=[r["sentence"] for r in part], model_name=model,
                                                           options=pb.TextOptions(return_attention=False)),
                                   timeout=300)
        for r, result in zip(part, reply.results):
            found = [w for t in result.tokens for w in t.words if (w.start, w.end) == (r["start"], r["end"])]
            out.append((" ".join(found[0].result.output_tokens), found[0].choice) if found else ("", ""))
    return out


def scores(rows: list[dict], got: list[str], table: dict, commoner: dict) -> dict:
    by_reading, by_word = defaultdict(lambda: [0, 0]), defaultdict(lambda: [0, 0, 0])
    for r, pron in zip(rows, got):
        right = pron == table[r["homograph"]][r["wordid"]]
        by_reading[r["wordid"]][0] += right
        by_reading[r["wordid"]][1] += 1
        w = by_word[r["homograph"]]
        w[0] += right
        w[1] += 1
        w[2] += r["wordid"] == commoner[r["homograph"]]
    n = len(rows)
    return {"sentences": n, "accuracy": round(sum(v[0] for v in by_reading.values()) / n, 4),
            "balanced_accuracy": round(sum(a / b for a, b in by_reading.values()) / len(by_reading), 4),
            "commoner": round(sum(v[2] for v in by_word.values()) / n, 4),
            "per_homograph": {w: {"right": v[0], "of": v[1], "commoner": v[2]} for w, v in sorted(by_word.items())},
            "per_reading": {k: {"right": v[0], "of": v[1]} for k, v in sorted(by_reading.items())}}


def card(result: dict, args) -> str:
    lines = [f"# Homographs by context: {args.model}, split `{args.split}`", "",
             "Made by `scripts/homographs.py --split {} --card ...` against a server: the pronunciation served "
             "at each labelled homograph of data/wikipedia-homographs, through the running-text call, against "
             "the bundle's table (docs/homographs.md says how the choice is made).".format(args.split), "",
             f"- sentences: {result['sentences']}", f"- accuracy: **{result['accuracy']}**",
             f"- balanced accuracy over readings: **{result['balanced_accuracy']}**",
             f"- always the commoner reading (by train): {result['commoner']}", "",
             "| homograph | right | of | accuracy | commoner reading's share |", "|---|---:|---:|---:|---:|"]
    for w, v in result["per_homograph"].items():
        lines.append(f"| {w} | {v['right']} | {v['of']} | {v['right'] / v['of']:.2f} | {v['commoner'] / v['of']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default="localhost:50051")
    ap.add_argument("--model", default="g2p-en-stress")
    ap.add_argument("--bundle", type=Path, help="the model's bundle (its table) [models/<model>/1]")
    ap.add_argument("--split", choices=("train-heldout", "eval"), default="train-heldout")
    ap.add_argument("--card", type=Path, help="write the per-homograph figures here (markdown)")
    ap.add_argument("--show-wrong", type=int, default=0, help="print this many wrong sentences with their choice")
    args = ap.parse_args(argv)
    table = read_table((args.bundle or REPO / "models" / args.model / "1") / "homographs.tsv")
    train = read_split(DATA / "train.tsv")
    counts = Counter((r["homograph"], r["wordid"]) for r in train)
    commoner = {}
    for (word, wordid), n in sorted(counts.items(), key=lambda kv: -kv[1]):
        commoner.setdefault(word, wordid)
    rows = held_out(train)[1] if args.split == "train-heldout" else read_split(DATA / "eval.tsv")
    with grpc.insecure_channel(args.server) as channel:
        got = served(pbg.TransducerStub(channel), args.model, rows)
    result = scores(rows, [p for p, _ in got], table, commoner)
    wrong = [(r, p, c) for r, (p, c) in zip(rows, got) if p != table[r["homograph"]][r["wordid"]]]
    for r, p, c in wrong[:args.show_wrong]:
        print(f"{r['wordid']}: {r['sentence']!r} -> {p} ({c})", file=sys.stderr)
    if args.card:
        args.card.write_text(card(result, args), encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if not k.startswith("per_")}))


if __name__ == "__main__":
    main()
