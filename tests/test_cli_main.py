"""`slm <verb>`: one entry point for every slm-* command (slm/cli/main.py), which stay as aliases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from slm.cli.main import VERBS, main, usage

ROOT = Path(__file__).resolve().parents[1]


def scripts() -> dict[str, str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def test_every_slm_script_is_a_verb_with_the_same_entry_point():
    aliases = {name.removeprefix("slm-"): target for name, target in scripts().items() if name.startswith("slm-")}
    assert {verb: entry for verb, (entry, _) in VERBS.items()} == aliases
    assert scripts()["slm"] == "slm.cli.main:main"


def test_help_lists_every_verb_on_one_line_each(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and out == usage() + "\n"
    for verb, (_, what) in VERBS.items():
        assert sum(line.split()[:1] == [verb] for line in out.splitlines()) == 1 and what in out
    main(["help"])
    assert capsys.readouterr().out == usage() + "\n"


@pytest.mark.parametrize("argv, needle", [(["tran"], "unknown verb 'tran' (did you mean train?)"),
                                          (["xyzzy", "model=gpt2"], "unknown verb 'xyzzy'; choose one of: train, eval")])
def test_a_bad_verb_is_one_line_and_exit_2(capsys, argv, needle):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("slm: error: ") and needle in err
    assert all(verb in err for verb in VERBS)


def test_no_verb_prints_the_verbs_and_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        main([])
    assert exit_.value.code == 2 and capsys.readouterr().err == usage() + "\n"


def test_a_verb_runs_its_command_with_the_rest_of_the_line(capsys, monkeypatch, tmp_path):
    bin_dir = Path(sys.executable).parent
    monkeypatch.setattr(sys, "argv", [str(bin_dir / "slm")])  # main() hands the command its line in sys.argv
    main(["params", "model=gpt2", "tokenizer=gpt2", "--json"])
    assert json.loads(capsys.readouterr().out)["params_total"] == 124_439_808
    # as run by its alias script, so that a command that runs its own line again (Lightning's DDP) runs the same
    assert sys.argv == [str(bin_dir / "slm-params"), "model=gpt2", "tokenizer=gpt2", "--json"]
    monkeypatch.setenv("SLM_RUNS", str(tmp_path / "none"))
    with pytest.raises(SystemExit) as exit_:
        main(["status"])
    assert exit_.value.code == 2 and capsys.readouterr().err.startswith("slm-status: error: ")  # named as the alias
    main(["help", "params"])  # = slm params --help
    assert capsys.readouterr().out.startswith("`slm-params <hydra overrides> [--json]`")


def test_the_installed_script_is_quick_to_list_and_runs_a_verb():
    """`slm --help` imports no command (no torch); `slm train --help` is slm-train's own help."""
    slm = Path(sys.executable).parent / "slm"
    assert slm.exists(), "pip install -e . --no-deps installs the slm script"
    out = subprocess.run([sys.executable, "-c", "import sys; from slm.cli.main import main\ntry:\n main(['--help'])\n"
                          "except SystemExit: pass\nprint('torch' in sys.modules, 'hydra' in sys.modules)"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "False False", out.stderr
    out = subprocess.run([str(slm), "train", "--help"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HYDRA_FULL_ERROR": "0"})
    assert out.returncode == 0 and "model=<preset>" in out.stdout, out.stderr[-2000:]
