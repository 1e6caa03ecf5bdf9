"""`hydra/launcher=slurm` (conf/hydra/launcher/slurm.yaml): hydra-submitit-launcher's Slurm launcher,
waiting for every job of the array.

The stock launcher collects results with `[j.results()[0] for j in jobs]`: the first job that dies
without a result (killed, out of memory, node failure) raises there, the driver stops waiting for the
others and the sweep's summary is lost. Here each job is waited for on its own; one that died becomes a
FAILED JobReturn carrying submitit's error (read from Slurm's accounting: sacct), which the sweepers
record in that job's result.json, and the others are still collected.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, List, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititSlurmLauncher
from omegaconf import OmegaConf

log = logging.getLogger(__name__)


class SlurmLauncher(SubmititSlurmLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import submitit

        assert self.config is not None and len(job_overrides) > 0
        specific_init_keys = {"max_num_timeout"}
        init_params = {"folder": self.params["submitit_folder"]}
        init_params.update({f"{self._EXECUTOR}_{k}": v for k, v in self.params.items() if k in specific_init_keys})
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init_params)
        baseparams = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{
            k if k in baseparams else f"{self._EXECUTOR}_{k}": v
            for k, v in self.params.items() if k not in specific_init_keys | {"submitit_folder"}
        })
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info(f"Submitit '{self._EXECUTOR}' sweep output dir : {sweep_dir}")
        job_params: List[Any] = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            job_params.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        jobs = executor.map_array(self, *zip(*job_params))
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
