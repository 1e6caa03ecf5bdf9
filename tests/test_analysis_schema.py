"""The results table's schema (analysis.schema) and the lr as a nuisance axis (analysis.tuning), on the real
records shipped in docs/: seeds pool into one configuration, each configuration is taken at its best lr, and
every column the collector writes outside the model section has a role."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from analysis.collect import collect, row_from_record
from analysis.records import model_section
from analysis.schema import TRAIN_AXES, config_columns, config_keys, model_cells, role_of
from analysis.thresholds import best_per_family
from analysis.tiers import find_tiers, units_of
from analysis.tuning import EDGE_HIGH, EDGE_LOW, at_best_lr, lr_curves, rows_at
from slm.runs.record import load_record

DOCS = Path(__file__).resolve().parents[1] / "docs"
LADDER = DOCS / "2512.20877" / "runs" / "ladder_sweeps"
WIDTH = DOCS / "lr_transfer" / "runs" / "lr_transfer_width"


def test_every_column_outside_the_model_section_has_a_role():
    records = sorted(DOCS.rglob("result.json"))
    assert len(records) >= 200
    for path in records:
        record = load_record(path.parent)
        row = row_from_record(record, path.parent, DOCS)
        model_keys = set(model_cells(model_section(record)))  # the model section's columns, as the collector writes them
        for column in set(row) - model_keys:
            assert role_of(column) != "config" or column in TRAIN_AXES, (column, path)


def test_metrics_and_nuisance_axes_are_not_configuration():
    for column in ("test_nll", "test_targets", "val_bpb", "test_bpb", "seed", "lr", "lr_multiplier", "score_x",
                   "budget_error", "wall_seconds", "run_dir", "notes"):
        assert role_of(column) != "config", column
    for column in ("family", "d_model", "mup_base_width", "optimizer", "data", "max_steps", "epochs"):
        assert role_of(column) == "config", column


def test_seeds_of_real_ladder_records_pool_into_one_configuration():
    """Three seeds of two linear-model contexts (arXiv 2512.20877's sweep) pool into one configuration each:
    test_nll is a score, not a configuration axis, and records without model.mup pool with those that have it."""
    table = collect(LADDER)
    assert len(table) == 16
    for score in ("test_nll", "val_nll"):
        units, _, _ = units_of(table, score)
        assert len(units) == 12  # 16 runs: two configurations hold 3 seeds each
        assert sorted(units["n_seeds"])[-2:] == [3, 3]
    linear = table[(table["family"] == "ladder_linear") & (table["context_length"] == 32)]
    assert config_keys(linear).nunique() == 1 and sorted(linear["seed"]) == [0, 1, 2]


def test_lr_searched_records_are_taken_at_each_configurations_best_lr():
    table = collect(WIDTH)  # 4 widths x 2 parametrizations x 8 lrs, a second seed at 4 lrs
    best = at_best_lr(table, "val_nll")
    assert len(best) == 8 and (best["n_lrs"] == 8).all()
    curves = lr_curves(table, "val_nll")
    for _, row in best.iterrows():
        curve = curves[curves["config_key"] == row["config_key"]]
        assert math.isclose(row["tuned"], curve["mean"].min())
    units, _, notes = units_of(table, "val_nll")
    assert len(units) == 8 and any("best lr" in n for n in notes)
    tuned = rows_at(table, "val_nll", "tuned")
    assert set(config_keys(tuned)) == set(best["config_key"])
    family = best_per_family(table, "val_nll", by="parametrization")
    assert set(family["parametrization"]) == {"sp", "mup"}


def _synthetic(rows):
    frame = pd.DataFrame(rows, columns=["family", "d_model", "lr", "seed", "val_nll", "status", "lr_multiplier"])
    frame["run"] = [f"r{i}" for i in range(len(frame))]
    return frame


def test_edge_flags_diverged_lrs_and_the_shared_lr():
    table = _synthetic([
        # a: best at the lowest lr tried -> edge
        ("a", 64, 1e-3, 0, 2.0, "completed", 0.5), ("a", 64, 2e-3, 0, 2.1, "completed", 1.0),
        ("a", 64, 4e-3, 0, 2.3, "completed", 2.0),
        # b: best at the highest lr that trained; the next one diverged -> interior, not an edge
        ("b", 64, 1e-3, 0, 2.4, "completed", 0.5), ("b", 64, 2e-3, 0, 2.2, "completed", 1.0),
        ("b", 64, 2e-3, 1, 2.0, "completed", 1.0), ("b", 64, 4e-3, 0, None, "diverged", 2.0),
        # c: best at the highest -> edge
        ("c", 64, 1e-3, 0, 2.6, "completed", 0.5), ("c", 64, 2e-3, 0, 2.5, "completed", 1.0),
        ("c", 64, 4e-3, 0, 1.9, "completed", 2.0),
    ])
    family = dict(zip(config_keys(table), table["family"]))
    best = at_best_lr(table, "val_nll")
    best.index = best["config_key"].map(family)
    assert best.loc["a", "edge"] == EDGE_LOW and best.loc["c", "edge"] == EDGE_HIGH
    assert pd.isna(best.loc["b", "edge"]) and best.loc["b", "best_lr"] == 2e-3
    assert best.loc["b", "tuned"] == pytest.approx(2.1) and best.loc["b", "tuned_seeds"] == 2
    assert (best["shared_lr"] == 2e-3).all()
    assert best.loc["c", "shared"] == pytest.approx(2.5) and best.loc["c", "gain"] == pytest.approx(0.6)
    # rankings: tuned c (1.9) < a (2.0) < b (2.1); shared b (2.1) < a (2.1)... b 2.1, a 2.1, c 2.5
    assert best.loc["c", "rank_tuned"] == 1 and best.loc["c", "rank_shared"] == 3
    shared = rows_at(table, "val_nll", "shared")
    assert sorted(shared["lr"].unique()) == [2e-3] and len(shared) == 4


def test_without_multipliers_the_shared_lr_is_the_one_most_configurations_used():
    table = _synthetic([("a", 64, 1e-3, 0, 2.0, "completed", None), ("a", 64, 2e-3, 0, 2.1, "completed", None),
                        ("b", 64, 2e-3, 0, 2.2, "completed", None), ("c", 64, 2e-3, 0, 2.4, "completed", None)])
    best = at_best_lr(table, "val_nll")
    assert (best["shared_lr"] == 2e-3).all()
    assert best["n_lrs"].max() == 2


def test_tiers_of_an_lr_search_use_the_best_lr_and_single_lr_tables_are_unchanged():
    table = _synthetic([(f, 64, lr, s, v + (0.3 if lr != 2e-3 else 0) + 0.001 * s, "completed", 1.0)
                        for f, v in (("a", 2.0), ("b", 2.01), ("c", 3.0), ("d", 3.02))
                        for lr in (1e-3, 2e-3, 4e-3) for s in (0, 1)])
    result = find_tiers(table, "val_nll", k=2, n_sim=500, n_boot=200)
    assert result.split and sorted(len(t.members) for t in result.tiers) == [2, 2]
    single = table[table["lr"] == 2e-3]
    assert config_columns(single) == config_columns(table)
    assert len(units_of(single, "val_nll")[0]) == 4
