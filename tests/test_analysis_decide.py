"""slm-decide: decision accuracy of a ladder (analysis/decide.py), checked against Kendall's tau (scipy)."""


import zlib

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
    assert [r.rung for r in result.rows] == RUNGS[:-1]  # the target itself is not a row: its noise is the ceiling
    assert result.rows[-1].accuracy == 1.0 and result.rows[-1].share == pytest.approx(1 / 4)
    assert result.rows[0].share == pytest.approx(1 / 64)  # (1e5 / 8e5)^2 of the target's compute


def test_the_interval_the_ceiling_and_the_cheapest_rung():
    table = ladder(noise=0.03)
    result = decide(table, proxies=["val_nll"], draws=300, seed=1)
    for row in result.rows:
        assert 0 <= row.low <= row.high <= 1
    assert result.ceiling is not None and 0.5 < result.ceiling <= 1
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
    assert len([line for line in out.splitlines() if line.startswith("| val_nll |")]) == len(RUNGS) - 1


def test_the_plot_draws_one_line_per_proxy_with_the_ceiling_and_the_level(tmp_path, capsys):
    from analysis.decide_plots import accuracy_plot as plot

    table = ladder(noise=0.02)
    table["val_bpb"] = table["val_nll"] / np.log(2) / 1.1
    result = decide(table, proxies=["val_nll", "val_bpb"], draws=20)
    ax = plot(result, 0.8).axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sorted(labels) == sorted(["val_nll", "val_bpb (the same points as val_nll: the lines coincide)",
                                     "noise ceiling (val_nll at the target)", "level 0.8"])
    assert ax.get_xlabel() == "% of the target's training compute"
    path = tmp_path / "results.parquet"
    table.to_parquet(path)
    decide_main([str(path), "--draws", "10", "--plot", str(tmp_path / "fig")])
    assert (tmp_path / "fig" / "decision_accuracy.png").stat().st_size > 0
    assert (tmp_path / "fig" / "rank_flow.png").stat().st_size > 0
    assert "decision_accuracy.svg" in capsys.readouterr().out


def test_the_rank_flow_is_each_configurations_rank_at_each_rung():
    from analysis.decide import ladder_table, ranks
    from analysis.decide_plots import rank_flow

    table = ladder()
    flow = ranks(ladder_table(table, "family", "param_budget"))
    # the target order: canon best (rank 1) ... gpt2 worst (5); the lowest rung swaps llama3 (4 -> 3) and lfm2 (3 -> 4)
    assert flow[RUNGS[-1]].to_dict() == {"canon": 1, "moe": 2, "lfm2": 3, "llama3": 4, "gpt2": 5}
    assert flow[RUNGS[0]].to_dict() == {"canon": 1, "moe": 2, "lfm2": 4, "llama3": 3, "gpt2": 5}
    ax = rank_flow(ladder_table(table, "family", "param_budget")).axes[0]
    assert len(ax.get_lines()) == len(FAMILIES) and ax.yaxis_inverted()


def test_each_configuration_is_taken_at_its_best_lr_per_rung():
    """An lr searched per rung: the runs at the lr with the best seed mean stand for the configuration there (chosen
    per proxy); a best lr at the edge of its grid is named."""
    rows = []
    for budget, truth in ((1e5, {"a": 3.0, "b": 3.2}), (2e5, {"a": 2.8, "b": 2.6})):
        for name, best in truth.items():
            for lr, penalty in ((1e-3, 0.5), (2e-3, 0.0), (4e-3, 0.3 if name == "a" else -0.05)):
                for seed in range(2):
                    rows.append({"family": name, "param_budget": budget, "seed": seed, "lr": lr,
                                 "val_nll": best + penalty + 0.01 * seed, "train_flops": budget ** 2})
    result = decide(pd.DataFrame(rows), proxies=["val_nll"], draws=0)
    # a's best lr is 2e-3 at both rungs (3.005, 2.805); b's is 4e-3 (3.155, 2.555): a < b at 1e5, b < a at 2e5
    assert result.chosen[("val_nll", 1e5, "a")] == 2e-3 and result.chosen[("val_nll", 2e5, "b")] == 4e-3
    assert len(result.rows) == 1 and result.rows[0].accuracy == 0.0
    assert any("edge of the searched grid" in n and "b at 100000 (lr 0.004)" in n for n in result.notes)


def test_a_configuration_missing_at_a_rung_is_named_and_unequal_seeds_are_stated(tmp_path, capsys):
    table = ladder(noise=0.01)
    table = table[~((table["family"] == "moe") & (table["param_budget"] == RUNGS[1]))]  # moe never reached rung 2
    table = table[~((table["param_budget"] == RUNGS[0]) & (table["seed"] == 2))]        # rung 1 has two seeds
    result = decide(table, proxies=["val_nll"], draws=0)
    assert "moe has no completed run at param_budget = 200000: judged without it there" in result.notes
    assert any(n.startswith("seeds per configuration differ across rungs (param_budget 100000: 2;") for n in result.notes)
    assert [r.configurations for r in result.rows] == [5, 4, 5]  # the others are still judged
    failed = ladder().assign(status=lambda t: np.where(t["param_budget"] == RUNGS[-1], "failed", "completed"))
    with pytest.raises(DecideError, match="--target 800000: no configuration has a completed run with val_nll"):
        decide(failed, proxies=["val_nll"])
    path = tmp_path / "results.parquet"
    failed.to_parquet(path)
    with pytest.raises(SystemExit) as exit_:
        decide_main([str(path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "800000" in err
    one = ladder()[lambda t: t["param_budget"] == RUNGS[0]]
    with pytest.raises(DecideError, match="a ladder needs at least two rungs; the results have 1"):
        decide(one, proxies=["val_nll"])


def test_the_command_prints_the_held_out_check_and_a_forecast(tmp_path, capsys):
    path = tmp_path / "results.parquet"
    table = ladder(noise=0.01)
    table["params_total"] = table["param_budget"]
    table.to_parquet(path)
    decide_main([str(path), "--draws", "50", "--forecast", "params=70e6"])
    out = capsys.readouterr().out
    assert "Held-out check" in out and "target_params = 7e+07" in out
    with pytest.raises(SystemExit) as exit_:
        decide_main([str(path), "--forecast", "size=big"])
    assert exit_.value.code == 2 and "--forecast size=big is invalid" in capsys.readouterr().err


def test_the_report_of_a_ladder_sweep_has_the_rankings_across_scale_section(tmp_path):
    from analysis.report import write_report

    table = ladder(noise=0.01)
    table["run"] = [f"run{i}" for i in range(len(table))]
    table["lr_rule"] = "search"
    path = tmp_path / "results.parquet"
    table.to_parquet(path)
    html, _ = write_report(path, tmp_path / "report", table=table)
    text = (tmp_path / "report" / "report.md").read_text()
    section = text.split("## Rankings across scale", 1)[1].split("\n## ", 1)[0]
    assert "| val_nll | 100000 | 1.56% | 5 | 0.900 |" in section and "noise ceiling" in section  # as slm-decide
    assert "Held-out check" in section and "figures/rank_flow.png" in section
    assert (tmp_path / "report" / "figures" / "decision_accuracy.png").exists()
    # the verdict is per rung and at the target: no ranking of (family x rung) cells against each other
    verdict = text.split("## Verdict", 1)[1].split("\n## ", 1)[0]
    assert verdict.lstrip().startswith("The decision: canon is best at the target param_budget = 800000 on val_nll")
    rows = [line.split(" | ") for line in verdict.splitlines() if line.startswith("| ") and "---" not in line]
    assert [row[0] for row in rows] == ["| param_budget", "| 100000", "| 200000", "| 400000", "| 800000 (target)"]
    order = [[name.split()[0] for name in row[3].split(" < ")] for row in rows[1:]]
    assert order[0] == ["canon", "moe", "llama3", "lfm2", "gpt2"]  # the lowest rung swaps llama3 and lfm2
    assert order[-1] == ["canon", "moe", "lfm2", "llama3", "gpt2"] and "**Ranking**" not in verdict
    assert "Rankings across scale" not in _plain_report(tmp_path, table.drop(columns="lr_rule"))


def _plain_report(tmp_path, table) -> str:
    from analysis.report import write_report

    path = tmp_path / "plain.parquet"
    table.to_parquet(path)
    write_report(path, tmp_path / "plain", table=table)
    return (tmp_path / "plain" / "report.md").read_text()


def test_proxies_are_judged_against_the_final_loss_at_the_target_in_their_own_direction():
    table = ladder(noise=0.0, swap_at_low=False)
    table["score_task"] = 1.0 - table["val_nll"] / 10  # higher is better, the same order as the loss
    table["val_nll_25"] = table["val_nll"] + 0.5        # read at 25% of each run
    table["metric_task"] = "acc"
    result = decide(table, proxies=["val_nll", "score_task", "val_nll_25"], draws=0)
    assert result.truth == "val_nll" and all(r.accuracy == 1.0 for r in result.rows)
    early = [r for r in result.rows if r.proxy == "val_nll_25"]
    assert [r.rung for r in early] == RUNGS  # stopping the target itself at 25% is a rung too
    assert early[-1].share == pytest.approx(0.25) and early[0].share == pytest.approx(0.25 / 64)
    assert [r.rung for r in result.rows if r.proxy == "score_task"] == RUNGS[:-1]
    assert result.cheapest("val_nll_25", 0.8).rung == RUNGS[0]


def test_a_diverged_lr_ranks_last_duplicates_are_refused_and_one_seed_has_no_interval():
    rows = []
    for budget in (1e5, 2e5):
        for name, base in (("a", 3.0), ("b", 3.1)):
            for lr, extra, status in ((1e-3, 0.2, "completed"), (2e-3, 0.0, "completed"), (4e-3, -0.5, "diverged")):
                rows.append({"family": name, "param_budget": budget, "seed": 0, "lr": lr, "status": status,
                             "val_nll": base + extra if status == "completed" else None, "train_flops": budget})
    table = pd.DataFrame(rows)
    table.loc[(table["lr"] == 4e-3) & (table["family"] == "a"), ["status", "val_nll"]] = ["completed", 2.0]
    result = decide(table, proxies=["val_nll"], draws=100)
    # a's 4e-3 completed (2.0, its best); b's 4e-3 diverged: b is taken at 2e-3, inside its grid of three lrs
    assert result.chosen[("val_nll", 1e5, "a")] == 4e-3 and result.chosen[("val_nll", 1e5, "b")] == 2e-3
    assert not any("b at" in n for n in result.notes if "edge" in n) and any("a at 100000" in n for n in result.notes)
    assert result.rows[0].low is None and "| - |" in markdown(result)
    twice = pd.concat([table, table.iloc[[1]]])
    with pytest.raises(DecideError, match="two runs of family = a at param_budget = 100000, lr 0.002, seed 0"):
        decide(twice, proxies=["val_nll"], draws=0)


def test_a_ladders_points_are_labelled_by_family_where_that_names_them():
    from analysis.decide import ladder_points

    table = pd.DataFrame({"family": ["gpt2", "llama3", "llama3"],
                          "ladder_point": ["model=gpt2,x=1", "model=llama3,x=1", "model=llama3,x=1"]})
    assert list(ladder_points(table)) == ["gpt2", "llama3", "llama3"]
    table["ladder_point"] = ["model=gpt2,x=1", "model=llama3,x=1", "model=llama3,qk=1,x=1"]
    assert list(ladder_points(table)) == ["model=gpt2", "model=llama3", "model=llama3,qk=1"]
    assert ladder_points(table.drop(columns="ladder_point")) is None


def test_the_rank_flow_puts_every_rung_on_the_compute_axis():
    from analysis.decide import ladder_table
    from analysis.decide_plots import rank_flow

    table = ladder()
    result = decide(table, proxies=["val_nll"], draws=0)
    shares = {r.rung: r.share for r in result.rows} | {result.target: 1.0}
    ax = rank_flow(ladder_table(table, "family", "param_budget"), "param_budget", shares).axes[0]
    assert list(ax.get_lines()[0].get_xdata()) == pytest.approx([100 / 64, 100 / 16, 100 / 4, 100])
    assert ax.get_xlabel() == "% of the top rung's training compute"


def test_the_interval_is_a_direct_resampling_of_the_seeds():
    """The 95% interval redone by hand: each draw redraws every configuration's seeds at the rung, then at the target
    (numpy's choice with replacement, configurations in table order), and takes the agreement of the two means."""
    table = ladder(noise=0.05)
    result = decide(table, proxies=["val_nll"], draws=200, seed=7)
    cells = {r: {f: table[(table["param_budget"] == r) & (table["family"] == f)]["val_nll"].to_numpy()
                 for f in FAMILIES} for r in RUNGS}
    for row in result.rows:  # each row from its own generator: seed, the proxy's name (CRC-32) and the rung's position
        rng, boot = np.random.default_rng([7, zlib.crc32(b"val_nll"), RUNGS.index(row.rung)]), []
        for _ in range(200):
            low = {f: rng.choice(v, size=len(v), replace=True).mean() for f, v in cells[row.rung].items()}
            top = {f: rng.choice(v, size=len(v), replace=True).mean() for f, v in cells[RUNGS[-1]].items()}
            boot.append(agreement(low, top)[0])
        assert (row.low, row.high) == (np.percentile(boot, 2.5), np.percentile(boot, 97.5))


@pytest.mark.parametrize("group, runs", [("ladder_cpu", 240), ("ladder_cpu_mup", 150)])
def test_the_shipped_ladder_records_give_the_documented_tables(tmp_path, capsys, group, runs):
    """The real runs of `make decide` in docs/decisions/runs/ (rung and lr rule from their sweep.json) judged afresh
    give docs/decisions/<group>.md: decision accuracy, the held-out check and the forecast at 70M parameters."""
    from pathlib import Path

    from analysis import collect

    docs = Path(__file__).resolve().parents[1] / "docs" / "decisions"
    table = collect(docs / "runs" / group)
    assert len(table) == runs and (table["status"] == "completed").all()
    assert set(table["lr_rule"]) == ({"search"} if group == "ladder_cpu" else {"search", "transfer"})
    assert table["family"].nunique() == 5 and table["param_budget"].nunique() == 4
    # the proxies the documented tables judge (a metric added to slm.metrics later would add rows of its own)
    decide_main([str(docs / "runs" / group), "--proxy", "val_nll,val_bpb,val_nll_last3,val_nll_50,val_nll_25", "--forecast",
                 "params=70e6", "-o", str(tmp_path / "decide.md")])
    capsys.readouterr()
    assert (tmp_path / "decide.md").read_text() == (docs / f"{group}.md").read_text()


def test_a_proxy_s_interval_does_not_depend_on_the_other_proxies_judged():
    """Each (proxy, rung) row redraws from its own generator: a proxy judged alone, or beside one more (a metric added
    to the registry), keeps the interval it has in the full table."""
    table = ladder(noise=0.05)
    table["val_nll_25"] = table["val_nll"] + 0.01
    alone = {(r.proxy, r.rung): (r.low, r.high) for r in decide(table, proxies=["val_nll"], draws=100, seed=3).rows}
    both = {(r.proxy, r.rung): (r.low, r.high)
            for r in decide(table, proxies=["val_nll_25", "val_nll"], draws=100, seed=3).rows}
    assert alone and all(both[k] == v for k, v in alone.items())


@pytest.mark.slow  # ~20 s idle (1,416 records): make test-slow runs it; make test stays under ~10 min on 2 cores
def test_the_close_call_records_give_the_documented_tables(tmp_path, capsys):
    """make decide-close's records in docs/decisions/runs/ (ladder_close and its 1-token copy, the probes, memorization
    alone, LFM2 vs Canon at five lengths) judged afresh give the pages docs/decisions.md quotes: decision accuracy per
    proxy, the interventions against their baselines, the axes; the memorization probe against ladder_cpu; the regimes."""
    from pathlib import Path

    from analysis import collect
    from analysis import regimes

    docs = Path(__file__).resolve().parents[1] / "docs" / "decisions"
    runs = docs / "runs"
    table = collect(runs / "ladder_close")
    assert len(table) == 672 and (table["status"] == "completed").all() and table["branch"].notna().sum() == 336
    decide_main([str(runs / "ladder_close"), str(runs / "ladder_close_t1"), "--probes", str(runs / "probes_close"),
                 "--probes", str(runs / "probes_close_memo"), "--proxy", "val_nll,val_bpb,val_nll_avg,val_nll_last3,"
                 "val_nll_50,val_nll_avg_50,val_nll_25,val_nll_avg_25", "-o", str(tmp_path / "close.md")])
    decide_main([str(runs / "ladder_cpu"), "--proxy", "val_nll", "--probes", str(runs / "probes_cpu_memo"), "-o",
                 str(tmp_path / "memorization.md")])
    capsys.readouterr()
    assert (tmp_path / "close.md").read_text() == (docs / "ladder_close.md").read_text()
    assert (tmp_path / "memorization.md").read_text() == (docs / "ladder_cpu_memorization.md").read_text()
    assert regimes.main([str(runs / "regimes_cpu"), "-o", str(tmp_path / "regimes.md")]) == 0
    assert (tmp_path / "regimes.md").read_text() == (docs / "regimes_cpu.md").read_text()
    page = (docs.parent / "decisions.md").read_text()  # the page quotes these figures
    for quoted in ("| `val_nll` | lowest rung | 1.51% | **0.857** | 0.714–0.905 | 4.33 |",
                   "| `probe_nll_memorization` | one probe, 200 steps | 0.495% | **0.952** | 0.857–1.000 | 1.38 |",
                   "**Noise ceiling 0.968:**"):
        assert quoted in page
    close = (docs / "ladder_close.md").read_text()
    assert "| val_nll | 50000 | 1.51% | 7 | 0.857 | 0.714-0.905 | 4.33 |" in close
    assert "| probe_nll_memorization | 50000 | 0.495% | 7 | 0.952 | 0.857-1.000 | 1.38 |" in close
    assert "noise ceiling 0.968" in close
