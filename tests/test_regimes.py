"""analysis.regimes on records written in the test: each regime takes each configuration at its own best lr, the
leader and its seeds, and the answer names where the leader changes."""

from __future__ import annotations

import json

import pytest

from analysis import regimes as R


def _record(directory, status, nll, tokens, params, seed, lr, branch=None):
    directory.mkdir(parents=True)
    record = {"status": status, "eval": {"val_nll": nll}, "training": {"tokens": tokens},
              "model": {"params_total": params}, "config": {"train": {"seed": seed, "lr": lr}}}
    if branch:
        record["branch"] = branch
    (directory / "result.json").write_text(json.dumps(record))


def _sweep(tmp_path, losses):
    """losses: {(config, lr, seed): (full run nll, branch nll)}; 1000 params, 10000 tokens, a branch at 0.1."""
    jobs = {}
    for (config, lr, seed), (full, short) in losses.items():
        key = f"{config},train.lr={lr},train.seed={seed}"
        jobs[key] = [config, f"train.lr={lr}", f"train.seed={seed}"]
        _record(tmp_path / key, "completed" if full is not None else "failed", full, 10000, 1000, seed, lr)
        _record(tmp_path / f"{key},branch=0.1", "completed", short, 1000, 1000, seed, lr,
                branch={"of": key, "fraction": 0.1, "step": 1, "steps": 2})
    (tmp_path / "sweep.json").write_text(json.dumps({"jobs": jobs}))
    return tmp_path


def test_each_regime_takes_the_best_lr_and_the_leader_flips(tmp_path):
    losses = {
        # a: best at lr 1 at 1 token/param (mean 2.0), at lr 2 at 10 (mean 1.55)
        ("model=a", 1, 0): (1.7, 2.0), ("model=a", 1, 1): (1.7, 2.0),
        ("model=a", 2, 0): (1.5, 2.2), ("model=a", 2, 1): (1.6, 2.4),
        # b: 2.1 at 1 token/param (behind a), 1.525 at 10 (ahead on the mean, in one seed of two)
        ("model=b", 1, 0): (1.4, 2.1), ("model=b", 1, 1): (1.65, 2.1),
        ("model=b", 2, 0): (None, 2.5), ("model=b", 2, 1): (1.3, 2.5),  # a failed seed ranks lr 2 last
    }
    found = R.regimes(_sweep(tmp_path, losses))
    assert [r.tokens_per_param for r in found] == [1, 10]
    low, high = found
    assert low.lr == {"model=a": 1, "model=b": 1} and low.order() == ["model=a", "model=b"]
    assert high.lr == {"model=a": 2, "model=b": 1}
    assert high.mean("model=a") == pytest.approx(1.55) and high.mean("model=b") == pytest.approx(1.525)
    assert high.seeds_ahead("model=b", "model=a") == (1, 2)  # seed 0: 1.4 < 1.5; seed 1: 1.65 > 1.6
    text = R.markdown(found)
    assert "| model=b | 0.0250 | 1 of 2 (vs model=a) |" in text
    assert "The leader changes with tokens per parameter: 1 → 10 (model=a → model=b)" in text


def test_a_directory_without_a_sweep_is_one_line_and_exit_2(tmp_path, capsys):
    assert R.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "has no sweep.json" in err and len(err.strip().splitlines()) == 1


def test_configurations_a_little_apart_in_parameters_share_a_regime(tmp_path):
    """One run length over two configurations' slightly different parameter counts (1000 and 1020: 10 and 9.80 tokens
    per parameter, their branches 1 and 0.98) is one regime each, named by the median, 9.9 and 0.99."""
    jobs = {}
    for config, params, full, short in (("model=a", 1000, 1.5, 2.0), ("model=b", 1020, 1.4, 2.1)):
        key = f"{config},train.lr=1,train.seed=0"
        jobs[key] = [config, "train.lr=1", "train.seed=0"]
        _record(tmp_path / key, "completed", full, 10000, params, 0, 1)
        _record(tmp_path / f"{key},branch=0.1", "completed", short, 1000, params, 0, 1,
                branch={"of": key, "fraction": 0.1, "step": 1, "steps": 2})
    (tmp_path / "sweep.json").write_text(json.dumps({"jobs": jobs}))
    found = R.regimes(tmp_path)
    assert [r.tokens_per_param for r in found] == [0.99, 9.9]
    assert [r.order() for r in found] == [["model=a", "model=b"], ["model=b", "model=a"]]
    assert R._clusters([0.593, 0.607, 1.24, 1.27, 2.5]) == {0.6: [0.593, 0.607], 1.25: [1.24, 1.27], 2.5: [2.5]}
