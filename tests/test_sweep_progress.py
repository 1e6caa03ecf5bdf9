"""A sweep's progress (job i of n, the whole sweep's counts, the time left from completed jobs' recorded times) as the
sweeper, slm-workers and slm-status show it; the Slurm dry run's submission; the dry run's MFU beside the measured one."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from slm.sweeps import jobs as J, progress as P
from slm.sweeps.plan import mfu_by_family, slurm_lines
from slm.cli.status import report
from slm.runs.lock import run_lock
from slm.runs.progress import sweep_progress
from slm.runs.record import update_record
from slm.runs.states import job_seconds, states_of
from slm.sweeps.store import list_jobs
from tests.test_sweep_grid import TINY, slm

ROOT = Path(__file__).parents[1]


def _run(run_dir: Path, status: str, logged: int = 0, max_steps: int = 10, **training) -> Path:
    """A run directory whose record says `status`, with `logged` steps in train_log.jsonl."""
    run_dir.mkdir(parents=True)
    update_record(run_dir, status=status, error=None, training={"max_steps": max_steps, **training})
    if logged:
        (run_dir / "train_log.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, logged + 1)))
    return run_dir


def _sweep(tmp_path: Path) -> tuple[Path, list[J.Job]]:
    """a: completed in 60 s of training; b: half trained (its lock is taken by the tests); c: failed; d, e: pending."""
    sweep = tmp_path / "demo"
    _run(sweep / "a", "completed", 10, steps=10, session_steps=10, wall_seconds=60.0)
    _run(sweep / "b", "running", 5)
    _run(sweep / "c", "failed")
    jobs = [J.Job([k], sweep / k, None) for k in "abcde"]
    list_jobs(sweep, {j.key: j.overrides for j in jobs})
    return sweep, jobs


def test_a_copy_counts_the_whole_sweep_and_the_eta_from_completed_jobs(tmp_path, monkeypatch):
    sweep, jobs = _sweep(tmp_path)
    monkeypatch.delenv("SLM_WORKERS", raising=False)
    with run_lock(sweep / "b") as held:  # another copy trains b
        assert held
        line = P.progress_line("demo", jobs, jobs[3], "starts (d)", starting=True)
        # left: half of b, all of d and e = 2.5 jobs x 60 s, 2 at a time (b's copy and this one)
        assert line == ("sweep demo: job 4 of 5 starts (d); 1 completed, 1 failed, 2 running, 1 pending (2 of 5 done); "
                        "eta 1m15s")
        monkeypatch.setenv("SLM_WORKERS", "3")  # three copies share it: at most the 3 jobs left at once
        assert P.progress_line("demo", jobs, jobs[3], "starts (d)", starting=True).endswith("eta 50s")
    # nobody holds b: it is stopped, left to be resumed; one job at a time
    monkeypatch.delenv("SLM_WORKERS")
    line = P.progress_line("demo", jobs, jobs[0], "completed in 1m01s")
    assert line.startswith("sweep demo: job 1 of 5 completed in 1m01s; 1 completed, 1 failed, 0 running, 1 stopped, "
                           "2 pending (2 of 5 done); eta 2m30s"), line


def test_no_eta_before_a_job_has_completed_and_none_once_every_job_is_done(tmp_path):
    sweep = tmp_path / "s"
    _run(sweep / "a", "failed")
    states = states_of([sweep / "a", sweep / "b"])
    assert [s.status for s in states] == ["failed", "pending"]
    assert sweep_progress(states).eta is None
    assert P.progress_line("s", [J.Job([], sweep / k, None) for k in "ab"], J.Job([], sweep / "a", None), "failed in 1s") \
        .endswith("1 pending (1 of 2 done); eta after the first job completes")
    update_record(sweep / "a", status="completed", training={"wall_seconds": 5.0})
    _run(sweep / "b", "completed", wall_seconds=7.0)
    p = sweep_progress(states_of([sweep / "a", sweep / "b"]))
    assert (p.done, p.unfinished, p.eta, p.per_job) == (2, 0, None, 6.0)


def test_a_resumed_runs_training_time_is_scaled_to_the_whole_run():
    assert job_seconds({"training": {"wall_seconds": 30.0, "steps": 100, "session_steps": 25}}) == 120.0
    assert job_seconds({"training": {"wall_seconds": 30.0, "steps": 100, "session_steps": 100}}) == 30.0
    assert job_seconds({"training": {"wall_seconds": "nan"}}) is None and job_seconds({}) is None


def test_the_sweeps_outcomes_tell_a_job_another_copy_trains_from_a_stopped_one(tmp_path, capsys):
    sweep, jobs = _sweep(tmp_path)
    with run_lock(sweep / "b"):
        assert J.outcome(jobs[1])["status"] == "running"
        assert J.taken(jobs[1]) and not J.taken(jobs[3])
        P.summarize("demo", sweep, [J.outcome(j) for j in jobs[:3]])
    assert J.outcome(jobs[1])["status"] == "stopped"  # recorded running, nobody trains it: resumed next time
    assert J.taken(jobs[0]) and not J.taken(jobs[1])  # completed meanwhile: passed over
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"sweep demo: 3 jobs: 1 completed, 1 running, 1 failed (details: slm-status {sweep})"
    assert out[1:3] == ["  running   b:", "  failed    c:"]
    assert out[3] == f"sweep demo: 1 job is still training in another process: this is not the sweep's end (slm-status {sweep})"


def test_slm_status_shows_the_progress_of_a_group_while_it_runs(tmp_path):
    sweep, _ = _sweep(tmp_path)
    with run_lock(sweep / "b"):
        lines = report(sweep)
    assert lines[1] == ("progress: 1 completed, 1 failed, 1 running, 2 pending (2 of 5 done); eta 2m30s: "
                        "2.5 jobs left x 1m00s per job (the mean time of 1 completed job: training, and where recorded "
                        "the final validation and scoring; data preparation not counted), 1 at a time")
    done = tmp_path / "done"
    _run(done / "a", "completed", wall_seconds=1.0)
    assert not any(line.startswith("progress:") for line in report(done))


def test_workers_sum_up_the_sweep_once_every_copy_has_ended(tmp_path):
    # two copies of a sweep of jobs a, b: the first trains a and ends at once; the second holds b a while longer
    sweep = tmp_path / "runs" / "t"
    copy = tmp_path / "a_copy.py"
    copy.write_text(textwrap.dedent(f"""
        import os, sys, time
        from pathlib import Path
        from slm.sweeps import jobs as J, progress as P
        from slm.runs.record import update_record
        from slm.runs.lock import run_lock
        sweep = Path({str(sweep)!r})
        jobs = [J.Job([k], sweep / k, None) for k in "ab"]
        assert os.environ["SLM_WORKERS"] == "2" and P.note_for_workers("t", sweep, jobs)
        try:
            os.close(os.open({str(tmp_path / 'first')!r}, os.O_CREAT | os.O_EXCL))
            first = True
        except FileExistsError:
            first = False
        key = "a" if first else "b"
        with run_lock(sweep / key):
            update_record(sweep / key, status="running")
            time.sleep(0 if first else 1.5)
            update_record(sweep / key, status="completed" if first else "failed", error=None if first else "boom")
        print(key, "done", flush=True)
        sys.exit(0 if first else 1)
    """))
    out = subprocess.run([sys.executable, "-m", "slm.cli.workers", "2", "--stagger", "0.2", "--",
                          sys.executable, str(copy)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert sorted(lines[:2]) == ["[1] a done", "[2] b done"], out.stdout
    assert lines[2:] == ["slm-workers: every copy has ended (exit status 1); the sweeps they ran, from their run "
                         "directories:", f"sweep t: 2 jobs: 1 completed, 1 failed (details: slm-status {sweep})",
                         "  failed    b: boom"], out.stdout


def test_a_sweep_prints_job_i_of_n_and_plain_lines_off_a_terminal(tmp_path, monkeypatch):
    args = ["-m", "run_group=prog", *TINY, "train.length.steps=2", "train.seed=1,2,3"]
    out = slm(tmp_path, *args)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "\r" not in out.stdout
    lines = [line for line in out.stdout.splitlines() if line.startswith("sweep prog: job")]
    assert [" ".join(line.split()[:7]) for line in lines] == [
        "sweep prog: job 1 of 3 starts", "sweep prog: job 1 of 3 completed", "sweep prog: job 2 of 3 starts",
        "sweep prog: job 2 of 3 completed", "sweep prog: job 3 of 3 starts", "sweep prog: job 3 of 3 completed"]
    assert lines[0].endswith("0 completed, 0 failed, 1 running, 2 pending (0 of 3 done); eta after the first job completes")
    assert "1 completed, 0 failed, 0 running, 2 pending (1 of 3 done); eta " in lines[1]
    assert lines[-1].endswith("3 completed, 0 failed, 0 running, 0 pending (3 of 3 done)")
    assert out.stdout.splitlines()[-1].startswith("sweep prog: 3 jobs: 3 completed")
    # as a copy of slm-workers: it notes its jobs for slm-workers' summary and leaves the summary to it
    notes = tmp_path / "notes"
    notes.mkdir()
    monkeypatch.setenv("SLM_WORKERS_DIR", str(notes))
    again = slm(tmp_path, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.splitlines()[-1] == "sweep prog: this copy is done; slm-workers sums up the sweep once every copy has ended"
    note, = [json.loads(p.read_text()) for p in notes.iterdir()]
    assert note["name"] == "prog" and len(note["keys"]) == 3 and Path(note["sweep_dir"]) == tmp_path / "runs" / "prog"


SLURM = OmegaConf.to_container(OmegaConf.load(ROOT / "conf/hydra/launcher/slurm.yaml"))


def _row(state: str, hours: float = 1.0, **more) -> dict:
    return {"state": state, "launch": state not in ("completed", "failed"), "error": None, "gpu_hours": hours, **more}


def test_the_slurm_dry_run_says_what_would_be_submitted():
    rows = [_row("pending", 30.0), _row("stopped", 2.0), _row("completed"), _row("failed"),
            _row("pending", launch=False, invalid=True, error="bad")]
    lines = slurm_lines({**SLURM, "partition": "gpu", "timeout_min": 600}, rows)
    assert lines[0] == "Slurm (hydra_plugins.slm_sweeps.slurm_launcher.SlurmLauncher), nothing submitted:"
    assert lines[1] == ("  array: 2 jobs, the jobs not completed (left out: 1 completed, 1 recorded failed (rerun_failed="
                        "true adds it), 1 invalid); at most 64 running at once (array_parallelism)")
    assert lines[2] == "  per job: 1 node x 1 task per node, 1 GPU per node, 8 CPUs per task, 64 GB memory per node"
    assert lines[3] == "  partition gpu"
    assert lines[4].startswith("  time limit: 10h00m per attempt (timeout_min=600); 120 s before it USR2 checkpoints")
    assert lines[4].endswith("up to 10 times (max_num_timeout; preemptions without limit); the longest job, 30.00 h "
                             "estimated on its 1 GPU, needs about 4 attempts")
    assert lines[5] == "  32.00 GPU-h for the array at the MFU above"
    multi = slurm_lines({**SLURM, "nodes": 2, "gpus_per_node": 4, "tasks_per_node": 4}, rows, batch_size=1)
    assert "in 2 arrays of at most 1 one after another" in multi[1] and "4 GPUs per node (8 in all)" in multi[2]
    assert "3.75 h estimated on its 8 GPUs, fits in one attempt" in multi[4]
    assert slurm_lines({**SLURM, "timeout_min": 60, "max_num_timeout": 0}, rows)[4].endswith(
        "needs about 32 attempts (more than max_num_timeout allows: raise timeout_min)")
    assert slurm_lines({"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}, rows) == []


def test_the_cli_slurm_dry_run_submits_nothing(tmp_path):
    out = slm(tmp_path, "-m", "run_group=sl", *TINY, "train.seed=1,2", "hydra/launcher=slurm",
              "hydra.sweeper.dry_run=true", "hydra.launcher.partition=gpu", "hydra.launcher.array_parallelism=7")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "  array: 2 jobs, the jobs not completed; at most 7 running at once (array_parallelism)" in out.stdout
    assert "  partition gpu" in out.stdout and "per job: 1 node x 1 task per node, 1 GPU per node" in out.stdout
    assert not (tmp_path / "runs").exists()  # no sweep directory, no .submitit


@pytest.mark.parametrize("given, beside", [
    (None, "15.3%, assumed (hydra.sweeper.estimate.assumed_mfu): the one measured figure (llama3 70M, torch.compile"),
    (0.4, "40.0%, as given (hydra.sweeper.estimate.mfu): the one measured figure is 15.3% (llama3 70M"),
])
def test_an_mfu_not_measured_here_is_stated_beside_the_measured_one(tmp_path, given, beside):
    estimate = OmegaConf.to_container(OmegaConf.load(ROOT / "conf/hydra/sweeper/grid.yaml").estimate)
    mfu, source = mfu_by_family({**estimate, "mfu": given}, {"llama3"}, tmp_path)["llama3"]
    assert f"{mfu:.1%}, {source}".startswith(beside) and "docs/benchmarks.md" in source
    assert "15.3%" in (ROOT / "docs/benchmarks.md").read_text() and "15.3%" in (ROOT / "docs/sweeps.md").read_text()


def test_a_jobs_time_is_its_training_and_the_rest_of_its_last_session():
    """Scoring can take longer than training (the cpu_default sweep's dllm: 36 s of training, 64 s of scoring): the
    time left counts it where the record has it."""
    assert job_seconds({"training": {"wall_seconds": 36.0, "steps": 10, "session_steps": 10}}) == 36.0
    assert job_seconds({"training": {"wall_seconds": 36.0, "steps": 10, "session_steps": 10,
                                     "session_job_seconds": 100.0}}) == 100.0
    # a resumed run: its earlier sessions' training (scaled) plus the last session's validation and scoring
    assert job_seconds({"training": {"wall_seconds": 18.0, "steps": 10, "session_steps": 5,
                                     "session_job_seconds": 30.0}}) == 36.0 + 12.0
    assert job_seconds({"training": {}}) is None


def test_a_completed_run_records_its_sessions_time(tmp_path, monkeypatch):
    from tests.test_bad_input import RUN, _train

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLM_RUNS", str(tmp_path / "runs"))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    _train(RUN)
    (run,) = (tmp_path / "runs" / "train").iterdir()
    training = json.loads((run / "result.json").read_text())["training"]
    assert training["session_job_seconds"] >= training["wall_seconds"] > 0


def test_a_halving_rungs_paused_jobs_give_the_eta_and_slm_status_their_rung_score_and_rank(tmp_path):
    """Through a whole halving rung no job completes: the eta comes from the paused ones (their pace over all their
    steps, an upper bound: halving prunes some), and slm-status shows each paused run's rung, score and rank."""
    from slm.sweeps.store import save_halving_decisions

    sweep = tmp_path / "halve"
    paused = {"step": 8, "fraction": 1 / 3}
    _run(sweep / "a", "paused", 8, max_steps=24, steps=8, wall_seconds=4.0, paused={**paused, "val_nll": 3.0})
    _run(sweep / "b", "paused", 8, max_steps=24, steps=8, wall_seconds=4.0, paused={**paused, "val_nll": 3.5})
    list_jobs(sweep, {k: [f"x={k}", "train.seed=0"] for k in "abc"})
    p = sweep_progress(states_of([sweep / k for k in "abc"]))
    assert p.per_job == 12.0 and p.left == pytest.approx(1 + 2 * 2 / 3)  # c to do, a and b two thirds each
    lines = report(sweep)
    assert lines[1].startswith("progress: 0 completed, 0 failed, 0 running, 2 paused, 1 pending (0 of 3 done); "
                               "eta at most 28s: 2.33 jobs left x 12s per job"), lines[1]
    assert any(x.endswith("rung 1: paused at step 8: val_nll 3.0000 there; ranked once every job of the rung has "
                          "reached it") for x in lines), lines
    save_halving_decisions(sweep, [{"rung": 1, "rungs": 2, "fraction": 1 / 3, "kept": ["x=a"],
                                    "scores": {"x=a": 3.0, "x=b": 3.5}, "jobs": {"x=a": ["a"], "x=b": ["b"]}}])
    lines = report(sweep)
    assert any(x.endswith("8/24  rung 1 of 2 (step 8): score 3.0000 (its configuration's mean over seeds), rank 1 "
                          "of 2: goes on") for x in lines), lines
