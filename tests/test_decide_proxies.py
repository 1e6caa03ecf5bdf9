"""Issue 51's proxies and verdict axes for slm-decide, each on a small synthetic case whose numbers are worked out by
hand in the comments: the mean of the last validations (val_nll_last3), Heineman et al.'s SNR beside slm's, the loss
before and after the decay (decay branches), and the axes a verdict was checked across."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from analysis import collect
from analysis import records as read
from analysis.decide import decide, default_proxies, markdown, part_read
from analysis.decide_axes import CHANGED, HELD, NOT
from analysis.decide_snr import signal_to_noise
from analysis.decide_words import answer
from tests.test_analysis_collect import make_record, write

# a run of 100 steps validated at 25, 50, 75, 98 and at its end, 100: 98 is within 5% of the steps of 100, so the run
# has four distinct validations, 3.0, 2.6, 2.3, 2.2
CURVE = [[25, 3.0], [50, 2.6], [75, 2.3], [98, 2.25], [100, 2.2]]


class Run:
    def __init__(self, curve, branch=None):
        self.record = {"eval": {"val_curve": curve}, "training": {"max_steps": 100}}
        if branch:
            self.record["branch"] = branch


def test_the_mean_of_the_last_three_validations_and_their_relative_spread_by_hand():
    # the last three distinct validations: 2.6, 2.3, 2.2 (98's 2.25 is the end's point, replaced by 2.2)
    assert read.validations(Run(CURVE).record) == [3.0, 2.6, 2.3, 2.2]
    assert read.curve_mean(Run(CURVE), 3) == pytest.approx(7.1 / 3)  # 2.366667
    # deviations from 2.366667: +0.233333, -0.066667, -0.166667; squares 0.054444 + 0.004444 + 0.027778 = 0.086667;
    # / 3 (ddof 0) = 0.028889; sqrt 0.169967; / 2.366667 = 0.071817
    assert read.late_rsd(Run(CURVE)) == pytest.approx(0.071817, abs=1e-6)
    # two distinct validations are fewer than three: no value (so the column is empty and not a default proxy)
    short = [[50, 2.6], [98, 2.3], [100, 2.2]]
    assert read.curve_mean(Run(short), 3) is None and read.late_rsd(Run(short)) is None


def _ladder(rows) -> pd.DataFrame:
    """A ladder's table: (family, param_budget, seed, lr, val_nll) rows, train_flops 10 per unit of budget, tokens 5
    per unit (5 tokens per parameter), completed."""
    frame = pd.DataFrame(rows, columns=["family", "param_budget", "seed", "lr", "val_nll"])
    return frame.assign(status="completed", train_flops=frame["param_budget"] * 10.0,
                        tokens=frame["param_budget"] * 5.0)


TARGET = {"A": [2.00, 2.02, 2.04], "B": [2.10, 2.12, 2.14], "C": [2.20, 2.22, 2.24]}
LOW = {"A": [2.50, 2.52, 2.54], "B": [2.60, 2.62, 2.64], "C": [2.70, 2.72, 2.74]}


def _base(target=TARGET, low=LOW, seeds=3, lr=1e-3) -> pd.DataFrame:
    rows = [(f, rung, s, lr, v[s]) for rung, cells in ((1000, low), (2000, target)) for f, v in cells.items()
            for s in range(seeds)]
    return _ladder(rows)


def test_the_averaged_proxy_costs_the_whole_run_and_is_a_default_where_the_curve_has_the_points():
    table = _base()
    table["val_nll_last3"] = table["val_nll"] + 0.1  # the same order as the final loss, 0.1 higher
    assert part_read("val_nll_last3") == 1.0
    assert default_proxies(table) == ["val_nll", "val_nll_last3"]  # after the final losses (no val_bpb here)
    result = decide(table, proxies=["val_nll_last3"], draws=0)
    # read at the end: judged below the target only, at the rung's whole share, 1000 x 10 / (2000 x 10) = 0.5
    assert [(r.rung, r.share, r.accuracy) for r in result.rows] == [(1000.0, 0.5, 1.0)]
    table["val_nll_last3"] = math.nan  # runs whose curves have fewer than three validations: not proposed
    assert "val_nll_last3" not in default_proxies(table)


def test_the_averaged_weights_read_part_way_by_hand():
    """val_nll_avg_50 and val_nll_avg_25 read eval.val_curve_avg (the averaged weights' curve) as val_nll_50 and
    val_nll_25 read eval.val_curve, and cost half and a quarter of the run."""
    from analysis.schema import metric_column
    from slm.metrics import METRICS

    run = Run(CURVE)
    # the averaged weights lag the raw ones early and lead them late: 3.2 at 25, 2.5 at 50 (of 100 steps)
    run.record["eval"]["val_curve_avg"] = [[25, 3.2], [50, 2.5], [75, 2.25], [100, 2.15]]
    read_avg = {name: metric_column(METRICS[name]).source for name in ("val_nll_avg_50", "val_nll_avg_25")}
    assert read_avg["val_nll_avg_50"](run) == 2.5 and read_avg["val_nll_avg_25"](run) == 3.2
    assert metric_column(METRICS["val_nll_50"]).source(run) == 2.6  # the raw curve's, not the averaged one's
    assert part_read("val_nll_avg_50") == 0.5 and part_read("val_nll_avg_25") == 0.25
    # nearest 50 is 62 here, 12 steps away: more than 5% of 100 steps, so no value
    run.record["eval"]["val_curve_avg"] = [[62, 2.4], [100, 2.15]]
    assert read_avg["val_nll_avg_50"](run) is None
    del run.record["eval"]["val_curve_avg"]  # a run without train.validation.averaging
    assert read_avg["val_nll_avg_50"](run) is None
    table = _base()
    table["val_nll_avg_50"] = table["val_nll"] + 0.3
    assert default_proxies(table) == ["val_nll", "val_nll_avg_50"]
    # read at 50%: the lower rung at 0.5 x 0.5 = 0.25 of the target, and the target itself stopped at 0.5
    result = decide(table, proxies=["val_nll_avg_50"], draws=0)
    assert [(r.rung, r.share, r.accuracy) for r in result.rows] == [(1000.0, 0.25, 1.0), (2000.0, 0.5, 1.0)]


def test_heinemans_snr_is_their_formula_on_a_worked_example():
    # signal scores 2.0, 2.5, 3.0: range 1.0 over mean 2.5 = 0.4; noise scores 2.0, 2.2, 2.4: mean 2.2, deviations
    # -0.2, 0, +0.2, variance (ddof 0) 0.08 / 3 = 0.026667, std 0.163299, over the mean 0.074227; 0.4 / 0.074227
    assert signal_to_noise([2.0, 2.5, 3.0], [2.0, 2.2, 2.4]) == pytest.approx(5.388877, abs=1e-5)
    assert signal_to_noise([2.0, 3.0], [2.2, 2.2]) == math.inf


def test_both_snrs_of_a_rung_by_hand():
    # at rung 1000: A's seeds 2.0 and 2.2 (mean 2.1), B's 2.4 and 2.6 (mean 2.5); the runs' relative late spreads
    # 0.01, 0.03, 0.02, 0.02 (mean 0.02)
    rows = [("A", 1000, 0, 1e-3, 2.0), ("A", 1000, 1, 1e-3, 2.2), ("B", 1000, 0, 1e-3, 2.4), ("B", 1000, 1, 1e-3, 2.6),
            ("A", 2000, 0, 1e-3, 1.9), ("A", 2000, 1, 1e-3, 1.9), ("B", 2000, 0, 1e-3, 2.0), ("B", 2000, 1, 1e-3, 2.0)]
    table = _ladder(rows).assign(val_nll_late_rsd=[0.01, 0.03, 0.02, 0.02, 0.5, 0.5, 0.5, 0.5])
    table["val_nll_50"] = table["val_nll"]
    result = decide(table, proxies=["val_nll", "val_nll_50"], draws=0)
    row = next(r for r in result.rows if r.proxy == "val_nll")
    # slm's: std (ddof 1) of the means 2.1, 2.5 = 0.282843; pooled seed variance (0.02 + 0.02) / 2 = 0.02, its root
    # 0.141421: 2.0
    assert row.snr == pytest.approx(2.0)
    # Heineman's: range 0.4 over the means' mean 2.3 = 0.173913, over the mean relative spread 0.02: 8.695652
    assert row.snr_heineman == pytest.approx(8.695652, abs=1e-5)
    # a proxy read part-way has no late validations: no Heineman SNR; the table shows both columns
    assert all(r.snr_heineman is None for r in result.rows if r.proxy == "val_nll_50")
    assert "| SNR | SNR (Heineman) |" in markdown(result) and "| 2 | 8.7 |" in markdown(result)


def _branches(before: dict, after: dict, rung=1000, fraction=0.5) -> pd.DataFrame:
    rows = [(f, rung, s, 1e-3, after[f]) for f in after for s in range(3)]
    frame = _ladder(rows).assign(branch=fraction, val_nll_stable=[before[f] for f in after for _ in range(3)])
    return frame.assign(train_flops=frame["param_budget"] * 10.0 * fraction,
                        tokens=frame["param_budget"] * 5.0 * fraction)


def test_before_and_after_the_decay_by_hand():
    # at rung 1000, branch 0.5: before the decay B < A < C, after it A < B < C; the target's order is A < B < C
    branches = _branches(before={"A": 2.9, "B": 2.8, "C": 3.0}, after={"A": 2.7, "B": 2.75, "C": 2.8})
    alone = decide(_base(), proxies=["val_nll"], draws=0)
    result = decide(pd.concat([_base(), branches], ignore_index=True), proxies=["val_nll"], draws=0)
    # the branches are not further seeds of their runs: the ladder's own rows are the same
    assert [(r.proxy, r.rung, r.accuracy) for r in result.rows] == [(r.proxy, r.rung, r.accuracy) for r in alone.rows]
    [row] = result.decay
    # pairs (A,B) (A,C) (B,C): before orders them B<A, A<C, B<C -> against the target 2 of 3; after all 3 of 3;
    # before against after: 2 of 3. Compute: 5000 / 20000 FLOPs
    assert (row.rung, row.fraction, row.share) == (1000.0, 0.5, 0.25)
    assert (row.before, row.after, row.agreement, row.pairs) == (pytest.approx(2 / 3), 1.0, pytest.approx(2 / 3), 3)
    assert (row.first_before, row.first_after) == ("B", "A")
    decay = next(a for a in result.axes if a.name == "decay phase")
    assert decay.state == CHANGED and "B first before the decay, A after" in decay.detail
    assert "Before and after the decay" in markdown(result) and row.intervals == {}  # draws=0: no intervals
    # every branch's seeds share one value, so every redraw gives the same three agreements: the intervals are points
    redrawn = decide(pd.concat([_base(), branches], ignore_index=True), proxies=["val_nll"], draws=50).decay[0]
    assert redrawn.intervals == {"before": (pytest.approx(2 / 3), pytest.approx(2 / 3)), "after": (1.0, 1.0),
                                 "agreement": (pytest.approx(2 / 3), pytest.approx(2 / 3))}
    assert "| 0.667 (0.667-0.667) | 1.000 (1.000-1.000) | 0.667 (0.667-0.667), 3 pairs | B | A |" in \
        markdown(decide(pd.concat([_base(), branches], ignore_index=True), proxies=["val_nll"], draws=50))
    held = decide(pd.concat([_base(), _branches({"A": 2.8, "B": 2.9, "C": 3.0}, {"A": 2.7, "B": 2.75, "C": 2.8})],
                            ignore_index=True), proxies=["val_nll"], draws=0)
    assert [(a.state, a.detail) for a in held.axes if a.name == "decay phase"] == \
        [(HELD, "the same first before and after the decay at each of 1 branch point(s); agreement before vs after "
                "1.000-1.000")]


def test_a_branch_collects_as_a_row_of_its_runs_ladder_point_with_the_stable_loss_beside_it(tmp_path):
    sweep = tmp_path / "ladder"
    key = "model=gpt2,model.param_budget=1000"
    sweep.mkdir()
    (sweep / "sweep.json").write_text(json.dumps({"jobs": {key: [key]}, "ladder": {
        key: {"rung": 1000, "rung_index": 0, "lr_rule": "search", "config": "model=gpt2"}}}))
    run = make_record(val_nll=2.2)
    run["eval"]["val_curve"] = CURVE
    write(sweep / key, run)
    branch = make_record(val_nll=2.4)
    branch["branch"] = {"of": key, "fraction": 0.5, "step": 40, "steps": 50}
    write(sweep / f"{key},branch=0.5", branch)
    table = collect(sweep).set_index("branch", drop=False)
    assert table["lr_rule"].tolist() == ["search", "search"]
    assert table["ladder_point"].tolist() == ["model=gpt2", "model=gpt2"]
    by_branch = table.reset_index(drop=True).set_index(table["branch"].fillna(1.0).to_numpy())
    # the branch's stable-phase loss is its run's validation at the branch's last step, 50: 2.6
    assert by_branch.loc[0.5, "val_nll_stable"] == 2.6 and pd.isna(by_branch.loc[1.0, "val_nll_stable"])
    assert by_branch.loc[1.0, "val_nll_last3"] == pytest.approx(7.1 / 3)
    assert by_branch.loc[1.0, "val_nll_late_rsd"] == pytest.approx(0.071817, abs=1e-6)


def _axis(result, name):
    return next(a for a in result.axes if a.name == name)


def test_seeds_axis_each_state():
    assert _axis(decide(_base(), draws=0), "seeds").state == HELD
    target = dict(TARGET, B=[2.10, 2.12, 2.03])  # B is first in seed 2 (2.03 < A's 2.04); A's mean is still lowest
    seeds = _axis(decide(_base(target), draws=0), "seeds")
    assert seeds.state == CHANGED and seeds.detail.startswith("B first in seed 2 (A first in 2 of 3)")
    assert _axis(decide(_base(seeds=1), draws=0), "seeds").state == NOT


def test_lr_axis_each_state():
    one = decide(_base(), draws=0)
    assert _axis(one, "lr").state == NOT and "one lr per configuration" in _axis(one, "lr").detail
    # the target also runs lr 2e-3: A 2.30, B 2.35, C 2.25 in every seed; each configuration's best lr is 1e-3
    other = _base(target={"A": [2.30] * 3, "B": [2.35] * 3, "C": [2.25] * 3}, lr=2e-3)
    table = pd.concat([_base(), other[other["param_budget"] == 2000]], ignore_index=True).assign(lr_rule="search")
    lr = _axis(decide(table, draws=0), "lr")
    assert (lr.state, lr.detail) == (CHANGED, "C first at lr 0.002 (each configuration at its best lr puts A first); "
                                              "lr searched per rung")
    other = _base(target={"A": [2.25] * 3, "B": [2.35] * 3, "C": [2.30] * 3}, lr=2e-3)
    table = pd.concat([_base(), other[other["param_budget"] == 2000]], ignore_index=True)
    assert _axis(decide(table, draws=0), "lr").state == HELD


def test_scale_axis_each_state():
    assert _axis(decide(_base(), draws=0), "scale").state == HELD
    low = dict(LOW, B=[2.40, 2.42, 2.44])
    scale = _axis(decide(_base(low=low), draws=0), "scale")
    assert (scale.state, scale.detail) == (CHANGED, "B first at param_budget = 1000 (A at the target)")
    table = _base()
    table["val_nll_25"] = table["val_nll"]
    table.loc[table["param_budget"] == 1000, "val_nll"] = math.nan  # the truth only at the target
    assert _axis(decide(table, proxies=["val_nll_25"], draws=0), "scale").state == NOT


def test_tokens_per_parameter_axis_each_state():
    # the same configurations at the target rung trained at 1 token per parameter as well as 5
    def second(values):
        rows = _base(target={f: [v] * 3 for f, v in values.items()})
        rows = rows[rows["param_budget"] == 2000]
        return rows.assign(tokens=rows["param_budget"] * 1.0)

    alone = decide(_base(), draws=0)
    assert _axis(alone, "tokens per parameter").state == NOT
    table = pd.concat([_base(), second({"A": 2.6, "B": 2.5, "C": 2.7})], ignore_index=True)
    result = decide(table, draws=0)  # no "two runs of one configuration": the 1-token runs are set aside
    assert [(r.rung, r.accuracy) for r in result.rows] == [(r.rung, r.accuracy) for r in alone.rows]
    tokens = _axis(result, "tokens per parameter")
    assert (tokens.state, tokens.detail) == (CHANGED, "at param_budget = 2000, 1 tokens per parameter puts B first, 5 "
                                                      "puts A first")
    table = pd.concat([_base(), second({"A": 2.5, "B": 2.6, "C": 2.7})], ignore_index=True)
    assert _axis(decide(table, draws=0), "tokens per parameter").state == HELD
    # both rungs at both regimes: changed at the lower (1 token puts B first), held at the target (A first at both)
    low = _base(low={"A": [2.6] * 3, "B": [2.5] * 3, "C": [2.7] * 3})
    low = low[low["param_budget"] == 1000].assign(tokens=lambda t: t["param_budget"] * 1.0)
    table = pd.concat([_base(), second({"A": 2.5, "B": 2.6, "C": 2.7}), low], ignore_index=True)
    tokens = _axis(decide(table, draws=0), "tokens per parameter")
    assert (tokens.state, tokens.detail) == (CHANGED, "at param_budget = 1000, 1 tokens per parameter puts B first, 5 "
                                                      "puts A first; the same first at param_budget = 2000")


def test_a_ladder_at_two_token_regimes_sets_aside_the_other_regime_s_decay_branches():
    """Two ladders of the same points (a sweep and its copy at 1 token per parameter, the sweep=<file> choice in their
    ladder_point) are one set of configurations, and the decay branches of the runs set aside are set aside too."""
    from analysis.decide import ladder_config

    def ladder(sweep, per_param):
        rows = _base().assign(tokens=lambda t: t["param_budget"] * per_param, lr_rule="search")
        rows["ladder_point"] = rows["family"].map(lambda f: f"model.x={f},sweep={sweep}")
        branches = rows.assign(branch=0.5, val_nll_stable=rows["val_nll"] + 0.1,
                               tokens=rows["tokens"] * 0.5, train_flops=rows["train_flops"] * 0.5)
        return pd.concat([rows, branches], ignore_index=True).drop(columns="family")

    table, config = ladder_config(pd.concat([ladder("close", 5.0), ladder("close_t1", 1.0)], ignore_index=True))
    assert sorted(table[config].unique()) == ["model.x=A", "model.x=B", "model.x=C"]
    result = decide(table, config, draws=0)  # no "two runs of one configuration" from the other regime's branches
    assert [(d.rung, d.fraction) for d in result.decay] == [(1000.0, 0.5), (2000.0, 0.5)]
    assert _axis(result, "tokens per parameter").state == HELD


def test_the_answer_says_the_axes_one_line_each():
    text = answer(decide(_base(), draws=0))
    lines = text.splitlines()
    start = lines.index("- Checked across, for A first (held / changed / not checked):")
    assert [line.split(":")[0].strip("- ") for line in lines[start + 1:]] == \
        ["seeds", "lr", "scale", "tokens per parameter", "decay phase"]
    assert lines[start + 1] == "  - seeds: checked, held: A first in each of the 3 seeds at the target; noise ceiling " \
                               "1.000"
    assert lines[start + 5] == "  - decay phase: not checked: no decay branches (train.schedule.decay_branches)"


def test_a_run_stopped_early_keeps_its_token_regime():
    # a diverged seed saw 40 of its 100 steps' tokens: planned, it is still at 5 tokens per parameter, one regime
    table = _base().assign(steps=100, max_steps=100)
    table.loc[0, ["status", "steps", "tokens"]] = ["diverged", 40, table.loc[0, "tokens"] * 0.4]
    result = decide(table, draws=0)
    assert _axis(result, "tokens per parameter").state == NOT and "5 tokens per parameter" in \
        _axis(result, "tokens per parameter").detail


def test_an_intervention_s_effect_by_hand_and_its_interval_is_paired():
    """analysis.decide_effects.judge: the proxy with an intervention against the same proxy without it, at one rung."""
    from analysis.decide_effects import judge

    top = {"A": {0: 1.0, 1: 1.2}, "B": {0: 2.0, 1: 2.2}, "C": {0: 3.0, 1: 3.2}}  # the target orders A < B < C
    base = {"A": {0: 5.0, 1: 5.2}, "B": {0: 6.0, 1: 6.2}, "C": {0: 7.0, 1: 7.2}}  # the same order: 3 of 3 pairs
    # with it: B and C swap (means 7.1 and 6.6): A<B, A<C right, B<C wrong: 2 of 3 pairs
    proxy = {"A": {0: 5.0, 1: 5.2}, "B": {0: 7.0, 1: 7.2}, "C": {0: 6.5, 1: 6.7}}
    e = judge("x", proxy, base, top, 1000.0, 0.01, 0, 0, ("p", "b"))
    assert (e.accuracy, e.base_accuracy) == (pytest.approx(2 / 3), 1.0) and e.difference == pytest.approx(-1 / 3)
    # slm's SNR of the base: means 5.1, 6.1, 7.1, std (ddof 1) 1.0; within each configuration the two seeds are 0.1
    # from their mean: pooled variance (3 x 0.02) / 3 = 0.02, sd 0.141421: SNR 7.0711. The proxy: means 5.1, 7.1,
    # 6.6, std 1.040833, the same seed spread: 7.3598
    assert e.base_snr == pytest.approx(7.0711, abs=1e-4) and e.snr == pytest.approx(7.3598, abs=1e-4)
    assert e.low is None and e.snr_ratio == pytest.approx(7.3598 / 7.0711, abs=1e-4)
    # a proxy that is its own baseline differs by exactly 0 in every redraw: the redraws are paired (two independent
    # redraws of the seeds would give differences on both sides of 0)
    same = judge("x", base, base, top, 1000.0, 0.01, 200, 0, ("b", "b"))
    assert (same.low, same.high, same.snr_low, same.snr_high) == (0.0, 0.0, 1.0, 1.0)
    # configurations without seeds in common with the base are left out; fewer than two left: no effect
    assert judge("x", {"A": {5: 1.0}, "B": {0: 1.0}}, base, top, 1000.0, None, 0, 0, ("p", "b")) is None


def test_slm_decide_reports_each_intervention_beside_its_baseline(capsys):
    """decide() judges every intervention whose two proxies it judged; the Markdown has the table."""
    table = _base()
    table["val_nll_last3"] = table["val_nll"] + 0.05  # the same order as the final loss
    result = decide(table, proxies=["val_nll", "val_nll_last3"], draws=50)
    assert [(e.intervention, e.proxy, e.base, e.rung) for e in result.effects] == [
        ("averaged scores", "val_nll_last3", "val_nll", 1000.0)]
    assert result.effects[0].difference == 0.0 and "| averaged scores | val_nll_last3 | val_nll | 1000 |" in markdown(result)
    assert not decide(table, proxies=["val_nll_last3"], draws=0).effects  # the baseline not judged: no row
