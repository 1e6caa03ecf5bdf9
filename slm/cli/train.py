"""`slm-train <hydra overrides>`: train one model; `-m` runs a sweep (one job per combination).

    slm-train model=debug train.length.tokens=2e5
    slm-train model=gpt2 model.n_layers=4 model.d_model=256 tokenizer=gpt2 train.precision=bf16-mixed
    slm-train -m sweep=smoke                       # an experiment file of sweeps/ (see README: Sweeps)

The run directory is runs/<run_group>/<job key>, where the job key is made from the command's
overrides; running the same command again resumes that run from its last checkpoint (or does nothing
if it completed).

A single run that fails exits non-zero (bad input: one line, exit 2). In a sweep (-m) every job's
outcome is recorded in its result.json and the sweep goes on: an invalid config or a failure is recorded
`failed` with its error line, a divergence `diverged`; completed jobs are skipped, interrupted ones
resume, and failed or diverged ones run again only with `rerun_failed=true`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from slm.cli.config import CONF_DIR, USER_ERRORS, one_line_errors, register_resolvers, reports_user_errors
from slm.pipes import quiet_on_closed_pipe

register_resolvers()


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def hydra_main(cfg: DictConfig) -> dict:
    hydra_cfg = HydraConfig.get()
    run_dir = hydra_cfg.runtime.output_dir
    keep_full_key(run_dir, list(hydra_cfg.overrides.task), list(hydra_cfg.job.config.override_dirname.exclude_keys))
    if hydra_cfg.mode == RunMode.MULTIRUN:
        return sweep_job(cfg, run_dir)
    return single_run(cfg, run_dir)


@reports_user_errors("slm-train")
def single_run(cfg: DictConfig, run_dir: str) -> dict:
    from slm.objectives import check_preset
    from slm.runs.job import RunInUseError, train_run
    from slm.runs.refused import discard_refused
    from slm.training.distributed import is_rank_zero
    from slm.training.stop_guard import StopGuard

    fresh = not (Path(run_dir) / "result.json").exists()  # Hydra made the directory for this attempt
    try:
        resolved = OmegaConf.to_container(cfg, resolve=True)
        check_preset(resolved["model"], resolved["train"]["objective"])  # train.objective=causal_lm with model=dllm
        with StopGuard():  # a second Ctrl-C or SIGTERM stops the process, even in the middle of a slow step
            record = train_run(resolved, run_dir)
    except RunInUseError:
        raise
    except Exception as err:
        discard_refused(run_dir, err, fresh=fresh, bad_input=USER_ERRORS)  # refused before training: no directory left
        raise
    if is_rank_zero():  # the other processes of a data-parallel job say nothing
        print(f"slm-train: {record['status']}: {run_dir}")
    return outcome(record, run_dir)


main = quiet_on_closed_pipe(one_line_errors("slm-train", hydra_main))  # the console entry point

def keep_full_key(run_dir: str, overrides: list[str], exclude: list[str]) -> None:
    """Write the whole job key beside a run directory's name that was cut to a start and a hash
    (slm.runs.keys.FULL_KEY_FILE), so that `slm-status` can show what the hash stands for."""
    from slm.atomic import atomic_write
    from slm.cli.job_keys import whole_key
    from slm.runs.keys import FULL_KEY_FILE, MAX_LEN

    whole = whole_key(overrides, exclude)
    path = Path(run_dir) / FULL_KEY_FILE
    if len(whole) > MAX_LEN and not path.exists() and Path(run_dir).is_dir():
        atomic_write(path, lambda f: f.write((whole + "\n").encode("utf-8")))


def sweep_job(cfg: DictConfig, run_dir: str) -> dict:
    """One job of a sweep: never raises for a failure of its own, so the other jobs go on."""
    from slm.runs.job import record_failure, train_run
    from slm.training.distributed import is_rank_zero
    from slm.training.stop_guard import StopGuard

    try:
        resolved = OmegaConf.to_container(cfg, resolve=True)
    except Exception as err:  # an interpolation that does not resolve: an invalid config
        record = record_failure(run_dir, OmegaConf.to_container(cfg, resolve=False), err)
    else:
        problem = _preset_clash(resolved) or _local_parallel_sweep(resolved)
        if problem:
            record = record_failure(run_dir, resolved, problem)
        else:
            with StopGuard():  # a second Ctrl-C or SIGTERM stops the process, even in the middle of a slow step
                record = train_run(resolved, run_dir, sweep=True,
                                   rerun_failed=bool(resolved.get("rerun_failed", False)))
    if not is_rank_zero():
        return outcome(record, run_dir)
    line = f"slm-train: {record['status']}: {run_dir}"
    if record.get("error"):
        line += f": {record['error']}"
    print(line, file=sys.stderr if record["status"] == "failed" else sys.stdout)
    return outcome(record, run_dir)


def _preset_clash(cfg: dict) -> str | None:
    """Why the job's train.objective cannot train its model preset (None if it can): slm.objectives.check_preset."""
    from slm.objectives import check_preset

    try:
        check_preset(cfg["model"], cfg["train"]["objective"])
    except ValueError as err:  # ObjectiveError, or an unknown model.objective
        return str(err)
    return None


def _local_parallel_sweep(cfg: dict) -> str | None:
    """Why a sweep job of several processes cannot run here (None if it can): in a local sweep no launcher starts
    them, and Lightning would start each by running the whole sweep command again."""
    from slm.training.distributed import started_by_launcher

    train = cfg.get("train") or {}
    world = int(train.get("devices") or 1) * int(train.get("num_nodes") or 1)
    if world == 1 or started_by_launcher():
        return None
    return (f"train.parallel.devices x train.parallel.num_nodes = {world} processes per job: a local sweep cannot start them; run "
            "the sweep on Slurm with hydra/launcher=slurm_multigpu (a task per device), or train one run at a "
            "time without -m (Lightning starts the processes)")


def outcome(record: dict, run_dir: str) -> dict:
    """What a job returns to Hydra's sweeper: status, error line, validation NLL, run directory."""
    return {"status": record["status"], "error": record.get("error"),
            "val_nll": (record.get("eval") or {}).get("val_nll"), "run_dir": str(run_dir)}


if __name__ == "__main__":
    main()
