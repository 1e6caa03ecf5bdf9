"""Training health (slm.runs.health): the spike and validation-rise rules on made-up logs; a tiny run with one batch
of random tokens injected, flagged in its record, slm-status, the sweep's summary and the report; and the report's
line on runs too short to rank (analysis.too_short)."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from slm.runs.health import OK, SPIKE, VAL_RISE, assess, describe, spikes, val_rises


def _log(values) -> list[tuple[int, float]]:
    return list(enumerate(values, 1))


def _falling(n: int = 200, noise: float = 0.03, seed: int = 0) -> list[float]:
    """A training loss falling from 4.2 to about 2 with per-step noise, like the default study's."""
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1)
    return list(2.0 + 2.2 * np.exp(-steps / 30) + noise * rng.standard_normal(n))


def test_a_healthy_falling_loss_and_a_noisy_objective_are_not_flagged():
    assert spikes(_log(_falling())) == []
    noisy = _falling(noise=0.3, seed=1)  # masked diffusion's per-step scatter: judged against its own noise
    assert spikes(_log(noisy)) == []
    assert assess(_log(_falling()), warmup=10, curve=[[100, 2.5], [200, 2.3]])["flag"] == OK


def test_the_default_studys_spike_is_found_with_its_step_loss_and_median():
    values = _falling()
    values[12] = 5.17  # step 13, as the default study's llama3 run at depth 2
    (found,) = spikes(_log(values))
    assert found["step"] == 13 and found["loss"] == 5.17 and found["steps"] == 1
    assert found["median"] == pytest.approx(np.median(values[2:12]))
    values[13] = 5.0  # two steps in a row: one spike, its highest loss
    (found,) = spikes(_log(values))
    assert (found["step"], found["loss"], found["steps"]) == (13, 5.17, 2)
    health = assess(_log(values), warmup=12)
    assert health["flag"] == SPIKE and health["warmup"] == 12 and health["steps_judged"] == 190
    assert describe(health).startswith("loss spike at step 13: 5.17 against a median of ")


def test_a_sampled_objectives_heavy_tail_is_not_a_spike_but_a_larger_jump_is():
    """Masked diffusion's per-step loss (nll_kind nelbo) reaches 1.28x its median at fixed weights: its rule is 30%."""
    values = _falling(noise=0.03)
    values[150] = 1.2 * float(np.median(values[140:150]))
    assert [s["step"] for s in assess(_log(values), warmup=10)["spikes"]] == [151]
    assert assess(_log(values), warmup=10, kind="nelbo")["flag"] == OK
    values[150] = 1.5 * float(np.median(values[140:150]))
    health = assess(_log(values), warmup=10, kind="nelbo")
    assert health["flag"] == SPIKE and health["rel"] == 0.3


def test_a_validation_rise_beyond_one_percent_is_flagged_and_a_smaller_one_is_not():
    curve = [[50, 3.0], [100, 2.6], [150, 2.61], [200, 2.7]]  # +0.4%: noise; +3.4%: a rise
    assert val_rises(curve) == [{"step": 200, "val_nll": 2.7, "previous_step": 150, "previous": 2.61}]
    health = assess(_log(_falling()), warmup=10, curve=curve)
    assert health["flag"] == VAL_RISE
    assert describe(health) == "validation rose 1 time (step 150 2.610 -> step 200 2.700)"
    assert describe({"flag": OK}) is None and describe(None) is None


TINY = ["model=debug", "eval=none", "train.length.steps=40", "train.validation.interval=0",
        "train.validation.batches=1", "train.logging.print_interval=0", "train.logging.progress_bar=false"]
SPIKED = 25  # the step whose batch is replaced by uniformly random tokens


@pytest.fixture(scope="module")
def spiked_run(tmp_path_factory):
    """A tiny run (40 steps) whose batch of step 25 is uniformly random tokens: its loss jumps far above the ~3.3
    nats of the steps before."""
    from slm.cli.config import compose_config
    from slm.data.mix import TrainSampler
    from slm.runs.job import train_run

    root = tmp_path_factory.mktemp("health")
    real = TrainSampler.rows

    def rows(self, index, lo, hi):
        out = real(self, index, lo, hi)
        if index == SPIKED - 1:
            out = np.random.default_rng(0).integers(0, 65, size=out.shape).astype(out.dtype)
        return out

    mp = pytest.MonkeyPatch()
    mp.setenv("SLM_CACHE", str(root / "cache"))
    mp.setattr(TrainSampler, "rows", rows)
    try:
        cfg = OmegaConf.to_container(compose_config(TINY), resolve=True)
        with contextlib.redirect_stdout(io.StringIO()):
            train_run(cfg, root / "runs" / "spiky" / "job")
    finally:
        mp.undo()
    return root / "runs" / "spiky"


def test_an_injected_spike_is_in_the_record_status_summary_and_report(spiked_run, tmp_path):
    from analysis import collect
    from analysis.report import run_table, sections
    from slm.cli.status import report as status_report
    from slm.runs.record import load_record
    from slm.sweeps.status import summary_lines

    record = load_record(spiked_run / "job")
    health = record["health"]
    assert record["status"] == "completed" and health["flag"] == SPIKE
    assert [s["step"] for s in health["spikes"]] == [SPIKED] and health["spikes"][0]["loss"] > 4.0
    line = describe(health)
    assert line.startswith(f"loss spike at step {SPIKED}: ")
    assert f"health: {line}" in [l.strip() for l in status_report(spiked_run)]
    assert f"  health    job: {line}" in summary_lines("spiky", spiked_run, [("job", "completed", None)])
    table = collect(spiked_run)
    assert table.at[0, "health"] == SPIKE and table.at[0, "health_note"] == line
    assert run_table(table, "val_nll")["health"].tolist() == [SPIKE]
    parts = dict(sections(table, "results.parquet"))
    (text,) = parts["Training health"]
    assert text.startswith("1 of 1 runs judged had a loss spike or a validation rise") and line in text


def test_a_healthy_table_has_no_health_section_or_column(default_table):
    from analysis.report import run_table, sections

    table = default_table.assign(health=OK)
    assert "Training health" not in dict(sections(table, "results.parquet"))
    assert "health" not in run_table(table, "val_nll")


# ------------------------------------------------------------------ W7: too short to rank


@pytest.fixture(scope="module")
def default_table(tmp_path_factory):
    from analysis import collect
    from tests.test_analysis_verdict import default_study

    return collect(default_study(tmp_path_factory.mktemp("cpu_default") / "runs"))


def _verdict(table: pd.DataFrame) -> list:
    from analysis.report import sections

    return dict(sections(table, "results.parquet"))["Verdict"]


def test_a_report_on_runs_of_normal_length_has_no_warning(default_table):
    from analysis.too_short import warning

    assert (default_table["tokens"] >= default_table["params_total"]).all()  # 1.0e6 tokens, <= 0.77M parameters
    assert warning(default_table) is None
    assert not any("too short" in str(b).lower() for b in _verdict(default_table))


def test_a_report_on_runs_too_short_to_rank_says_so_first(default_table):
    """The README's 20-step first look: 0.16 tokens per parameter."""
    short = default_table.copy()
    short["tokens"] = 0.16 * short["params_total"]
    first = _verdict(short)[0]
    assert first.startswith("**Too short to rank anything**: all 12 completed runs are too short (0.16 tokens per "
                            "parameter)")
    assert "fewer than 1 token per parameter" in first
    # some runs only, and the warmup rule: steps < 2 x warmup
    mixed = default_table.copy()
    mixed["warmup_steps"] = 12.0
    mixed.loc[mixed.index[:3], "steps"] = 20
    first = _verdict(mixed)[0]
    assert first.startswith("**3 of 12 completed runs are too short to rank** (3 ended within 2x their warmup)")
    # a range of tokens per parameter is said once, as a range (it listed each value: "0.16 ...; 0.17 ...")
    spread = default_table.assign(tokens=default_table["params_total"].to_numpy() * ([0.16, 0.17] * 6))
    first = _verdict(spread)[0]
    assert "are too short (0.16 to 0.17 tokens per parameter)" in first and first.count("tokens per parameter") == 1


def test_slm_report_prints_the_warning_too(default_table, tmp_path, capsys):
    from analysis import save_results
    from analysis.cli import report_main

    short = default_table.assign(tokens=0.16 * default_table["params_total"])
    report_main([str(save_results(short, tmp_path / "results.parquet")), "-o", str(tmp_path / "report")])
    assert "slm-report: warning: Too short to rank anything: all 12 completed runs" in capsys.readouterr().out


def test_a_post_training_stage_is_not_too_short_for_its_few_tokens(default_table):
    """An SFT or DPO stage starts from trained weights: its own 0.16 tokens per parameter rank it no less."""
    from analysis.too_short import warning

    stages = default_table.copy()
    stages["tokens"] = 0.16 * stages["params_total"]
    stages["objective"] = "preference"
    assert warning(stages) is None
    stages.loc[stages.index[:2], "objective"] = "causal_lm"  # a pretraining run still is
    assert warning(stages).startswith("**2 of 12 completed runs are too short to rank**")
