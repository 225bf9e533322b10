"""Every SIGMORPHON 2021 model scored on its test file through a running server, greedy and beam 5,
beside the figures docs/sigmorphon.md shows (each manifest's task_scores, taken in process).

    make serve &                                   # every model of models/
    .venv/bin/python scripts/sigmorphon_served.py --server localhost:50051

    make serve MODEL_REPOSITORY=models-transfer DEFAULT_MODEL= &   # low models pretrained on other languages
    .venv/bin/python scripts/sigmorphon_served.py --server localhost:50051 --repository models-transfer

One JSON line per language, then how many of the figures the server gave equal the table's.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from experiments.sigmorphon.layout import Paths, Study  # noqa: E402
from experiments.sigmorphon.task import load  # noqa: E402


def served_wer(server: str, model: str, gold: Path, beam: int) -> float:
    out = subprocess.run([str(Path(sys.executable).parent / "attnserve-eval"), "--server", server, "--model", model,
                          "--gold", str(gold), "--beam-size", str(beam), "--timeout-s", "300"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["wer_percent"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default="localhost:50051")
    p.add_argument("--repository", type=Path, default=REPO / "models", help="the model repository the server serves")
    args = p.parse_args(argv)
    study = Study(load(REPO / "experiments" / "sigmorphon" / "recipes"), Paths.under(REPO))
    beam, suffix = study.task.beam, study.task.transfer.suffix
    same = total = 0
    for lang, language in sorted(study.task.languages.items(), key=lambda kv: (kv[1].subtask, kv[0])):
        base = language.model
        name = next((n for n in (base, base + suffix) if (args.repository / n / "1" / "manifest.json").exists()), None)
        if name is None:  # models-transfer holds the low languages only
            continue
        table = json.loads((args.repository / name / "1" / "manifest.json").read_text())["task_scores"]["test"]
        row = {"lang": lang, "model": name}
        for width, key in ((1, "greedy"), (beam, f"beam{beam}")):
            got = served_wer(args.server, name, study.files(lang)["test"], width)
            row[key] = {"server": got, "table": table[key]}
            same += round(got, 2) == table[key]
            total += 1
        print(json.dumps(row, ensure_ascii=False), flush=True)
    print(json.dumps({"figures": total, "equal_to_the_table": same}))


if __name__ == "__main__":
    main()
