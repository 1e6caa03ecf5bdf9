"""`hydra/launcher=slurm` (conf/hydra/launcher/slurm.yaml): hydra-submitit-launcher's Slurm launcher,
waiting for every job of the array.

The stock launcher collects results with `[j.results()[0] for j in jobs]`: the first job that dies
without a result (killed, out of memory, node failure) raises there, the driver stops waiting for the
others and the sweep's summary is lost. Here each job is waited for on its own; one that died becomes a
FAILED JobReturn carrying submitit's error (read from Slurm's accounting: sacct), which the sweepers
record in that job's result.json, and the others are still collected.

The stock launcher also pickles itself (the sweep's whole config, Hydra's config loader) and Hydra's global state
into every job's pickle: ~85 KB and ~70 ms a job, 12 minutes and 850 MB for a 10,000-job array. Here they are pickled
once per array into `<submitit folder>/array-<id>.pkl`, and each job's pickle holds an ArrayTask (that file's path and
the job's own arguments, well under 1 KB); on the node the task loads the file and runs the job as the stock launcher
would, and its `checkpoint` resubmits it as it is, so a requeued job (USR2, preemption) runs the same way again.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititSlurmLauncher
from omegaconf import OmegaConf

log = logging.getLogger(__name__)


def max_array_size() -> int | None:
    """The cluster's MaxArraySize (`scontrol show config`: an array's indices run 0 to MaxArraySize - 1, 1001 by
    default), or None where scontrol does not answer (no Slurm here: nothing limits the array)."""
    import re
    import subprocess

    try:
        out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"^\s*MaxArraySize\s*=\s*(\d+)", out.stdout, re.M) if out.returncode == 0 else None
    return int(found.group(1)) if found else None


class Requeued:
    """A task submitit resubmits as it is on USR2 or a preemption (submitit.helpers.Checkpointable's rule, without
    importing submitit when Hydra discovers the plugin)."""

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


class ArrayTask(Requeued):
    """One job of an array: the stock launcher's call with its arguments, the launcher and Hydra's state read from the
    file every job of the array shares (`shared`: a pickle of (launcher, Singleton state))."""

    def __init__(self, shared: str, overrides: list[str], job_num: int) -> None:
        self.shared, self.overrides, self.job_num = shared, overrides, job_num

    def __call__(self) -> JobReturn:
        import pickle

        with open(self.shared, "rb") as f:
            launcher, singleton_state = pickle.load(f)
        return launcher(self.overrides, "hydra.sweep.dir", self.job_num, f"job_id_for_{self.job_num}", singleton_state)


class WorkerTask(Requeued):
    """One worker of an Optuna study shared by a Slurm array (hydra.sweeper.workers; slm.sweeps.study_claims):
    slm-train's sweep command, run in this process as one driver with the basic launcher, so that it asks for a trial,
    trains it, tells it and asks again until the study holds its trials. On USR2 or a preemption the trial's run
    checkpoints and submitit requeues the task as it is; its next attempt (or another worker) takes the trial up
    again, since no live driver claims it any more."""

    def __init__(self, argv: list[str], workers: int) -> None:
        self.argv, self.workers = list(argv), workers

    def __call__(self) -> int:
        import os
        import sys

        from slm.sweeps.status import WORKERS_ENV

        os.environ[WORKERS_ENV] = str(self.workers)  # a copy among `workers`: SQLite refused, summaries partial
        sys.argv = ["slm-train", *self.argv]
        from slm.cli.train import main

        try:
            main()
        except SystemExit as stop:
            if stop.code == -1:  # submitit's own exit once it has requeued this task: no result for this attempt
                raise
            if stop.code not in (0, None):
                raise RuntimeError(f"the worker's driver exited {stop.code}") from None
        return 0


class SlurmLauncher(SubmititSlurmLauncher):
    def array_limit(self) -> int | None:
        """The most jobs one array may hold on this cluster (MaxArraySize, read once), None when unknown."""
        if not hasattr(self, "_array_limit"):
            self._array_limit = max_array_size()
        return self._array_limit

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        jobs = self.submit(job_overrides, initial_job_idx)
        return self.collect(jobs, job_overrides)

    def executor(self) -> Any:
        """submitit's Slurm executor with this launcher's settings (conf/hydra/launcher/slurm.yaml)."""
        import submitit

        specific_init_keys = {"max_num_timeout"}
        init_params = {"folder": self.params["submitit_folder"]}
        init_params.update({f"{self._EXECUTOR}_{k}": v for k, v in self.params.items() if k in specific_init_keys})
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init_params)
        baseparams = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{
            k if k in baseparams else f"{self._EXECUTOR}_{k}": v
            for k, v in self.params.items() if k not in specific_init_keys | {"submitit_folder"}
        })
        return executor

    def submit(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list:
        """Submit the jobs as one array (one sbatch); submitit's Job of each, in order."""
        import cloudpickle
        from submitit.core.utils import JobPaths

        from slm.atomic import atomic_write

        assert self.config is not None and len(job_overrides) > 0
        executor = self.executor()
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info(f"Submitit '{self._EXECUTOR}' sweep output dir : {sweep_dir}")
        folder = JobPaths.get_first_id_independent_folder(self.params["submitit_folder"])
        folder.mkdir(parents=True, exist_ok=True)
        shared = folder / f"array-{uuid.uuid4().hex}.pkl"
        payload = cloudpickle.dumps((self, Singleton.get_state()))
        atomic_write(shared, lambda f: f.write(payload))
        tasks = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            tasks.append(ArrayTask(str(shared), list(overrides), idx))
        jobs = executor.submit_array(tasks)  # each task its own callable: submitit's requeue calls its checkpoint
        log.info(f"Submitted {len(jobs)} job{'s' if len(jobs) != 1 else ''} as Slurm array "
                 f"{str(jobs[0].job_id).split('_')[0]}")
        return jobs

    def submit_workers(self, argv: list[str], count: int) -> list[str]:
        """Submit `count` WorkerTasks of `argv` (slm-train's arguments) as one array and wait for every one; the
        errors of those that died, one line each (a worker that died leaves its trial to the others)."""
        assert self.config is not None
        executor = self.executor()
        executor.update_parameters(slurm_array_parallelism=count)
        jobs = executor.submit_array([WorkerTask(argv, count) for _ in range(count)])
        log.info(f"Submitted {count} workers of the study as Slurm array {str(jobs[0].job_id).split('_')[0]}")
        errors = []
        for job in jobs:
            try:
                job.results()
            except Exception as err:  # the worker died: its trial is taken up by the others, or the next start
                errors.append(f"Slurm job {job.job_id}: {' '.join(str(err).split())[:500]}")
                log.error(errors[-1])
        return errors

    def collect(self, jobs: list, job_overrides: Sequence[Sequence[str]]) -> list[JobReturn]:
        """Each job's JobReturn, waited for one by one; a job that died without a result is FAILED with its error."""
        returns = []
        for job, overrides in zip(jobs, job_overrides):
            try:
                returns.append(job.results()[0])
            except Exception as err:  # the job died without a result
                log.error(f"Slurm job {job.job_id} failed: {' '.join(str(err).split())[:500]}")
                ret = JobReturn(overrides=list(overrides), status=JobStatus.FAILED)
                ret.return_value = err
                returns.append(ret)
        return returns
