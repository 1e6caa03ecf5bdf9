"""Run paths resolve the same way in slm-generate, slm-eval, slm-export-hf, slm-status and the analysis commands
(slm.runs.paths): a path,
else a run group or a run under $SLM_RUNS; a run group of one run stands for it; nothing found is one line, exit 2,
with the closest names under $SLM_RUNS."""

from __future__ import annotations

import json

import pytest

from slm.cli.paths import resolve_group, resolve_path, resolve_run
from tests.test_cli_verbs import _fails, _run_dir


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """$SLM_RUNS with run groups `solo` (one run) and `pair` (two), the working directory elsewhere."""
    root = tmp_path / "runs"
    _run_dir(root / "solo" / "model=debug")
    for key in ("model=gpt2", "model=llama3"):
        _run_dir(root / "pair" / key)
        (root / "pair" / key / "result.json").write_text(json.dumps({"status": "completed"}))
    (root / "empty").mkdir()
    monkeypatch.setenv("SLM_RUNS", str(root))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    return root


def test_a_path_then_a_name_under_slm_runs(runs, tmp_path):
    assert resolve_path(str(runs / "pair"), "p") == runs / "pair"  # a path that exists
    assert resolve_path("pair", "p") == runs / "pair"  # a run group's name
    assert resolve_path("pair/model=gpt2", "p") == runs / "pair" / "model=gpt2"  # a run, relative to $SLM_RUNS
    assert resolve_run("solo", "p") == runs / "solo" / "model=debug"  # a run group of one run is that run
    assert resolve_run("pair/model=llama3", "p") == runs / "pair" / "model=llama3"
    assert resolve_group("pair", "p") == runs / "pair"


@pytest.mark.parametrize("arg, needles", [
    ("pari", ["pari: no such run or checkpoint directory, here or under", "did you mean", "runs/pair?"]),
    ("pair/model=gpt3", ["did you mean", "runs/pair/model=gpt2"]),
    ("runs/pair/model=lama3", ["did you mean", "runs/pair/model=llama3"]),  # given with the runs/ prefix
    ("zzzzzz", ["run groups under", "empty, pair, solo"]),  # nothing close: the groups
])
def test_nothing_matches_is_one_line_with_the_closest_names(runs, capsys, arg, needles):
    _fails(lambda argv: resolve_run(argv[0], "slm-generate"), [arg], capsys, *needles, prog="slm-generate")


def test_a_run_group_of_several_runs_names_one(runs, capsys):
    _fails(lambda argv: resolve_run(argv[0], "slm-eval"), ["pair"], capsys, "is a run group of 2 runs: name one",
           "pair/model=gpt2", prog="slm-eval")
    _fails(lambda argv: resolve_run(argv[0], "slm-eval"), ["empty"], capsys, "no run in it", prog="slm-eval")


def test_no_runs_directory_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SLM_RUNS", str(tmp_path / "nowhere"))
    monkeypatch.chdir(tmp_path)
    _fails(lambda argv: resolve_run(argv[0], "slm-generate"), ["x"], capsys, "does not exist (set SLM_RUNS",
           prog="slm-generate")


def test_every_command_takes_the_same_arguments(runs, tmp_path, capsys):
    from slm.cli.eval import main as slm_eval
    from slm.cli.export_hf import run as export_hf
    from slm.cli.generate import run as generate
    from slm.cli.status import run as status

    assert len(generate(["solo", "F", "-n", "3", "--seed", "0"])) == 1  # the group's one run
    capsys.readouterr()
    export_hf(["pair/model=llama3", str(tmp_path / "hf"), "--no-check"])
    assert (tmp_path / "hf" / "config.json").exists()
    capsys.readouterr()
    status(["pair"])
    assert capsys.readouterr().out.startswith(f"{runs / 'pair'}: 2 jobs")
    for command, prog, argv in ((generate, "slm-generate", ["paer", "x"]), (slm_eval, "slm-eval", ["paer"]),
                                (export_hf, "slm-export-hf", ["paer", str(tmp_path / "out")]),
                                (status, "slm-status", ["paer"])):
        _fails(command, argv, capsys, "paer: no such", "did you mean", "runs/pair", prog=prog)
    _fails(slm_eval, ["pair"], capsys, "is a run group of 2 runs", prog="slm-eval")
    assert not (tmp_path / "out").exists()


def test_the_analysis_commands_follow_the_same_rule(runs, tmp_path, capsys):
    """slm-collect, slm-report and slm-compare take a run group or run under $SLM_RUNS too, and a name that
    matches nothing is the same one line with the closest names."""
    from analysis.cli import collect_main, compare_main, report_main

    collect_main(["pair", "-o", str(tmp_path / "t.csv")])
    assert capsys.readouterr().out.startswith("slm-collect: 2 runs")
    for command, prog, argv in ((collect_main, "slm-collect", ["paer"]), (report_main, "slm-report", ["paer"]),
                                (compare_main, "slm-compare", ["pair/model=gpt2", "pair/model=lama3"])):
        _fails(command, argv, capsys, "no such", "did you mean", "runs/pair", prog=prog)
    # both runs found by name; refused for what they lack (no per-document results), not for where they are
    _fails(compare_main, ["pair/model=gpt2", "pair/model=llama3"], capsys, "no per-document results",
           prog="slm-compare")
    _fails(compare_main, ["pair", "solo"], capsys, "is a run group of 2 runs", prog="slm-compare")
