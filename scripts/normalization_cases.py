"""How a running server reads each normalization class: NeMo's written -> spoken test cases
(data/nemo-text-normalization/) through the running-text call, per class.

    make serve &
    .venv/bin/python scripts/normalization_cases.py --server localhost:50051            # English and French
    .venv/bin/python scripts/normalization_cases.py --lang en --show-wrong 3            # and what it got wrong

A case is right when the text as read (TextResult.spoken) equals one of its expected spoken forms,
both lower-cased with punctuation (hyphens included) read as spaces and runs of spaces as one.
A case whose written side is empty is left out (there is nothing to read). One JSON line per
language: per class right / total, and the share over every case.
"""
from __future__ import annotations

import argparse
import json
import sys
import unicodedata
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg  # noqa: E402

CASES = REPO / "data" / "nemo-text-normalization"
MODELS = {"en": "g2p-en", "fr": "g2p-fra"}
CHUNK = 64  # texts per call


def comparable(text: str) -> str:
    """Lower case, every punctuation character (hyphens, apostrophes, periods) a space, spaces collapsed."""
    return " ".join("".join(" " if unicodedata.category(c).startswith("P") else c for c in text.lower()).split())


def read_cases(path: Path) -> list[tuple[str, list[str]]]:
    """(written, its right spoken forms) per line, as NeMo's tests read them; empty written sides dropped."""
    cases = []
    for line in path.read_text(encoding="utf-8").splitlines():
        written, *spoken = line.split("~")
        if written.strip() and spoken:
            cases.append((written, spoken))
    return cases


def spoken(stub, model: str, texts: list[str]) -> list[str | None]:
    """Each text as the server reads it; None where the server refused it (the error counts as wrong)."""
    try:
        reply = stub.TransduceText(pb.TransduceTextRequest(texts=texts, model_name=model,
                                                           options=pb.TextOptions(return_attention=False)),
                                   timeout=120)
        return [r.spoken for r in reply.results]
    except grpc.RpcError:
        if len(texts) == 1:
            return [None]
        return [s for t in texts for s in spoken(stub, model, [t])]


def measure(stub, lang: str, model: str, show_wrong: int) -> dict:
    classes = {}
    for path in sorted((CASES / lang).glob("*.txt")):
        cases = read_cases(path)
        got = [s for i in range(0, len(cases), CHUNK) for s in spoken(stub, model, [w for w, _ in cases[i:i + CHUNK]])]
        wrong = [(w, exp[0], g) for (w, exp), g in zip(cases, got)
                 if g is None or comparable(g) not in {comparable(e) for e in exp}]
        classes[path.stem] = {"right": len(cases) - len(wrong), "total": len(cases)}
        for w, e, g in wrong[:show_wrong]:
            print(json.dumps({"lang": lang, "class": path.stem, "written": w, "expected": e, "read": g},
                             ensure_ascii=False), file=sys.stderr)
    right, total = sum(c["right"] for c in classes.values()), sum(c["total"] for c in classes.values())
    return {"lang": lang, "model": model, "right": right, "total": total, "share": round(right / total, 4),
            "classes": classes}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default="localhost:50051")
    p.add_argument("--lang", nargs="+", default=sorted(MODELS), choices=sorted(MODELS))
    p.add_argument("--show-wrong", type=int, default=0, help="print this many wrong cases a class (stderr)")
    args = p.parse_args(argv)
    with grpc.insecure_channel(args.server) as channel:
        stub = pbg.TransducerStub(channel)
        for lang in args.lang:
            print(json.dumps(measure(stub, lang, MODELS[lang], args.show_wrong)), flush=True)


if __name__ == "__main__":
    main()
