"""slm/sweeps without Hydra: the sweeper's settings, halving's and a ladder's decisions on plain Jobs (configs as
dicts, records as JSON files), and the layer imports no Hydra."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from slm.settings import SettingsError
from slm.sweeps import halving as H
from slm.sweeps import ladder as L
from slm.sweeps.jobs import Job, SweepError
from slm.sweeps.settings import SweepSettings

ROOT = Path(__file__).resolve().parents[1]


def cfg(steps: int = 90, kind: str = "wsd", lr: float = 1e-3, **train) -> dict:
    return {"model": {"context_length": 64, "parametrization": {"kind": "sp"}},
            "train": {"batch_size": 4, "lr": lr, "length": {"steps": steps},
                      "schedule": {"kind": kind, "decay_fraction": 0.2}, **train}}


def job(tmp_path: Path, key: str, config: dict | None = None, overrides: list[str] | None = None) -> Job:
    return Job(overrides if overrides is not None else [key], tmp_path / key, config if config is not None else cfg())


def record(job: Job, status: str = "paused", curve: list | None = None, steps: int | None = None) -> None:
    job.run_dir.mkdir(parents=True, exist_ok=True)
    body = {"status": status, "eval": {"val_curve": curve or []}, "training": {"steps": steps}}
    (job.run_dir / "result.json").write_text(json.dumps(body))


# -- settings ------------------------------------------------------------------------------------------------------

def test_the_defaults_and_the_lr_search_multipliers():
    s = SweepSettings.read({})
    assert (s.ladder, s.halving, s.multipliers, s.dry_run, s.estimate.assumed_mfu) == (None, None, [], False, 0.153)
    assert SweepSettings.read({"lr_search": [2, 0.5, 2]}).multipliers == [0.5, 1.0, 2.0]
    assert SweepSettings.read({"lr_search": 2}).multipliers == [1.0, 2.0]


def test_a_ladders_rule_and_search_rungs_are_derived_from_the_lr_search():
    fixed = SweepSettings.read({"ladder": {"rungs": [2e5, 1e5]}}).ladder
    assert (fixed.rungs, fixed.lr, fixed.search_rungs, fixed.searched(1)) == ([1e5, 2e5], "fixed", 1, True)
    transfer = SweepSettings.read({"lr_search": [0.5, 2], "ladder": {"rungs": [1, 2, 3, 4], "lr": "transfer"}}).ladder
    assert transfer.search_rungs == 2 and transfer.searched(1) and not transfer.searched(2)


def test_halvings_rungs_as_fractions():
    assert SweepSettings.read({"halving": {"rungs": 3}}).halving.rung_fractions() == [1 / 9, 1 / 3, 1.0]
    assert SweepSettings.read({"halving": {"eta": 2, "fractions": [0.25, 1]}}).halving.rung_fractions() == [0.25, 1.0]


@pytest.mark.parametrize("node, key, says", [
    ({"lr_search": [0.5, -1]}, "hydra.sweeper.lr_search", "hydra.sweeper.lr_search=[0.5, -1] is invalid"),
    ({"max_batch_size": 0}, "hydra.sweeper.max_batch_size", "must be an integer > 0"),
    ({"nope": 1}, "hydra.sweeper.nope", "hydra.sweeper has unknown key 'nope'"),
    ({"ladder": {"rungs": [1e5]}}, "hydra.sweeper.ladder.rungs", "at least two distinct positive"),
    ({"ladder": {"rungs": [1e5, 1e5]}}, "hydra.sweeper.ladder.rungs", "at least two distinct positive"),
    ({"ladder": {"rungs": [1, 2], "lr": "sometimes"}}, "hydra.sweeper.ladder.lr", "choose one of: search, transfer"),
    ({"ladder": {"rungs": [1, 2], "lr": "search"}}, "hydra.sweeper.ladder.lr",
     "hydra.sweeper.ladder.lr='search' is invalid: it searches the lr at every rung: set hydra.sweeper.lr_search"),
    ({"ladder": {"rungs": [1, 2], "lr": "fixed"}, "lr_search": [2]}, "hydra.sweeper.ladder.lr",
     "but hydra.sweeper.lr_search=[1.0, 2.0] is set"),
    ({"ladder": {"rungs": [1, 2], "lr": "transfer"}}, "hydra.sweeper.ladder.lr", "carries the lr searched"),
    ({"ladder": {"rungs": [1, 2], "search_rungs": 2}}, "hydra.sweeper.ladder.search_rungs", "1 to 1"),
    ({"ladder": {"rungs": [1, 2], "validations": 0}}, "hydra.sweeper.ladder.validations", "must be an integer >= 1"),
    ({"halving": {"eta": 1, "rungs": 3}}, "hydra.sweeper.halving.eta", "hydra.sweeper.halving.eta=1 is invalid"),
    ({"halving": {"eta": 3}}, "hydra.sweeper.halving", "needs one of rungs or fractions"),
    ({"halving": {"rungs": 2, "fractions": [0.5, 1]}}, "hydra.sweeper.halving", "needs one of rungs or fractions"),
    ({"halving": {"fractions": [0.5, 0.25, 1]}}, "hydra.sweeper.halving.fractions",
     "hydra.sweeper.halving.fractions=[0.5, 0.25, 1] is invalid"),
    ({"halving": {"fractions": [0.5, 1.5]}}, "hydra.sweeper.halving.fractions", "every item a number in (0, 1]"),
    ({"halving": {"rungs": 2}, "ladder": {"rungs": [1, 2]}}, "hydra.sweeper.halving", "cannot be combined"),
    ({"estimate": {"mfu": 0}}, "hydra.sweeper.estimate.mfu", "hydra.sweeper.estimate.mfu=0 is invalid"),
])
def test_a_bad_setting_is_one_settings_error_naming_its_key(node, key, says):
    with pytest.raises(SettingsError) as err:
        SweepSettings.read(node)
    assert err.value.key == key and says in str(err.value) and "\n" not in str(err.value)


# -- halving -------------------------------------------------------------------------------------------------------

def test_survivors_keep_ceil_n_over_eta_at_each_rung():
    assert H.survivors(10, 3, 3) == [10, 4, 2]
    assert H.survivors(2, 3, 4) == [2, 1, 1, 1]


def test_rung_steps_fall_in_the_stable_phase_of_a_wsd_schedule(tmp_path):
    halving = SweepSettings.read({"halving": {"rungs": 3}}).halving
    assert H.rung_steps(job(tmp_path, "a"), halving) == [10, 30, 90]  # stable phase: steps 1-72 of 90
    with pytest.raises(SweepError, match="needs train.schedule.kind=wsd"):
        H.rung_steps(job(tmp_path, "b", cfg(kind="cosine")), halving)
    late = SweepSettings.read({"halving": {"fractions": [0.5, 0.9, 1]}}).halving
    with pytest.raises(SweepError, match=r"do not fit its 90 steps: the rungs fall at steps \[45, 81, 90\]"):
        H.rung_steps(job(tmp_path, "c"), late)


def test_a_rung_decides_by_the_mean_over_seeds_once_every_job_reached_it(tmp_path):
    a0, a1, b0, c0 = (job(tmp_path, k) for k in ("a0", "a1", "b0", "c0"))
    configs = {"a": [a0, a1], "b": [b0], "c": [c0]}
    steps = {j.key: 10 for j in (a0, a1, b0, c0)}
    record(a0, curve=[[10, 2.0]])
    record(a1, curve=[[10, 3.0]])
    record(b0, curve=[[10, 2.4]])
    assert H.decide(0, 0.25, configs, steps, eta=2, rungs=3) is None  # c has not reached the rung
    record(c0, status="diverged")
    decision = H.decide(0, 0.25, configs, steps, eta=2, rungs=3)
    assert decision["kept"] == ["b", "a"] and decision["rung"] == 1 and decision["scores"]["c"] is None
    assert decision["scores"]["a"] == pytest.approx(2.5) and decision["jobs"]["a"] == ["a0", "a1"]
    assert H.reached(c0, 10) and H.score_at(c0, 10) == math.inf


def test_a_pruned_job_records_its_rung_score_and_rank(tmp_path):
    a, b = job(tmp_path, "a"), job(tmp_path, "b")
    record(a, curve=[[10, 2.0]], steps=10)
    record(b, curve=[[10, 3.0]], steps=10)
    decision = H.decide(0, 0.5, {"a": [a], "b": [b]}, {"a": 10, "b": 10}, eta=2, rungs=2)
    H.prune(b, "b", decision, 10)
    pruned = json.loads((b.run_dir / "result.json").read_text())
    assert pruned["status"] == "pruned" and pruned["halving"]["rank"] == 2 and pruned["halving"]["score"] == 3.0


# -- ladder --------------------------------------------------------------------------------------------------------

def compose_from(base: dict, root: Path):
    """A compose callable without Hydra: `a.b=v` overrides set on a copy of `base`."""
    import copy

    def compose(overrides: list[str]) -> Job:
        config = copy.deepcopy(base)
        for line in overrides:
            key, value = line.lstrip("+").split("=", 1)
            *path, leaf = key.split(".")
            node = config
            for part in path:
                node = node.setdefault(part, {})
            node[leaf] = json.loads(value) if value.replace(".", "", 1).replace("e", "", 1).isdigit() else value
        return Job(list(overrides), root / ",".join(sorted(overrides)), config)

    return compose


def test_a_ladder_puts_every_point_at_every_rung_the_lowest_first(tmp_path):
    base = cfg()
    base["train"]["length"] = {}
    compose = compose_from(base, tmp_path)
    ladder = SweepSettings.read({"ladder": {"rungs": [1e5, 5e4], "tokens_per_param": 2}}).ladder
    points = [compose(["model.n_layers=2"]), compose(["model.n_layers=4"])]
    plan = L.expand(compose, points, ladder)
    assert [(e.index, e.rung) for e in plan.searched] == [(0, 5e4), (0, 5e4), (1, 1e5), (1, 1e5)] and not plan.deferred
    assert plan.searched[0].job.overrides == ["model.n_layers=2", "model.param_budget=50000", "train.length.tokens=100000",
                                              "train.validation.interval=97"]  # 390 steps of 256 tokens / 4
    info = L.info(plan, {e.job.key: e for e in plan.searched}, searching=False)
    assert {v["lr_rule"] for v in info.values()} == {"fixed"} and sorted(v["rung"] for v in info.values())[0] == 5e4
    with pytest.raises(SweepError, match="the ladder sets model.param_budget per rung"):
        L.expand(compose, [compose(["model.param_budget=1e5"])], ladder)


def test_a_transfer_ladder_needs_mup_and_defers_the_rungs_above(tmp_path):
    base = cfg()
    base["train"]["length"] = {}
    compose = compose_from(base, tmp_path)
    ladder = SweepSettings.read({"lr_search": [0.5, 2], "ladder": {"rungs": [5e4, 1e5, 2e5], "lr": "transfer",
                                                                    "search_rungs": 1}}).ladder
    with pytest.raises(SweepError, match="which only mup or completep promise"):
        L.expand(compose, [compose(["model.n_layers=2"])], ladder)
    base["model"]["parametrization"]["kind"] = "mup"
    plan = L.expand(compose, [compose(["model.n_layers=2"])], ladder)
    assert len(plan.searched) == 1 and [e.rung for e in plan.deferred] == [1e5, 2e5]
    jobs, multipliers, owners = L.search(compose, plan, [0.5, 1.0, 2.0])
    assert sorted(multipliers.values()) == [0.5, 1.0, 2.0] and set(owners) == {j.key for j in jobs}


# -- no Hydra ------------------------------------------------------------------------------------------------------

def test_the_layer_imports_no_hydra_and_nothing_above_it():
    code = ("import sys, pkgutil, importlib, slm.sweeps\n"
            "for m in pkgutil.iter_modules(slm.sweeps.__path__): importlib.import_module('slm.sweeps.' + m.name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('hydra', 'hydra_plugins', 'analysis')\n"
            "             or m.startswith('slm.cli')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout
