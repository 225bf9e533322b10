"""SIGMORPHON 2021 Task 1 (multilingual G2P): a model per language on the task's own splits, as an experiment of
the library. One driver, `python -m experiments.sigmorphon` (driver.py); the recipes are data, recipes/*.toml
(task.py reads them); the table in docs/sigmorphon.md is a function of the built models' manifests (table.py);
what was tried and not shipped is recorded in docs/sigmorphon-tried.md.

Imports run one way, each at its module's top: layout reads task; build reads layout, flags and english;
heldout reads build; prefix_prosody reads build, heldout and errors; transfer, table and errors read layout
(table and errors flags too); driver imports them all and nothing imports it
(tests/experiments/test_sigmorphon_recipes.py holds them to it).
"""
