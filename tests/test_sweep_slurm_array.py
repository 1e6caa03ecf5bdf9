"""hydra/launcher=slurm prepares an array with one shared payload (hydra_plugins/slm_sweeps/slurm_launcher.py): each
job's pickle is an ArrayTask of its own overrides, a node runs it as the stock launcher would, and a requeue resubmits
it unchanged. Slurm is stood in for by stand-ins on PATH for every binary the submission calls (submitit refuses to
start without an `srun`; `sbatch` answers as sbatch does; `scontrol` knows no cluster), so the test is the same on a
machine that never had Slurm and on one where a real Slurm is installed (tests/slurm runs a real one)."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SBATCH = """#!/bin/sh
echo "$@" > "$SLM_TEST_SBATCH_MARK"
echo "Submitted batch job 4242"
"""
# Each binary the launcher's path may call, as this test's stand-in: sbatch submits; srun is only looked for (submitit's
# executor checks it is on PATH); scontrol fails as it does where no cluster answers (no MaxArraySize: nothing is cut).
STAND_INS = {"sbatch": SBATCH, "srun": "#!/bin/sh\nexit 0\n",
             "scontrol": "#!/bin/sh\necho 'slurm_load_ctl_conf error: Unable to contact slurm controller' >&2\nexit 1\n"}


@pytest.fixture(scope="module")
def submitted(tmp_path_factory):
    """A 3-job Slurm sweep, stopped once sbatch has been called: (its work directory, the run group's directory)."""
    work = tmp_path_factory.mktemp("slurm")
    (work / "bin").mkdir()
    for name, script in STAND_INS.items():
        (work / "bin" / name).write_text(script)
        (work / "bin" / name).chmod(0o755)
    mark = work / "sbatch.mark"
    env = {**os.environ, "SLM_RUNS": str(work / "runs"), "PATH": f"{work / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "SLM_TEST_SBATCH_MARK": str(mark), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "slm.cli.train", "-m", "model=debug", "train.seed=0,1,2",
                             "train.length.steps=2", "eval=none", "run_group=arr", "hydra/launcher=slurm"],
                            cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        began = time.monotonic()
        while not mark.exists():
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() - began < 300
            time.sleep(0.1)
        time.sleep(0.5)  # submitit moves each job's pickle into place after sbatch answers
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return work, work / "runs" / "arr"


def job_pickles(sweep: Path) -> list[Path]:
    return sorted((sweep / ".submitit").glob("4242_*/4242_*_submitted.pkl"))


def test_each_job_pickle_is_its_own_small_task_and_the_launcher_is_pickled_once(submitted):
    from hydra_plugins.slm_sweeps.slurm_launcher import ArrayTask

    _, sweep = submitted
    paths = job_pickles(sweep)
    assert [p.parent.name for p in paths] == ["4242_0", "4242_1", "4242_2"]
    shared = list((sweep / ".submitit").glob("array-*.pkl"))
    assert len(shared) == 1
    tasks = []
    for path in paths:
        assert path.stat().st_size < 2000  # the stock launcher's were ~85 KB each
        with path.open("rb") as f:
            delayed = pickle.load(f)
        assert isinstance(delayed.function, ArrayTask) and delayed.args == () and delayed.kwargs == {}
        tasks.append(delayed.function)
    assert [t.job_num for t in tasks] == [0, 1, 2]
    assert [t.overrides for t in tasks] == [["model=debug", f"train.seed={s}", "train.length.steps=2", "eval=none",
                                             "run_group=arr"] for s in range(3)]
    assert {t.shared for t in tasks} == {str(shared[0])}
    with shared[0].open("rb") as f:
        launcher, state = pickle.load(f)
    assert type(launcher).__name__ == "SlurmLauncher" and str(launcher.config.run_group) == "arr"
    requeued = tasks[1].checkpoint()  # what submitit submits again on USR2 or a preemption
    assert requeued.function is tasks[1] and requeued.args == ()


def test_a_node_runs_its_task_into_the_job_directory(submitted):
    """The array's second task, run as Slurm would run it on a node (submitit's entry point, Slurm's variables)."""
    work, sweep = submitted
    env = {**os.environ, "SLM_RUNS": str(work / "runs"), "OMP_NUM_THREADS": "1", "SUBMITIT_EXECUTOR": "slurm",
           "SLURM_JOB_ID": "4245", "SLURM_ARRAY_JOB_ID": "4242", "SLURM_ARRAY_TASK_ID": "1", "SLURM_PROCID": "0",
           "SLURM_NTASKS": "1", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "localhost",
           "SLURM_JOB_NUM_NODES": "1"}
    out = subprocess.run([sys.executable, "-m", "submitit.core._submit", str(sweep / ".submitit" / "%j")], cwd=work,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    record = json.loads((sweep / "model=debug,train.length.steps=2,train.seed=1" / "result.json").read_text())
    assert record["status"] == "completed"
    assert (sweep / ".submitit" / "4242_1" / "4242_1_0_result.pkl").exists()  # what the waiting sweep reads
    assert not (sweep / "model=debug,train.length.steps=2,train.seed=0").exists()


def test_an_array_is_cut_at_the_clusters_max_array_size(tmp_path, monkeypatch):
    """sbatch refuses an array over MaxArraySize (1001 by default): without hydra.sweeper.max_batch_size the sweeper
    submits arrays of at most that many, one after another; without scontrol nothing is cut."""
    from types import SimpleNamespace

    from hydra_plugins.slm_sweeps.grid_sweeper import GridSweeper
    from hydra_plugins.slm_sweeps.slurm_launcher import SlurmLauncher, max_array_size

    (tmp_path / "scontrol").write_text("#!/bin/sh\necho 'MaxArraySize            = 1001'\necho 'MaxJobCount = 10000'\n")
    (tmp_path / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert max_array_size() == 1001
    sweeper = GridSweeper()
    sweeper.launcher = SlurmLauncher.__new__(SlurmLauncher)
    assert sweeper.batch_size() == 1001
    sweeper.max_batch_size = 50
    assert sweeper.batch_size() == 50
    sweeper.max_batch_size, sweeper.launcher = None, SimpleNamespace()  # the basic launcher: no limit
    assert sweeper.batch_size() is None
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert max_array_size() is None
