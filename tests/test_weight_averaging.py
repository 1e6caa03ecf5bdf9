"""train.validation.averaging (slm.training.averaging, slm.training.weight_averaging): the averaged weights equal the
average computed here from the raw weights of the steps they take (LAWA's mean of the last snapshots, the EMA's
recurrence from `start`), their validation loss (eval.val_nll_avg) is a fresh model's on the same windows, a run
killed and resumed averages the same weights bit for bit, `keep` saves them, bad settings are one line and exit 2,
and the default changes no job key of a shipped sweep."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from slm.model.weights import load_model
from slm.runs import job as steps
from slm.runs.record import load_record
from tests.test_bad_input import RUN, _train, snapshot, workdir  # noqa: F401 (workdir: a fixture)
from tests.test_sweep_compose import hydra_env, planned_jobs  # noqa: F401 (hydra_env: a fixture)

TINY = ["model=debug", "eval=none", "train.validation.batches=2", "train.logging.print_interval=0",
        "train.logging.progress_bar=false", "train.logging.interval=2", "train.checkpoint.interval=4"]
AVG = "train.validation.averaging"
STATE = "AverageWeights"  # the callback's entry in a checkpoint's callbacks


def compose(overrides: list[str]) -> dict:
    from slm.cli.config import compose_config

    return OmegaConf.to_container(compose_config([*TINY, *overrides]), resolve=True)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SLM_CACHE", str(tmp_path.parent / "slm-cache"))  # the tokenized shards, shared by the tests


def raw(run: Path, step: int) -> dict[str, torch.Tensor]:
    """The network's parameters after optimizer step `step` (checkpoints/step-<step>.ckpt)."""
    state = torch.load(run / "checkpoints" / f"step-{step}.ckpt", weights_only=True)["state_dict"]
    return {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")}


def saved(run: Path) -> dict[str, torch.Tensor]:
    """The parameters of the run's saved model (model/)."""
    return {name: p.detach() for name, p in load_model(run / "model").named_parameters()}


def averaging_state(run: Path, name: str) -> dict:
    """The averaged weights' state in the run's checkpoint `name`."""
    return torch.load(run / "checkpoints" / name, weights_only=True)["callbacks"][STATE]


def test_lawa_is_the_mean_of_the_last_snapshots_and_keep_saves_it(tmp_path, cache):
    """window 3, every 2, 9 steps: snapshots at 2, 4, 6, 8, the last three averaged (9 is no multiple of 2); keep:
    the saved model is their mean, its validation the record's val_nll, the raw weights' last_val_nll."""
    run = tmp_path / "lawa"
    rec = steps.train_run(compose(["train.length.steps=9", "train.validation.interval=4",
                                   "train.checkpoint.keep_every=2", f"{AVG}.kind=lawa", f"{AVG}.window=3",
                                   f"{AVG}.every=2", f"{AVG}.keep=true"]), run)
    e = rec["eval"]
    assert e["averaged_weights"] == {"kind": "lawa", "updates": 4, "last_update": 8, "snapshots": [4, 6, 8]}
    four, six, eight = raw(run, 4), raw(run, 6), raw(run, 8)
    weights = saved(run)
    assert weights.keys() <= four.keys() and weights
    for name, p in weights.items():
        assert torch.equal(p, (four[name] + six[name] + eight[name]) / 3), name
    assert [s for s, _ in e["val_curve_avg"]] == [4, 8, 9] and [s for s, _ in e["val_curve"]] == [4, 8, 9]
    assert e["averaged_kept"] and e["val_nll"] == e["val_nll_avg"] == e["val_curve_avg"][-1][1]
    assert (e["last_val_nll"], e["last_val_step"]) == (e["val_curve"][-1][1], 9) and e["val_nll"] != e["last_val_nll"]
    from analysis import collect

    assert collect(run / "result.json")["val_nll_avg"].tolist() == [e["val_nll_avg"]]  # a column of the results table

    # val_nll_avg is the validation loss of those weights loaded into a fresh model, on the same windows
    job = steps.prepare(compose(["train.length.steps=9"]), tmp_path / "fresh")
    built = steps.build(job, None)
    built.module.model.load_state_dict(load_model(run / "model").state_dict())
    built.trainer.validate(built.module, datamodule=built.datamodule, verbose=False)
    assert built.module.val_metrics["val_nll"] == e["val_nll_avg"]


def test_ema_follows_its_recurrence_from_start(tmp_path, cache):
    """decay 0.8 from step 3 of 6: the average starts as the weights of step 3, then avg <- lerp(avg, w, 0.2) after
    steps 4, 5, 6; no averaged validation before step 3; without keep the saved weights are the raw ones; another run
    starts from its checkpoint (train.init_from)."""
    run = tmp_path / "ema"
    rec = steps.train_run(compose(["train.length.steps=6", "train.validation.interval=2",
                                   "train.checkpoint.keep_every=1", f"{AVG}.kind=ema", f"{AVG}.decay=0.8",
                                   f"{AVG}.start=3"]), run)
    expected = {k: v.clone() for k, v in raw(run, 3).items()}
    for step in (4, 5, 6):
        for name, w in raw(run, step).items():
            expected[name].lerp_(w, 1 - 0.8)
    averaged = averaging_state(run, "step-6.ckpt")["averager"]
    assert (averaged["count"], averaged["last_step"]) == (4, 6) and averaged["params"]
    for name, p in averaged["params"].items():
        assert torch.equal(p, expected[name]), name
        assert not torch.equal(p, raw(run, 6)[name]), name
    e = rec["eval"]
    assert [s for s, _ in e["val_curve_avg"]] == [4, 6] and [s for s, _ in e["val_curve"]] == [2, 4, 6]
    assert e["val_nll_avg"] == e["val_curve_avg"][-1][1] != e["val_nll"] and "averaged_kept" not in e
    for name, p in saved(run).items():
        assert torch.equal(p, raw(run, 6)[name]), name
    # train.init_from a checkpoint of an averaging run takes its raw weights (the average is not in its state_dict)
    other = steps.train_run(compose(["train.length.steps=2", f"train.init_from={run}/checkpoints/step-6.ckpt",
                                     f"{AVG}.kind=lawa", f"{AVG}.every=1"]), tmp_path / "init")
    assert other["status"] == "completed" and other["training"]["init_from"]["checkpoint_step"] == 6
    assert other["eval"]["averaged_weights"]["snapshots"] == [1, 2]


@pytest.mark.parametrize("kind", ["ema", "lawa"])
def test_a_killed_and_resumed_run_averages_the_same_weights(tmp_path, cache, kind):
    """A run resumed from its step-5 checkpoint (killed after step 5) ends with the same averaged weights, the same
    val_nll_avg and averaged curve, bit for bit, as the run trained in one go (lawa: a snapshot on each side)."""
    cfg = compose(["train.length.steps=8", "train.validation.interval=3", "train.checkpoint.keep_steps=[5, 8]",
                   f"{AVG}.kind={kind}", f"{AVG}.decay=0.5", f"{AVG}.window=3", f"{AVG}.every=2"])
    whole = steps.train_run(cfg, tmp_path / "whole")
    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copy(tmp_path / "whole" / "checkpoints" / "step-5.ckpt", resumed / "checkpoints" / "last.ckpt")
    again = steps.train_run(cfg, resumed)
    assert again["training"]["resumed_from"] == "checkpoints/last.ckpt"
    for field in ("val_nll_avg", "val_curve_avg", "averaged_weights", "val_nll"):
        assert again["eval"][field] == whole["eval"][field], field
    one, two = (averaging_state(run, "step-8.ckpt")["averager"] for run in (tmp_path / "whole", resumed))
    tensors = [(a, b) for a, b in zip(one.get("params", {}).values(), two.get("params", {}).values())]
    tensors += [(a, b) for s, t in zip(one.get("snapshots", []), two.get("snapshots", []))
                for a, b in zip(s["params"].values(), t["params"].values())]
    assert tensors and all(torch.equal(a, b) for a, b in tensors)


@pytest.mark.parametrize("argv, line", [
    ([f"{AVG}.kind=swa"], f"{AVG}.kind='swa' is invalid: choose one of: none, ema, lawa"),
    ([f"{AVG}.kind=lawa", f"{AVG}.window=0"], f"{AVG}.window=0 is invalid: must be an integer > 0"),
    ([f"{AVG}.kind=ema", f"{AVG}.decay=1"], f"{AVG}.decay=1 is invalid: must be a number in (0, 1)"),
    ([f"{AVG}.kind=ema", f"{AVG}.keep=true", "train.validation.restore_best=true"],
     f"{AVG}.keep=True is invalid: not with train.validation.restore_best=true"),
    ([f"{AVG}.keep=true"], f"{AVG}.keep=True is invalid: {AVG}.kind is none"),
    ([f"{AVG}.kind=ema", f"{AVG}.start=2"], f"{AVG}.start=2 is invalid: must be below the run's steps (the run has 2 "
                                            "steps)"),
    ([f"{AVG}.kind=lawa", f"{AVG}.every=3"], f"{AVG}.every=3 is invalid: no snapshot from step 0 to the end"),
], ids=["kind", "window", "decay", "keep+restore_best", "keep+none", "start", "every"])
def test_bad_averaging_is_one_line_and_exit_2(workdir, capsys, argv, line):  # noqa: F811 (workdir)
    before = snapshot(workdir)
    with pytest.raises(SystemExit) as exit_:
        _train([*RUN, *argv])
    lines = [text for text in capsys.readouterr().err.splitlines() if text.strip()]
    assert exit_.value.code == 2 and lines[-1].startswith("slm-train: error: ") and line in lines[-1], lines[-1:]
    assert len([text for text in lines if ": error:" in text]) == 1 and snapshot(workdir) == before


def test_a_decay_branch_averages_as_the_run_of_its_length_trained_alone(tmp_path, cache):
    """A wsd run of 16 steps with a branch at 0.5 (8 steps, its decay from step 7: it resumes from the run's state
    there, the average included) ends with the averaged weights, val_nll_avg and curve of the 8-step wsd run trained
    alone."""
    common = ["train.schedule.kind=wsd", "train.schedule.warmup_steps=1", "train.validation.interval=4",
              f"{AVG}.kind=ema", f"{AVG}.decay=0.5", f"{AVG}.start=2", f"{AVG}.keep=true"]
    run = tmp_path / "t" / "wsd"
    steps.train_run(compose([*common, "train.length.steps=16", "train.schedule.decay_branches=[0.5]"]), run)
    branch = run.parent / "wsd,branch=0.5"
    alone = steps.train_run(compose([*common, "train.length.steps=8"]), tmp_path / "alone")
    mine = load_record(branch)
    assert mine["status"] == "completed" and mine["branch"]["step"] == 7
    for field in ("val_nll_avg", "val_curve_avg", "averaged_weights", "val_nll", "last_val_nll"):
        assert mine["eval"][field] == alone["eval"][field], field
    a, b = saved(branch), saved(tmp_path / "alone")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


CPU_DEFAULT_KEYS = (12, "195d974db84a36a7")
"""sweeps/cpu_default.yaml's job keys before train.validation.averaging existed: their count and the first 16 hex
digits of the SHA-256 of their sorted run-directory names (run group/key), one a line."""


def test_the_default_changes_no_job_key_of_a_shipped_sweep(hydra_env):  # noqa: F811 (hydra_env)
    from hydra.core.global_hydra import GlobalHydra

    try:
        recording = planned_jobs(hydra_env, "cpu_default")
    finally:  # hydra_env is module-scoped: Hydra's global state cleared for the tests that compose after this one
        GlobalHydra.instance().clear()
    runs = os.environ["SLM_RUNS"]
    keys = sorted(os.path.relpath(str(job.run_dir), runs) for _, job in recording.made)
    assert (len(keys), hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]) == CPU_DEFAULT_KEYS
    assert all(job.cfg["train"]["validation"]["averaging"]["kind"] == "none" for _, job in recording.made)
