"""Decay branches (train.schedule.decay_branches, issue 42 §4): one wsd run, several token budgets. A branch equals the
wsd run trained alone with its budget (and the run's warmup), bit for bit; a job killed after its run completed goes
straight to the pending branches, and a second rerun trains nothing; bad fractions are one line; slm-collect lists each
branch as a run of its token budget."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from slm.runs.branches import branch_name, has_checkpoint, pending_branches
from slm.runs.record import load_record, update_record
from slm.settings import SettingsError
from slm.training.config import TrainConfig
from tests.test_train_cli import FAST, curve, slm_train

STEPS, WARMUP = 40, 2  # the default warmup_fraction 0.05 of 40 steps
WSD = [*(a for a in FAST if not a.startswith("train.logging.interval=")), "train.logging.interval=1",
       "train.schedule.kind=wsd", "train.seed=3", "train.validation.interval=10"]
RUN = [*WSD, f"train.length.steps={STEPS}"]
BRANCHES = {0.25: 10, 0.5: 20}  # fraction: the branch's steps (round(40 f)); its decay begins at 8 and 16
MAIN = [*RUN, "train.schedule.decay_branches=[0.25,0.5]"]


def main_dir(root: Path) -> Path:
    (only,) = [p for p in (root / "runs" / "t").iterdir() if ",branch=" not in p.name]
    return only


def status(path: Path) -> str | None:
    try:
        return (load_record(path) or {}).get("status")
    except ValueError:  # being replaced (atomic, but read between two writes): not yet
        return None


def kill_after_main(root: Path) -> Path:
    """Start the branched run, SIGKILL it as soon as its own record says completed (its branches come next)."""
    proc = slm_train(root, *MAIN, wait=False)
    deadline, runs = time.time() + 240, root / "runs" / "t"
    while time.time() < deadline and proc.poll() is None:
        done = runs.exists() and any(status(p) == "completed" for p in runs.iterdir() if ",branch=" not in p.name)
        if done:
            break
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the job ended before it could be killed"
    return main_dir(root)


def compose(overrides: list[str]) -> dict:
    from slm.cli.config import compose_config

    return OmegaConf.to_container(compose_config(["run_group=t", *overrides]), resolve=True)


def train_here(cfg: dict, run_dir: Path) -> str:
    """train_run in this process (what slm-train runs), its output."""
    from slm.runs.job import train_run

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        train_run(cfg, run_dir)
    return out.getvalue()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """The branched run (slm-train), killed once its own training completed, then its job run again twice (in this
    process); and the wsd runs of 10 and 20 steps trained alone with the run's warmup."""
    root = tmp_path_factory.mktemp("branched")
    cache = os.environ.get("SLM_CACHE")
    os.environ["SLM_CACHE"] = str(root.parent / "slm-cache")  # the shards slm_train made
    try:
        main = kill_after_main(root)
        cfg = load_record(main)["config"]
        killed = {"main": load_record(main), "log": (main / "train_log.jsonl").read_text(),
                  "pending": pending_branches(main, cfg)}
        again = train_here(cfg, main)
        branches = {f: main.parent / branch_name(main.name, f) for f in BRANCHES}
        stamps = {f: load_record(d)["updated_at"] for f, d in branches.items()}
        third = train_here(cfg, main)
        solo = {}
        for steps in BRANCHES.values():
            solo[steps] = root / "alone" / str(steps)
            train_here(compose([*WSD, f"train.length.steps={steps}", f"train.schedule.warmup_steps={WARMUP}"]),
                       solo[steps])
    finally:
        if cache is None:
            os.environ.pop("SLM_CACHE", None)
        else:
            os.environ["SLM_CACHE"] = cache
    return {"root": root, "main": main, "cfg": cfg, "killed": killed, "again": again, "third": third,
            "branches": branches, "stamps": stamps, "solo": solo}


def test_a_branch_is_the_wsd_run_of_its_budget(runs):
    """Each branch ends with the weights, per-step log (losses and lrs), validation and curve of the wsd run of its
    length trained alone with the run's warmup; its record says where it came from."""
    for f, steps in BRANCHES.items():
        branch, solo = runs["branches"][f], runs["solo"][steps]
        a, b = load_file(branch / "model" / "model.safetensors"), load_file(solo / "model" / "model.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), f
        assert (branch / "train_log.jsonl").read_text() == (solo / "train_log.jsonl").read_text()
        mine, theirs = load_record(branch), load_record(solo)
        assert mine["status"] == "completed" and mine["eval"]["val_nll"] == theirs["eval"]["val_nll"]
        assert mine["eval"]["val_curve"] == theirs["eval"]["val_curve"]
        assert curve(branch) == curve(solo)
        start = steps - max(1, int(0.2 * steps))
        assert mine["branch"] == {"of": runs["main"].name, "fraction": f, "step": start, "steps": steps}
        assert mine["training"]["steps"] == steps and mine["training"]["tokens"] == steps * 16 * 128
        assert mine["training"]["session_steps"] == steps - start  # only the decay was trained for it
        train = mine["config"]["train"]
        assert train["length"]["steps"] == steps and train["schedule"]["warmup_steps"] == WARMUP
        assert train["schedule"]["decay_branches"] == [] and json.loads(json.dumps(mine["config"])) == mine["config"]


def test_a_job_killed_after_its_run_trains_only_the_branches_then_nothing(runs):
    killed, main = runs["killed"], runs["main"]
    assert killed["main"]["status"] == "completed"
    assert killed["pending"], "the kill came after every branch had completed"
    said = runs["again"]
    assert "is already completed; training its decay branch" in said, said[-3000:]
    assert "step 0 of" not in said  # the run is not trained again, and no branch starts from step 0
    assert said.count("slm-train: decay branch ") == len(killed["pending"])
    for f in BRANCHES:  # a branch that never ran starts from the run's checkpoint: it does not "resume"
        start = BRANCHES[f] - max(1, int(0.2 * BRANCHES[f]))
        if runs["branches"][f] in killed["pending"]:
            assert f"starts from the main run's step {start} of {BRANCHES[f]} ({main.name})" in said, said[-3000:]
    assert "resumed from step" not in said and "starts from the main run's step" in said
    assert load_record(main)["updated_at"] == killed["main"]["updated_at"]
    assert (main / "train_log.jsonl").read_text() == killed["log"]
    assert pending_branches(main, runs["cfg"]) == []
    third = runs["third"]
    assert "nothing to do" in third and "decay branch" not in third and "resumed from" not in third, third[-3000:]
    assert {f: load_record(d)["updated_at"] for f, d in runs["branches"].items()} == runs["stamps"]


def test_slm_collect_lists_each_branch_with_its_token_budget(runs):
    from analysis.collect import collect

    table = collect(runs["main"].parent)
    assert len(table) == 3 and set(table["status"]) == {"completed"}
    tokens = dict(zip(table["run"].astype(str), table["tokens"]))
    assert tokens[runs["main"].name] == STEPS * 16 * 128
    for f, steps in BRANCHES.items():
        assert tokens[branch_name(runs["main"].name, f)] == steps * 16 * 128


def bad(length: dict | None = None, **schedule) -> SettingsError:
    node = {"length": length or {"steps": 100}, "batch_size": 4, "schedule": {"kind": "wsd", **schedule}}
    with pytest.raises(SettingsError) as err:
        TrainConfig.from_node(node).decay_branches(context_length=8)
    assert "\n" not in str(err.value) and err.value.key == "train.schedule.decay_branches"
    return err.value


def test_bad_fractions_are_one_line_naming_the_value_and_what_is_allowed():
    assert "need train.schedule.kind=wsd" in str(bad(kind="cosine", decay_branches=[0.5]))
    assert "every item a number in (0, 1)" in str(bad(decay_branches=[0.5, 1.5]))
    assert "every item a number in (0, 1)" in str(bad(decay_branches=[0]))
    assert "0.5 is listed twice" in str(bad(decay_branches=[0.5, 0.5]))
    err = str(bad(decay_branches=[0.5, 0.04]))  # 4 steps: its decay would begin at step 3, in the warmup of 5
    assert err.startswith("train.schedule.decay_branches=[0.5, 0.04] is invalid: the branch at 0.04 (4 of the run's "
                          "100 steps) would begin its decay at step 3, before the end of the warmup (step 5); a "
                          "fraction of at least 0.06 (6 steps) is allowed"), err
    assert "0.62 (62 steps)" in str(bad(decay_branches=[0.1], warmup_fraction=0.5))
    assert "both 25 steps long" in str(bad(decay_branches=[0.25, 0.251]))
    assert "as long as the run: a fraction of at most 0.99" in str(bad(decay_branches=[0.999]))
    assert "train.length.epochs" in str(bad({"epochs": 2, "windows_per_epoch": 400}, decay_branches=[0.5]))
    # a token budget: the branch is f x the tokens, in whole batches (as `train.length.tokens=` given alone)
    cfg = TrainConfig.from_node({"length": {"tokens": 3.2e6}, "batch_size": 32,
                                 "schedule": {"kind": "wsd", "decay_branches": [0.5, 0.0625]}})
    assert [(b.fraction, b.steps, b.start, b.length) for b in cfg.decay_branches(64)] == [
        (0.0625, 97, 78, {"tokens": 200000.0}), (0.5, 781, 625, {"tokens": 1600000.0})]


def test_slm_train_refuses_a_bad_branch_in_one_line_and_leaves_nothing(tmp_path):
    out = slm_train(tmp_path, *RUN, "train.schedule.decay_branches=[0.04]")
    assert out.returncode == 2, out.stderr[-2000:]
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("slm-train: error: train.schedule.decay_branches=[0.04] is invalid: the branch at 0.04 "
                           "(2 of the run's 40 steps) would begin its decay at step 1"), line
    assert not (tmp_path / "runs" / "t").exists() or not any((tmp_path / "runs" / "t").iterdir())


def test_pending_branches_follow_the_records(tmp_path):
    """What the sweeper asks of a job whose own record is settled: the branches it would still train."""
    main = tmp_path / "g" / "k"
    cfg = {"train": {"schedule": {"decay_branches": [0.5, 0.25]}}}
    b25, b50 = (main.parent / branch_name(main.name, f) for f in (0.25, 0.5))
    assert pending_branches(main, {"train": {"schedule": {"decay_branches": []}}}) == []
    assert pending_branches(main, None) == []
    assert pending_branches(main, cfg) == [b25, b50]  # nothing ran yet: the job trains both
    update_record(main, status="completed")
    update_record(b25, status="completed")
    assert pending_branches(main, cfg) == [b50]
    update_record(b50, status="failed")
    assert pending_branches(main, cfg) == [] and pending_branches(main, cfg, rerun_failed=True) == [b50]
    update_record(main, status="diverged")  # diverged before branch 0.5's step: nothing to resume from
    update_record(b50, status="running")
    assert not has_checkpoint(b50) and pending_branches(main, cfg) == []
    assert pending_branches(main, cfg, rerun_failed=True) == [b50]  # the run is trained again, and writes it
    (b50 / "checkpoints").mkdir()
    (b50 / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert pending_branches(main, cfg) == [b50]


def test_a_branch_whose_checkpoint_is_missing_trains_from_step_0_to_the_same_run(runs, tmp_path):
    """A run that completed before its branches were asked for under the same key (here: a copy without them): its
    job trains each branch from step 0, which is the same run."""
    import shutil

    main = tmp_path / "t" / runs["main"].name
    shutil.copytree(runs["main"], main)
    said = train_here(runs["cfg"], main)
    assert said.count("from step 0: the run left no checkpoint") == len(BRANCHES), said[-3000:]
    for f, steps in BRANCHES.items():
        branch, solo = main.parent / branch_name(main.name, f), runs["solo"][steps]
        a, b = load_file(branch / "model" / "model.safetensors"), load_file(solo / "model" / "model.safetensors")
        assert all(torch.equal(a[k], b[k]) for k in a) and load_record(branch)["training"]["resumed_from"] is None
    assert pending_branches(main, runs["cfg"]) == []


def test_the_dry_run_counts_the_branches_decays(tmp_path):
    """A job's dry-run row: its own steps, and its tokens, FLOPs and GPU-hours with each branch's decay added."""
    from slm.sweeps.jobs import Job
    from slm.sweeps.plan import plan_row
    from slm.cli.config import compose_config

    base = ["model=debug", "train.length.steps=100", "train.schedule.kind=wsd", "train.schedule.warmup_steps=2",
            "train.schedule.decay_fraction=0.2"]
    plain = plan_row(Job([], tmp_path / "a", compose_config(base)), {"mfu": 0.4, "peak_flops": 1e15})
    branched = plan_row(Job([], tmp_path / "b", compose_config([*base, "train.schedule.decay_branches=[0.25,0.5]"])),
                        {"mfu": 0.4, "peak_flops": 1e15})
    assert branched["steps"] == plain["steps"] == 100
    per_step = plain["tokens"] / 100
    assert branched["tokens"] == plain["tokens"] + (5 + 10) * per_step  # 25 steps decay over 5, 50 over 10
    assert branched["flops"] / plain["flops"] == pytest.approx(115 / 100)
    assert any("with its 2 decay branches" in note and "15 more steps" in note for note in branched["notes"])
