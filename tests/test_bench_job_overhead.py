"""bench/job_overhead.py's arithmetic: the phases of each job from the probe's time stamps, and --variant."""

from __future__ import annotations

import argparse

import pytest

from bench.job_overhead import PHASES, phases_of, sweep_args, variant


def test_phases_from_stamps():
    """Two jobs of one process: nested spans become exclusive phases that add up to the process's wall time."""
    stamps = {"stamps": [  # (name, job, start, end), as the probe appends them: inner spans end first
        ("setup", 0, 10.0, 10.5), ("fit", 0, 11.0, 31.0), ("env_info", 0, 32.5, 33.0), ("score", 0, 32.0, 36.0),
        ("throughput", 0, 36.0, 36.5), ("eval", 0, 31.5, 37.0), ("job", 0, 9.0, 37.5),
        ("setup", 1, 38.0, 38.2), ("fit", 1, 38.5, 50.0), ("score", 1, 51.0, 54.0), ("eval", 1, 50.5, 54.5),
        ("job", 1, 37.8, 55.0)], "end": 56.0}
    records = [{"training": {"train_seconds": 18.0}}, {"training": {"train_seconds": 10.0}}]
    first, second = phases_of(stamps, spawned=2.0, records=records)
    assert first == pytest.approx({"start-up": 7.0, "set-up": 0.5, "train": 18.0, "fit-other": 2.0, "save-record": 2.5,
                                   "eval-prepare": 1.0, "score": 3.5, "env-info": 0.5, "throughput": 0.5,
                                   "between": 0.0, "exit": 0.0})
    assert second == pytest.approx({"start-up": 0.0, "set-up": 0.2, "train": 10.0, "fit-other": 1.5,
                                    "save-record": 1.5, "eval-prepare": 1.0, "score": 3.0, "env-info": 0.0,
                                    "throughput": 0.0, "between": 0.3, "exit": 1.0})
    assert set(first) == set(PHASES)
    assert sum(first.values()) + sum(second.values()) == pytest.approx(56.0 - 2.0)


def test_variant_and_sweep_arguments():
    assert variant("spin1k=GOMP_SPINCOUNT=1000,OMP_WAIT_POLICY=active") == (
        "spin1k", {"GOMP_SPINCOUNT": "1000", "OMP_WAIT_POLICY": "active"})
    for bad in ("spin1k", "=A=1", "x=A"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected NAME=VAR=VALUE"):
            variant(bad)
    assert sweep_args(["gpt2-2"], 5e4) == ["-m", "sweep=cpu_default", "train.length.tokens=50000",
                                           'hydra.sweeper.points=[["model=gpt2","model.n_layers=2"]]']
