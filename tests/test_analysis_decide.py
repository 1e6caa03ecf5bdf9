"""slm-decide: decision accuracy of a ladder (analysis/decide.py), checked against Kendall's tau (scipy)."""

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau

from analysis.cli import decide_main
from analysis.decide import DecideError, agreement, decide, markdown, noise_ceiling, snr

FAMILIES = ["gpt2", "llama3", "lfm2", "moe", "canon"]
RUNGS = [1e5, 2e5, 4e5, 8e5]


def ladder(noise: float = 0.0, seeds: int = 3, swap_at_low: bool = True) -> pd.DataFrame:
    """Five families at four rungs: the target order is gpt2 > llama3 > ... (higher loss first); the lowest rung
    swaps llama3 and lfm2."""
    rng = np.random.default_rng(0)
    rows = []
    for r, budget in enumerate(RUNGS):
        for f, family in enumerate(FAMILIES):
            base = 3.0 - 0.3 * r - 0.1 * f
            if swap_at_low and r == 0 and family in ("llama3", "lfm2"):
                base += -0.15 if family == "llama3" else 0.15
            for s in range(seeds):
                rows.append({"family": family, "param_budget": budget, "seed": s, "status": "completed",
                             "val_nll": base + noise * rng.standard_normal(), "train_flops": 6 * budget * 20 * budget})
    return pd.DataFrame(rows)


def test_decision_accuracy_is_one_plus_kendalls_tau_over_two():
    table = ladder(noise=0.02)
    result = decide(table, proxies=["val_nll"], draws=0)
    means = table.groupby(["param_budget", "family"])["val_nll"].mean()
    target = means.loc[RUNGS[-1]]
    for row in result.rows:
        tau = kendalltau(means.loc[row.rung][FAMILIES], target[FAMILIES]).statistic
        assert row.accuracy == pytest.approx((1 + tau) / 2)
    assert [r.accuracy for r in result.rows][0] == pytest.approx(0.9)  # one swapped pair of ten
    assert result.rows[-1].accuracy == 1.0 and result.rows[-1].share == pytest.approx(1.0)
    assert result.rows[0].share == pytest.approx(1 / 64)  # (1e5 / 8e5)^2 of the target's compute


def test_the_interval_the_ceiling_and_the_cheapest_rung():
    table = ladder(noise=0.03)
    result = decide(table, proxies=["val_nll"], draws=300, seed=1)
    for row in result.rows:
        assert 0 <= row.low <= row.high <= 1
    assert result.ceilings["val_nll"] is not None and 0.5 < result.ceilings["val_nll"] <= 1
    best = result.cheapest("val_nll", 0.95)
    assert best is not None and best.rung == RUNGS[1]  # the lowest rung (0.9) misses 0.95, the next reaches it
    assert result.cheapest("val_nll", 1.01) is None
    text = markdown(result, 0.95)
    assert "| val_nll | 100000 | 1.56% | 5 | 0.900 |" in text and "param_budget = 200000" in text


def test_the_noise_ceiling_by_hand():
    # seed 0 orders a < b < c; seed 1 orders b < a < c: of the three pairs, (a, b) disagrees
    by_config = {"a": {0: 1.0, 1: 2.0}, "b": {0: 2.0, 1: 1.0}, "c": {0: 3.0, 1: 3.0}}
    assert noise_ceiling(by_config) == pytest.approx(2 / 3)
    assert noise_ceiling({"a": {0: 1.0}, "b": {0: 2.0}}) is None
    assert agreement({"a": 1.0, "b": 1.0}, {"a": 1.0, "b": 2.0}) == (0.5, 1)  # a tie counts one half


def test_snr_is_the_spread_across_configurations_over_the_seed_spread():
    by_config = {"a": {0: 1.0, 1: 1.2}, "b": {0: 2.0, 1: 2.2}}
    within = np.sqrt(((0.1 ** 2) * 4) / 2)
    assert snr(by_config) == pytest.approx(np.std([1.1, 2.1], ddof=1) / within)
    assert snr({"a": {0: 1.0}, "b": {0: 2.0}}) is None


def test_bad_input_is_one_line(tmp_path, capsys):
    table = ladder()
    with pytest.raises(DecideError, match="no column 'depth'"):
        decide(table, rung="depth")
    with pytest.raises(DecideError, match="--target 300000"):
        decide(table, target=3e5)
    path = tmp_path / "results.parquet"
    table.to_parquet(path)
    with pytest.raises(SystemExit) as exit_:
        decide_main([str(path), "--level", "1.5"])
    assert exit_.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_the_command_writes_its_table(tmp_path, capsys):
    path = tmp_path / "results.parquet"
    ladder(noise=0.01).to_parquet(path)
    decide_main([str(path), "--draws", "50", "-o", str(tmp_path / "decide.md")])
    out = capsys.readouterr().out
    assert "noise ceiling" in out and (tmp_path / "decide.md").read_text() in out
    assert len([line for line in out.splitlines() if line.startswith("| val_nll |")]) == len(RUNGS)


def test_the_plot_draws_one_line_per_proxy_with_the_ceiling_and_the_level(tmp_path, capsys):
    from analysis.decide import plot

    table = ladder(noise=0.02)
    table["val_bpb"] = table["val_nll"] / np.log(2) / 1.1
    result = decide(table, proxies=["val_nll", "val_bpb"], draws=20)
    ax = plot(result, 0.8).axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sorted(labels) == sorted(["val_nll", "val_nll: noise ceiling", "val_bpb", "val_bpb: noise ceiling",
                                     "level 0.8"])
    assert ax.get_xlabel() == "% of the target's training compute"
    path = tmp_path / "results.parquet"
    table.to_parquet(path)
    decide_main([str(path), "--draws", "10", "--plot", str(tmp_path / "fig")])
    assert (tmp_path / "fig" / "decision_accuracy.png").stat().st_size > 0
    assert "decision_accuracy.svg" in capsys.readouterr().out
