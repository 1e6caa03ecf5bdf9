"""Sweeps through hydra/launcher=slurm on a real single-node Slurm cluster (tests/slurm/start.sh;
`make test-slurm` installs, starts, runs these and stops it): the smoke sweep, a preemption that
checkpoints, requeues and resumes to the weights of an uninterrupted run, failing jobs reported, an
Optuna study whose trials run as Slurm jobs, an Optuna study shared by an array of workers of which one is
preempted, and successive halving with one array per rung."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from slm.training.trial_link import open_storage

pytestmark = pytest.mark.slurm

# the test cluster has no GPU and little memory; one thread per job keeps the runs bit-identical
LAUNCHER = ["hydra/launcher=slurm", "hydra.launcher.gpus_per_node=null", "hydra.launcher.cpus_per_task=1",
            "hydra.launcher.mem_gb=null", "hydra.launcher.timeout_min=20",
            "hydra.launcher.setup=['export OMP_NUM_THREADS=1']"]
LONG = ["model=debug", "eval=none", "train.length.steps=600", "train.checkpoint.interval=1000", "train.validation.interval=200", "train.validation.batches=2",
        "train.logging.interval=10", "train.logging.progress_bar=false"]


@pytest.fixture(scope="module", autouse=True)
def cluster():
    if not os.environ.get("SLURM_CONF") or shutil.which("sinfo") is None:
        pytest.skip("no Slurm cluster: run `make test-slurm`")
    if subprocess.run(["sinfo", "-h"], capture_output=True, timeout=30).returncode != 0:
        pytest.skip("the Slurm cluster does not answer: run `make test-slurm`")


def env(root: Path) -> dict:
    return {**os.environ, "SLM_RUNS": str(root / "runs"), "SLM_CACHE": str(root.parent / "slm-cache"),
            "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def sweep(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slm.cli.train", "-m", *args, *LAUNCHER], env=env(root),
                          capture_output=True, text=True, timeout=900)


def start(root: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    log = root / "driver.log"
    root.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "slm.cli.train", "-m", *args, *LAUNCHER], env=env(root),
                            stdout=log.open("w"), stderr=subprocess.STDOUT, text=True)
    return proc, log


def slurm_job(log: Path, sweep_dir: Path, marker: str, timeout: float = 120) -> str:
    """The Slurm id (<array>_<index>) of the job whose overrides contain `marker`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        index = re.search(rf"#(\d+) : .*{re.escape(marker)}", log.read_text())
        arrays = {t.split("_")[0] for t in tasks(sweep_dir)} if index else set()
        if arrays:
            return f"{max(arrays, key=int)}_{index.group(1)}"
        time.sleep(0.5)
    raise AssertionError(f"no Slurm job for {marker}:\n{log.read_text()[-3000:]}")


def tasks(sweep_dir: Path) -> list[str]:
    """The Slurm array tasks (<array>_<index>) submitit made folders for."""
    folder = sweep_dir / ".submitit"
    return sorted(p.name for p in folder.iterdir() if re.fullmatch(r"\d+_\d+", p.name)) if folder.exists() else []


def last_step(run_dir: Path) -> int:
    path = run_dir / "train_log.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return json.loads(lines[-1])["step"] if lines else 0


def wait_for_step(sweep_dir: Path, marker: str, step: int, proc: subprocess.Popen, timeout: float = 300) -> Path:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        for run_dir in sweep_dir.glob(f"*{marker}*"):
            if last_step(run_dir) >= step:
                return run_dir
        time.sleep(0.2)
    raise AssertionError(f"{marker} never reached step {step}")


STARTED = time.strftime("%Y-%m-%dT%H:%M:%S")
"""When this module was imported: job ids start again when the test cluster is started again over an existing
accounting database, so sacct also lists older jobs of the same id; those submitted before now are ignored."""


LIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"}


def sacct(job: str, timeout: float = 120) -> list[str]:
    """The states of a job that has ended (each attempt's, -D), read from Slurm's accounting once it has caught
    up: slurmdbd records the end a few seconds after the job ends, later on a loaded machine."""
    deadline = time.time() + timeout
    while True:
        out = subprocess.run(["sacct", "-j", job, "-D", "-X", "-n", "-P", "-o", "JobID,State,Submit"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        rows = [line.split("|") for line in out.stdout.splitlines() if line.strip()]
        states = [row[1].split()[0] for row in rows if row[2] >= STARTED]
        if (states and states[-1] not in LIVE) or time.time() > deadline:
            return states
        time.sleep(1)


def record(run_dir: Path) -> dict:
    return json.loads((run_dir / "result.json").read_text())


def test_smoke_sweep_through_slurm_and_again_without_jobs(tmp_path):
    out = sweep(tmp_path, "sweep=smoke")
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert "sweep smoke: 4 jobs: 4 completed" in out.stdout
    sweep_dir = tmp_path / "runs" / "smoke"
    submitted = tasks(sweep_dir)
    assert len(submitted) == 4 and all(sacct(t) == ["COMPLETED"] for t in submitted)
    again = sweep(tmp_path, "sweep=smoke")
    assert again.returncode == 0 and "launching 0 of 4 jobs" in again.stdout
    assert tasks(sweep_dir) == submitted  # nothing submitted


REF, CUT = 200, 300


def test_preemption_checkpoints_requeues_and_resumes_to_the_same_weights(tmp_path):
    # two jobs that train the same weights: validating every 200 or 300 steps changes what is logged, not what
    # is trained (training batches are a function of seed and step; debug has no dropout), and keys the job apart
    settings = [a for a in LONG if not a.startswith("train.validation.interval=")]
    proc, log = start(tmp_path, "run_group=pre", *settings, f"train.validation.interval={REF},{CUT}")
    sweep_dir = tmp_path / "runs" / "pre"
    job = slurm_job(log, sweep_dir, f"train.validation.interval={CUT}")
    cut = wait_for_step(sweep_dir, f"train.validation.interval={CUT}", 100, proc)
    subprocess.run(["scancel", "--signal=USR2", job], check=True, timeout=60)
    proc.wait(timeout=900)
    assert proc.returncode == 0, log.read_text()[-3000:]
    (ref,) = sweep_dir.glob(f"*train.validation.interval={REF}*")
    r = record(cut)
    assert r["status"] == "completed" and r["training"]["resumed_from"] == "checkpoints/last.ckpt"
    assert r["training"]["interruptions"] == 1 and r["training"]["interrupted"]["signal"] == "SIGUSR2"
    assert 100 <= r["training"]["interrupted"]["step"] < 600
    assert "REQUEUED" in sacct(job) and sacct(job)[-1] == "COMPLETED"
    a, b = load_file(ref / "model" / "model.safetensors"), load_file(cut / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (ref / "train_log.jsonl").read_text() == (cut / "train_log.jsonl").read_text()
    assert r["eval"]["val_nll"] == record(ref)["eval"]["val_nll"]


def test_failing_jobs_are_reported_failed_and_the_others_complete(tmp_path):
    proc, log = start(tmp_path, "run_group=die", *LONG, "train.lr=0.001,0.002,-1")
    sweep_dir = tmp_path / "runs" / "die"
    job = slurm_job(log, sweep_dir, "train.lr=0.002")
    wait_for_step(sweep_dir, "train.lr=0.002", 20, proc)
    subprocess.run(["scancel", job], check=True, timeout=60)  # the job dies without a result
    proc.wait(timeout=900)
    out = log.read_text()
    assert proc.returncode == 1, out[-3000:]
    status = {re.search(r"train.lr=([^,]+)", p.name).group(1): record(p) for p in sweep_dir.glob("*train.lr=*")}
    assert {k: r["status"] for k, r in status.items()} == {"0.001": "completed", "0.002": "failed",
                                                           "-1.0": "failed"}  # keys spell a float field's value as a float
    assert "CANCELLED" in status["0.002"]["error"] and "UncompletedJobError" in status["0.002"]["error"]
    assert status["-1.0"]["error"].startswith("SettingsError: train.lr=-1 is invalid")
    assert "sweep die: 3 jobs: 1 completed, 2 failed" in out
    assert sacct(job)[-1].startswith("CANCELLED")
    report = subprocess.run([sys.executable, "-m", "slm.cli.status", str(sweep_dir)], capture_output=True, text=True)
    assert "failed (2)" in report.stdout and "CANCELLED" in report.stdout


def test_optuna_trials_run_as_slurm_jobs(tmp_path):
    import optuna

    out = sweep(tmp_path, "hydra/sweeper=optuna", "run_group=opt", "model=debug", "eval=none", "train.length.steps=10",
                "train.validation.batches=1", "train.logging.progress_bar=false", "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2")
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    sweep_dir = tmp_path / "runs" / "opt"
    study = optuna.load_study(study_name="opt", storage=open_storage(str(sweep_dir / "optuna.journal")))
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 4 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    runs = {p.name: record(p) for p in sweep_dir.glob("model=debug,*")}
    assert len(runs) == 4 and all(r["status"] == "completed" for r in runs.values())
    assert sorted(t.value for t in trials) == sorted(r["eval"]["val_nll"] for r in runs.values())
    assert (sweep_dir / ".submitit").is_dir()  # the trials went through Slurm


def test_a_two_task_job_trains_data_parallel_like_one_process(tmp_path):
    """hydra/launcher=slurm_multigpu with train.parallel.devices=2 on the CPU: one Slurm job of 2 tasks (gloo); rank 0
    alone writes the record and the per-step log, whose losses follow a single-process run of the same batch."""
    tiny = ["model=debug", "model.n_layers=1", "model.context_length=32", "eval=none", "train.length.steps=8",
            "train.batch_size=4", "train.validation.batches=1", "train.logging.progress_bar=false", "train.parallel.accelerator=cpu"]
    launcher = [a.replace("hydra/launcher=slurm", "hydra/launcher=slurm_multigpu") for a in LAUNCHER]
    out = subprocess.run([sys.executable, "-m", "slm.cli.train", "-m", "run_group=dp", *tiny, "train.parallel.devices=2",
                          *launcher], env=env(tmp_path), capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert "1 completed" in out.stdout
    sweep_dir = tmp_path / "runs" / "dp"
    (run_dir,) = [p for p in sweep_dir.iterdir() if (p / "result.json").exists()]
    rec = record(run_dir)
    assert rec["status"] == "completed" and rec["training"]["world_size"] == 2
    # one job is submitted as a plain job (no array): .submitit/<id>/ holds a log per task
    (job,) = [p for p in (sweep_dir / ".submitit").iterdir() if re.fullmatch(r"\d+", p.name)]
    assert {p.name for p in job.glob("*_log.out")} == {f"{job.name}_0_log.out", f"{job.name}_1_log.out"}
    two = [json.loads(line)["loss"] for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    single = subprocess.run([sys.executable, "-m", "slm.cli.train", "run_group=one", *tiny],
                            env={**env(tmp_path), "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600)
    assert single.returncode == 0, single.stderr[-3000:]
    (one_dir,) = [p for p in (tmp_path / "runs" / "one").iterdir() if (p / "result.json").exists()]
    one = [json.loads(line)["loss"] for line in (one_dir / "train_log.jsonl").read_text().splitlines()]
    assert len(two) == len(one) == 8
    assert all(abs(a - b) <= 2e-5 * abs(b) for a, b in zip(two, one)), (two, one)


def test_successive_halving_runs_each_rung_as_one_array_and_prunes_the_rest(tmp_path):
    """hydra.sweeper.halving through Slurm: 4 lrs x 1 seed, eta 2, rungs at half and all of 16 steps: an array of 4
    jobs that pause at step 8, then an array of the 2 that go on; the others recorded pruned; a second run submits
    nothing."""
    args = ["run_group=halve", "model=debug", "eval=none", "train.length.steps=16", "train.schedule.kind=wsd",
            "train.schedule.warmup_steps=2", "train.schedule.decay_fraction=0.25", "train.validation.interval=0",
            "train.validation.batches=2", "train.logging.progress_bar=false", "train.lr=1e-4,1e-3,3e-3,3e-2",
            "hydra.sweeper.halving={eta: 2, fractions: [0.5, 1]}"]
    out = sweep(tmp_path, *args)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    sweep_dir = tmp_path / "runs" / "halve"
    submitted = tasks(sweep_dir)
    assert len({t.split("_")[0] for t in submitted}) == 2 and len(submitted) == 6  # one array per rung: 4, then 2
    statuses = sorted(record(p)["status"] for p in sweep_dir.glob("*train.lr=*"))
    assert statuses == ["completed", "completed", "pruned", "pruned"]
    pruned = [record(p) for p in sweep_dir.glob("*train.lr=*") if record(p)["status"] == "pruned"]
    assert all(r["halving"]["step"] == 8 and r["training"]["steps"] == 8 for r in pruned)
    again = sweep(tmp_path, *args)
    assert again.returncode == 0 and tasks(sweep_dir) == submitted, (again.stdout + again.stderr)[-3000:]


def test_optuna_workers_share_a_study_and_a_preempted_one_s_trial_resumes_as_itself(tmp_path):
    """hydra.sweeper.workers=2: one array of 2 worker tasks, each a driver asking, training and telling trials of one
    journal study until it holds 3. One worker is preempted (USR2) in the middle of a trial: its run checkpoints,
    submitit requeues the task, and the trial is taken up again with its own values and run directory, resumed from
    its checkpoint: 3 trials in all, none failed, and the requeue in Slurm's accounting."""
    import optuna

    proc, log = start(tmp_path, "hydra/sweeper=optuna", "run_group=async", *LONG, "hydra.sweeper.n_trials=3",
                      "hydra.sweeper.workers=2", "hydra.sweeper.params=null",
                      "train.lr=tag(log, interval(1e-4, 1e-2))")
    sweep_dir = tmp_path / "runs" / "async"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:  # both workers are training a trial
        if sum(last_step(p) >= 100 for p in sweep_dir.glob("model=debug,*")) >= 2:
            break
        time.sleep(0.2)
    (array,) = {t.split("_")[0] for t in tasks(sweep_dir)}
    subprocess.run(["scancel", "--signal=USR2", f"{array}_0"], check=True, timeout=60)
    proc.wait(timeout=900)
    out = log.read_text()
    assert proc.returncode == 0, out[-3000:]
    study = optuna.load_study(study_name="async", storage=open_storage(str(sweep_dir / "optuna.journal")))
    trials = study.get_trials(deepcopy=False)
    assert [t.number for t in trials] == [0, 1, 2], [(t.number, t.state) for t in trials]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    runs = {t.user_attrs["run_dir"]: record(Path(t.user_attrs["run_dir"])) for t in trials}
    assert len(runs) == 3 and all(r["status"] == "completed" for r in runs.values())
    resumed = [r for r in runs.values() if r["training"].get("interruptions")]
    assert len(resumed) == 1 and resumed[0]["training"]["resumed_from"] == "checkpoints/last.ckpt"
    assert resumed[0]["training"]["interrupted"]["signal"] == "SIGUSR2"
    assert "REQUEUED" in sacct(f"{array}_0") and sacct(f"{array}_0")[-1] == "COMPLETED"
    assert "optuna study async: 3 trials: 3 complete, 0 pruned, 0 failed" in out
    assert "failed during processing" not in out  # the preempted attempt is requeued, not reported a dead worker
