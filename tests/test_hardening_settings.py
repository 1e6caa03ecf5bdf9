"""Hardening of settings: nothing read wrongly. A setting given twice (in its old and new spelling, or twice in one)
with two values is refused in one line naming both, with one value it is one setting with one note and one job key;
a sweep's points cannot silently override the command line; a config file with an old key is refused before any
directory; every `eval.*` setting is checked before training; a sweeper's refusal is slm's own line; a command
piped into `head` ends quietly. In-process where it can be, tiny models, CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.test_bad_input import RUN, _train, workdir  # noqa: F401 - workdir is a fixture
from tests.test_hardening_training import one_line_exit_2

ROOT = Path(__file__).resolve().parents[1]


def _nothing_written(workdir: Path) -> None:
    assert not (workdir / "runs").exists() or not [p for p in (workdir / "runs").rglob("*") if p.is_file()]


# -- one setting, two spellings ------------------------------------------------------------------------------------

@pytest.mark.parametrize("given, needles", [
    (["train.steps=5", "train.length.steps=7"], ["'train.steps=5'", "'train.length.steps=7'", "train.length.steps"]),
    (["train.length.steps=7", "train.steps=5"], ["'train.length.steps=7'", "'train.steps=5'"]),
    (["train.tokens=2e5", "train.length.tokens=3e5"], ["'train.tokens=2e5'", "'train.length.tokens=3e5'"]),
    (["train.schedule=wsd", "train.schedule.kind=cosine"], ["'train.schedule=wsd'", "'train.schedule.kind=cosine'"]),
    (["model.n_experts=4", "model.moe.n_experts=8"], ["'model.n_experts=4'", "'model.moe.n_experts=8'"]),
    (["train.lr=1e-3", "train.lr=2e-3"], ["'train.lr=1e-3'", "'train.lr=2e-3'"]),
    (["+train.lr=1e-3", "train.lr=2e-3"], ["'+train.lr=1e-3'", "'train.lr=2e-3'"]),
    (["model=gpt2"], ["'model=debug'", "'model=gpt2'"]),
    (["-m", "model.n_layers=1,2", "model.n_layers=3"], ["'model.n_layers=1,2'", "'model.n_layers=3'"]),
], ids=["steps", "steps_reversed", "tokens", "schedule", "n_experts", "same_spelling", "plus_prefix", "group",
        "sweep_axis"])
def test_a_setting_given_two_values_is_refused_naming_both(workdir, capsys, given, needles):
    length = [] if any(g.startswith(("train.steps", "train.length", "train.tokens")) for g in given) else [RUN[1]]
    line = one_line_exit_2(capsys, [RUN[0], *given, *length, *RUN[2:]])
    for needle in needles:
        assert needle in line, line
    assert "give it once" in line
    _nothing_written(workdir)


def test_one_value_twice_is_one_setting_one_note_one_key(workdir, capsys):
    _train([*RUN, "train.steps=2.0"])  # RUN holds train.length.steps=2
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "note:" in line]
    assert len(notes) == 1 and "'train.length.steps=2'" in notes[0] and "'train.steps=2.0'" in notes[0], notes
    (run,) = (workdir / "runs" / "train").iterdir()
    keys = run.name.split(",")  # one spelling in the job key: today's
    assert "train.length.steps=2" in keys and not [k for k in keys if k.startswith("train.steps")], run.name
    log = (run / "train_log.jsonl").read_text().splitlines()
    assert len(log) == 2


def test_settings_once_compares_values_as_hydra_parses_them():
    from slm.cli.config import SettingGivenTwice, settings_once

    out, notes = settings_once(["train.tokens=1e6", "train.length.tokens=1000000", "model=gpt2", "-m"])
    assert out == ["train.length.tokens=1e6", "model=gpt2", "-m"] and len(notes) == 1
    with pytest.raises(SettingGivenTwice, match="'model.canon_set=AC' and 'model.canon.set=ABCD'"):
        settings_once(["model.canon_set=AC", "model.canon.set=ABCD"])
    with pytest.raises(SettingGivenTwice):
        settings_once(["train.compile=true", "train.compile=1"])  # a boolean is not the number 1
    assert settings_once(["~train.lr", "train.lr=1"])[0] == ["~train.lr", "train.lr=1"]  # a deletion is no value


# -- sweeps --------------------------------------------------------------------------------------------------------

def _sweep_file(workdir: Path, text: str) -> str:
    """A sweep file of the user's own, in a search path of its own: `sweep=mine` with the returned override."""
    (workdir / "extra" / "sweep").mkdir(parents=True)
    (workdir / "extra" / "sweep" / "mine.yaml").write_text("# @package _global_\nrun_group: mine\n" + text)
    return f"hydra.searchpath=[file://{workdir / 'extra'}]"


def test_a_point_cannot_silently_override_the_command_line(workdir, capsys):
    search = _sweep_file(workdir, "hydra:\n  sweeper:\n    points:\n      - [model.n_layers=1, train.steps=2]\n"
                                  "      - [model.n_layers=2, train.length.steps=2]\n")
    line = one_line_exit_2(capsys, ["-m", "sweep=mine", search, *RUN, "model.n_layers=3"])
    assert "'model.n_layers=3' (command line or hydra.sweeper.params)" in line
    assert "'model.n_layers=1' (hydra.sweeper.points[0])" in line
    _nothing_written(workdir)


def test_two_spellings_in_a_sweeps_params_are_refused(workdir, capsys):
    search = _sweep_file(workdir, "hydra:\n  sweeper:\n    params:\n      train.steps: 2\n"
                                  "      train.length.steps: 3,4\n")
    line = one_line_exit_2(capsys, ["-m", "sweep=mine", search, RUN[0], "eval=none"])
    assert "'train.steps=2' (hydra.sweeper.params)" in line and "'train.length.steps=3,4'" in line
    _nothing_written(workdir)


@pytest.mark.parametrize("multirun", [True, False], ids=["sweep", "single_run"])
def test_a_config_file_with_an_old_key_is_refused_before_any_directory(workdir, capsys, multirun):
    search = _sweep_file(workdir, "train:\n  steps: 3\nhydra:\n  sweeper:\n    params:\n      model.n_layers: 1,2\n")
    line = one_line_exit_2(capsys, [*(["-m"] if multirun else []), "sweep=mine", search, RUN[0], "eval=none"])
    assert line.startswith("train.steps is now spelt train.length.steps") and "config file" in line
    assert not (workdir / "runs").exists()


def test_a_sweepers_refusal_is_slms_own_line(workdir, capsys):
    line = one_line_exit_2(capsys, ["-m", *RUN, "hydra.sweeper.lr_search=[0,1]"])
    assert line.startswith("hydra.sweeper.lr_search=[0, 1] is invalid") and "Error in call to target" not in line
    assert not (workdir / "runs").exists()


# -- every eval setting before any work ----------------------------------------------------------------------------

@pytest.mark.parametrize("override, needle", [
    ("eval.throughput.diffusion.cache=bogus", "eval.throughput.diffusion.cache='bogus' is invalid: one of: none, prefix"),
    ("eval.throughput.diffusion.block_length=0", "eval.throughput.diffusion.block_length=0"),
    ("eval.throughput.diffusion.steps=0", "eval.throughput.diffusion.steps=0"),
    ("eval.throughput.diffusion.threshold=1.5", "eval.throughput.diffusion.threshold=1.5"),
    ("+eval.throughput.diffusion.blocks=3", "eval.throughput.diffusion has unknown key 'blocks'"),
    ("+eval.throughput.repeat=3", "eval.throughput has unknown key 'repeat'"),
    ("eval.throughput.prompt_tokens=0", "eval.throughput.prompt_tokens=0 is invalid"),
    ("eval.throughput.new_tokens=-3", "eval.throughput.new_tokens=-3 is invalid"),
    ("eval.throughput.compile=maybe", "eval.throughput.compile='maybe' is invalid: expected true or false"),
    ("eval.throughput.cpu_threads=0", "eval.throughput.cpu_threads=0 is invalid"),
    ("eval.throughput.enabled=yes", "eval.throughput.enabled='yes' is invalid"),
    ("eval.num_fewshot=-1", "eval.num_fewshot=-1 is invalid"),
    ("eval.limit=0", "eval.limit=0 is invalid"),
    ("eval.limit=nan", "eval.limit=nan is invalid"),
    ("eval.batch_size=0", "eval.batch_size=0 is invalid"),
    ("eval.dtype=fp8", "eval.dtype='fp8' is invalid: one of: auto, float32"),
    ("eval.device=gpu", "eval.device='gpu' is invalid"),
    ("eval.enabled=maybe", "eval.enabled='maybe' is invalid"),
    ("eval.per_document=1", "eval.per_document=1 is invalid"),
    ("eval.tasks=[nope_task]", "unknown task(s) nope_task"),
    ("eval.metrics.slm_shakespeare_mc=acc_norm", "eval.metrics.slm_shakespeare_mc='acc_norm' is invalid"),
    ("eval.average=[hellaswag]", "hellaswag is not in eval.tasks"),
    ("+eval.include_path=[/no/such/dir]", "eval.include_path='/no/such/dir' is invalid: no such directory"),
    ("+eval.model_args.mc_nm=3", "eval.model_args has unknown key 'mc_nm' (did you mean mc_num?)"),
    ("+eval.model_args.batch_size=3", "eval.model_args.batch_size=3 is invalid: evaluation sets batch_size"),
    ("+eval.model_args.mc_num=0", "eval.model_args.mc_num=0"),
    ("+eval.model_args.max_length=1000", "eval.model_args.max_length=1000 is invalid"),
])
def test_every_eval_setting_is_checked_before_training(workdir, capsys, override, needle):
    argv = [*[a for a in RUN if a != "eval=none"], "eval=offline", override]
    line = one_line_exit_2(capsys, argv)
    assert needle in line, line
    assert not (workdir / "runs").exists() or not list((workdir / "runs").rglob("train_log.jsonl"))


def test_a_sampler_cache_the_model_cannot_use_is_refused_before_training(workdir, capsys):
    """Fast-dLLM's caches hold attention keys and values only: a diffusion model with Canon layers is refused."""
    line = one_line_exit_2(capsys, ["model=dllm_canon", "model.n_layers=1", "model.d_model=64", "model.attention.n_heads=2",
                                    "model.attention.n_kv_heads=2", "train.length.steps=2", "eval=offline", "eval.tasks=[]",
                                    "eval.throughput.diffusion.cache=prefix"])
    assert line.startswith("eval.throughput.diffusion.cache='prefix': a bidirectional cache keeps attention") and \
        "Canon layers" in line
    assert not list((workdir / "runs").rglob("train_log.jsonl"))


def test_eval_checks_hold_for_slm_eval_too(tmp_path):
    """slm-eval's spec is settled by the same rules (its names are the suites' keys, eval.*)."""
    from slm.eval.checks import check_available
    from slm.eval.spec import spec_from_config
    from slm.settings import SettingsError

    with pytest.raises(SettingsError, match=r"^eval.throughput.diffusion.cache='x' is invalid: one of: none, prefix"):
        spec_from_config({"tasks": [], "throughput": {"diffusion": {"cache": "x"}}})
    spec = spec_from_config({"tasks": "slm_shakespeare_bpb, slm_shakespeare_mc"})  # a string: comma-separated
    assert spec.tasks == ["slm_shakespeare_bpb", "slm_shakespeare_mc"]
    check_available(spec_from_config({"tasks": [], "throughput": {"diffusion": {"cache": "dual", "threshold": 0.9}}}))


# -- a command piped into head -------------------------------------------------------------------------------------

def _entry_points() -> dict[str, str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


@pytest.mark.parametrize("name", sorted(_entry_points()))
def test_every_command_ends_quietly_when_its_reader_goes(name):
    import importlib

    module, _, attr = _entry_points()[name].partition(":")
    fn = getattr(importlib.import_module(module), attr)
    assert getattr(fn, "quiet_on_closed_pipe", False), f"{name}: its entry point is not wrapped"


def test_a_closed_pipe_is_exit_141_and_no_traceback():
    exe = Path(sys.executable).parent / "slm-params"
    proc = subprocess.Popen([str(exe), "model=gpt2", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    proc.stdout.close()  # the reader is gone before the first line: `| head -0`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err and "BrokenPipeError" not in err, err
