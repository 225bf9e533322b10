"""English's frequent words against each of the two dictionaries alone: docs/frequent-words.md.

The table scores English against WikiPron's readings and CMUdict's together (scripts/frequent_words.py,
data/wikipron/frequent/eng_us.tsv). Each English model's lexicon is one of the two: g2p-eng-us-ipa's
is the task's and WikiPron's, the ARPAbet models' CMUdict's. This scores every English model, as served,
against each dictionary alone (WikiPron: its entries at 9aa71006, in the task's conventions too, and
the task's files; CMUdict: every pronunciation, in the server's IPA), token-weighted over the same
words, as transcribed and with two folds a listener of American English does not hear as another
word (`fold`), and lists the words a model's answer is outside a dictionary for:

    PYTHONPATH=. .venv/bin/python scripts/english_cross_check.py --server localhost:50051 \
        --wikipron /tmp/wikipron [--show-wrong 40]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from attnserve.v1 import attnserve_pb2_grpc as pbg  # noqa: E402
from frequent_words import TEXT_ALSO, transduce  # noqa: E402
from training.wikipron import ENGLISH, ENGLISH_MODELS, FREQUENT_DIR, by_sound, read_frequent, read_tsv, to_task  # noqa: E402
from wikipron_lexicons import cmudict_ipa, task_pairs, wikipron_entries  # noqa: E402

CODE = "eng_us"


def fold(heard: str) -> str:
    """A pronunciation (by_sound's) with the cot-caught merger (ɔ as ɑ, but before r, where American
    speech keeps them apart: `for` is not `far`) and ɪ as ə (the reduced vowel, written either way by
    the two dictionaries: `business`, `minutes`). Lenient: it would also equal a stressed ɪ and ʌ,
    which a word's two dictionary readings hardly ever differ by."""
    return re.sub("ɔ(?!r)", "ɑ", heard).replace("ɪ", "ə")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default="localhost:50051")
    p.add_argument("--wikipron", type=Path, required=True, help="a git clone of CUNY-CL/wikipron")
    p.add_argument("--show-wrong", type=int, default=0, help="print that many words outside each dictionary")
    args = p.parse_args(argv)
    manifest = json.loads((REPO / "models" / ENGLISH[CODE].model / "1" / "manifest.json").read_text())
    wikipron: dict[str, list[str]] = {}
    for word, pron in wikipron_entries(args.wikipron, ENGLISH[CODE].file):
        wikipron.setdefault(word, []).extend([pron, to_task(CODE, word, pron)])
    for word, pron, _ in task_pairs(manifest):
        wikipron.setdefault(word, []).append(pron)
    for word, also in TEXT_ALSO[CODE].items():
        wikipron.setdefault(word, []).extend(also)
    dictionaries = {"wikipron": wikipron, "cmudict": cmudict_ipa()}
    words = read_frequent(FREQUENT_DIR / f"{CODE}.tsv")
    stub = pbg.TransducerStub(grpc.insecure_channel(args.server))
    for model in ENGLISH_MODELS:
        served = transduce(stub, model, [w.word for w in words], False, "" if model == ENGLISH[CODE].model else "ipa")
        for name, readings in dictionaries.items():
            for folded in (False, True):
                heard = (lambda x: fold(by_sound(x, CODE))) if folded else (lambda x: by_sound(x, CODE))
                right = total = 0.0
                wrong = []
                for word, result in zip(words, served):
                    if not readings.get(word.word):
                        continue
                    total += word.frequency
                    if result.complete and result.pronunciation and \
                            heard(result.pronunciation) in {heard(r) for r in readings[word.word]}:
                        right += word.frequency
                    else:
                        wrong.append((word.word, result.pronunciation, sorted(set(readings[word.word]))))
                print(json.dumps({"model": model, "against": name, "folded": folded, "share": round(right / total, 3),
                                  "words_outside": len(wrong)}, ensure_ascii=False), flush=True)
                for w in wrong[:args.show_wrong if folded else 0]:
                    print("   ", json.dumps(w, ensure_ascii=False))


if __name__ == "__main__":
    main()
