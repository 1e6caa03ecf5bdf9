"""Tier detection (finds real splits, refuses uniform data and splits inside the noise), thresholds, best
per family, the Pareto frontier and two-level comparisons, on synthetic data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.thresholds import best_per_family, compare, find_threshold, pareto_frontier, pareto_mask
from analysis.tiers import find_tiers, partition, run_labels, tiers_from_values

LABELS = [f"c{i}" for i in range(40)]


def two_tier_values(rng, n_low=6, n_high=5, low=0.30, high=0.36, sd=0.003):
    return np.r_[low + sd * rng.standard_normal(n_low), high + sd * rng.standard_normal(n_high)]


def test_two_tiers_are_found():
    rng = np.random.default_rng(0)
    values = two_tier_values(rng)
    result = tiers_from_values(values, labels=LABELS[:11])
    assert result.split and result.k == 2, result.summary()
    assert sorted(result.tiers[0].members) == sorted(f"c{i}" for i in range(6, 11))   # tier 1 = the high ones
    gap = result.gaps[0]
    assert gap.significant and gap.p_value < 0.05 and gap.size > 0.04 and gap.t > 5
    assert gap.separation is None and "spread alone" in " ".join(result.notes)
    # asking for exactly two gives the same split
    assert tiers_from_values(values, labels=LABELS[:11], k=2).tiers[0].members == result.tiers[0].members


def test_lower_is_better_ranks_the_low_values_first():
    values = two_tier_values(np.random.default_rng(1))
    result = tiers_from_values(values, labels=LABELS[:11], higher_is_better=False)
    assert result.split and set(result.tiers[0].members) == {f"c{i}" for i in range(6)}


@pytest.mark.parametrize("values", [np.linspace(0.25, 0.35, 12), np.linspace(0, 1, 7)])
def test_evenly_spread_values_are_refused(values):
    result = tiers_from_values(values)
    assert not result.split and result.k == 1 and "no real gap" in result.reason
    forced = tiers_from_values(values, k=2)
    assert not forced.split and "no real gap for 2 tiers" in forced.reason


def test_false_splits_are_rare_on_one_population():
    rng = np.random.default_rng(2)
    draws = {"gaussian": lambda n: rng.standard_normal(n), "uniform": lambda n: rng.uniform(size=n),
             "skewed": lambda n: rng.exponential(size=n)}
    for name, draw in draws.items():
        splits = sum(tiers_from_values(draw(12), n_sim=1000).split for _ in range(40))
        assert splits <= 6, f"{name}: {splits}/40 false splits"   # alpha = 0.05: ~2 expected


def test_split_within_the_runs_noise_is_refused():
    values = two_tier_values(np.random.default_rng(3), low=0.30, high=0.31, sd=0.0005)
    clean = tiers_from_values(values)
    assert clean.split  # no uncertainty given: the spread alone says two tiers
    noisy = tiers_from_values(values, stderr=np.full(len(values), 0.01))
    assert not noisy.split and "noise" in noisy.reason
    assert noisy.gaps[0].separation < 0.95


def test_three_tiers():
    values = np.r_[np.linspace(0, 1, 5), np.linspace(3, 4, 5), np.linspace(7, 8, 5)]
    result = tiers_from_values(values)
    assert result.split and result.k == 3 and [t.n for t in result.tiers] == [5, 5, 5]
    assert not tiers_from_values(values, k=2).split   # the lower "tier" would hold a gap of its own


def test_too_few_and_equal_values():
    assert "too few" in tiers_from_values([0.1, 0.2, 0.3]).reason
    assert "equal" in tiers_from_values([0.2] * 6).reason


def test_partition_respects_min_size():
    z = np.array([[0.0, 10.0, 10.1, 10.2, 20.0, 20.1]])
    assert partition(z, 2, 2).tolist() == [[4]]       # the gap after 0.0 would leave a tier of one
    assert partition(z, 2, 1).tolist() == [[1]]


def seeded_table(rng, stderr=0.004):
    """Two families x a depth/width grid x 2 seeds; d_model >= 512 scores higher."""
    rows = []
    for family, offset in (("gpt2", 0.0), ("llama3", 0.01)):
        for n_layers, d_model in ((4, 768), (12, 512), (16, 448), (24, 384), (32, 384), (48, 320), (64, 256)):
            for seed in (0, 1):
                score = 0.30 + 0.05 * (d_model >= 512) + offset + 0.002 * rng.standard_normal()
                rows.append({"run": f"{family}/L{n_layers}_d{d_model}_s{seed}", "status": "completed",
                             "family": family, "n_layers": n_layers, "d_model": d_model, "seed": seed,
                             "score_hellaswag": score, "stderr_hellaswag": stderr, "metric_hellaswag": "acc_norm,none",
                             "train_flops": 1e17 * n_layers / 12, "val_nll": 3.0 - 0.1 * (d_model >= 512) - offset})
    rows.append({"run": "gpt2/broken", "status": "failed", "family": "gpt2", "n_layers": 2, "d_model": 64})
    return pd.DataFrame(rows)


def test_find_tiers_on_a_table_pools_seeds():
    table = seeded_table(np.random.default_rng(4))
    result = find_tiers(table, "score_hellaswag", k=2)
    assert result.split and len(result.units) == 14 and (result.units["n_seeds"] == 2).all()
    top = table.loc[result.labels == 1]
    assert set(top["d_model"]) == {512, 768} and len(top) == 8
    assert result.labels[table["status"] == "failed"].isna().all()
    assert result.gaps[0].separation == pytest.approx(1.0)
    assert any("failed" in n or "left out" in n for n in result.notes)


def test_threshold_found_and_refused():
    rng = np.random.default_rng(5)
    table = seeded_table(rng)
    result = find_threshold(table, "d_model", "score_hellaswag")
    assert result.found and result.threshold == 512 and result.below == 448 and result.better_side == "above"
    assert result.clean and result.p_value < 0.01 and "n_layers" in result.confounded_with
    noise = table.assign(score_hellaswag=0.3 + 0.01 * rng.standard_normal(len(table)))
    assert not find_threshold(noise, "d_model", "score_hellaswag").found
    assert "nothing to cut" in find_threshold(table.assign(d_model=512), "d_model", "score_hellaswag").reason


def test_best_per_family_pareto_and_compare():
    table = seeded_table(np.random.default_rng(6))
    best = best_per_family(table, "score_hellaswag")
    assert set(best["family"]) == {"gpt2", "llama3"} and (best["d_model"] >= 512).all()
    assert pareto_mask([1, 2, 3, 4], [4, 3, 3.5, 1]).tolist() == [True, True, False, True]
    front = pareto_frontier(table)
    assert front["train_flops"].is_monotonic_increasing and front["val_nll"].is_monotonic_decreasing
    wide = compare(table, "d_model", 768, 256, "score_hellaswag")
    assert wide.ci[0] > 0 and wide.p_value < 0.01 and "beats" in wide.summary()
    same = compare(table, "d_model", 384, 320, "score_hellaswag")
    assert same.ci[0] < 0 < same.ci[1]


def test_run_labels_name_what_differs():
    table = seeded_table(np.random.default_rng(7))
    labels = run_labels(table[table["status"] == "completed"])
    assert labels.iloc[0] == "gpt2 L4 d768 seed 0"
    assert labels.is_unique


def test_a_partial_tables_pending_rows_do_not_make_a_run_list_every_setting():
    """Pending rows (no config yet) neither make an axis vary nor make an empty value usual: the one finished llama3
    run is not labelled with every setting it has (the notebook's label on a partial table)."""
    import pandas as pd

    from analysis.labels import run_labels

    table = pd.DataFrame({"family": ["llama3", "llama3", "llama3", "gpt2"], "n_layers": [4, None, None, 4],
                          "d_model": [64, None, None, 64], "norm": ["rmsnorm", None, None, "layernorm"],
                          "position": ["rope", None, None, "learned"], "lr": [1e-3, None, None, 1e-3],
                          "run": ["a", "b", "c", "d"], "status": ["completed", "pending", "pending", "completed"]})
    labels = run_labels(table).tolist()
    assert labels[3] == "gpt2" and labels[0].startswith("llama3")
    assert not any(word in " ".join(labels) for word in ("norm=", "position=", "lr=", "L4", "d64")), labels
