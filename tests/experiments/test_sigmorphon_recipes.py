"""The SIGMORPHON experiment's recipes as data, its table as a function of the manifests, and its place beside
the library: nothing in training/ imports it, and its own modules import one another one way, at the top."""
import ast
from pathlib import Path

import pytest

from experiments.sigmorphon import build, table
from experiments.sigmorphon.driver import ROOT, study_of
from experiments.sigmorphon.flags import parsed
from experiments.sigmorphon.task import argv, spelled

STUDY = study_of()
PACKAGE = ROOT / "experiments" / "sigmorphon"


def test_a_toml_value_is_the_word_the_recipes_always_wrote():
    assert [spelled(v) for v in (3e-3, 1e-5, 0.3, 0.0, 1.0, 0.01, 128, "cosine", True)] == [
        "3e-3", "1e-5", "0.3", "0.0", "1.0", "0.01", "128", "cosine", "true"]
    assert argv({"hidden-size": 128, "lr": 3e-3, "output": "monotonic"}) == (
        "--hidden-size", "128", "--lr", "3e-3", "--output", "monotonic")


def test_every_member_of_every_recipe_is_a_run_training_train_accepts():
    task = STUDY.task
    assert len(task.languages) == 21 and {g.subtask for g in task.languages.values()} == {"high", "medium", "low"}
    for variant, langs in ((STUDY.rules(), list(task.languages)), (STUDY.transfer(), STUDY.low_langs())):
        for lang in langs:
            recipe = task.recipe_for(lang)
            for seed in variant.seeds or recipe.seeds:
                args = parsed(build.member_flags(STUDY, lang, seed, recipe, variant))
                assert args["seed"] == seed
    assert parsed(list(task.transfer.pretrain_flags))["max_epochs"] == 25
    # a language's own flag wins over its recipe's, as on the command line
    assert parsed(build.train_flags(STUDY, "kor", 1, task.recipe_for("kor"), STUDY.rules()))["hidden_size"] == 256


def test_a_mistyped_flag_in_a_recipe_is_refused(tmp_path):
    for name in ("task", "high", "medium", "low", "transfer"):
        text = (PACKAGE / "recipes" / f"{name}.toml").read_text(encoding="utf-8")
        (tmp_path / f"{name}.toml").write_text(text.replace("hidden-size = 128", "hiden-size = 128"), encoding="utf-8")
    study = study_of(recipes=tmp_path)
    with pytest.raises(SystemExit):
        parsed(build.member_flags(study, "ady", 1, study.task.recipe_for("ady"), study.rules()))


def test_a_misspelt_setting_in_a_recipe_is_refused(tmp_path):
    for name in ("task", "high", "medium", "low", "transfer"):
        text = (PACKAGE / "recipes" / f"{name}.toml").read_text(encoding="utf-8")
        (tmp_path / f"{name}.toml").write_text(text.replace("seeds_why =", "seed_why ="), encoding="utf-8")
    with pytest.raises(ValueError, match=r"medium.toml \[languages.dut\]: unknown keys \['seed_why'\]"):
        study_of(recipes=tmp_path)


def test_the_committed_tables_are_what_the_shipped_manifests_give():
    doc = ROOT / "docs" / "sigmorphon.md"
    text = doc.read_text(encoding="utf-8")
    rules = table.built_models(STUDY, STUDY.rules(), list(STUDY.task.languages))
    transfer = table.built_models(STUDY, STUDY.transfer(), STUDY.low_langs())
    test_words = {lang: len(build.read_lines(STUDY.files(lang)["test"])) for lang in {**rules, **transfer}}
    assert table.fill(text, table.regions(STUDY.task, rules, transfer, test_words)) == text


def test_a_doc_without_a_region_is_refused_not_skipped():
    with pytest.raises(ValueError, match="0 regions named 'cost'"):
        table.fill("no markers here", {"cost": "x"})


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(module imported, whether at the module's top level) for each import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
            found += [(n, id(node) in top) for n in names]
    return found


def test_the_library_never_imports_the_experiment():
    for path in (ROOT / "training").rglob("*.py"):
        assert not [m for m, _ in _imports(path) if m.split(".")[0] == "experiments"], path


def test_the_experiments_modules_import_one_another_at_the_top_and_without_a_cycle():
    modules = {p.stem: p for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    graph = {}
    for name, path in modules.items():
        own = [(m, top) for m, top in _imports(path) if m.startswith("experiments.sigmorphon")]
        assert all(top for _, top in own), (name, own)
        graph[name] = {m.split(".")[2] for m, _ in own if len(m.split(".")) > 2 and m.split(".")[2] in modules}
    done, path = set(), []

    def visit(node):
        assert node not in path, f"import cycle: {' -> '.join(path + [node])}"
        if node in done:
            return
        path.append(node)
        for dep in graph[node]:
            visit(dep)
        path.pop()
        done.add(node)

    for name in graph:
        visit(name)
    assert "driver" not in set().union(*graph.values())  # the command-line edge: nothing imports it
