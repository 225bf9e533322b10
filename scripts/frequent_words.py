"""How each served language's most frequent words are read, as served: docs/frequent-words.md.

    make serve &
    .venv/bin/python scripts/frequent_words.py --server localhost:50051 --out docs/frequent-words.md

For every served language wordfreq covers, its 1,000 most frequent words (wordfreq 3.1.1's ranks)
that WikiPron transcribes (data/wikipron/frequent/<code>.tsv, written with the lexicons by
scripts/wikipron_lexicons.py) are sent as a user sends running text, one word a text, through the
running-text call (TransduceText). A word is read right when nothing of it is left unread and its
pronunciation sounds as one that the file gives for it (training/wikipron.by_sound: segments run
together, ties dropped, so that a segmentation convention alone is no error). Two shares, each
weighted by the words' wordfreq frequencies (a token's share of running text), i.e. the share of
those tokens of running text read right:

- **as served**: every such word, the lexicon on;
- **outside the lexicon and task files**: the words that no task file (train, dev, test) has, each
  decoded by the model alone (`bypass_lexicon`): what a frequent word that the lexicon lacked would
  get, i.e. the model's reading of frequent words it never saw.

Where the task's reading is not what running text needs, the word is scored against what text needs
(TEXT_NEEDS): Japanese は, へ and を are, in running text, the particles read わ, え and お, not the
nouns WikiPron transcribes; English `the` may be ðə (TEXT_ALSO). English is scored on every English
model, the ARPAbet ones asked for IPA, against WikiPron's readings and CMUdict's (the file holds
both: scripts/wikipron_lexicons.py), comparing by the American sound (training/wikipron.by_sound:
length, stress and the notations of one sound that WikiPron and ARPAbet's IPA write differently
folded), since the task edited WikiPron's English (scripts/english_cross_check.py: each alone). Korean endings and particles are scored as
WikiPron reads them alone, which is how a text of that one word is read. One JSON line per
language on stdout; --out writes the table.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))  # its neighbours, however this file is loaded

import language_coverage  # noqa: E402  (scripts/, beside this file)
import normalization_cases  # noqa: E402
from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg  # noqa: E402
from service.answering.alphabet import is_arpabet  # noqa: E402
from training.wikipron import (ENGLISH, ENGLISH_MODELS, FREQUENT_DIR, LANGUAGES, Frequent, by_sound,  # noqa: E402
                               read_frequent)

CHUNK = 64  # texts per call
# task code -> word -> what running text needs it read as, in place of the file's readings: the
# Japanese particles, which WikiPron transcribes as the nouns spelt alike
TEXT_NEEDS = {"jpn_hira": {"は": ("ɰᵝ a̠",), "へ": ("e̞",), "を": ("o̞", "ɰᵝ o̞")}}
# task code -> word -> a reading running text needs beside the file's: English `the` before a
# consonant, which WikiPron's entry (9aa71006) lacks
TEXT_ALSO = {"eng_us": {"the": ("ð ə",)}}
TARGET = 0.98


@dataclass
class Share:
    right: float = 0.0  # the frequencies of the words read right
    total: float = 0.0
    words: int = 0
    words_right: int = 0

    def add(self, frequency: float, ok: bool) -> None:
        self.total += frequency
        self.words += 1
        if ok:
            self.right += frequency
            self.words_right += 1

    @property
    def share(self) -> float | None:
        return self.right / self.total if self.total else None


def right_readings(code: str, word: Frequent) -> set[str]:
    readings = TEXT_NEEDS.get(code, {}).get(word.word, word.right) + TEXT_ALSO.get(code, {}).get(word.word, ())
    return {by_sound(p, code) for p in readings}


def read_right(code: str, word: Frequent, result) -> bool:
    """Whether a word's TextResult reads it right: nothing unread, and a right reading by sound."""
    return (result.complete and bool(result.pronunciation)
            and by_sound(result.pronunciation, code) in right_readings(code, word))


def score(code: str, words: list[Frequent], served: list, alone: list | None = None) -> tuple[Share, Share, list]:
    """(as served, outside the lexicon and task files, the words read wrong as served) of one
    language; `alone`: the model's results, bypassing the lexicon, for the words outside the task files."""
    all_words, outside, wrong = Share(), Share(), []
    for word, result in zip(words, served):
        ok = read_right(code, word, result)
        all_words.add(word.frequency, ok)
        if not ok:
            wrong.append((word.word, result.pronunciation or "(unread)", sorted(right_readings(code, word))))
    for word, result in zip([w for w in words if not w.in_task], alone or []):
        outside.add(word.frequency, read_right(code, word, result))
    return all_words, outside, wrong


def transduce(stub, model: str, texts: list[str], bypass: bool, alphabet: str = "") -> list:
    out = []
    options = pb.TextOptions(return_attention=False, bypass_lexicon=bypass, alphabet=alphabet, word_separator=" ")
    for i in range(0, len(texts), CHUNK):
        reply = stub.TransduceText(pb.TransduceTextRequest(texts=texts[i:i + CHUNK], model_name=model, options=options),
                                   timeout=120)
        out += reply.results
    return out


def pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def table(rows: list[dict], baseline: dict[str, dict] | None = None) -> str:
    """The markdown table; `baseline`: an earlier run's rows by model, shown beside as served."""
    before = " before |" if baseline else ""
    lines = ["| language | model | words scored | as served (token-weighted) |" + before + " words right | "
             "outside lexicon and task files: words | model alone (token-weighted) | ≥ 0.98 |",
             "|---|---|---|---|" + ("---|" if baseline else "") + "---|---|---|---|"]
    for r in rows:
        was = f" {pct(baseline.get(r['model'], {}).get('served'))} |" if baseline else ""
        lines.append(f"| {r['code']} | `{r['model']}` | {r['words']} | {pct(r['served'])} |{was} {r['words_right']} | "
                     f"{r['outside_words']} | {pct(r['outside'])} | {'yes' if (r['served'] or 0) >= TARGET else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default="localhost:50051")
    p.add_argument("--langs", nargs="*", help="task codes (default: every one with a file in data/wikipron/frequent/)")
    p.add_argument("--out", type=Path, help="write the table into this markdown file, between its markers")
    p.add_argument("--show-wrong", type=int, default=0, help="print that many words read wrong per language")
    p.add_argument("--baseline", type=Path, help="an earlier run's JSON lines: its as-served share beside each row")
    args = p.parse_args(argv)
    stub = pbg.TransducerStub(grpc.insecure_channel(args.server))
    served_models = {m.name for m in stub.ListModels(pb.ListModelsRequest(), timeout=30).models}
    rows = []
    for code in args.langs or sorted(p.stem for p in FREQUENT_DIR.glob("*.tsv")):
        models = ENGLISH_MODELS if code in ENGLISH else (LANGUAGES[code].model,)
        words = read_frequent(FREQUENT_DIR / f"{code}.tsv")
        for model in (m for m in models if m in served_models):
            info = stub.GetModelInfo(pb.GetModelInfoRequest(model_name=model), timeout=30)
            alphabet = "ipa" if is_arpabet(list(info.target_vocab)) else ""  # WikiPron's is IPA
            served = transduce(stub, model, [w.word for w in words], False, alphabet)
            alone = transduce(stub, model, [w.word for w in words if not w.in_task], True, alphabet)
            all_words, outside, wrong = score(code, words, served, alone)
            row = {"code": code, "model": model, "words": all_words.words, "words_right": all_words.words_right,
                   "served": all_words.share, "outside_words": outside.words, "outside": outside.share}
            print(json.dumps(row, ensure_ascii=False), flush=True)
            for w in wrong[:args.show_wrong]:
                print("   ", json.dumps(w, ensure_ascii=False))
            rows.append(row)
    if args.out:
        baseline = None
        if args.baseline:
            lines = args.baseline.read_text(encoding="utf-8").splitlines()
            baseline = {r["model"]: r for r in map(json.loads, (x for x in lines if x.startswith("{")))}
        write_table(args.out, table(rows, baseline))
        measured = [normalization_cases.measure(stub, lang, model, 0)
                    for lang, model in sorted(normalization_cases.MODELS.items()) if model in served_models]
        write_table(args.out, normalization_table(measured), NORMALIZATION)
        write_table(args.out, coverage_table(), COVERAGE)


def normalization_table(measured: list[dict]) -> str:
    """Per class, right of total for each language NeMo's cases cover (normalization_cases.py's scoring)."""
    classes = sorted({c for m in measured for c in m["classes"]})
    lines = ["| class | " + " | ".join(f"{m['lang']} (`{m['model']}`)" for m in measured) + " |",
             "|---|" + "---:|" * len(measured)]
    for c in classes:
        cells = [f"{m['classes'][c]['right']}/{m['classes'][c]['total']}" if c in m["classes"] else "" for m in measured]
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    lines.append("| **all** | " + " | ".join(f"**{m['right']}/{m['total']} = {m['share']:.3f}**" for m in measured) + " |")
    return "\n".join(lines) + "\n"


def coverage_table() -> str:
    """Per shipped model, whether the text rules read a sentence of numbers, %, a clock time, a decimal
    and a numeric date with nothing unread (language_coverage.py: the reader alone, no server)."""
    lines = ["| model | language | numbers, %, time, decimal, date |", "|---|---|---|"]
    for d in sorted(p for p in (REPO / "models").iterdir() if p.is_dir()):
        name, language, missed = language_coverage.coverage(sorted(d.iterdir())[-1])
        if name == "homograph-en":
            continue  # a context model: it reads a homograph's sentence, not text (docs/homographs.md)
        lines.append(f"| `{name}` | {language} | {'read whole' if not missed else 'unread: ' + ' '.join(missed)} |")
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- frequent_words.py: begin -->", "<!-- frequent_words.py: end -->"
NORMALIZATION = ("<!-- normalization: begin -->", "<!-- normalization: end -->")
COVERAGE = ("<!-- coverage: begin -->", "<!-- coverage: end -->")


def write_table(path: Path, text: str, markers: tuple[str, str] = (BEGIN, END)) -> None:
    """The table between the file's markers (the rest of the page is prose, kept as written)."""
    begin, end = markers
    page = path.read_text(encoding="utf-8")
    head, rest = page.split(begin, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}\n{text}{end}{tail}", encoding="utf-8")


if __name__ == "__main__":
    main()
