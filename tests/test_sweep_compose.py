"""hydra_plugins/slm_sweeps/compose.py: a sweep's jobs composed from a base once per group choice give every job the
config and run directory Hydra's full composition (jobs.compose_job, the path before) gives, for every shipped sweep
and for the overrides that must take the slow path; and a 10,000-job dry run plans in seconds."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import pytest
from omegaconf import DictConfig, OmegaConf, open_dict

from slm.cli.config import CONF_DIR

SWEEPS = sorted(p.stem for p in (CONF_DIR / "sweep").glob("*.yaml")
                if "n_trials:" not in p.read_text() and "slm_top_trials" not in p.read_text())
"""The grid sweeps a study does not feed: an Optuna sweep file's jobs are its sampler's, and a grid over a study's best
trials needs the study (tests/test_optuna_space.py runs both through slm-train)."""


@pytest.fixture(scope="module")
def hydra_env(tmp_path_factory):
    """A function: overrides -> (the sweeper, the sweep's master config), composed as `slm-train -m` composes them."""
    from hydra._internal.callbacks import Callbacks
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.plugins import Plugins
    from hydra.core.utils import setup_globals
    from hydra.types import HydraContext, RunMode

    from slm.cli.config import register_resolvers

    runs = tmp_path_factory.mktemp("runs")
    old = os.environ.get("SLM_RUNS")
    os.environ["SLM_RUNS"] = str(runs)
    setup_globals()
    register_resolvers()
    hydra = Hydra.create_main_hydra2("slm-train", create_config_search_path(str(CONF_DIR)))

    def make(overrides: list[str]):
        cfg = hydra.compose_config("config", overrides, run_mode=RunMode.MULTIRUN, with_log_configuration=False)
        HydraConfig.instance().set_config(cfg)
        sweeper = Plugins.instance().instantiate_sweeper(
            config=cfg, hydra_context=HydraContext(config_loader=hydra.config_loader, callbacks=Callbacks(cfg)),
            task_function=lambda c: None)
        return sweeper, cfg, hydra.config_loader

    yield make
    GlobalHydra.instance().clear()
    if old is None:
        os.environ.pop("SLM_RUNS", None)
    else:
        os.environ["SLM_RUNS"] = old


def values(job) -> str | None:
    """The job's config less its hydra node, resolved, as JSON in its own key order (types and order count)."""
    if job.cfg is None:
        return None
    cfg = job.cfg
    if isinstance(cfg, DictConfig):
        cfg = copy.deepcopy(cfg)
        if "hydra" in cfg:
            with open_dict(cfg):
                del cfg["hydra"]
        cfg = OmegaConf.to_container(cfg, resolve=True)
    return json.dumps(cfg)


def same_as_hydra(composer, overrides: list[str]):
    """The job as the composer makes it, checked against Hydra's full composition of the same overrides."""
    from hydra_plugins.slm_sweeps.compose import compose_job

    fast = composer(overrides)
    slow = compose_job(composer.loader, composer.master, overrides)
    assert (fast.run_dir, fast.error) == (slow.run_dir, slow.error), overrides
    assert values(fast) == values(slow), overrides
    return fast


class Recording:
    """A Composer that keeps every job it made (overrides, job)."""

    def __init__(self, composer):
        self.composer, self.made = composer, []
        self.loader, self.master = composer.loader, composer.master

    def __call__(self, overrides):
        job = self.composer(overrides)
        self.made.append((list(overrides), job))
        return job


def planned_jobs(hydra_env, sweep: str):
    from hydra_plugins.slm_sweeps.compose import Composer

    sweeper, cfg, loader = hydra_env([f"sweep={sweep}"])
    recording = Recording(Composer(loader, cfg))
    sweeper.planned(OmegaConf.to_container(cfg.hydra.overrides.task), recording)
    return recording


def sample(made: list, most: int) -> list:
    """Up to `most` of the jobs: the first, the last and evenly between."""
    if len(made) <= most:
        return made
    step = (len(made) - 1) / (most - 1)
    return [made[round(i * step)] for i in range(most)]


@pytest.mark.parametrize("sweep", SWEEPS)
def test_every_shipped_sweep_composes_its_jobs_as_hydra_does(hydra_env, sweep):
    recording = planned_jobs(hydra_env, sweep)
    assert recording.made
    for overrides, _ in sample(recording.made, 3):
        same_as_hydra(recording.composer, overrides)


@pytest.mark.slow
@pytest.mark.parametrize("sweep", SWEEPS)
def test_every_job_of_every_shipped_sweep_composes_as_hydra_does(hydra_env, sweep):
    recording = planned_jobs(hydra_env, sweep)
    for overrides, _ in recording.made:
        same_as_hydra(recording.composer, overrides)


def test_the_shipped_grid_and_ladder_sweeps_never_compose_a_job_the_slow_way(hydra_env):
    for sweep in ("claims_cpu", "ladder_cpu", "lr_transfer_width", "cpu_scaling"):
        recording = planned_jobs(hydra_env, sweep)
        assert recording.composer.slow_jobs == 0, sweep
        assert all(isinstance(job.cfg, dict) for _, job in recording.made), sweep  # the plain path


@pytest.mark.parametrize("overrides", [
    ["model=gpt2", "model.n_layers=3", "train.seed=1"],                    # a group choice: its own base
    ["model.objective=mdlm"],                                              # train.objective interpolates it
    ["+train.new_field=1"],                                                # an addition
    ["++model.n_layers=5"],                                                # a forced one
    ["~model.param_budget"],                                               # a deletion
    ["data.cache_dir=/nonexistent-parent/x"],                              # checked as a directory
    ["model.layer_types=[attn,attn]", "train.lr=0.003", "train.schedule.kind=wsd"],  # a list, a float, a string
    ["model.attention={n_kv_heads: 1}"],                                   # a mapping: merged
    ["model.nope=1"],                                                      # not a setting: Hydra's error line
    ["run_group=other", "model.n_layers=3"],                               # a top-level setting: another directory
    ["rerun_failed=maybe"],                                                # refused by the run-group check
    ["train={lr: 0.01}", "train.seed=3"],                                  # a section, then a field under it
    ["train.seed=3", "train={lr: 0.01}"],                                  # and the other order
    ["model.n_layers=4", "model.n_layers=5"],                              # the last one wins
    ["model=gpt2", "model.d_model=${model.n_layers}"],                     # an interpolation as a value
    ["train.logging.loggers=[csv]", "eval=none"],                          # left out of the key
])
def test_overrides_off_the_plain_path_still_compose_as_hydra_does(hydra_env, overrides):
    from hydra_plugins.slm_sweeps.compose import Composer

    _, cfg, loader = hydra_env(["model=debug"])
    same_as_hydra(Composer(loader, cfg), overrides)


def test_a_job_that_does_not_compose_is_recorded_with_hydras_own_line(hydra_env):
    from hydra_plugins.slm_sweeps.compose import Composer

    _, cfg, loader = hydra_env(["model=debug"])
    job = same_as_hydra(Composer(loader, cfg), ["model.nope=1"])
    assert job.cfg is None and "model.nope" in job.error


def test_a_thousand_job_dry_run_lists_every_job(tmp_path):
    """20 depths x 50 seeds of the debug model through slm-train's dry run (its time is bench/sweep_plan.py's)."""
    env = {**os.environ, "SLM_RUNS": str(tmp_path / "runs"), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "slm.cli.train", "-m", "model=debug", "model.n_layers=range(1,21)",
                          "train.seed=range(0,50)", "hydra.sweeper.dry_run=true"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("dry run of sweep train: 1000 jobs")
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("model.n_layers=")]
    assert len(rows) == 1000 and len({r[0] for r in rows}) == 1000
    assert {(r[0].split(",")[0], r[1]) for r in rows} == {(f"model.n_layers={n}", str(n)) for n in range(1, 21)}
    assert not (tmp_path / "runs").exists()
