"""The SIGMORPHON experiment (experiments/sigmorphon/) end to end on a tiny made-up language: two seeds trained a
few steps with the task's splits, exported as their ensemble, quantized, scored, written to models/<name>/1
without its checkpoint, resumed without training again, and tabled; every path and the recipes passed in."""
import json
import random
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from experiments.sigmorphon import build, flags, heldout, table
from experiments.sigmorphon.driver import ROOT, main, member_argv, study_of
from experiments.sigmorphon.layout import Paths, Study
from experiments.sigmorphon.task import Language, Recipe
from service.engine.bundle import load_bundle
from service.engine.engine import served_precision
from training import evaluate
from training.data import read_lines

PHONES = {"a": "A", "b": "B", "c": "K", "d": "D", "e": "E", "f": "F"}
COSINE = ("--lr-schedule", "cosine", "--min-lr", "1e-5", "--patience-epochs", "1000", "--threads", "1",
          "--device", "cpu")
TINY = Recipe(("--hidden-size", "16", "--enc-layers", "1", "--emb-dim", "8", "--batch-size", "64", "--max-epochs", "2",
               "--lr", "0.01", "--dropout", "0.0", "--max-output-len", "12", *COSINE), seeds=(1, 2))
STUDY = study_of()  # the repository's recipes and paths


def tiny(study: Study, recipe: Recipe = TINY, **language) -> Study:
    """`study` with the tiny language alone, trained by `recipe` (the low subtask's), and the language's own
    settings; every other subtask's recipe the repository's."""
    task = study.task
    low = replace(task.subtasks["low"], recipe=recipe)
    return replace(study, task=replace(task, languages={"tiny": Language("low", "g2p-tiny", 20.0, **language)},
                                       subtasks={**task.subtasks, "low": low}))


@pytest.fixture
def study(tmp_path):
    """A repository of its own: the tiny language's files, and docs/sigmorphon.md to fill."""
    paths = Paths.under(tmp_path)
    rng = random.Random(3)
    words = sorted({"".join(rng.choice("abcdef") for _ in range(rng.randint(2, 6))) for _ in range(300)})
    (paths.data / "low").mkdir(parents=True)
    for split, ws in (("train", words[:200]), ("dev", words[200:230]), ("test", words[230:260])):
        (paths.data / "low" / f"tiny_{split}.tsv").write_text(
            "".join(f"{w}\t{' '.join(PHONES[c] for c in w)}\n" for w in ws), encoding="utf-8")
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "sigmorphon.md", tmp_path / "docs" / "sigmorphon.md")
    return tiny(Study(STUDY.task, paths))


def test_a_language_is_trained_exported_scored_and_tabled_and_resumes_without_training(study, capsys):
    # Its two members: the recipe's one seed and a second from the language's own seeds.
    study = tiny(study, Recipe(TINY.flags, seeds=(1,)), seeds=(1, 2), seeds_why="two seeds beat one on its dev")
    paths, rules = study.paths, study.rules()
    bundle = build.build(study, "tiny", rules)
    assert bundle == paths.models / "g2p-tiny" / "1"
    manifest = load_bundle(bundle).manifest  # every file it lists is there, with its sha256
    assert "checkpoint.pt" not in manifest["files"] and not (bundle / "checkpoint.pt").exists()
    assert (paths.runs / "tiny" / "checkpoint.pt").exists()
    scores = manifest["task_scores"]
    assert scores["members"] == 2 and len(manifest["model_config"]["ensemble"]) == 2
    if scores["precision"] == "int8":
        assert manifest["int8"]["metrics"]["dev"]["wer"] <= manifest["metrics"]["dev"]["wer"]
    elif "encoder.int8" in manifest["graphs"]:  # kept, free on dev, but timed slower than fp32
        assert manifest["int8"]["speed"]["int8_over_fp32"] > 1
    else:
        assert "dev WER" in manifest["int8_dropped"]["why"]
    capsys.readouterr()
    evaluate.main(["--bundle", str(bundle), "--gold", str(paths.data / "low" / "tiny_test.tsv"),
                   "--precision", scores["precision"], "--beam-size", "5"])
    assert json.loads(capsys.readouterr().out)["wer_percent"] == scores["test"]["beam5"]

    stamp = (bundle / "manifest.json").stat().st_mtime_ns
    build.build(study, "tiny", rules)  # done: neither trained nor exported again
    assert (bundle / "manifest.json").stat().st_mtime_ns == stamp
    doc = paths.root / "docs" / "sigmorphon.md"
    table.write_table(study, doc)
    text = doc.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if "`g2p-tiny`" in line)
    assert f"| {scores['test']['greedy']:.2f} |" in row and "| 20.00 |" in row
    assert "| `tiny` | 1, 2 | two seeds beat one on its dev |" in text
    hours = sum(m["history"][-1]["minutes"] for m in manifest["training"]["members"]) / 60
    assert f"Training: 2 runs, {hours:.1f} hours in all" in text
    errors = {f"{table.sampling_error({'tiny': scores['test'][pick]}, {'tiny': 30}):.2f}"  # 30 test words
              for pick in ("greedy", "beam5")}  # at the decoding dev chose
    assert any(f"), ± {se}: one standard error" in text for se in errors)
    assert "## Where the errors are" in text  # the prose around the tables, as it was

    # A changed recipe is noticed: the same runs in another order are another model, built again from the
    # runs as they are; a run trained with other flags than the recipe now asks is refused, not reused.
    assert [r["run"] for r in scores["runs"]] == ["seed1", "seed2"]
    build.build(tiny(study, Recipe(TINY.flags, seeds=(1,)), seeds=(2, 1), seeds_why="seed 2 first"), "tiny", rules)
    assert [r["run"] for r in load_bundle(bundle).manifest["task_scores"]["runs"]] == ["seed2", "seed1"]
    changed = tiny(study, Recipe(TINY.flags, seeds=(1,)), seeds=(2, 1), flags=("--dropout", "0.1"), why="more dropout")
    with pytest.raises(SystemExit, match="seed2 was trained with other flags"):
        build.build(changed, "tiny", rules)


def test_a_models_training_time_is_its_members_own_minutes():
    one = {"training": {"history": [{"minutes": 1.0}, {"minutes": 3.5}]}}  # a run's minutes so far, each epoch
    two = {"training": {"members": [{"history": [{"minutes": 2.0}]}, {"history": [{"minutes": 4.0}]}]}}
    assert table.train_minutes(one) == 3.5 and table.train_minutes(two) == 6.0
    assert table.train_minutes({}) == 0  # no history recorded: nothing counted


def test_a_macro_figures_sampling_error_is_its_languages_binomial_errors_averaged():
    assert table.sampling_error({"a": 50.0}, {"a": 100}) == pytest.approx(5.0)  # sqrt(.25 / 100)
    # Two languages: sqrt(.1 * .9 / 100 + .5 * .5 / 400) / 2, in points; a perfect language adds nothing.
    assert table.sampling_error({"a": 10.0, "b": 50.0}, {"a": 100, "b": 400}) == pytest.approx(1.9526, abs=1e-4)
    assert table.sampling_error({"a": 0.0, "b": 0.0}, {"a": 100, "b": 100}) == 0


def test_a_model_built_before_its_runs_were_recorded_is_built_again_when_a_flag_changes():
    # Such a manifest records no runs, only the settings it was trained with: a changed flag shows there.
    manifest = {"task_scores": {"members": 1}, "data": {},
                "model_config": {"enc_layers": 1, "hidden_size": 16}, "train_config": {"seed": 1, "max_epochs": 60}}
    given = ["--seed", "1", "--hidden-size", "16", "--enc-layers", "1", "--max-epochs", "60"]
    assert flags.built_as(manifest, [{"run": "seed1", "flags": given}])
    assert not flags.built_as(manifest, [{"run": "seed1", "flags": [*given, "--enc-layers", "2"]}])
    assert not flags.built_as(manifest, [{"run": "seed1", "flags": [*given, "--max-epochs", "25"]}])
    assert not flags.built_as(manifest, [{"run": "seed2", "flags": ["--seed", "2", *given[2:]]}])


def test_a_model_is_built_again_when_what_it_trains_changes_not_where_a_flag_is_written_or_where_it_ran():
    recorded = ["--seed", "2", "--hidden-size", "256", "--device", "cpu", "--output", "monotonic", "--hidden-size", "384"]
    manifest = {"task_scores": {"runs": [{"run": "seed2", "flags": recorded}]}}
    moved = ["--seed", "2", "--hidden-size", "384", "--device", "cuda", "--threads", "1", "--output", "monotonic"]
    assert flags.built_as(manifest, [{"run": "seed2", "flags": moved}])
    assert not flags.built_as(manifest, [{"run": "seed2", "flags": [*moved, "--hidden-size", "256"]}])
    assert not flags.built_as(manifest, [{"run": "seed2", "flags": [*moved, "+cmudict_ipa"]}])
    assert not flags.built_as(manifest, [{"run": "seed2", "flags": moved}, {"run": "seed1", "flags": moved}])


def test_a_variants_seeds_take_the_place_of_its_recipes(study):
    study = tiny(study, Recipe(TINY.flags, seeds=(1,)))
    root = study.paths.root
    variant = replace(study.rules(), runs=root / "runs-other", models=root / "models-other", seeds=(2, 3))
    manifest = load_bundle(build.build(study, "tiny", variant)).manifest
    assert [r["run"] for r in manifest["task_scores"]["runs"]] == ["seed2", "seed3"]
    assert manifest["task_scores"]["members"] == 2 and not (root / "runs-other" / "tiny" / "seed1").exists()


def test_a_recipe_that_trains_on_dev_exports_each_runs_last_epoch_and_the_table_says_so(study):
    study = tiny(study, Recipe(TINY.flags, seeds=(1,), train_on_dev=True, decoding="beam5"))
    manifest = load_bundle(build.build(study, "tiny", study.rules())).manifest
    last = torch.load(study.paths.runs / "tiny" / "seed1" / "last.pt", weights_only=False)
    assert manifest["data"]["train_on_dev"] is True and manifest["training"]["best_epoch"] == last["epoch"] == 2  # the epoch exported
    assert manifest["task_scores"]["runs"][0]["flags"][-4:] == list(flags.TRAIN_ON_DEV)
    # int8 takes the same check on dev as any model's (kept where no worse there), and is scored as served
    assert ("int8" in manifest) != ("int8_dropped" in manifest)
    assert manifest["task_scores"]["precision"] == served_precision(manifest, "auto")
    doc = study.paths.root / "docs" / "sigmorphon.md"
    table.write_table(study, doc)
    text = doc.read_text(encoding="utf-8")
    dev = manifest["task_scores"]["dev"]
    row = next(line for line in text.splitlines() if "`g2p-tiny`" in line)
    assert f"| ({dev['greedy']:.2f}) | ({dev['beam5']:.2f}) |" in row  # figures on words it learned, marked
    assert "Decoding chosen on dev: **beam5**" in text and "trained on the train and dev files together" in text


def test_the_table_says_what_chose_the_decoding_of_models_dev_cannot_choose_for():
    learned = {"train_on_dev": True, "dev": {"greedy": 1.0, "beam5": 2.0}}
    unseen = {"train_on_dev": False, "dev": {"greedy": 3.0, "beam5": 2.0}}
    task = tiny(STUDY, Recipe(("--x",), seeds=(1,), train_on_dev=True, decoding="beam5",
                              decoding_chosen_on="held-out words")).task
    assert table.decoding_chosen(task, [learned], "low") == ("beam5", "held-out words")  # the recipe's
    assert table.decoding_chosen(task, [learned, unseen], "low") == ("beam5", "dev")  # dev's, where it can


def test_cmudict_in_the_task_ipa_is_marked_and_leaves_out_the_held_out_words(tmp_path):
    from experiments.sigmorphon.english import MARK, to_ipa, write_targets

    assert to_ipa(["N", "AY1", "T"]) == "n a ɪ t" and to_ipa(["AH0", "B", "AH1", "V"]) == "ə b ʌ v"
    assert to_ipa(["B", "ER1", "D", "ER0"]) == "b ɝ d ɚ" and to_ipa(["JH", "AO1", "R", "JH"]) == "d͡ʒ ɔ ɹ d͡ʒ"
    train, dev, test = (tmp_path / f"{s}.tsv" for s in ("train", "dev", "test"))
    train.write_text("knight\tn a ɪ t\n", encoding="utf-8")
    dev.write_text("above\tə b ʌ v\n", encoding="utf-8")
    test.write_text("bird\tb ɝ d\n", encoding="utf-8")
    out = tmp_path / "targets.tsv"
    counts = write_targets(train, [dev, test], out)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "knight\tn a ɪ t" and counts["eng_us_train"] == 1 and counts["cmudict_ipa"] > 100_000
    sources = {line.split("\t")[0] for line in lines[1:]}
    assert all(s.startswith(MARK) for s in sources) and f"{MARK}knight" in sources
    assert f"{MARK}above" not in sources and f"{MARK}bird" not in sources


def test_a_held_out_question_on_eng_us_gets_cmudict_without_a_held_out_dev_or_test_word(tmp_path):
    from experiments.sigmorphon.english import MARK

    rest, held = tmp_path / "rest.tsv", tmp_path / "held.tsv"  # two of eng_us's train words
    rest.write_text("table\tt e ɪ b ə l\n", encoding="utf-8")
    held.write_text("garden\tɡ ɑ ɹ d ə n\n", encoding="utf-8")
    given = build.cmudict_flags(STUDY, "eng_us", STUDY.task.recipe_for("eng_us"), tmp_path / "run", rest, (held,))
    lines = Path(given[given.index("--train-targets") + 1]).read_text(encoding="utf-8").splitlines()
    sources = {line.split("\t")[0] for line in lines}
    assert lines[0] == "table\tt e ɪ b ə l" and f"{MARK}table" in sources and f"{MARK}garden" not in sources
    f = STUDY.files("eng_us")
    assert not sources & {MARK + s for split in ("dev", "test") for s, _ in read_lines(f[split])}
    assert Path(given[given.index("--source-hints") + 1]).exists()


def test_a_second_driver_passes_over_a_language_another_is_building(study, capsys):
    with build.sole_driver("tiny", study.rules()):  # as another driver building it holds it
        with pytest.raises(build.Busy, match="tiny: another driver is building it"):
            build.build(study, "tiny", study.rules())
        main(["build"], study=study)  # every language: this one passed over, nothing trained
    assert "tiny: another driver is building it" in capsys.readouterr().out
    assert not (study.paths.runs / "tiny" / "seed1").exists() and not (study.paths.models / "g2p-tiny").exists()


def test_runs_trained_elsewhere_are_built_here_and_the_model_records_where_they_ran(study):
    # --train-only on a lent GPU, say, with --device cuda; here the override is the recipe's own device, so
    # that the test runs anywhere: what matters is that it is recorded and the runs are not trained again.
    doc = study.paths.root / "docs" / "sigmorphon.md"
    before = doc.read_text(encoding="utf-8")
    main(["build", "--langs", "tiny", "--train-only", "--device", "cpu"], study=study)
    runs = [study.paths.runs / "tiny" / f"seed{seed}" for seed in (1, 2)]
    assert all((run / "best.pt").exists() for run in runs)
    assert not (study.paths.models / "g2p-tiny").exists() and doc.read_text(encoding="utf-8") == before
    stamps = [(run / "best.pt").stat().st_mtime_ns for run in runs]
    bundle = build.build(study, "tiny", study.rules())
    assert [(run / "best.pt").stat().st_mtime_ns for run in runs] == stamps  # built from them, not trained again
    recorded = load_bundle(bundle).manifest["task_scores"]["runs"]
    assert [r["flags"][-2:] for r in recorded] == [["--device", "cpu"]] * 2


def test_a_recipe_question_is_asked_on_a_held_out_eighth_no_member_trained_on(study):
    runs = study.paths.root / "heldout"
    result = heldout.ask(study, "tiny", "wider", [1, 2], ["--hidden-size", "24"], runs=runs)
    held = read_lines(runs / "tiny" / "heldout.tsv")
    rest = read_lines(runs / "tiny" / "train_rest.tsv")
    train = read_lines(study.paths.data / "low" / "tiny_train.tsv")
    assert held and sorted(held + rest) == sorted(train) and all(heldout.held_out(s) for s, _ in held)
    assert result["heldout_words"] == len(held) and 0 <= result["heldout_beam5_fp32"] <= 100
    run = runs / "tiny" / "wider" / "seed1"
    assert json.loads((run / "result.json").read_text())["parameters"] > 0
    assert torch.load(run / "best.pt", weights_only=False)["model_config"]["hidden_size"] == 24  # the flag asked
    stamp = (run / "best.pt").stat().st_mtime_ns
    assert heldout.ask(study, "tiny", "wider", [1, 2], ["--hidden-size", "24"], runs=runs) == result
    assert (run / "best.pt").stat().st_mtime_ns == stamp  # asked again: scored again, not trained again
    base = heldout.ask(study, "tiny", "base", [1, 2], [], runs=runs)
    compared = heldout.against(result, "base", runs, beam=5)
    wrong = [round(r["heldout_beam5_fp32"] * len(held) / 100) for r in (result, base)]
    assert (compared["wrong"], compared["against_wrong"], compared["fewer_wrong"]) == (*wrong, wrong[1] - wrong[0])


def test_transfer_models_pretrain_on_the_other_languages_and_get_a_row_of_their_own(study):
    """experiments/sigmorphon/transfer.py: one model pretrained on every low and medium train file but Korean's,
    with no source of a low test file in it; the low language's recipe continues from it and its bundle
    goes to models-transfer/<name>-transfer/1; the table gives it a section of its own, the rule-abiding
    section unchanged."""
    paths = study.paths
    rng = random.Random(5)
    (paths.data / "medium").mkdir()
    low_test = [line.split("\t")[0] for line in (paths.data / "low" / "tiny_test.tsv").read_text().splitlines()]
    for lang, letters in (("mid", "abcdxy"), ("kor", "abcz")):
        words = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(2, 5))) for _ in range(150)})
        words = [w for w in words if w not in low_test][:100] + low_test[:3]  # three test words of the low language
        for split in ("train", "dev", "test"):
            (paths.data / "medium" / f"{lang}_{split}.tsv").write_text(
                "".join(f"{w}\t{' '.join(c.upper() for c in w)}\n" for w in words), encoding="utf-8")
    languages = {**study.task.languages, "mid": Language("medium", "g2p-mid", 5.0),
                 "kor": Language("medium", "g2p-kor", 5.0)}
    transfer = replace(study.task.transfer, pretrain_flags=study.task.subtasks["low"].recipe.flags, seeds=(1, 2))
    study = replace(study, task=replace(study.task, languages=languages, transfer=transfer))

    main(["transfer"], study=study)
    pretraining = (paths.transfer_runs / "pretrain_train.tsv").read_text(encoding="utf-8").splitlines()
    sources = {line.split("\t")[0] for line in pretraining}
    assert not sources & set(low_test)  # no test word of a low language, in any language
    assert not any("z" in s for s in sources)  # nothing of Korean's
    assert len(pretraining) == 200 + 100  # tiny's train file, and mid's less the three test words
    bundle = paths.transfer_models / "g2p-tiny-transfer" / "1"
    manifest = load_bundle(bundle).manifest
    assert manifest["name"] == "g2p-tiny-transfer" and manifest["task_scores"]["members"] == 2
    assert "pretrained on the train files" in manifest["outside_data"]
    member = torch.load(paths.transfer_runs / "tiny" / "seed1" / "best.pt", weights_only=False)
    assert member["data"]["continued_from"]["symbols_carried"]["src"][0] > 4  # letters carried over, specials too
    assert not (paths.models / "g2p-tiny").exists()  # the rule-abiding model is not built by it
    doc = (paths.root / "docs" / "sigmorphon.md").read_text(encoding="utf-8")
    assert "## low, pretrained on the other languages (its own row)" in doc
    row = next(line for line in doc.splitlines() if "`g2p-tiny-transfer`" in line)
    assert f"| {manifest['task_scores']['test']['greedy']:.2f} |" in row
    assert "beside the target of <= 24.00 for models under the subtask's rules" in doc


def test_errors_are_sorted_into_prosody_only_and_one_segment():
    from experiments.sigmorphon.errors import bare, classify

    assert bare(["ǎː", "d", "a", "m"]) == ["a", "d", "a", "m"]  # caron and length go, the vowel stays
    assert bare(["ˈ", "k", "ɑ̃"]) == ["k", "ɑ̃"]  # a stress segment goes, the nasal tilde stays
    rows = [("adam", "ǎ d a m"), ("kat", "k a t"), ("sobe", "s o b e"), ("vrt", "v r t")]
    hyps = {"adam": ["a", "d", "aː", "m"],  # length and accent only: two segments, but prosody only
            "kat": ["k", "a", "t"],  # right
            "sobe": ["s", "o", "b", "i"],  # one segment
            "vrt": ["v", "ə", "r", "t", "a"]}  # two segments more
    r = classify(rows, hyps)
    assert (r["words"], r["errors"], r["prosody_only"], r["one_segment"]) == (4, 3, 1, 1)


def test_a_memory_of_trained_prefixes_is_scored_against_the_model_on_held_out_words_only():
    from experiments.sigmorphon.prefix_prosody import marked, prefix_prosody

    assert marked(["k", "aː"]) and not marked(["k", "a"])
    trained = [("가구", "k a ɡ u"), ("가구점", "k a ɡ u dʑ ʌ m"), ("사과", "s aː ɡ w a"), ("사과나무", "s aː ɡ w a n a m u")]
    held = [("가구들", "k a ɡ u d ɯ l"),  # majority short, the model short: right both ways
            ("사과즙", "s aː ɡ w a dʑ ɯ p̚"),  # majority long, the model short: the memory mends it
            ("나비", "n a b i")]  # no trained word begins so: not covered
    hyps = {"가구들": "k a ɡ u d ɯ l".split(), "사과즙": "s a ɡ w a dʑ ɯ p̚".split(), "나비": "n a p i".split()}
    counts = prefix_prosody(trained, held, hyps)
    assert counts == {"words": 3, "wrong": 2, "prosody_only": 1, "covered": 2, "majority_right": 2, "model_right": 1,
                      "would_mend": 1, "would_break": 0, "gold_marked": 1, "model_marked": 0}


def test_profile_step_times_a_recipes_member_and_names_its_operators():
    from training.profile_step import profile

    mean_ms, report = profile(member_argv(STUDY, "ady"), steps=1, warm=1)
    assert mean_ms > 0 and "aten::" in report and "Self CPU" in report


def test_each_source_is_held_out_by_exactly_one_eighth_and_each_eighth_has_its_own_runs():
    sources = [f"word{i}" for i in range(200)]
    eighths = [[k for k in range(8) if heldout.held_out(s, k)] for s in sources]
    assert all(len(e) == 1 for e in eighths) and {e[0] for e in eighths} == set(range(8))
    assert [s for s in sources if heldout.held_out(s)] == [s for s, e in zip(sources, eighths) if e == [0]]
    assert heldout.runs_of(STUDY, 0) == STUDY.paths.heldout_runs  # the figures docs/sigmorphon-tried.md records
    assert len({heldout.runs_of(STUDY, k) for k in range(8)}) == 8
    with pytest.raises(ValueError, match="got 8"):
        heldout.runs_of(STUDY, 8)
