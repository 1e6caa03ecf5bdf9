"""The first hour, as a new user runs things: a sweep file without -m is refused before it trains a stray run, the
banner names the optimizer and parametrisation, job keys read in today's spelling while runs keyed the former way
are still found, a cut key keeps its whole text beside it, and Lightning repeats nothing slm's own lines say."""

from __future__ import annotations

import io
import json
import logging
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.test_bad_input import RUN, _train, workdir  # noqa: F401 - workdir is a fixture
from tests.test_hardening_training import one_line_exit_2


# -- a sweep file without -m ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("sweep", ["cpu_default", "smoke"])
def test_a_sweep_file_without_m_is_refused_with_the_command_to_run(workdir, capsys, sweep):
    line = one_line_exit_2(capsys, [f"sweep={sweep}", "train.length.steps=2"])
    assert line.startswith(f"sweep={sweep} sweeps ") and f"`slm-train -m sweep={sweep} train.length.steps=2`" in line
    assert not (workdir / "runs").exists()


def _root(task: list[str], params=None, points=None, lr_search=None, mode="RunMode.RUN"):
    return OmegaConf.create({"hydra": {"mode": mode, "runtime": {"choices": {"sweep": "mine"}},
                                       "overrides": {"task": ["sweep=mine", *task]},
                                       "sweeper": {"params": params, "points": points, "lr_search": lr_search}}})


def test_one_run_of_a_sweep_file_is_allowed_when_the_command_line_sets_what_it_sweeps():
    from slm.cli.config import stray_single_run

    assert stray_single_run(_root(["data=wikitext2"], params={"data": "ptb,wikitext2"})) is None  # ladder_word's
    assert stray_single_run(_root(["model=dhara"], points=[["model=dhara"]])) is None  # one point, given
    assert stray_single_run(_root([], params={"data": "a,b"}, mode="RunMode.MULTIRUN")) is None  # a sweep's job
    assert "hydra.sweeper.params data" in stray_single_run(_root([], params={"data": "ptb,wikitext2"}))
    assert "2 points" in stray_single_run(_root(["model=a"], points=[["model=a"], ["model=b"]]))
    assert "lr search" in stray_single_run(_root([], lr_search=[0.5, 2]))


# -- the banner ----------------------------------------------------------------------------------------------------

def test_the_banner_names_the_optimizer_its_lrs_and_the_parametrization(workdir, capsys):
    _train([*RUN, "train.optimizer=muon", "train.optim.muon.lr=0.03", "model.parametrization.kind=completep"])
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if " steps of " in line)
    assert "muon lr 0.03 on the hidden matrices + adamw lr 0.001 on the rest (cosine, warmup 0 steps)" in line
    assert "parametrization completep from width 256, depth 2" in line


# -- job keys ------------------------------------------------------------------------------------------------------

def test_a_key_is_spelt_as_it_is_typed_today(workdir):
    _train(RUN)
    (run,) = (workdir / "runs" / "train").iterdir()
    assert "train.length.steps=2" in run.name.split(",")


def _legacy_run(workdir: Path) -> Path:
    """A completed run keyed the former way (moved settings spelt flat), as runs made before today's rule are."""
    from slm.cli.job_keys import canonical_overrides
    from slm.runs.keys import job_key

    exclude = ["run_group", "eval", "train.logging.progress_bar"]
    name = job_key(",".join(sorted(canonical_overrides(RUN, exclude, legacy=True))))
    assert "train.steps=2" in name.split(",")
    run = workdir / "runs" / "train" / name
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps({"status": "completed", "config": {}, "eval": {"val_nll": 3.0}}))
    return run


def test_a_run_keyed_the_former_way_is_found_by_a_single_run_and_a_sweep(workdir, capsys):
    legacy = _legacy_run(workdir)
    _train(RUN)
    out = capsys.readouterr().out
    assert f"{legacy} is already completed" in out
    _train(["-m", *RUN])
    out = capsys.readouterr().out
    assert "launching 0 of 1 jobs" in out
    assert [p.name for p in (workdir / "runs" / "train").iterdir() if p.is_dir() and p.name != "multirun"] == \
        [legacy.name]


def test_a_cut_key_keeps_its_whole_text_beside_it(workdir):
    from slm.runs.keys import CUT_MARK, MAX_LEN, read_full_key

    long = ["train.seed=4000000000", "train.lr=0.00123456", "train.optim.adamw.weight_decay=0.0123456", "train.grad_clip=0.987654",
            "model.position.rope_theta=123456.0", "train.schedule.min_lr_ratio=0.0123", "train.validation.interval=0"]
    _train([*RUN, *long])
    (run,) = (workdir / "runs" / "train").iterdir()
    whole = read_full_key(run)
    assert whole is not None and len(whole) > MAX_LEN and len(run.name) < MAX_LEN  # the name: a start and a hash
    kept = run.name.partition(CUT_MARK)[0]  # the whole overrides that fit, then "...sha1-" and the hash
    assert kept and whole.startswith(kept) and "train.optim.adamw.weight_decay=0.0123456" in whole
    from slm.cli.status import report

    lines = report(run.parent)
    assert any(line.strip() == f"whole key: {whole}" for line in lines), lines  # slm-status shows what was cut


# -- quieter -------------------------------------------------------------------------------------------------------

def test_lightning_repeats_nothing_slm_says_and_a_resume_names_its_checkpoint_once(workdir, capsys):
    argv = [*[a for a in RUN if not a.startswith("train.length")], "train.length.steps=4", "train.checkpoint.interval=2"]
    _train(argv)
    capsys.readouterr()
    (run,) = (workdir / "runs" / "train").iterdir()
    record = json.loads((run / "result.json").read_text())
    (run / "result.json").write_text(json.dumps({**record, "status": "running"}))  # as a kill after step 2's save:
    (run / "checkpoints" / "previous.ckpt").replace(run / "checkpoints" / "last.ckpt")
    _train(argv)
    out = capsys.readouterr().out
    for said in ("GPU available", "TPU available", "Trainer.fit` stopped", "Restoring states", "Restored all states"):
        assert said not in out, out
    assert out.count("last.ckpt") == 1 and "resumed from step 2 of 4 (checkpoints/last.ckpt)" in out, out


def test_a_lightning_line_goes_above_a_progress_bar_on_a_terminal(monkeypatch):
    from tqdm import tqdm

    from slm.training.logs import tidy_lightning_logging

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    monkeypatch.setattr(sys, "stdout", screen)
    tidy_lightning_logging()
    with tqdm(total=10, file=screen, bar_format="{n}/{total} bar") as bar:
        bar.update(3)
        logging.getLogger("lightning.pytorch.core").warning("a warning of Lightning's")
    lines = screen.getvalue().replace("\r", "\n").splitlines()
    assert "slm-train: warning: a warning of Lightning's" in lines  # a line of its own, not glued to "3/10 bar"
