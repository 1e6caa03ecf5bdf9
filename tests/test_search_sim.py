"""analysis.search_sim (slm-search-sim): a grid's durations replayed through synchronous halving, ASHA and Hyperband,
checked by hand on synthetic records; sync's decisions against slm.sweeps.halving's, ASHA's against the paper's rule."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from analysis.search_sim import optuna_search, parse_rungs, place_rungs, read_grid, sync_halving

PACE = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}
"""Seconds per step of the four configurations."""


def write_job(sweep: Path, name: str, seed: int, pace: float, curve: dict[int, float], steps: int = 9,
              status: str = "completed", reached: int | None = None) -> str:
    """One job's record (and its line in sweep.json): `curve` {step: val_nll}, its last point the final value."""
    key = f"model.x={name},train.seed={seed}"
    (sweep / key).mkdir(parents=True)
    reached = steps if reached is None else reached
    record = {"status": status, "training": {"max_steps": steps, "steps": reached, "session_steps": reached,
                                             "train_seconds": pace * reached},
              "eval": {"val_curve": [[s, v] for s, v in sorted(curve.items())]}}
    if status == "completed":
        record["eval"]["val_nll"] = curve[steps]
    (sweep / key / "result.json").write_text(json.dumps(record))
    listing = json.loads((sweep / "sweep.json").read_text()) if (sweep / "sweep.json").exists() else {"jobs": {}}
    listing["jobs"][key] = [f"train.seed={seed}", "sweep=sim", f"model.x={name}"]
    (sweep / "sweep.json").write_text(json.dumps(listing))
    return key


def four(tmp_path: Path, at3: dict[str, float] | None = None) -> list:
    """Configurations a-d, one seed each, 9 steps, validated at 3 (scores `at3`, default a best) and 9 (a best)."""
    at3 = at3 or {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}
    for i, name in enumerate("abcd"):
        write_job(tmp_path, name, 0, PACE[name], {3: at3[name], 9: 0.5 + i / 10})
    jobs = read_grid(tmp_path)
    place_rungs(jobs, parse_rungs("1/3,1"))
    return jobs


def by_name(jobs, names: str) -> list:
    return [next(j for j in jobs if j.config == f"model.x={n}") for n in names]


def test_one_worker_ends_when_the_sum_of_what_it_trained_is_spent(tmp_path):
    jobs = four(tmp_path)
    sync, trained = sync_halving(by_name(jobs, "abcd"), eta=2, workers=1)
    assert trained == [[f"model.x={n}" for n in "abcd"], ["model.x=a", "model.x=b"]]
    assert sync.end == sync.busy == 3 * (1 + 2 + 3 + 4) + 6 * (1 + 2)  # every job to step 3, then a and b to 9
    assert sync.idle == 0 and sync.utilisation == 1 and sync.pick == "model.x=a"
    assert sync.best_done == 30 + 6  # a, first of rung 2's queue, ends its last rung at 36
    # worst first: each newcomer is the best so far, so Optuna promotes every one and ASHA trains the whole grid
    asha, fate = optuna_search(by_name(jobs, "dcba"), eta=2, workers=1)
    grid, _ = sync_halving([j.to_the_end() for j in jobs], eta=2, workers=1)
    assert set(fate.values()) == {"completed"}
    assert asha.end == asha.busy == grid.end == grid.busy == 9 * (1 + 2 + 3 + 4)
    assert asha.pick == grid.pick == "model.x=a"


def test_sync_halving_on_many_workers_waits_for_the_slowest_at_every_rung(tmp_path):
    jobs = four(tmp_path)
    out, _ = sync_halving(by_name(jobs, "abcd"), eta=2, workers=8, launch_s=1.0)
    assert out.end == (1 + 4 * 3) + (1 + 2 * 6)  # rung 1: d's 3 steps; rung 2: b's 6 steps; a launch each
    assert out.busy == 4 * 1 + 3 * 10 + 2 * 1 + 6 * 3
    assert out.idle == pytest.approx(8 * out.end - out.busy)


def test_idle_time_by_hand_on_two_workers(tmp_path):
    jobs = four(tmp_path)
    out, _ = sync_halving(by_name(jobs, "abcd"), eta=2, workers=2)
    # rung 1: a [0,3] then c [3,12] on worker 0; b [0,6] then d [6,18] on worker 1; the barrier at 18
    # rung 2: a [18,24] on worker 0, b [18,30] on worker 1: the search ends at 30, having spent 30 + 18
    assert (out.end, out.busy, out.idle) == (30, 48, 2 * 30 - 48)
    assert out.utilisation == pytest.approx(0.8)


def test_asha_never_waits_with_a_worker_per_job(tmp_path):
    jobs = four(tmp_path, at3={"a": 2.0, "b": 1.0, "c": 3.0, "d": 0.5})
    out, fate = optuna_search(by_name(jobs, "abcd"), eta=2, workers=6)
    trained = {j.key: j.pace * (9 if fate[j.key] == "completed" else 3) for j in jobs}
    assert "pruned at rung 1" in fate.values() and "completed" in fate.values()
    # each job trains from time 0 without a pause until it is pruned or done; the 2 workers without a job idle
    assert out.busy == sum(trained.values()) and out.end == max(trained.values())
    assert out.idle == 6 * out.end - out.busy


def test_sync_halving_decides_as_slm_sweeps_halving(tmp_path):
    """Three rungs over 5 configurations x 2 seeds, a tie and a diverged seed: the configurations trained at each rung
    are the ones slm.sweeps.halving.decide keeps (its records read from the same files), and the rung steps are
    slm.training.length.pause_step's."""
    from slm.sweeps import halving as H
    from slm.sweeps.jobs import Job
    from slm.training.length import pause_step

    from analysis.search_sim import pause_step as sim_pause_step

    at = {"a": (3.0, 2.0), "b": (2.5, 1.5), "c": (2.5, 1.6), "d": (3.5, 1.0), "e": (4.0, 3.0)}
    for name, (s3, s9) in at.items():
        for seed in (0, 1):
            write_job(tmp_path, name, seed, PACE.get(name, 1.0), {3: s3 + seed / 10, 9: s9 + seed / 10,
                                                                  27: s9 - 0.5}, steps=27)
    write_job(tmp_path, "f", 0, 1.0, {3: 0.1, 9: 0.1, 27: 0.1}, steps=27)
    write_job(tmp_path, "f", 1, 1.0, {3: 0.2}, steps=27, status="diverged", reached=4)
    jobs = read_grid(tmp_path)
    fractions = parse_rungs("1/9,1/3,1")
    place_rungs(jobs, fractions)
    _, trained = sync_halving(jobs, eta=3, workers=4)
    listing = json.loads((tmp_path / "sweep.json").read_text())["jobs"]
    configs: dict[str, list] = {}
    for key, overrides in listing.items():
        job = Job(overrides, tmp_path / key, cfg={})
        configs.setdefault(H.configuration(job), []).append(job)
    alive, expected = sorted(configs), [sorted(configs)]
    for rung, fraction in enumerate(fractions[:-1]):
        steps = {j.key: pause_step(fraction, 27) for n in alive for j in configs[n]}
        alive = H.decide(rung, fraction, {n: configs[n] for n in alive}, steps, 3)["kept"]
        expected.append(alive)
    assert [sorted(t) for t in trained] == [sorted(e) for e in expected]
    assert [len(t) for t in trained] == H.survivors(6, 3, 3)
    assert all(sim_pause_step(f, n) == pause_step(f, n) for f in (0.1, 1 / 9, 0.25, 1 / 3, 0.5, 1) for n in range(1, 300))


def test_asha_promotes_as_the_paper_says_once_a_rung_holds_eta(tmp_path):
    """ASHA (Li et al., arXiv 1810.05934, Algorithm 2): a configuration of a rung that holds k is promotable when it
    is in the top floor(k / eta). Optuna's SuccessiveHalvingPruner decides on arrival: the same rule once k >= eta;
    below that it promotes the best so far (where the paper's top floor(k / eta) is empty and the newcomer waits)."""
    eta, arrivals = 3, [5.0, 4.0, 6.0, 4.5, 3.0, 3.9, 4.1]
    for i, value in enumerate(arrivals):
        write_job(tmp_path, f"t{i}", 0, 1.0, {3: value, 9: value})
    jobs = read_grid(tmp_path)
    place_rungs(jobs, parse_rungs("1/3,1"))
    order = [next(j for j in jobs if j.config == f"model.x=t{i}") for i in range(len(arrivals))]
    _, fate = optuna_search(order, eta=eta, workers=1)
    for k in range(1, len(arrivals) + 1):
        rank = sorted(arrivals[:k]).index(arrivals[k - 1]) + 1
        paper = rank <= k // eta if k >= eta else rank == 1
        assert (fate[order[k - 1].key] == "completed") == paper, k
    assert [fate[j.key] == "completed" for j in order] == [True, True, False, False, True, True, False]


def test_a_failed_job_stops_where_it_failed_and_ranks_last(tmp_path):
    four(tmp_path)
    write_job(tmp_path, "e", 0, 10.0, {}, status="failed", reached=2)
    jobs = read_grid(tmp_path)
    place_rungs(jobs, parse_rungs("1/3,1"))
    out, trained = sync_halving(jobs, eta=2, workers=1)
    # rung 1: a-d to step 3, e its 2 steps to where it failed (+inf, last); rung 2: the best ceil(5 / 2) to step 9
    assert trained[1] == ["model.x=a", "model.x=b", "model.x=c"]
    assert out.busy == 3 * (1 + 2 + 3 + 4) + 10 * 2 + 6 * (1 + 2 + 3)
    _, fate = optuna_search(jobs, eta=2, workers=1)
    assert fate[by_name(jobs, "e")[0].key] == "failed"


def _cli(tmp_path, *args) -> tuple[int, str, str]:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "analysis.cli", "search_sim", *map(str, args)], capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[1], timeout=120)
    return out.returncode, out.stdout, out.stderr


def test_the_command_prints_a_row_per_search_and_worker_count(tmp_path):
    four(tmp_path)
    code, out, err = _cli(tmp_path, tmp_path, "--rungs", "1/3,1", "--eta", "2", "--workers", "1,8", "--reps", "2")
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.startswith("| ") and "workers" not in line]
    assert [r.split(" | ")[:2] for r in rows] == [[f"| {m}", w] for m in ("grid", "sync", "asha", "hyperband")
                                                  for w in ("1", "8")]
    assert "| sync | 1 | 48 | " in out and "| sync | 8 | 24 | 18 | #1, #1 |" in out and "Left out:" in out and "more workers than" in out


@pytest.mark.parametrize("args, needle", [
    (["--rungs", "0,1"], "--rungs=0,1 is invalid: two or more increasing fractions of each job's steps in (0, 1]"),
    (["--rungs", "1/3,3/2"], "--rungs=1/3,3/2 is invalid"),
    (["--rungs", "1"], "--rungs=1 is invalid: two or more"),
    (["--rungs", "1/100,1/50,1"], "the rungs fall at steps [1, 1, 9] of run model.x=a,train.seed=0"),
    (["--rungs", "1/4,1"], "rung 1 falls at step 2 of 9 in run model.x=a,train.seed=0, which its grid did not "
                           "validate (it validated at steps 3, 9)"),
    (["--eta", "1"], "argument --eta: 1: must be >= 2"),
    (["--workers", "8,0"], "--workers=8,0 is invalid"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, needle):
    four(tmp_path)
    code, out, err = _cli(tmp_path, tmp_path, *args)
    assert (code, out) == (2, "") and len(err.strip().splitlines()) == 1 and needle in err, err


def test_a_directory_without_records_or_a_grid_not_finished_is_refused(tmp_path):
    code, _, err = _cli(tmp_path, tmp_path)
    assert code == 2 and "no records of a sweep's jobs here" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "sweep.json").write_text(json.dumps({"jobs": {"k": ["train.seed=0"]}}))
    assert "no records" in _cli(tmp_path, tmp_path)[2]
    (tmp_path / "sweep.json").unlink()
    four(tmp_path)
    listing = json.loads((tmp_path / "sweep.json").read_text())
    listing["jobs"]["model.x=e,train.seed=0"] = ["train.seed=0", "model.x=e"]
    (tmp_path / "sweep.json").write_text(json.dumps(listing))
    code, _, err = _cli(tmp_path, tmp_path)
    assert code == 2 and "1 of the sweep's 5 jobs have no record (e.g. model.x=e,train.seed=0)" in err


def test_snap_reads_a_rung_at_the_nearest_validation(tmp_path):
    four(tmp_path)
    jobs = read_grid(tmp_path)
    place_rungs(jobs, parse_rungs("1/4,1"), snap=1)  # step 2, read at 3
    assert [j.scores[0] for j in jobs] == [1.0, 2.0, 3.0, 4.0] and {j.rungs[0] for j in jobs} == {2}
    assert math.isfinite(sync_halving(jobs, 2, 2)[0].end)


def test_an_lr_searchs_configurations_are_named_with_their_lr_as_halving_names_them(tmp_path):
    from slm.sweeps import halving as H
    from slm.sweeps.jobs import Job

    four(tmp_path)
    listing = json.loads((tmp_path / "sweep.json").read_text())
    listing["lr_multipliers"] = {key: 1.0 for key in listing["jobs"]}
    (tmp_path / "sweep.json").write_text(json.dumps(listing))
    for key in listing["jobs"]:
        record = json.loads((tmp_path / key / "result.json").read_text())
        (tmp_path / key / "result.json").write_text(json.dumps({**record, "config": {"train": {"lr": 0.004}}}))
    names = {j.key: j.config for j in read_grid(tmp_path)}
    assert names == {key: H.configuration(Job(o, tmp_path / key, cfg={"train": {"lr": 0.004}}), searched=True)
                     for key, o in listing["jobs"].items()}
    assert all(n.endswith(",train.lr=0.004") for n in names.values())


def test_asha_with_every_trial_failed_picks_none(tmp_path):
    for name in "ab":
        write_job(tmp_path, name, 0, 1.0, {}, status="failed", reached=1)
    jobs = read_grid(tmp_path)
    place_rungs(jobs, parse_rungs("1/3,1"))
    out, fate = optuna_search(jobs, eta=2, workers=2)
    assert out.pick is None and set(fate.values()) == {"failed"} and out.busy == out.end * 2 == 2
