"""The report does not rank noise: a suite average's propagated standard error, error bars in
every score plot, multiple-choice scores against their chance level, no "best configuration" claimed within
noise, how far budget-solved runs landed from their budget, the CPU's cumulative peak memory left out of the
throughput plot (the HTML report's embedded figures: tests/test_analysis_report.py). Every input is built so the right answer is
known beforehand."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer

from analysis import collect
from analysis.records import average_stderr, chance_of
from analysis.plot_style import choose_score, near_chance
from analysis.plots import draw
from analysis.plots.heatmap import plot_heatmap
from analysis.plots.throughput import plot_throughput
from analysis.plots.tiers import plot_tiers
from analysis.report import budget_flags, sections
from analysis.thresholds import best_per_family
from tests.test_analysis_collect import make_record, write

MC = "acc_norm,none"


def scored_record(family, n_layers, scores, suite_tasks=("mc_a", "mc_b", "mc_c"), chance=None, **kw) -> dict:
    """A completed run whose lm-eval section holds `scores` {task: (value, stderr or None)}, with the
    multiple-choice tasks' chance levels `chance` {task: level} written by the evaluation, and an average
    over `suite_tasks` recorded with its members (eval.lm_eval.average_tasks)."""
    record = make_record(family=family, n_layers=n_layers, d_model=64 * n_layers, **kw)
    details = {}
    for task, (value, se) in scores.items():
        metric = "bits_per_byte,none" if task.endswith("ppl") else MC
        name = metric.split(",")[0]
        details[task] = {metric: value, f"{name}_stderr,none": "N/A" if se is None else se, "samples": 400}
        if chance and task in chance:
            details[task]["chance"] = chance[task]
    lm = {"scores": {t: v for t, (v, _) in scores.items()},
          "metrics": {t: ("bits_per_byte,none" if t.endswith("ppl") else MC) for t in scores},
          "details": details, "averages": {}, "average_tasks": {}}
    if suite_tasks:
        lm["averages"]["suite"] = float(np.mean([scores[t][0] for t in suite_tasks]))
        lm["average_tasks"]["suite"] = list(suite_tasks)
    record["eval"]["lm_eval"] = lm
    return record


# ---------------------------------------------------------------------------------------------- stderr


def test_average_carries_the_propagated_stderr(tmp_path):
    # by hand: se = sqrt(0.02^2 + 0.01^2 + 0.02^2) / 3 = sqrt(0.0009) / 3 = 0.03 / 3 = 0.01
    scores = {"mc_a": (0.5, 0.02), "mc_b": (0.4, 0.01), "mc_c": (0.3, 0.02), "text_ppl": (3.0, None)}
    write(tmp_path / "a", scored_record("gpt2", 2, scores, chance={"mc_a": 0.25, "mc_b": 0.5, "mc_c": 0.2}))
    # an average over a task with no stderr has none; an average of one task is flagged as such
    write(tmp_path / "b", scored_record("gpt2", 4, scores, suite_tasks=("mc_a", "text_ppl")))
    write(tmp_path / "c", scored_record("gpt2", 8, scores, suite_tasks=("mc_b",)))
    table = collect(tmp_path).set_index("n_layers")
    assert table.at[2, "stderr_avg_suite"] == pytest.approx(0.01, abs=1e-12)
    assert table.at[2, "tasks_avg_suite"] == "mc_a,mc_b,mc_c"
    assert table.at[2, "chance_avg_suite"] == pytest.approx((0.25 + 0.5 + 0.2) / 3)
    assert math.isnan(table.at[4, "stderr_avg_suite"])  # text_ppl has no stderr: nothing to propagate
    assert table.at[8, "stderr_avg_suite"] == pytest.approx(0.01)  # one task: its own stderr
    assert average_stderr([0.03, 0.04]) == pytest.approx(0.025) and average_stderr([0.1, None]) is None


def test_members_from_the_runs_eval_config_and_one_task_averages_are_not_the_score(tmp_path):
    """Records from before average_tasks: the suite's members come from the run's eval config. The offline
    suite averages one task, so the default score is that task (with its stderr), not a copy of it."""
    record = scored_record("gpt2", 2, {"slm_shakespeare_mc": (0.3, 0.02), "slm_shakespeare_ppl": (3.4, None)},
                           suite_tasks=None)
    record["eval"]["lm_eval"].pop("average_tasks")
    record["eval"]["lm_eval"]["averages"] = {"offline": 0.3}
    record["config"]["eval"] = {"name": "offline", "average": ["slm_shakespeare_mc"]}
    write(tmp_path / "a", record)
    table = collect(tmp_path)
    assert table.at[0, "tasks_avg_offline"] == "slm_shakespeare_mc"
    assert table.at[0, "chance_slm_shakespeare_mc"] == 0.25  # known table: 1 answer + 3 distractors
    assert choose_score(table) == ("score_slm_shakespeare_mc", "")
    fig = plot_heatmap(table)
    titles = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert len(titles) == 2 and not any("offline" in t for t in titles)
    assert "bits per byte" in " ".join(titles)  # labelled by what it is, not as a perplexity


def test_chance_of_needs_an_argmax_accuracy():
    assert chance_of("hellaswag", {}, "acc_norm,none") == 0.25
    assert chance_of("mystery_mc", {"chance": 0.2}, "acc,none") == 0.2
    assert chance_of("mystery_mc", {}, "acc,none") is None  # unknown task: no line rather than a guess
    assert chance_of("hellaswag", {"chance": 0.25}, "brier_score,none") is None
    assert chance_of("gsm8k", {}, "exact_match,strict-match") is None


# ---------------------------------------------------------------------------------------------- plots


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
    """Two families x three depths. Task mc_a: llama3 far above chance (0.6 +- 0.01), gpt2 at 0.26 +- 0.02,
    within noise of chance 0.25 (0.01 <= 1.96 x 0.02). Throughput measured on a CPU (process RSS)."""
    root = tmp_path_factory.mktemp("noisy")
    chance = {"mc_a": 0.25, "mc_b": 0.25, "mc_c": 0.5}
    for i, n_layers in enumerate((2, 4, 8)):
        for family, a in (("gpt2", 0.26), ("llama3", 0.6)):
            scores = {"mc_a": (a + 0.001 * i, 0.02 if family == "gpt2" else 0.01), "mc_b": (0.4 + 0.01 * i, 0.02),
                      "mc_c": (0.7, 0.015), "text_ppl": (3.0 - 0.1 * i, None)}
            write(root / f"{family}_L{n_layers}", scored_record(family, n_layers, scores, chance=chance,
                                                               throughput=1000.0 / n_layers))
    return collect(root)


def errorbars(fig):
    return [c for ax in fig.axes for c in ax.containers if isinstance(c, ErrorbarContainer)]


@pytest.mark.parametrize("kind", ["tiers", "threshold", "depth", "throughput"])
def test_every_score_plot_draws_error_bars(noisy, kind):
    fig, _ = draw(kind, noisy, score="avg_suite") if kind != "depth" else draw(kind, noisy)
    assert not hasattr(fig, "slm_placeholder")
    bars = errorbars(fig)
    assert bars, f"{kind}: no error bars"
    text = fig._suptitle.get_text()
    assert "95%" in text and "no per-run uncertainty" not in text


def test_error_bar_half_width_is_the_propagated_95_interval(noisy):
    fig = plot_tiers(noisy, "avg_suite")
    (bar,) = errorbars(fig)
    segments = bar.lines[2][0].get_segments()
    widths = sorted({round((s[1][0] - s[0][0]) / 2, 9) for s in segments})
    # gpt2: sqrt(0.02^2 + 0.02^2 + 0.015^2) / 3; llama3: sqrt(0.01^2 + 0.02^2 + 0.015^2) / 3
    expected = sorted(round(1.96 * math.sqrt(a ** 2 + 0.02 ** 2 + 0.015 ** 2) / 3, 9) for a in (0.01, 0.02))
    assert widths == pytest.approx(expected)


def test_heatmap_cells_carry_the_interval(noisy):
    fig = plot_heatmap(noisy)
    cells = [t.get_text() for t in fig.axes[0].texts]
    assert any(t.startswith("0.260\n±0.039") for t in cells)  # 1.96 x 0.02 on mc_a, gpt2 L2
    assert not any("±" in t for t in cells if t.startswith(("3.000", "2.900", "2.800")))  # text_ppl: no stderr


def title(fig) -> str:
    from analysis.plot_style import figure_text

    return figure_text(fig)  # title and caption, unwrapped (statistics are in the caption)


def chance_lines(ax):
    return [line for line in ax.get_lines() if line.get_linestyle() == ":"]


def test_multiple_choice_scores_are_drawn_against_chance(noisy):
    fig, _ = draw("threshold", noisy, score="score_mc_a")
    (line,) = chance_lines(fig.axes[0])
    assert list(line.get_ydata()) == [0.25, 0.25]
    assert "3 of 6 runs within noise of chance" in title(fig)

    fig = plot_tiers(noisy, "score_mc_a")
    (line,) = chance_lines(fig.axes[0])
    assert list(line.get_xdata()) == [0.25, 0.25]  # the score is on x there
    assert "3 of 6 configurations within noise of chance" in title(fig)

    fig, _ = draw("depth", noisy)
    panels = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    assert [list(ln.get_ydata()) for ln in chance_lines(panels["mc_a"])] == [[0.25, 0.25]]
    assert [list(ln.get_ydata()) for ln in chance_lines(panels["mc_c"])] == [[0.5, 0.5]]
    assert chance_lines(panels["text_ppl"]) == []  # bits per byte has no chance level
    assert "mc_a: 3 run(s) within noise of chance" in title(fig)

    fig = plot_throughput(noisy, "score_text_ppl")
    assert chance_lines(fig.axes[0]) == [] and "chance" not in title(fig)


def test_within_noise_of_chance_is_score_minus_chance_against_196_stderr():
    """One rule for slm-eval's score lines (a number at a time) and the analysis (a table's rows at once)."""
    from slm.eval.score_lines import near_chance as rule

    table = pd.DataFrame({"score_t": [0.289, 0.29, 0.30, 0.24, 0.5], "stderr_t": [0.02, 0.02, 0.02, np.nan, np.nan],
                          "chance_t": 0.25, "metric_t": MC})
    # 0.039 <= 0.0392 near; 0.04 > 0.0392 not; 0.24 below chance with no stderr: near; 0.5: not
    expected = [True, False, False, True, False]
    assert near_chance(table, "score_t").tolist() == expected
    assert [rule(s, 0.25, None if np.isnan(e) else e) for s, e in zip(table["score_t"], table["stderr_t"])] == expected
    assert rule(table["score_t"], table["chance_t"], table["stderr_t"].fillna(0.0)).tolist() == expected


def test_report_says_which_runs_are_within_noise_of_chance(noisy):
    text = _text(sections(noisy, "r.parquet", "score_mc_a"))
    assert "**score_mc_a** (mc_a): chance 0.25; 3 of 6 runs within noise of chance" in text
    assert "**score_mc_c** (mc_c): chance 0.5; all 6 runs are above chance beyond noise" in text
    assert "assumes the tasks' errors are independent" in _text(sections(noisy, "r.parquet", "avg_suite"))


def _text(parts) -> str:
    return "\n".join(b for _, blocks in parts for b in blocks if isinstance(b, str))


# ---------------------------------------------------------------------------------------------- best per family


def family_table(se_a: float | None, se_b: float | None) -> pd.DataFrame:
    """Family a: 0.60 against 0.50; family b: 0.52 against 0.51 (one seed each, stderr se_a / se_b)."""
    rows = []
    for family, values, se in (("a", (0.60, 0.50), se_a), ("b", (0.52, 0.51), se_b)):
        for n_layers, value in zip((2, 4), values):
            rows.append({"run": f"{family}{n_layers}", "status": "completed", "family": family, "n_layers": n_layers,
                         "d_model": 64, "seed": 0, "score_t": value, "stderr_t": se, "metric_t": MC})
    return pd.DataFrame(rows)


def test_best_configuration_is_claimed_only_beyond_noise():
    best = best_per_family(family_table(0.01, 0.02), "score_t").set_index("family")
    # a: z = 0.10 / sqrt(2 x 0.01^2) = 7.07 -> claimed; b: z = 0.01 / sqrt(2 x 0.02^2) = 0.354 -> withheld
    assert best.at["a", "clear"] == True and best.at["a", "z"] == pytest.approx(0.1 / math.sqrt(2e-4))
    assert best.at["b", "clear"] == False and best.at["b", "z"] == pytest.approx(0.01 / math.sqrt(8e-4))
    assert best.at["b", "within_noise"] == best.at["b", "runner_up"]
    text = _text(sections(family_table(0.01, 0.02), "r", "score_t"))
    assert "no best configuration is claimed" not in text
    frame = next(b for h, blocks in sections(family_table(0.01, 0.02), "r", "score_t") for b in blocks
                 if h == "Best configuration per family" and isinstance(b, pd.DataFrame)).set_index("family")
    assert not frame.at["a", "best configuration"].startswith("no clear best")
    assert frame.at["b", "best configuration"].startswith("no clear best")

    within = _text(sections(family_table(0.2, 0.2), "r", "score_t"))  # every difference within noise
    assert "No family has a configuration that beats its others beyond noise: no best configuration is claimed" \
        in within
    unknown = best_per_family(family_table(None, None), "score_t")
    assert unknown["clear"].isna().all() and unknown["verdict"].str.contains("not tested").all()
    assert "not tested against noise" in _text(sections(family_table(None, None), "r", "score_t"))


# ---------------------------------------------------------------------------------------------- budget


def test_budget_error_column_and_flag(tmp_path):
    def budget_run(name, budget, count="total", tolerance=...):
        record = make_record(n_layers=4, d_model=128)  # params_total = 1000 x 4 x 128 = 512,000
        record["model"]["param_budget"] = budget
        record["model"]["params_active"] = 256_000
        record["config"]["model"].update(param_budget=budget, budget_count=count)
        if tolerance is not ...:
            record["config"]["model"]["budget_tolerance"] = tolerance
        write(tmp_path / name, record)

    budget_run("near", 500_000, tolerance=0.25)           # +2.4%
    budget_run("far", 400_000)                            # +28%: outside the default 0.25
    budget_run("active", 250_000, count="active")         # active 256,000: +2.4%
    budget_run("loose", 400_000, tolerance=None)          # any distance allowed: not flagged
    write(tmp_path / "none", make_record(n_layers=4, d_model=128))  # no budget
    table = collect(tmp_path).set_index("run")
    assert table.at["near", "budget_error"] == pytest.approx(512_000 / 500_000 - 1)
    assert table.at["far", "budget_error"] == pytest.approx(0.28) and table.at["far", "budget_tolerance"] == 0.25
    assert table.at["active", "budget_error"] == pytest.approx(256_000 / 250_000 - 1)
    assert pd.isna(table.at["none", "budget_error"])
    flags = budget_flags(table)
    assert flags[flags].index.tolist() == ["far"]
    parts = dict(sections(table.reset_index(), "r"))
    text = "\n".join(b for b in parts["Parameter budget"] if isinstance(b, str))
    assert "1 of 4 runs landed outside their budget tolerance" in text
    frame = next(b for b in parts["Parameter budget"] if isinstance(b, pd.DataFrame))
    assert frame["outside"].tolist().count("yes") == 1 and "+28.0%" in frame["budget error"].tolist()
    runs = next(b for b in parts["All runs"] if isinstance(b, pd.DataFrame))
    assert "+28.0% (outside ±25%)" in runs["budget error"].tolist()


def test_dry_run_lists_how_far_each_job_landed_from_its_budget(tmp_path, capsys):
    from slm.sweeps.jobs import Job
    from slm.sweeps.plan import plan_row, print_plan
    from slm.cli.config import compose_config

    cfg = compose_config(["model=gpt2", "model.n_layers=2", "model.param_budget=5e5", "train.length.tokens=1e5"])
    row = plan_row(Job([], tmp_path / "job", cfg), {"mfu": 0.4, "peak_flops": 1e15})
    assert row["budget_error"] == pytest.approx(row["params"] / 5e5 - 1) and not row["budget_outside"]
    print_plan("t", tmp_path, [Job([], tmp_path / "job", cfg)], {"mfu": 0.4, "peak_flops": 1e15})
    out = capsys.readouterr().out
    assert re.search(r"\sbudget\s", out.splitlines()[1])
    assert f"{row['budget_error']:+.1%}" in out.splitlines()[2]


# ---------------------------------------------------------------------------------------------- peak memory


def test_cpu_peak_memory_is_left_out_of_the_throughput_plot(noisy):
    fig = plot_throughput(noisy, "score_mc_a")
    assert fig.slm_memory_left_out == 6
    sizes = {float(s) for coll in fig.axes[0].collections for s in getattr(coll, "get_sizes", list)()}
    assert len(sizes) == 1  # every marker the same size: memory not encoded
    assert "left out" in title(fig) and "peak RSS" in title(fig)
    assert not any("peak memory" in (lg.get_title().get_text()) for lg in fig.axes[0].findobj(
        lambda a: a.__class__.__name__ == "Legend"))

    gpu = noisy.copy()
    gpu["peak_memory_measure"] = "cuda_max_memory_allocated"
    gpu["peak_memory_bytes"] = np.linspace(100, 600, len(gpu)) * 2 ** 20
    fig = plot_throughput(gpu, "score_mc_a")
    assert fig.slm_memory_left_out == 0 and "left out" not in title(fig)
    sizes = {float(s) for coll in fig.axes[0].collections for s in getattr(coll, "get_sizes", list)()}
    assert len(sizes) > 2
