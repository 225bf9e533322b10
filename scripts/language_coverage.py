"""Which shipped models read numbers, `%`, a clock time, a decimal and a numeric date whole: the text
rules as they are (service/answering/textrules.py, languages/) and each model's alphabet, the reader
alone (no model is run, so it takes a second). A sentence per language; a model reads it whole when
no token is unread and `%` is read as a word, not passed over as punctuation.

    .venv/bin/python scripts/language_coverage.py            # a line per model, then the count

What it does not say is whether the words are right: the tests (tests/answering/test_languages.py)
hold hand-written forms.
"""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from attnserve.bundle.normalization import normalizer  # noqa: E402
from service.answering.languages.registry import reader  # noqa: E402
from service.answering.text import PUNCTUATION, Script  # noqa: E402
from service.answering.textrules import read_rules  # noqa: E402

SENTENCES = {"default": "3 21 1990 5% 10:30 3{decimal}5 05.03.2024", "ja": "3本 21 1990年 5% 10:30 2024年3月5日",
             "ko": "3개 21 5% 10:30 2024년 3월 5일"}


def coverage(bundle: Path) -> tuple[str, str, list[str]]:
    """(model, language, what it leaves unread) of a bundle's version directory."""
    m = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    vocab = m["src_vocab"] if isinstance(m["src_vocab"], list) else ast.literal_eval(m["src_vocab"])
    alphabet = frozenset(t for i, t in enumerate(vocab) if i not in set(m["special_ids"].values()))
    language = m.get("language") or "en"  # CMUdict bundles from before the field are English
    rules = read_rules(language)
    key = "ja" if rules.num2words == "ja" else "ko" if rules.num2words == "ko" else "default"
    text = SENTENCES[key].format(decimal=rules.decimal)
    chars = m.get("src_tokenization", "chars") == "chars"
    script = Script(chars, alphabet, normalizer(m["source_normalization"]), list)
    tokens = reader(rules).read(text, script)
    missed = [t.text for t in tokens if t.unread or t.text == "%" and t.kind == PUNCTUATION]
    return m["name"], language, missed


def main() -> int:
    rows = [coverage(sorted(d.iterdir())[-1]) for d in sorted((REPO / "models").iterdir()) if d.is_dir()]
    for name, language, missed in rows:
        print(f"{name:16} {language:10} {'whole' if not missed else 'missed: ' + ' '.join(missed)}")
    print(f"read whole: {sum(not missed for *_, missed in rows)} of {len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
