"""docs/sigmorphon.md: each SIGMORPHON 2021 language's dev and test WER beside the task's baseline, from
the task_scores that training/sigmorphon.py writes into each model's manifest."""
from __future__ import annotations

import json
from pathlib import Path

from training import sigmorphon
from training.sigmorphon import Variant
from training.sigmorphon_recipes import BASELINE_MACRO, BEAM, LANG_FLAGS, LANG_SEEDS, LANGS, RECIPES, SUBTASKS, TARGETS

HEADER = """# SIGMORPHON 2021 Task 1 (multilingual G2P): our models on the task's own splits

Written by `python -m training.sigmorphon` (`make sigmorphon`) from the `task_scores` of each
`models/<name>/1/manifest.json`. Each model learned from its language's train file, with early
stopping and every choice on the dev file (medium and low: no outside resource); the low and medium models, once
their recipe was chosen so, learned from the train and dev files together (their dev figures are marked). WER is the task
scorer's: the percentage of words whose predicted segment sequence differs from the gold one, through
the ONNX engine in the precision served (int8 only where it costs nothing on dev and is no slower: `int8.speed`), the lexicon never
consulted; the same as `attnserve-eval --bundle models/<name>/1 --gold data/sigmorphon-2021/<subtask>/<lang>_test.tsv
[--beam-size 5]`, and through a server: `scripts/sigmorphon_served.py --server ADDR` scores every model
on its test file through a running `make serve` and sets each figure beside this table's. Baseline:
the task's (data/sigmorphon-2021/README.md). Lower is better.
"""


def scores(lang: str, variant: Variant = sigmorphon.RULES) -> dict | None:
    path = variant.bundle(lang) / "manifest.json"
    if not path.exists():
        return None
    manifest = json.loads(path.read_text(encoding="utf-8"))
    return {**manifest["task_scores"], "parameters": manifest["parameters"],
            "train_on_dev": sigmorphon.trained_on_dev(manifest), "train_minutes": train_minutes(manifest),
            "mb": sum(f.stat().st_size for f in path.parent.iterdir()) / 1e6} if "task_scores" in manifest else None


def train_minutes(manifest: dict) -> float:
    """What the model's runs took, each member's minutes as its own history recorded them (one CPU thread a
    run, the recipes' `--threads 1`)."""
    training = manifest.get("training") or {}
    return sum(m["history"][-1]["minutes"] for m in training.get("members") or [training] if m.get("history"))


def decoding_on_dev(rows: list[dict], subtask: str) -> str:
    """The subtask's decoding: greedy or beam, whichever has the lower dev macro-average over the models
    that did not train on dev; where all did, the one its recipe chose on dev before they trained on it."""
    beam, held_out = f"beam{BEAM}", [r for r in rows if not r["train_on_dev"]]
    if not held_out:
        return sigmorphon.RECIPES[subtask].decoding
    return beam if sum(r["dev"][beam] for r in held_out) < sum(r["dev"]["greedy"] for r in held_out) else "greedy"


def dev_cell(s: dict, decoding: str) -> str:
    return f"({s['dev'][decoding]:.2f})" if s["train_on_dev"] else f"{s['dev'][decoding]:.2f}"


def subtask_lines(subtask: str, variant: Variant = sigmorphon.RULES, title: str = "") -> list[str]:
    langs = [lang for lang in LANGS if LANGS[lang][0] == subtask]
    rows = {lang: s for lang in langs if (s := scores(lang, variant))}
    lines = [f"## {title or subtask}", ""]
    if not rows:
        return lines + ["No model yet.", ""]
    pick = decoding_on_dev(list(rows.values()), subtask)
    if any(s["train_on_dev"] for s in rows.values()):
        lines += ["These models trained on the train and dev files together, once every choice had been made on dev "
                  "without them (the recipe's `train_on_dev`; each member is its run's last epoch, so dev picks "
                  "nothing): their dev figures, in parentheses, are figures on words they learned.", ""]
    lines += [f"Decoding chosen on dev: **{pick}**.", "",
              "| language | model | members | parameters | MB | precision | dev greedy | dev beam 5 | test greedy | "
              "test beam 5 | baseline | ours - baseline |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for lang in langs:
        name, baseline = variant.name(lang), LANGS[lang][2]
        s = rows.get(lang)
        if s is None:
            lines.append(f"| `{lang}` | `{name}` | | | | | | | (not yet) | | {baseline:.2f} | |")
            continue
        diff = s["test"][pick] - baseline
        mark = " (more than 1 point behind)" if diff > 1.0 else ""
        lines.append(f"| `{lang}` | `{name}` | {s['members']} | {s['parameters']:,} | {s['mb']:.1f} | {s['precision']} | "
                     f"{dev_cell(s, 'greedy')} | {dev_cell(s, f'beam{BEAM}')} | {s['test']['greedy']:.2f} | "
                     f"{s['test'][f'beam{BEAM}']:.2f} | {baseline:.2f} | {diff:+.2f}{mark} |")
    done = len(rows)
    macro = {k: sum(r["test"][k] for r in rows.values()) / done for k in ("greedy", f"beam{BEAM}")}
    base = sum(LANGS[lang][2] for lang in rows) / done
    partial = ("" if done == len(langs) else
               f" (partial: {done} of {len(langs)} languages; the baseline over the same: {base:.2f})")
    target = TARGETS[subtask]
    miss = macro[pick] - target
    verdict = f"target <= {target:.2f} met" if miss <= 0 else f"target <= {target:.2f} missed by {miss:.2f}"
    if variant != sigmorphon.RULES:  # the subtask's target is the rule-abiding models'
        verdict = f"beside the target of <= {target:.2f} for models under the subtask's rules ({miss:+.2f})"
    lines += ["", f"Macro test WER{partial}: **{macro[pick]:.2f}** ({pick}; greedy {macro['greedy']:.2f}, "
              f"beam 5 {macro[f'beam{BEAM}']:.2f}); baseline {BASELINE_MACRO[subtask]:.2f}; {verdict}.", ""]
    if variant == sigmorphon.RULES:  # the transfer row's runs start from a pretrained model, whose time is elsewhere
        lines += [f"Training: {sum(r['members'] for r in rows.values())} runs, "
                  f"{sum(r['train_minutes'] for r in rows.values()) / 60:.1f} hours in all, each on one CPU thread.", ""]
    return lines


def cost_lines() -> list[str]:
    """What training every rule-abiding model from scratch takes, beside what a session's background affords."""
    minutes = sum(s["train_minutes"] for lang in LANGS if (s := scores(lang)))
    return ["## What training them all takes", "",
            f"Every model above, from scratch: **{minutes / 60:.1f} hours** of runs on one CPU thread each (the "
            f"runs' own minutes, from the manifests), so about {minutes / 120:.1f} hours on 2 cores: more than "
            "the background of a 3-hour session, which the task asked it to fit. The models are committed and "
            "`make sigmorphon` trains only what is missing; a lent GPU trains the members in minutes "
            "(docs/training.md).", ""]


def recipe_lines() -> list[str]:
    lines = ["## Recipes", "", "Each subtask's `python -m training.train` flags (training/sigmorphon_recipes.py RECIPES); several "
             "seeds are exported as their ensemble (a model's `members`); each manifest keeps its own train_config.", ""]
    for subtask in SUBTASKS:
        r = RECIPES[subtask]
        extra = "; plus CMUdict in the task's IPA, marked (training/sigmorphon_english.py)" if r.cmudict_ipa else ""
        alt = f", and each again with `{' '.join(r.alt_flags)}`" if r.alt_flags else ""
        on_dev = (f"; on the train and dev files together, each member its run's last epoch: "
                  f"`{' '.join(sigmorphon.TRAIN_ON_DEV)}`" if r.train_on_dev else "")
        lines.append(f"- **{subtask}** (seeds {', '.join(map(str, r.seeds))}{alt}{extra}{on_dev}): `{' '.join(r.flags)}`")
    from training.sigmorphon_transfer import PRETRAIN_FLAGS

    lines.append(f"- **low, pretrained** (its own row; training/sigmorphon_transfer.py): one model pretrained with "
                 f"`{' '.join(PRETRAIN_FLAGS)}`, then the low recipe's seeds (not its alt_flags members) from it with `--init-from`, "
                 f"`--init-vocab by-symbol` and `--output context` (made before the low recipe's monotonic output)")
    lines += ["", "A language's own flags beside its subtask's (training/sigmorphon_recipes.py LANG_FLAGS): "
              + "; ".join(f"`{lang}` `{' '.join(flags)}` ({why})" for lang, (flags, why) in sorted(LANG_FLAGS.items()))
              + "."]
    if LANG_SEEDS:
        lines += ["", "A language's own seeds in place of its subtask's (training/sigmorphon_recipes.py LANG_SEEDS; several are one ensemble): "
                  + "; ".join(f"`{lang}` seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))} ({why})"
                              for lang, (seeds, why) in sorted(LANG_SEEDS.items())) + "."]
    return lines + [""]


TRANSFER = """Not under the subtask's rules, so beside the low table, never in place of it: each low language's
recipe started from one model pretrained on the train files of the task's other low and medium languages
(training/sigmorphon_transfer.py: Korean and every source of a low test file left out of that data).
The models are in `models-transfer/`, served by `make serve MODEL_REPOSITORY=models-transfer DEFAULT_MODEL=` and scored
through it by `scripts/sigmorphon_served.py --repository models-transfer`.
"""


ERRORS = """## Where the errors are

`python -m training.sigmorphon_errors` sorts each model's dev errors
([docs/results/sigmorphon_errors.md](results/sigmorphon_errors.md)): where most of a language's errors
differ from the gold only in length, stress or tone, marks its spelling does not write, more of the same
training mostly relearns a lexical lottery. So it is for the two medium languages furthest behind:
`hbs_latn` (pitch accent and length: nearly all of its errors) and `kor` (vowel length: about two
thirds), and for `lav` and `slv` among the low ones.

Korean length is not all lottery: words that share their first syllables often share it. Asked on `kor`'s
held-out eighth (2026-12-04; its recipe's model, seed 1, trained on the rest and dev: `python -m
training.sigmorphon_heldout --langs kor --tag recipe`, 21.0 with beam 5), by `python -m
training.sigmorphon_prefix_prosody --lang kor --tag recipe`: 218 of 1,038 words wrong, 147 by length
alone; the model writes a long vowel in 166 words where the gold has 207. 297 words begin with two
syllables some trained word begins with; there the majority of those trained words has the word's
length right in 278, the model in 258, and deciding length so where the model's segments are otherwise
right would mend 28 words and break 14 (1.35 points of `kor`'s 21.0). A way for a model to read those
neighbours is not built yet. Nor is the shortfall of long vowels a bias to shift: the same model decoding
greedily with 0.25-1.5 added to the log-probability of every long-vowel segment (one-off script) read 21.92-22.64
against 21.74 without on one half of those words (552) and 19.96-22.22 against 20.58 on the other (486).
"""


TRIED = """## Tried, not shipped

Measured on dev (fp32, through the engine) against the shipped recipe, on 2026-12-02 and 2026-12-03; the test
file was read once, for each candidate built. Once the recipes trained on dev too, the questions went to a
held-out eighth of each train file; `python -m training.sigmorphon_heldout` asks one such question.

- **low, six members**, in turn (before training/stacked.py): better on dev and test (now the recipe), but a
  lone word's time doubled (`python -m bench.many_models`: the low models' p50 2.1-2.6 ms became 4.0-6.1, over
  the 3 ms target) and the 24 models' resident memory went from 1,241 to 1,587 MB, over 1.5 GB. Members of one
  shape now step as one, and the six cost about what three did in turn.
- **medium, the monotonic output** at the full 60 epochs, on the two languages furthest behind: `kor` 19.8
  against 20.7 for the same schedule with soft attention, `hbs_latn` 38.1 against 36.9. Mixed, so not run on
  the other eight. Finishing the 60 epochs with soft attention did not beat the shipped models either (`kor`
  20.7 against 20.3, `hbs_latn` 36.9 against 36.5): they are at this recipe's plateau. On 2026-12-03, run to
  the end of each one's schedule on the three languages then behind by more than 1 point and not yet tried:
  `kor` (jamo sources) 20.1 against 20.3 and `dut` (25 epochs) 10.4 against 11.0, both kept (LANG_FLAGS; their
  test figures, read once each: `kor` 20.8 against 20.5, `dut` 15.0 against 16.0); `fre` 8.6 against 8.3, not kept;
  then on `jpn_hira`, exactly 1 point behind: 6.7 against 6.4, not kept; and on `arm_e`: 5.0 against 6.0, kept
  (test 8.0 against 7.8). Later that day on `bul`: 7.4 against 7.4, not kept; and `vie_hanoi`: 1.7 against 2.0,
  kept (test 2.2 against 3.3: better than the baseline's 2.5); and `geo` (25 epochs): 0.2 against 0.3, kept (test 0.0 against 0.1). On 2026-12-03 (a later session) on
  `hun`: 1.9 against 2.4, kept (test 1.7 against 1.6: one word more wrong; the baseline's 1.8). On 2026-12-05 (a later
  session) on `jpn_hira`'s held-out eighth (998 words; its 25 epochs, 256 wide, seed 1: `python -m
  training.sigmorphon_heldout --langs jpn_hira --tag mono -- --output monotonic`), under a rule written before
  its figure (kept if lower than the 7.82 recorded for its model below): 7.82 again, not kept.
- **low, int8 for the stacked decoder's products** (a scale per member and output column, the activations per
  row), to bring a lone word nearer 3 ms: on `g2p-ady`, dev unchanged, a lone word 2-5% sooner with the int8
  encoder (a Scan, slower than fp32's LSTM for one word) and 9-11% sooner with the fp32 encoder kept, in-process
  on one thread: the members' products were still one batched product over a 3-D weight. Shipped later in
  another form (2026-12-04): a product per member on a 2-D weight, which onnxruntime lays out once at load
  (a batched weight it reads whole at each call, and the six members' fp32 weights outgrow the core's cache),
  the encoder's LSTMs fp32 (`make quantize`'s method now, training/rowwise_int8.py). A lone `g2p-ady` word
  through the engine 2.8 ms fp32, 1.8 int8; every low model passed int8's dev check and is served int8.
- **medium, two seeds** as one ensemble (the full schedule, seeds 1 and 2), on `kor`: 20.4 with beam 5 against
  20.7 for seed 1 alone and 20.3 for the shipped model. No gain, so not run on the others. On 2026-12-03 again
  with `kor`'s monotonic output and jamo sources: seed 2 alone 19.1, seeds 1 and 2 as one ensemble 19.5, seed 1
  (then shipped) 20.1. Seed 2 alone is now its model (LANG_SEEDS); its test figure, read once: 20.8, as seed 1's.
  Two seeds differ by a point on dev and not on test: a seed's dev figure is partly luck. Later (another
  session) on the other two medium languages more than 1 point behind, each seed run to the end of its 60
  epochs: `hbs_latn` (its 2-layer encoder; seed 1 retrained to the shipped model's dev figures exactly), seeds
  1 and 2 as one ensemble 34.9 against 36.0 (seed 2 alone 36.7), kept (LANG_SEEDS; its test figure, read once:
  34.0 against 37.6); `fre`, 8.9 against 8.3 (seed 2 alone 9.0), not kept; and on `jpn_hira`, 1 point behind
  (25 epochs; seed 1 retrained here read 6.5 against the shipped 6.4), 6.7 (seed 2 alone 6.6), not kept; and on
  `dut` (25 epochs, the shipped seed 1 beside a seed 2 of 10.5), 10.3 against 10.4, one dev word: kept by the
  rule (LANG_SEEDS; its test figure, read once: 14.7 against 15.0, the baseline's).
- **medium, seed 1 and seed 1 at dropout 0.5** as one ensemble (the low recipe's six members gained from
  that diversity), each run to the end of its schedule, on the two languages nearest 1 point behind. `dut`
  (25 epochs): 11.2 with beam 5 against 11.0 shipped (seed 1 alone 11.6, at dropout 0.5 11.7); `fre` (60
  epochs): 8.5 against 8.3 (seed 1 alone 8.3, at dropout 0.5 9.3). More dropout hurt on its own and the
  ensembles did not beat the shipped models, so it was not run on the others.
- **medium, a 2-layer encoder** (seed 1, run to the end of its 60 epochs), on `hbs_latn` and `fre`:
  `hbs_latn` 36.0 with beam 5 against 36.5, so its model is now this one (LANG_FLAGS); `fre` 8.5 against 8.3,
  not kept. Later on `kor` (jamo sources, the monotonic output, seed 2): 20.4 against 19.1, not kept. On
  2026-12-04 (each run to the end of its schedule, under the same rule): `bul` 7.0 against 7.4, kept (LANG_FLAGS;
  its test figure, read once: 15.2 against 17.4; served int8, dev 7.1); `jpn_hira` (25 epochs) 6.8 against 6.4,
  not kept. Later that day (a new session, its rule written before): `arm_e` (its monotonic output) 5.1 against
  5.0, and `dut` (25 epochs, its two seeds as one ensemble) 10.9 against 10.3 (seeds 1 and 2 alone 10.7 each),
  neither kept; not run on `geo`, `hun` and `vie_hanoi`, within half a point of their baselines or ahead.
- **medium, the soft-attention model and the monotonic one as one ensemble** (training/ensemble.py: the
  monotonic member alone keeps an alignment state), each member run to the end of its 60 epochs, on two of
  the three medium languages more than 1 point behind (the third, `hbs_latn`, has a 2-layer encoder, which
  no monotonic run has). `fre` (the shipped soft model, retrained here to its dev 8.3, beside the monotonic
  run of 8.6): 8.4 with beam 5. `kor` (jamo sources, seed 2: the shipped monotonic model's 19.1 beside a soft
  run of 20.2): 19.3. Neither beat its shipped model, so neither is kept.
- **low, each member's last epoch** (the end of its cosine schedule, `--save-last`) in
  place of its dev-chosen best, where most members' best epochs came early, on a good day of a noisy 100-word
  dev set. Six members retrained for `ady` and `wel_sw` (their best.pt ensembles gave the shipped dev figures
  with beam 5, 22.0 and 12.0): the last.pt ensembles 26.0 and 14.0 on dev, which favours best.pt, chosen on
  it. So the question went to words neither had seen: the recipe's three seeds trained on each train file
  less a held-out eighth (by a hash of the source; 90-119 words a language), dev as given. On the held-out
  words, macro over the ten, the last.pt ensembles 30.55 with beam 5 (greedy 30.94) against 30.75 (31.14)
  for best.pt: within a word or two a language, no reason to change. The recipe kept best.pt (until it
  trained on dev, below, where dev picks nothing).
- **low, on the train and dev files together** (`train_on_dev`: each member its run's last epoch), against
  the recipe on the train file alone, early-stopped on dev. The question went to a held-out eighth of each
  train file (by the md5 of the source; 92-115 words a language), under a rule fixed before the two-seed
  figures were read: keep it if, macro over the ten with beam 5, seeds 1 and 2 trained on the rest of the
  train file plus dev (last.pt) beat them trained on the rest alone (best.pt on dev) by at least 1 point.
  Seed 1 alone: 31.89 against 33.89 (greedy 31.80 against 35.32). Seeds 1 and 2 as one ensemble: 31.39
  against 32.41 (greedy 31.17 against 32.96), better by 1.02, so kept (the low recipe). By language, with
  beam 5: `gre` -3.0, `slv` -4.1, `wel_sw` -2.1, `lav` -2.0, `rum` -1.0, `ady` +0.9, `khm` +1.1, the rest
  equal. Served fp32 at first (built before models trained on dev took int8's dev check, below), int8 since.
- **medium, on the train and dev files together** (`train_on_dev`, as the low recipe: each member its
  run's last epoch, run to the end of its schedule), against the recipe as it was, on the train file alone,
  early-stopped on dev. Asked on a held-out eighth of each train file (`int(md5(source).hexdigest(), 16) %
  8 == 0`; 976-1,050 words a language), one member a language (its first shipped seed, its LANG_FLAGS),
  under a rule written before: adopt if, macro over the languages run with beam 5, the train+dev member
  beats the train-only one by at least 0.3 points and is worse by more than 1 point on none. `dut` 12.50
  against 12.81, `jpn_hira` 7.82 against 7.82, `fre` 7.62 against 8.57, `kor` 21.68 against 23.70: macro
  12.41 against 13.23, so adopted (the medium recipe).
- **int8 for models trained on dev**, which had been served fp32 only, dev (learned) being unable to show
  what int8 costs. Asked on the four train+dev members above (each quantized as `make sigmorphon`
  quantizes), under a rule written before: adopt int8's usual check (kept where its dev WER is no worse
  than fp32's, served where also batch-independent and no slower) if on every one int8's held-out WER
  with beam 5 is within 0.1 points of fp32's and the dev check passes on none where int8 is worse held
  out. Held out, int8 equalled fp32 on all four (`dut` 12.50, `jpn_hira` 7.82, `fre` 7.62, `kor`
  21.68); on dev 0.030 against 0.029, 0.043 both, 0.024 against 0.025, 0.007 both. Adopted: such models
  now take the same check as the others (the medium models, then the low ones).
- **low, checkpoint averaging** (each member the mean of its epoch-end weights over the last 10 or 20 of
  its 60 epochs, in place of its last epoch), under a rule written before any figure: adopt the better
  average if, macro over the ten with beam 5, it beats last.pt by at least 0.5 points. Seeds 1 and 2 as one
  ensemble, trained on each train file less a held-out eighth (`int(md5(source).hexdigest(), 16) % 8 == 0`;
  94-126 words a language) plus dev, scored on the held-out words: last.pt 33.70, the last 10 epochs
  averaged 33.61, the last 20 33.83: every language equal or one word apart; the cosine schedule's tail
  moves the weights too little for an average to differ from its end. Not kept.
- **low, a longer schedule or no label smoothing**, on the same held-out split and seeds, one flag changed
  each, under a rule written before any figure: adopt the better if its held-out macro with beam 5 falls to
  33.00 or below (0.7 points under the recipe's 33.70). `--max-epochs 100`: 33.41 (`slv` -2.9, `ice` +3.2,
  the rest within two words); `--label-smoothing 0`: 33.62 (`gre` +4.8, `slv` -3.9, `ady` -2.8, `ice` +2.1, the rest within a word). Neither kept: the
  recipe's 60 epochs and label smoothing 0.1 stay.
- **low, GRU members** (`--cell gru`: a step reads three quarters of an LSTM's gate weights), the same
  held-out split, seeds and rule (adopt at 33.00 or below): 34.18 against the LSTM's 33.70 (`ady` -2.8,
  `ita` -2.6, `gre` +2.9, `khm` +2.8, `rum` +2.1). Nor was it much quicker: a lone held-out word of `ady`'s
  two-member ensemble 1.08-1.15 ms against 1.16-1.26, through the engine alone. Not kept.
- **low, batches of 8** (`--batch-size 8` in place of 16: twice the steps an epoch; 2026-12-05, `python -m
  training.sigmorphon_heldout --langs L --tag bs8 --seeds 1 2 -- --batch-size 8` beside `--tag recipe2`, the
  recipe retrained, which gave the 33.70 recorded above again exactly), the same held-out split and seeds,
  under a rule written before any figure, per language: kept where its held-out WER with beam 5 is at least
  2 words lower. Asked first on the four languages then more than 1 point behind, then on the other six:
  `ady` 30.28 against 28.44, `mlt_latn` 23.33 against 26.67, `rum` 6.38 against 7.45 (one word), `slv`
  68.63 against 66.67; `gre` 26.92 against 23.08, `ice` 31.91 against 29.79, `ita` 26.32 against 28.95,
  `khm` 38.32 against 41.12, `lav` 59.0 against 61.0, `wel_sw` 25.40 against 23.81. Kept on `ita`, `khm`,
  `lav` and `mlt_latn` (LANG_FLAGS), as the rule says; but macro over the ten 33.65 against 33.70, so
  which languages gained is likely as much the 100-word samples' luck as the languages'. Their test
  figures, read once each: `mlt_latn` 20.0 against 21.0, `lav` 50.0 against 52.0, `khm` 29.0 against 30.0,
  `ita` 20.0 against 19.0: low macro 25.30 -> 25.00. The low models pretrained on the
  other languages (their own row) were built before, on batches of 16, and were not built again.
- **medium, 384 wide** (`--hidden-size 384` in place of 256, every other flag and each language's own
  kept), under a rule written before any figure: adopt if, on a held-out eighth of the train file (the
  split of the train+dev experiment above; each member trained on the rest and dev, its first shipped
  seed), macro over `fre` and `kor` with beam 5 in fp32, it beats the recipe by at least 0.3 points and
  is worse on neither by more than 1. The recipe's figures recorded then were used, once `fre`'s member
  retrained here gave its 7.62 again exactly. `fre` 7.52 against 7.62, `kor` 20.23 against 21.68: macro
  13.88 against 14.65, so adopted: the medium recipe. Built first for `kor`, the language most behind (its
  test figure, read once: 20.2 against the 256-wide model's 19.6, both int8, beam 5). Then (2026-12-04,
  a later session) each language was built again, and where the wider model ships was decided by its cost
  and, for the schedule the question had not covered, by held-out words; never by a test figure, each
  read once as its build printed it:
  - the two-member ensembles stay 256 wide: `hbs_latn`'s two 384-wide members (trained on a lent GPU)
    took a lone word 3.1 ms in the engine alone (int8, one thread) against 1.7, past the 3 ms a served
    word may take (its test figure 34.3 against 32.7); `dut` likewise, not built;
  - the 25-epoch schedule (`dut`, `geo`, `jpn_hira`) was asked on `jpn_hira`'s held-out eighth, under a
    rule written before its figure: 7.92 with beam 5 against the recorded 7.82, so 256 there, and `geo`
    follows (`jpn_hira`'s test figure at 384 had been seen before the question was asked: 6.8 against 6.0);
  - `fre`: its 384-wide int8 graphs lost a dev word to fp32, so it would be served fp32, a lone word 2.3
    ms in the engine alone against 0.7: past 3 ms served, so 256 (its test figure 7.9 against 8.0);
  - shipped 384 wide: `kor`, and `bul` (2-layer; a lone word 1.7 ms in the engine alone against 1.1;
    test 12.0 against 11.2), `arm_e` (test 5.7 against 6.6) and `hun` (test 1.5 against 1.5), each int8
    and a lone word within 3 ms served;
  - `vie_hanoi` (2026-12-04, a later session; the tenth experiment), asked on its held-out eighth (986
    words; `python -m training.sigmorphon_heldout --langs vie_hanoi --tag h384 -- --hidden-size 384`
    beside `--tag h256 -- --hidden-size 256`) under a rule written before either figure: 384 if its
    held-out WER with beam 5 (fp32) is no worse than 256's. 0.91 both (9 words each), so built 384 wide
    as the recipe says (its test figure, read once: 2.2 against 2.0; a lone word 1.44-1.56 ms in the
    engine alone, int8, against 1.04-1.06).
  Of the eight test figures read at 384, five were worse than at 256 (`kor`, `jpn_hira`, `hbs_latn`,
  `bul`, `vie_hanoi`), two better (`arm_e`, `fre`) and one equal (`hun`). Held out, 384 was better on
  `kor`'s and `fre`'s eighths, a word worse on `jpn_hira`'s (25 epochs) and equal on `vie_hanoi`'s.
  The 60-epoch languages built 384 wide without such a question were asked next (2026-12-04, a later
  session), under the rule `vie_hanoi`'s was (written before any figure: 384 stays if its held-out WER
  with beam 5, fp32, is no worse than 256's): `arm_e` 5.37 against 5.37 (987 words, 53 wrong each) and
  `hun` 1.50 against 1.79 (1,064 words: 16 wrong against 19), so both stay 384 wide. `bul` (its 2-layer
  encoder), asked on 2026-12-05 under the same rule: 4.58 against 4.28 for 256 wide (982 words: 45 wrong
  against 42), so `bul` is 256 wide again: the model built so on 2026-12-04, before it went 384 wide (the
  same flags but the width; its test figure, read then: 11.2 against 12.0).
- **medium, the 25-epoch schedule for the languages on 60** (2026-12-05; `python -m
  training.sigmorphon_heldout --langs L --tag e25 -- --max-epochs 25` beside the recipe's 60, seed 1 each),
  under a rule written before any figure: 25 epochs replace 60 if the held-out WER with beam 5 (fp32) is
  lower. Asked first on `kor`, the language furthest behind (the 60-epoch figure the one recorded above):
  19.36 against 21.0 (1,038 words: 201 wrong against 218), so `kor` trains 25 epochs (LANG_FLAGS), seed 1
  as asked (its seed 2, picked on dev for the 60-epoch schedule, no longer; LANG_SEEDS). Its test figure,
  read once: 19.8 with beam 5 against 20.2. Its int8 graphs lost a dev word to fp32 (56 against 55 of
  1,000 learned words) and are dropped by the rule (on the held-out model's words, int8 equalled fp32 with
  beam 5, 19.36 both, and lost one greedily), so it was served fp32, a lone word 3.70 ms served
  (`python -m bench.many_models`), past 3 ms. So one more question, under a rule written before its figure:
  256 wide replaces 384 if its held-out WER (25 epochs, seed 1) is no worse than 19.36, the cheaper model
  winning a tie. 19.27 (200 wrong against 201), so `kor` is 256 wide (LANG_FLAGS): int8 passed its dev
  check, and its test figure, read once: 18.4 with beam 5 (greedy 18.6). Then, under the 25-epoch rule, on the other
  60-epoch languages furthest from the baseline or with the most errors: `hbs_latn` (its 2-layer encoder)
  37.36 against 36.2 (953 words), `arm_e` 6.18 against 5.37 (987 words), and `fre` 8.29 against the 7.62
  recorded for its 256-wide 60-epoch model on the same words (1,050; above); later `hun` 1.88 against 1.50
  (1,064 words) and `vie_hanoi` 1.01 against 0.91 (986 words): none kept. Then on `kor` (its 25 epochs, 256
  wide), batches of 16 in place of the recipe's 32 (`--tag bs16 -- --batch-size 16`), under a rule written
  before its figure (kept if at least 3 words fewer wrong than 200): 21.48 (223 wrong), not kept.
"""


def transfer_lines() -> list[str]:
    from training import sigmorphon_transfer

    variant = sigmorphon_transfer.variant()
    if not any(scores(lang, variant) for lang in sigmorphon_transfer.low_langs()):
        return []
    lines = subtask_lines("low", variant, "low, pretrained on the other languages (its own row)")
    return lines[:2] + [TRANSFER] + lines[2:]


def write_table(path: Path) -> None:
    lines = [HEADER]
    for subtask in SUBTASKS:
        lines += subtask_lines(subtask)
    lines += cost_lines()
    lines += transfer_lines()
    lines += recipe_lines()
    lines += [ERRORS, TRIED]
    path.write_text("\n".join(lines), encoding="utf-8")
