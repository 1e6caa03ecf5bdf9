"""slm-decide's answer in words (analysis/decide_words.py) and its bad input: one line, exit 2, nothing written."""

import numpy as np
import pandas as pd
import pytest

from analysis.cli import claims_main, decide_main
from analysis.decide import DecideError, decide
from analysis.decide_words import MAX_REACH, MIN_CEILING, MIN_RUNGS, MIN_SEEDS, answer
from tests.test_analysis_decide import RUNGS, ladder


def small(noise: float = 0.03, seed: int = 0, seeds: int = 2, rungs=(1e5, 2e5, 4e5)) -> pd.DataFrame:
    """Two families, `seeds` seeds, three rungs: llama3 a little ahead at every rung."""
    rng = np.random.default_rng(seed)
    rows = [{"family": family, "param_budget": b, "seed": s, "status": "completed", "params_total": b,
             "val_nll": 3.0 - 0.3 * r - 0.05 * f + noise * rng.standard_normal(), "train_flops": 120 * b * b}
            for r, b in enumerate(rungs) for f, family in enumerate(["gpt2", "llama3"]) for s in range(seeds)]
    return pd.DataFrame(rows)


def _run(tmp_path, capsys, table, *args) -> tuple[str, str]:
    path = tmp_path / "results.parquet"
    table.to_parquet(path)
    decide_main([str(path), *args])
    captured = capsys.readouterr()
    return captured.out, captured.err


def _fails(capsys, main, args) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(args)
    captured = capsys.readouterr()
    assert exit_.value.code == 2 and captured.err.count("\n") == 1 and captured.out == ""
    return captured.err


def test_the_shipped_ladder_opens_with_the_decision_in_words(capsys):
    from pathlib import Path

    runs = Path(__file__).resolve().parents[1] / "docs" / "decisions" / "runs" / "ladder_cpu"
    decide_main([str(runs), "--draws", "200", "--forecast", "params=70e6"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("The decision: llama3_canon is best at the target param_budget = 220000 on val_nll "
                               "(1.601; lfm2 next at 1.65, ahead in 3 of 3 seeds)")
    assert lines[1].startswith("- Decided at 0.8 by val_nll_50 at param_budget = 50000 (2.92% of the target's "
                               "compute)")
    assert lines[1].endswith("It puts lfm2 first, not llama3_canon.")  # the 0.9 rung gets the winner wrong
    assert lines[2] == ("- llama3_canon is first on val_nll_50 from param_budget = 80000 (6.9% of the target's "
                        "compute) up.")
    assert lines[3].startswith("- Trust: noise ceiling 1.000")
    assert lines[4].startswith("- Cannot decide at params = 7e+07 from this ladder: the target is about 60,000x the "
                               "top rung's compute, past the ladder's own span of 17x")
    assert "llama3_canon first (P(best) " in lines[4]
    assert min(i for i, line in enumerate(lines) if line.startswith("Decision accuracy")) > 4  # the tables after


def test_two_families_two_seeds_three_rungs_warn_and_cannot_decide_the_forecast(tmp_path, capsys):
    out, _ = _run(tmp_path, capsys, small(), "--draws", "200", "--forecast", "params=70e6")
    head = out.split("\nDecision accuracy:")[0]
    assert f"- warning: 2 seeds per configuration at the target, fewer than {MIN_SEEDS}" in head
    assert "- Cannot decide at params = 7e+07 from this ladder" in head
    # P(best) is said with what it means, after the warnings; the forecast's table explains it where it prints it
    assert head.index("warning: 2 seeds") < head.index("P(best)")
    assert "P(best): the share of the draws in which the configuration is lowest" in out


def test_thin_evidence_says_cannot_decide_or_warns_one_line_each():
    # the target's seeds disagree on the only pair: noise ceiling 0
    table = small(noise=0.0)
    table.loc[(table["param_budget"] == 4e5) & (table["family"] == "gpt2") & (table["seed"] == 1), "val_nll"] = 1.0
    result = decide(table, proxies=["val_nll"], draws=100)
    assert result.ceiling == 0 <= MIN_CEILING
    text = answer(result)
    assert text.startswith("Cannot decide which is best at the target param_budget = 400000 on val_nll: the target's "
                           "own seeds order the configurations no better than chance (noise ceiling 0.000")
    assert "The decision:" not in text and "Decided at" not in text  # no rung can predict an order that is noise
    # every interval 0-1: each seed orders the pair alike (ceiling 1), but a seed moves both far more than they differ
    noisy = small(noise=0.0)
    noisy["val_nll"] += noisy["seed"]
    result = decide(noisy, proxies=["val_nll"], draws=200)
    assert result.ceiling == 1 and all((r.low, r.high) == (0, 1) for r in result.rows)
    assert "- Cannot decide from the lower rungs: every 95% interval spans 0-1" in answer(result)
    # one seed, two rungs
    text = answer(decide(small(seeds=1, rungs=(1e5, 2e5)), proxies=["val_nll"], draws=100))
    assert "- warning: one seed per configuration at the target: no interval and no noise ceiling" in text
    assert f"- warning: 2 rungs, fewer than {MIN_RUNGS}: no held-out check" in text
    # a ceiling below the level
    table = ladder(noise=0.0)
    top = table["param_budget"] == RUNGS[-1]
    table.loc[top & (table["family"] == "moe") & (table["seed"] == 0), "val_nll"] -= 0.15  # moe passes canon once
    result = decide(table, proxies=["val_nll"], draws=50)
    assert 0.5 < result.ceiling < 0.95
    text = answer(result, level=0.95)
    assert f"- warning: the noise ceiling {result.ceiling:.3f} is below --level 0.95" in text
    assert "- warning: --draws 50, fewer than 100" in text


def test_a_forecast_within_the_ladders_reach_is_given_with_p_best(tmp_path, capsys):
    out, _ = _run(tmp_path, capsys, small(seeds=3), "--draws", "100", "--forecast", "flops=1e13")
    head = out.split("\nDecision accuracy:")[0]
    assert "- Forecast at flops = 1e+13: llama3 lowest" in head and "Cannot decide at" not in head
    assert MAX_REACH == 1.0  # 1e13 is 6.5x the top rung's 1.9e12, within the ladder's 16x
    assert "P(best) 1.000, the share of the seed redraws in which it is lowest): that is the stability" in head
    out, _ = _run(tmp_path, capsys, small(seeds=3), "--draws", "0", "--forecast", "flops=1e13")
    assert "without redraws (--draws 0) nothing says how stable that order is" in out and "P(best):" not in out


def test_output_paths_are_checked_before_the_work(tmp_path, capsys):
    path = tmp_path / "results.parquet"
    ladder(noise=0.01).to_parquet(path)
    folder = tmp_path / "folder"
    folder.mkdir()
    err = _fails(capsys, decide_main, [str(path), "-o", str(folder)])
    assert f"slm-decide: error: -o {folder}: is a directory" in err and list(folder.iterdir()) == []
    err = _fails(capsys, claims_main, [str(path), "-o", str(folder)])
    assert f"slm-claims: error: -o {folder}: is a directory" in err
    taken = tmp_path / "figure.png"
    taken.write_text("mine")
    err = _fails(capsys, decide_main, [str(path), "--plot", str(taken)])
    assert f"--plot {taken}: exists and is not a directory" in err and taken.read_text() == "mine"
    err = _fails(capsys, decide_main, [str(path), "-o", str(taken / "decide.md")])
    assert f"-o {taken / 'decide.md'}: {taken} is a file, not a directory" in err


def test_a_small_draws_with_a_plot_does_not_crash_and_names_an_interval_that_leaves_out_its_point(tmp_path, capsys):
    table = ladder(noise=0.1)
    result = decide(table, proxies=["val_nll"], draws=4)
    outside = [r for r in result.rows if not r.low <= r.accuracy <= r.high]
    assert outside  # percentiles of 4 redraws: 0.80-0.89 around a point of 0.90
    out, _ = _run(tmp_path, capsys, table, "--draws", "4", "--plot", str(tmp_path / "fig"))
    assert (tmp_path / "fig" / "decision_accuracy.png").stat().st_size > 0
    assert "the 95% interval 0.800-0.892 excludes the accuracy 0.900 of all the seeds" in out
    assert "- warning: --draws 4, fewer than 100" in out


def test_a_truth_without_values_is_refused_naming_truth(tmp_path, capsys):
    table = ladder(noise=0.01)
    table["val_bpb"] = table["val_nll"] / np.log(2)
    table["val_nll"] = np.nan
    with pytest.raises(DecideError, match="name the metric with --truth, e.g. --truth val_bpb"):
        decide(table, proxies=["val_bpb"])
    path = tmp_path / "results.parquet"
    table.to_parquet(path)
    err = _fails(capsys, decide_main, [str(path), "--proxy", "val_bpb"])
    assert "val_nll (the default --truth" in err
    err = _fails(capsys, decide_main, [str(path), "--truth", "val_nll", "--proxy", "val_bpb"])
    assert "--truth val_nll: no run has a value in that column" in err
    err = _fails(capsys, decide_main, [str(path), "--truth", "nll"])
    assert "--truth nll: the results have no column 'nll'" in err


def test_the_accuracy_plot_says_an_identical_proxy_and_a_ceiling_of_zero():
    from analysis.decide_plots import accuracy_plot

    table = small(noise=0.0)
    table.loc[(table["param_budget"] == 4e5) & (table["family"] == "gpt2") & (table["seed"] == 1), "val_nll"] = 1.0
    table["val_bpb"] = table["val_nll"] / np.log(2)
    ax = accuracy_plot(decide(table, proxies=["val_nll", "val_bpb"], draws=20), 0.8).axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "val_bpb (the same points as val_nll: the lines coincide)" in labels
    assert any(label.startswith("noise ceiling 0 ") and "not drawn" in label for label in labels)
    assert not any(line.get_linestyle() == ":" and len(line.get_ydata()) for line in ax.get_lines())  # not on the axis


def test_slm_decide_shows_progress_once_the_redraws_take_a_while():
    import io

    from analysis.cli import _Progress

    clock = iter([0.0, 0.0, 5.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0, 21.0])
    stream = io.StringIO()
    report = _Progress("slm-decide", stream=stream, label="decision accuracy:", unit="seed redraws", after=10.0)
    report.clock = lambda: next(clock)
    report.started = 0.0
    for done in range(0, 11):
        report(done, 10)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "slm-decide: decision accuracy: 3 of 10 seed redraws (30%), 11s, about 26s left"
    assert lines[-1] == "slm-decide: decision accuracy: 10 of 10 seed redraws (100%), 18s" and len(lines) == 8
    quiet = _Progress("slm-decide", stream=io.StringIO(), after=10.0)
    for done in range(0, 11):
        quiet(done, 10)
    assert quiet.stream.getvalue() == ""  # a short analysis prints nothing


def test_help_states_the_minimums(capsys):
    with pytest.raises(SystemExit):
        decide_main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"noise ceiling is at most {MIN_CEILING:g}" in text and f"fewer than {MIN_SEEDS} seeds" in text
    assert f"fewer than {MIN_RUNGS} rungs" in text and f"more than {MAX_REACH:g}x the ladder's span" in text
