"""hydra.sweeper.halving (slm/sweeps/halving.py): every job trains a rung's fraction of its steps, the best
1/eta of the configurations go on from their checkpoints, the others are recorded pruned; decisions pinned, a second
run trains nothing, a survivor ends as the same run trained straight through; bad blocks are one line and exit 2."""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

LRS = ["1e-4", "1e-3", "3e-3", "3e-2"]
BASE = ["model=debug", "model.n_layers=1", "train.length.steps=24", "train.batch_size=4", "train.schedule.kind=wsd",
        "train.schedule.warmup_steps=2", "train.schedule.decay_fraction=0.25", "train.validation.batches=2",
        "train.validation.interval=0", "eval=none", "train.logging.progress_bar=false"]
HALVING = "hydra.sweeper.halving={eta: 2, fractions: [0.25, 0.5, 1]}"


def slm(tmp_path: Path, *args: str, timeout: int = 900, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLM_RUNS": str(tmp_path / "runs"), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "slm.cli.train", *args], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=timeout)
    if check:
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def sweep_args(group: str = "halve") -> list[str]:
    return ["-m", *BASE, f"train.lr={','.join(LRS)}", "train.seed=0,1", f"run_group={group}", HALVING]


def records(sweep: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sweep.glob("*/result.json")}


def score(record: dict, step: int) -> float:
    return dict((s, v) for s, v in record["eval"]["val_curve"])[step]


@pytest.fixture(scope="module")
def halved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("halving")
    first = slm(tmp, *sweep_args())
    return tmp, first


def lr_of(record: dict) -> float:
    return record["config"]["train"]["lr"]


def test_each_rung_keeps_the_best_half_by_mean_loss_and_prunes_the_rest(halved):
    tmp, first = halved
    recs = records(tmp / "runs" / "halve")
    assert len(recs) == 8
    by_status = {}
    for key, r in recs.items():
        by_status.setdefault(r["status"], []).append(key)
    assert sorted(by_status) == ["completed", "pruned"] and len(by_status["completed"]) == 2
    # rung 1 (step 6): the 2 of 4 lrs with the lowest mean loss over both seeds go on, by hand from the curves
    at6 = {lr: statistics.fmean(score(r, 6) for r in recs.values() if lr_of(r) == lr) for lr in {lr_of(r) for r in recs.values()}}
    kept6 = sorted(at6, key=at6.get)[:2]
    pruned6 = {lr_of(r) for r in recs.values() if r["status"] == "pruned" and r["halving"]["rung"] == 1}
    assert pruned6 == set(at6) - set(kept6)
    at12 = {lr: statistics.fmean(score(r, 12) for r in recs.values() if lr_of(r) == lr) for lr in kept6}
    best = min(at12, key=at12.get)
    assert {lr_of(recs[k]) for k in by_status["completed"]} == {best}
    for key, r in recs.items():
        if r["status"] == "pruned":
            h = r["halving"]
            assert h["rungs"] == 3 and h["rung"] in (1, 2)  # numbered as the console numbers them
            assert h["step"] == (6 if h["rung"] == 1 else 12) and h["of"] == (4 if h["rung"] == 1 else 2)
            assert h["score"] == pytest.approx(at6[lr_of(r)] if h["rung"] == 1 else at12[lr_of(r)])
            name, value = h["configuration"].split("=")  # what tells it from the others: its lr
            assert name == "train.lr" and float(value) == lr_of(r)
            assert r["training"]["steps"] == h["step"]  # trained to its rung, not a step more
    decisions = json.loads((tmp / "runs" / "halve" / "sweep.json").read_text())["halving"]
    assert [(d["rung"], d["fraction"]) for d in (decisions["0"], decisions["1"])] == [(1, 0.25), (2, 0.5)]
    assert first.stdout.count("halving rung") == 3
    assert "rung 1 of 3: 2 configurations go on (" in first.stdout and "rung 2 of 3: 1 configuration goes on" \
        in first.stdout


def test_a_second_run_trains_nothing_and_keeps_every_record(halved):
    tmp, _ = halved
    sweep = tmp / "runs" / "halve"
    before = {p: p.stat().st_mtime_ns for p in sweep.glob("*/result.json")}
    again = slm(tmp, *sweep_args())
    assert "0 jobs to train" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in sweep.glob("*/result.json")} == before


def test_a_survivor_ends_as_the_same_run_trained_straight_through(halved):
    tmp, _ = halved
    recs = records(tmp / "runs" / "halve")
    survivor = next(r for r in recs.values() if r["status"] == "completed")
    lr, seed = survivor["config"]["train"]["lr"], survivor["config"]["train"]["seed"]
    slm(tmp, *BASE, f"train.lr={lr}", f"train.seed={seed}", "run_group=straight")
    (straight,) = records(tmp / "runs" / "straight").values()
    assert straight["eval"]["val_nll"] == survivor["eval"]["val_nll"]
    assert straight["training"]["steps"] == survivor["training"]["steps"] == 24


def test_killed_after_a_decision_and_started_again_it_decides_the_same(halved, tmp_path):
    tmp, _ = halved
    env = {**os.environ, "SLM_RUNS": str(tmp_path / "runs"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "slm.cli.train", *sweep_args()], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    sweep_file = tmp_path / "runs" / "halve" / "sweep.json"
    try:
        began = time.monotonic()
        while '"halving"' not in (sweep_file.read_text() if sweep_file.exists() else ""):
            assert proc.poll() is None and time.monotonic() - began < 600
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    slm(tmp_path, *sweep_args())
    statuses = {k: (r["status"], (r.get("halving") or {}).get("rung")) for k, r in records(sweep_file.parent).items()}
    reference = {k: (r["status"], (r.get("halving") or {}).get("rung")) for k, r in records(tmp / "runs" / "halve").items()}
    assert statuses == reference


@pytest.mark.parametrize("halving, says", [
    ("{eta: 1, rungs: 3}", "hydra.sweeper.halving.eta=1 is invalid"),
    ("{eta: 3, fractions: [0.5, 0.25, 1]}", "hydra.sweeper.halving.fractions=[0.5, 0.25, 1] is invalid"),
    ("{eta: 3, fractions: [0.25, 0.9, 1]}", "do not fit its 24 steps"),
    ("{eta: 3}", "needs one of rungs or fractions"),
])
def test_a_bad_halving_block_is_one_line_and_exit_2(tmp_path, halving, says):
    out = slm(tmp_path, "-m", *BASE, "train.seed=0,1", f"hydra.sweeper.halving={halving}", check=False)
    assert out.returncode == 2, out.stdout + out.stderr
    assert says in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "runs").exists()


def test_halving_needs_a_wsd_schedule_and_refuses_a_ladder_and_optuna(tmp_path):
    cosine = slm(tmp_path, "-m", *[a for a in BASE if not a.startswith("train.schedule.kind=")],
                 "train.schedule.kind=cosine", "train.seed=0,1", HALVING, check=False)
    assert cosine.returncode == 2 and "needs train.schedule.kind=wsd" in cosine.stderr
    ladder = slm(tmp_path, "-m", *BASE, "train.seed=0,1", HALVING,
                 "hydra.sweeper.ladder={rungs: [5e4, 1e5]}", check=False)
    assert ladder.returncode == 2 and "cannot be combined" in ladder.stderr
    optuna = slm(tmp_path, "-m", "hydra/sweeper=optuna", *BASE, HALVING, check=False)
    assert optuna.returncode == 2 and "the grid sweeper's" in optuna.stderr
    assert not (tmp_path / "runs").exists()


def test_the_dry_run_prints_the_rungs_and_the_compute_at_most(tmp_path):
    out = slm(tmp_path, *sweep_args(), "hydra.sweeper.dry_run=true")
    lines = [line for line in out.stdout.splitlines() if line.startswith("halving")]
    assert lines[0].startswith("halving (eta 2): 4 configurations of 2 seed(s); rungs at 0.25 (4 configurations), "
                               "0.5 (2 configurations), 1 (1 configuration)")
    share = 0.25 + 0.5 * 0.25 + 0.25 * 0.5  # of the full grid, every configuration costing the same
    assert f"{share:.1%} of the full grid's" in lines[1]
    assert math.isclose(share, 0.5)


def test_the_table_lists_pruned_runs_and_the_report_shows_each_rung(halved):
    from analysis.collect import collect
    from analysis.halving import report_blocks

    tmp, _ = halved
    sweep = tmp / "runs" / "halve"
    table = collect(sweep)
    assert sorted(table["status"].value_counts().items()) == [("completed", 2), ("pruned", 6)]
    blocks = report_blocks(table)
    decisions = json.loads((sweep / "sweep.json").read_text())["halving"]
    frames = [b for b in blocks if not isinstance(b, str)]
    assert len(frames) == 2 and blocks[0].startswith("halve: successive halving (hydra.sweeper.halving) over 4 ")
    for frame, rung in zip(frames, ("0", "1")):
        d = decisions[rung]
        assert frame["went on"].tolist().count("yes") == len(d["kept"])
        assert frame["score"].tolist() == sorted(v for v in d["scores"].values())
    assert report_blocks(table[table["status"] == "completed"].assign(run_dir=str(tmp / "x" / "y"))) == []


def test_a_run_resumed_past_an_earlier_rungs_pause_trains_nothing_for_it(tmp_path):
    """A halving sweep killed after a later rung began (the run recorded `running` again, its checkpoint past the
    earlier rung's step) and started again: the earlier rung's launch trains nothing, and the rung counts as reached
    (the run's validation at its step is in the record)."""
    from slm.sweeps.halving import reached
    from slm.sweeps.jobs import Job

    args = [*BASE, "train.seed=0", "run_group=one"]
    slm(tmp_path, *args, "train.length.pause_at=0.5")
    run_dir = next((tmp_path / "runs" / "one").glob("*/result.json")).parent
    record = json.loads((run_dir / "result.json").read_text())
    assert record["status"] == "paused" and record["training"]["steps"] == 12
    record["status"] = "running"  # as the next rung's start() leaves it, killed before its first checkpoint
    (run_dir / "result.json").write_text(json.dumps(record))
    again = slm(tmp_path, *args, "train.length.pause_at=0.25")
    assert "at or past its train.length.pause_at; nothing to do" in again.stdout
    assert json.loads((run_dir / "result.json").read_text())["training"]["steps"] == 12
    job = Job([], run_dir, {})
    assert reached(job, 6) is False and reached(job, 12) is True  # validated at 12 (the pause); not at 6


MINE = """# @package _global_
defaults:
  - override /model: debug
  - override /eval: none
  - _self_
run_group: mine
model: {n_layers: 1}
train:
  length: {steps: 24}
  batch_size: 4
  schedule: {kind: wsd, warmup_steps: 2, decay_fraction: 0.25}
  validation: {batches: 2, interval: 0}
  logging: {progress_bar: false}
hydra:
  sweeper:
    halving: {eta: 3, rungs: 2}
    lr_search: [0.25, 1, 4]
    params: {train.seed: "0,1"}
"""


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """The first hour's halving sweep: every setting in a sweep file of the user's, lr_search [0.25, 1, 4] and two seeds,
    so that the x1 job's overrides name nothing but its seed (debug's lr, 1e-3, is the x1 lr)."""
    tmp = tmp_path_factory.mktemp("searched")
    (tmp / "mine" / "sweep").mkdir(parents=True)
    (tmp / "mine" / "sweep" / "mine.yaml").write_text(MINE)
    out = slm(tmp, "-m", "--config-dir", str(tmp / "mine"), "sweep=mine")
    return tmp / "runs" / "mine", out


def test_every_configuration_is_named_by_its_lr_and_the_summary_names_the_winner(searched):
    import re

    sweep, out = searched
    decision = json.loads((sweep / "sweep.json").read_text())["halving"]["0"]
    names = {"train.lr=0.00025", "train.lr=0.001", "train.lr=0.004"}  # the x1 one was "" (no override but its seed)
    assert set(decision["scores"]) == set(decision["labels"]) == set(decision["jobs"]) == names
    recs = records(sweep)
    done = [r for r in recs.values() if r["status"] == "completed"]
    assert len(done) == 2 and len({lr_of(r) for r in done}) == 1
    (line,) = [x for x in out.stdout.splitlines() if "halving chose" in x]
    chosen, value = re.search(r"halving chose (\S+): final validation loss ([\d.]+) \(the mean of 2 seeds\)", line).groups()
    assert float(chosen.split("=")[1]) == lr_of(done[0])
    assert float(value) == round(statistics.fmean(r["eval"]["val_nll"] for r in done), 4)
    assert line.endswith("2 of 3 configurations pruned (rung 1: 2)")
    from slm.sweeps.status import summary_lines  # slm-workers' summary of the sweep ends with it too

    assert summary_lines("mine", sweep, [])[-1] == line
    # the record's rung is the one the console printed
    assert f"sweep mine: rung 1 of 2: 1 configuration goes on ({chosen}), 2 pruned" in out.stdout
    pruned = [r["halving"] for r in recs.values() if r["status"] == "pruned"]
    assert len(pruned) == 4 and all(h["rung"] == 1 and h["rungs"] == 2 and h["configuration"] in names for h in pruned)


def test_slm_status_shows_each_pruned_runs_rung_score_and_rank(searched):
    from slm.cli.status import report

    sweep, _ = searched
    lines = report(sweep)
    decision = json.loads((sweep / "sweep.json").read_text())["halving"]["0"]
    for key, r in records(sweep).items():
        if r["status"] == "pruned":
            h = r["halving"]
            (line,) = [x for x in lines if x.strip().startswith(key)]
            assert (f"pruned at rung 1 of 2 (step 8): score {decision['scores'][h['configuration']]:.4f} (its "
                    f"configuration's mean over seeds), rank {h['rank']} of 3; 1 went on") in line


def test_the_report_says_which_lrs_were_searched_and_puts_the_pruned_in_the_verdict(searched, tmp_path):
    from analysis.report import build_report

    sweep, _ = searched
    build_report(sweep, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    verdict = md.split("## Verdict", 1)[1].split("\n## ", 1)[0]
    # W1: the lrs the sweep searched, and why only one finished, not "every configuration ran at one lr"
    assert "every configuration ran at one lr" not in md and "0.25,0.5,1,2,4" not in md
    assert "the sweep searched lr x 0.25, 1, 4 (hydra.sweeper.lr_search), and successive halving pruned" in md
    # W2: the three configurations compared, the chosen one and the two pruned with their rung and score; no seed
    assert "nothing to compare" not in verdict and "train.seed" not in md and "seed 0" not in verdict
    assert "**Successive halving** (mine): 3 configurations compared; 2 pruned at their rungs, 1 trained to the end; " \
           "chosen: train.lr=" in verdict
    assert "there is one configuration" not in verdict and "one configuration was trained to it" in verdict
    rows = [x for x in verdict.splitlines() if x.startswith("| train.lr=")]
    outcomes = sorted(x.split(" | ")[1] for x in rows if "1 of 2" in x)
    assert outcomes == ["chosen", "pruned", "pruned"]
    decision = json.loads((sweep / "sweep.json").read_text())["halving"]["0"]
    for name, score in decision["scores"].items():
        assert any(x.startswith(f"| {name} |") and f"| {score:.4g} |" in x for x in rows), (name, rows)


def test_a_users_pause_at_is_refused_in_one_line(tmp_path):
    out = slm(tmp_path, "-m", *BASE, "train.seed=0,1", HALVING, "train.length.pause_at=0.5", check=False)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "train.length.pause_at=0.5 is refused" in out.stderr
    assert not (tmp_path / "runs").exists()


def test_an_earlier_versions_pinned_decision_is_read_with_todays_names_and_rung_numbers():
    """A sweep pinned by an earlier version (rungs from 0, the x1 lr's configuration named "") started again: its
    decision holds, under today's names."""
    from slm.sweeps.halving import _upgraded

    old = {"rung": 0, "fraction": 0.5, "kept": [""], "scores": {"": 3.0, "train.lr=0.004": 3.5}}
    new = _upgraded(old, 0, 2, {"": "train.lr=0.001", "train.lr=0.004": "train.lr=0.004"})
    assert (new["rung"], new["rungs"], new["kept"]) == (1, 2, ["train.lr=0.001"])
    assert new["scores"] == {"train.lr=0.001": 3.0, "train.lr=0.004": 3.5}
    assert _upgraded(new | {"jobs": {}}, 0, 2, {}) == new | {"jobs": {}}


def test_a_sweep_of_seeds_only_names_its_configuration_and_says_there_is_nothing_to_prune(tmp_path):
    (tmp_path / "mine" / "sweep").mkdir(parents=True)
    seeds = MINE.replace("run_group: mine", "run_group: seeds_only").replace("    lr_search: [0.25, 1, 4]\n", "")
    (tmp_path / "mine" / "sweep" / "seeds_only.yaml").write_text(seeds)
    out = slm(tmp_path, "-m", "--config-dir", str(tmp_path / "mine"), "sweep=seeds_only")
    sweep = tmp_path / "runs" / "seeds_only"
    decision = json.loads((sweep / "sweep.json").read_text())["halving"]["0"]
    assert set(decision["scores"]) == {"default"}  # was ""
    assert set(decision["labels"]) == {"default"}
    assert "halving over one configuration (default: its jobs differ in train.seed only): nothing to prune" in out.stdout
    assert "halving chose default: final validation loss" in out.stdout
