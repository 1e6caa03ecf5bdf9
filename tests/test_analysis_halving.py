"""analysis/halving.py: the agreement of two orders (against scipy's Kendall tau), halving's kept sets by hand, and
the comparison of a halving sweep with its full grid from record files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy.stats import kendalltau

from analysis.halving import agreement, judge, markdown, simulate


def test_agreement_is_one_plus_kendalls_tau_over_two_without_ties():
    a = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.5, "e": 0.5}
    b = {"a": 1.5, "b": 1.0, "c": 3.5, "d": 3.0, "e": 0.1}
    tau = kendalltau([a[k] for k in sorted(a)], [b[k] for k in sorted(a)]).statistic
    assert agreement(a, b) == pytest.approx((1 + tau) / 2)
    assert agreement(a, a) == 1.0 and agreement(a, {k: -v for k, v in a.items()}) == 0.0
    assert agreement({"a": 1.0, "b": 1.0}, {"a": 1.0, "b": 2.0}) == 0.5  # a tie counts one half
    assert agreement({"a": math.inf, "b": 1.0}, {"a": 3.0, "b": 2.0}) == 1.0  # a failed one ranks last


def test_simulate_keeps_the_best_ceil_n_over_eta_of_those_still_in():
    rung1 = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "e": 5.0}
    rung2 = {"a": 9.0, "b": 1.0, "c": 0.5, "d": 0.1, "e": 0.0}  # d, e were pruned at rung 1: their values do not count
    assert simulate([rung1, rung2], eta=2) == [["a", "b", "c", "d", "e"], ["a", "b", "c"], ["c", "b"]]


def _sweep(root: Path, name: str, jobs: dict[str, dict], halving: list | None = None) -> Path:
    """A sweep directory: sweep.json listing the jobs, a result.json per job (and its branches)."""
    sweep = root / name
    sweep.mkdir(parents=True)
    listing = {"jobs": {key: job["overrides"] for key, job in jobs.items()}}
    if halving is not None:
        listing["halving"] = {str(i): d for i, d in enumerate(halving)}
        (sweep / "multirun.yaml").write_text("hydra:\n  sweeper:\n    halving: {eta: 2, rungs: 2}\n")
    (sweep / "sweep.json").write_text(json.dumps(listing))
    for key, job in jobs.items():
        (sweep / key).mkdir()
        (sweep / key / "result.json").write_text(json.dumps({"schema_version": 1, **job["record"]}))
        for fraction, value in job.get("branches", {}).items():
            branch = sweep / f"{key},branch={fraction!r}"
            branch.mkdir()
            (branch / "result.json").write_text(json.dumps({
                "schema_version": 1, "status": "completed", "eval": {"val_nll": value},
                "branch": {"of": key, "fraction": fraction, "step": 4, "steps": 5}}))
    return sweep


def _record(final, curve, steps=10, status="completed"):
    return {"status": status, "eval": {"val_nll": final, "val_curve": curve},
            "training": {"max_steps": 10, "steps": steps, "tokens": steps * 100}, "model": {"flops_per_token": 6.0}}


def test_judge_compares_halving_with_the_grid_from_the_records(tmp_path):
    finals = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}
    at5 = {"a": 3.5, "b": 3.0, "c": 4.0, "d": 5.0}  # the stable phase at step 5 swaps a and b
    branch = {"a": 2.0, "b": 2.5, "c": 3.5, "d": 4.5}  # the decay branch orders them as the end does
    grid = {f"{c},train.seed={s}": {"overrides": [f"x={c}", f"train.seed={s}", "sweep=grid"],
                                    "record": _record(finals[c] + s / 100, [[5, at5[c] + s / 100], [10, finals[c]]]),
                                    "branches": {0.5: branch[c] + s / 100}} for c in finals for s in (0, 1)}
    kept = {"a", "b"}
    halved = {f"{c},train.seed={s}": {"overrides": [f"x={c}", f"train.seed={s}", "sweep=halving"],
                                      "record": _record(finals[c] + s / 100, [[5, at5[c]], [10, finals[c]]])
                                      if c in kept else _record(None, [[5, at5[c]]], steps=5, status="pruned")}
              for c in finals for s in (0, 1)}
    decision = {"rung": 0, "fraction": 0.5, "kept": ["x=b", "x=a"], "scores": {f"x={c}": at5[c] for c in finals}}
    result = judge(_sweep(tmp_path, "grid", grid), _sweep(tmp_path, "halving", halved, [decision]))
    assert result["steps"] == [5] and result["configurations"] == 4 and result["seeds"] == 2
    assert result["truth_top"] == ["x=a", "x=b", "x=c"] and result["halving_top"] == ["x=a", "x=b"]
    assert result["rungs"]["stable"][0]["agreement"] == pytest.approx(5 / 6)
    assert result["rungs"]["branch"][0]["agreement"] == 1.0
    assert result["keeps_best"] == {"stable": True, "branch": True}
    assert result["halving_best_rank_in_truth"] == 1 and result["pruned"] == {1: ["x=c", "x=d"]}
    assert result["flops"]["grid"] == 8 * 1000 * 6.0 and result["flops"]["halving"] == (4 * 1000 + 4 * 500) * 6.0
    text = markdown(result)
    assert "| stable | 0.833 | yes |" in text and "| halving | 3.6e+04 | 75.0% |" in text
