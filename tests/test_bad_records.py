"""One bad run never takes the others down: every kind of unreadable result.json (or sweep.json,
multirun.yaml) is one line naming the file and the reason in slm-status, slm-collect and the sweepers,
and the good runs beside it are still listed, collected and trained."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from analysis.cli import collect_main, plot_main, report_main
from analysis.collect import collect
from slm.sweeps.jobs import Job
from slm.sweeps.plan import plan_row
from slm.cli.status import run as status_cli
from slm.runs.record import RecordError, load_record
from slm.sweeps.status import sweep_states
from slm.training.trial_link import open_storage
from tests.test_analysis_collect import make_record, write
from tests.test_sweep_grid import TINY, slm

GOOD, BAD = "model.n_layers=4", "model.n_layers=8"


def _object(**fields) -> str:
    return json.dumps({**make_record(), **fields})


def _unreadable(path: Path) -> None:
    path.write_text(_object())
    path.chmod(0)


# kind -> (how the bad result.json is made, a fragment of the reason)
KINDS = {
    "truncated": (lambda p: p.write_text('{"status": "completed", "config": '), "not valid JSON (Expecting value"),
    "empty": (lambda p: p.write_text(""), "empty file"),
    "binary": (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00"), "not UTF-8 text"),
    "list": (lambda p: p.write_text("[1, 2]"), "not a JSON object but an array"),
    "number": (lambda p: p.write_text("3"), "not a JSON object but a number"),
    "training list": (lambda p: p.write_text(_object(training=[1, 2])), "section 'training' is an array"),
    "eval string": (lambda p: p.write_text(_object(eval="x")), "section 'eval' is a string"),
    "model number": (lambda p: p.write_text(_object(model=3)), "section 'model' is a number"),
    "status number": (lambda p: p.write_text(_object(status=5)), "status 5 is not one of running, completed"),
    "status unknown": (lambda p: p.write_text(_object(status="done")), 'status "done" is not one of'),
    "directory": (lambda p: p.mkdir(), "cannot read it (Is a directory)"),
    "no permission": (_unreadable, "cannot read it (Permission denied)"),
}


@pytest.fixture(params=list(KINDS))
def bad_sweep(request, tmp_path):
    """A sweep directory with one good run and one run whose result.json is bad in the given way."""
    if request.param == "no permission" and os.geteuid() == 0:
        pytest.skip("root reads a file whatever its mode")
    make, reason = KINDS[request.param]
    sweep = tmp_path / "runs" / "grid"
    write(sweep / GOOD, make_record())
    (sweep / BAD / ".hydra").mkdir(parents=True)
    make(sweep / BAD / "result.json")
    yield sweep, reason
    (sweep / BAD / "result.json").chmod(0o644)


def test_load_record_raises_one_line_naming_the_file(bad_sweep):
    sweep, reason = bad_sweep
    with pytest.raises(RecordError) as err:
        load_record(sweep / BAD)
    message = str(err.value)
    assert message.startswith(f"{sweep / BAD / 'result.json'}: ") and reason in message and "\n" not in message
    assert load_record(sweep / GOOD)["status"] == "completed" and load_record(sweep / "missing") is None


def test_status_lists_it_unreadable_beside_the_good_run(bad_sweep, capsys):
    sweep, reason = bad_sweep
    states = {s.key: s for s in sweep_states(sweep)}
    assert states[GOOD].status == "completed" and states[BAD].status == "unreadable"
    assert states[BAD].error.startswith(str(sweep / BAD / "result.json")) and reason in states[BAD].error

    status_cli([str(sweep)])
    printed = capsys.readouterr()
    assert printed.err == ""
    lines = printed.out.splitlines()
    assert lines[0] == f"{sweep}: 2 jobs: 1 unreadable, 1 completed"
    assert lines[1] == "unreadable (1)" and lines[2].split()[0] == BAD and reason in lines[2]
    assert lines[3] == "completed (1)" and lines[4].split()[0] == GOOD

    status_cli([str(sweep), "--json"])
    rows = {r["key"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows[BAD]["status"] == "unreadable" and rows[GOOD]["status"] == "completed"


def test_collect_warns_once_and_keeps_the_good_run(bad_sweep, caplog):
    sweep, reason = bad_sweep
    with caplog.at_level(logging.WARNING, logger="analysis.collect"):
        table = collect([sweep])
    assert table["run"].tolist() == [GOOD]
    (warning,) = [r.getMessage() for r in caplog.records]
    assert str(sweep / BAD / "result.json") in warning and reason in warning and warning.endswith("skipped")


def test_dry_run_plan_shows_the_state_unreadable(bad_sweep):
    sweep, _ = bad_sweep
    assert plan_row(Job([], sweep / BAD, None, "x"), {})["state"] == "unreadable"
    assert plan_row(Job([], sweep / GOOD, None, "x"), {})["state"] == "completed"


def test_null_sections_are_readable(tmp_path, caplog):
    run = write(tmp_path / "runs" / "grid" / GOOD, {**make_record(), "config": None, "eval": None, "training": None})
    assert load_record(run)["config"] is None
    assert [s.status for s in sweep_states(run.parent)] == ["completed"]
    with caplog.at_level(logging.WARNING, logger="analysis.collect"):
        assert collect([run.parent])["status"].tolist() == ["completed"]
    assert not caplog.records


def test_nested_field_of_the_wrong_type_is_skipped_by_collect(tmp_path, caplog):
    sweep = tmp_path / "runs" / "grid"
    write(sweep / GOOD, make_record())
    record = make_record()
    record["eval"]["lm_eval"] = [1, 2]
    write(sweep / BAD, record)
    with caplog.at_level(logging.WARNING, logger="analysis.collect"):
        assert collect([sweep])["run"].tolist() == [GOOD]
    (warning,) = [r.getMessage() for r in caplog.records]
    assert str(sweep / BAD / "result.json") in warning and "unexpected content" in warning


SWEEP_FILES = {
    "sweep.json not JSON": ("sweep.json", "{\"jobs\": ", "not valid JSON"),
    "sweep.json jobs a list": ("sweep.json", '{"jobs": [1]}', '"jobs" is not an object'),
    "multirun.yaml not YAML": ("multirun.yaml", "hydra: [unclosed\n", "not valid YAML"),
    "multirun.yaml binary": ("multirun.yaml", b"\xff\xfe\x00", "not UTF-8 text"),
    "multirun.yaml a list": ("multirun.yaml", "- 1\n", "no hydra: section"),
}


@pytest.mark.parametrize("kind", list(SWEEP_FILES))
def test_corrupt_sweep_files_are_one_warning(tmp_path, capsys, caplog, kind):
    name, content, reason = SWEEP_FILES[kind]
    sweep = tmp_path / "runs" / "grid"
    write(sweep / GOOD, make_record())
    path = sweep / name
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)

    status_cli([str(sweep)])
    printed = capsys.readouterr()
    assert f"{sweep}: 1 job: 1 completed" in printed.out
    if name == "sweep.json":
        assert printed.err.startswith(f"slm-status: warning: {path}: ") and printed.err.count("\n") == 1
        assert reason in printed.err and printed.err.endswith("; the jobs not started yet are unknown\n")
    else:
        assert printed.err == ""

    with caplog.at_level(logging.WARNING, logger="analysis.collect"):
        assert collect([sweep])["run"].tolist() == [GOOD]
    warnings = [r.getMessage() for r in caplog.records]
    if name == "multirun.yaml" or kind == "sweep.json not JSON":  # the collector reads sweep.json's lr_multipliers
        (warning,) = warnings
        assert str(path) in warning and reason in warning
    else:
        assert not warnings  # a bad "jobs" is the status's business, not the table's


def test_analysis_commands_succeed_beside_a_bad_record(tmp_path, capsys):
    sweep = tmp_path / "runs" / "grid"
    write(sweep / GOOD, make_record())
    write(sweep / "model.n_layers=6", make_record(n_layers=6, val_nll=2.9))
    write(sweep / BAD, '{"status": "completed", "config": ')
    bad = f"{sweep / BAD / 'result.json'}: not valid JSON"

    collect_main([str(sweep), "-o", str(tmp_path / "results.parquet")])
    printed = capsys.readouterr()
    assert "2 runs (2 completed)" in printed.out
    assert printed.err.count("\n") == 1 and printed.err.startswith(f"slm-collect: warning: cannot read {bad}")
    report_main([str(sweep), "-o", str(tmp_path / "report")])
    printed = capsys.readouterr()
    assert (tmp_path / "report" / "report.html").is_file()
    assert printed.err.count(bad) == 1 and "Traceback" not in printed.err
    plot_main([str(sweep), "--kind", "pareto", "-o", str(tmp_path / "plots")])
    printed = capsys.readouterr()
    assert printed.err.count(bad) == 1 and list((tmp_path / "plots").iterdir())


def test_status_usage_error_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        status_cli(["--nosuch", "x"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1
    assert err.startswith("slm-status: error: unrecognized arguments: --nosuch") and "(see slm-status --help)" in err


def _key(*overrides: str) -> str:
    """The run directory of a sweep job: its overrides less conf/config.yaml's exclude_keys (slm.cli.job_keys)."""
    import yaml

    from slm.cli.config import CONF_DIR
    from slm.cli.job_keys import key_from_overrides

    hydra = yaml.safe_load((CONF_DIR / "config.yaml").read_text())["hydra"]
    return key_from_overrides(overrides, hydra["job"]["config"]["override_dirname"]["exclude_keys"])


def test_grid_sweep_skips_the_job_with_a_corrupt_record_and_runs_the_other(tmp_path):
    args = ["run_group=bad", *TINY, "train.length.steps=2"]
    sweep = tmp_path / "runs" / "bad"
    corrupt = sweep / _key(*args, "train.lr=0.002") / "result.json"
    corrupt.parent.mkdir(parents=True)
    corrupt.write_text('{"status": "comp')
    (sweep / "sweep.json").write_text("{")
    out = slm(tmp_path, "-m", *args, "train.lr=0.001,0.002")
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"slm-train: {corrupt}: not valid JSON (Unterminated string starting at: line 1 column 12 (char 11)); " \
           "job skipped (move the file aside to run it again)" in out.stderr.splitlines()
    assert f"slm-train: {sweep / 'sweep.json'}: not valid JSON" in out.stderr and "Traceback" not in out.stderr
    assert corrupt.read_text() == '{"status": "comp'  # left as it was
    assert load_record(sweep / _key(*args, "train.lr=0.001"))["status"] == "completed"
    assert "sweep bad: 2 jobs: 1 completed, 1 unreadable" in out.stdout
    assert len(json.loads((sweep / "sweep.json").read_text())["jobs"]) == 2  # rewritten


@pytest.mark.slow  # an Optuna study of two trials (~15 s); the grid sweep above covers the skip in make test
def test_optuna_trial_with_a_corrupt_record_fails_and_the_study_goes_on(tmp_path):
    import optuna
    from optuna.trial import TrialState

    args = ["hydra/sweeper=optuna", "~hydra.sweeper.params", "run_group=opt", *TINY, "train.length.steps=2",
            "hydra.sweeper.n_trials=3", "hydra.sweeper.sampler.name=random", "hydra.sweeper.sampler.seed=0"]
    sweep = tmp_path / "runs" / "opt"
    corrupt = sweep / _key(*TINY, "train.length.steps=2", "train.lr=0.002") / "result.json"
    corrupt.parent.mkdir(parents=True)
    corrupt.write_text("[]")
    out = slm(tmp_path, "-m", *args, "train.lr=choice(0.001,0.002)")
    assert out.returncode == 0, out.stderr[-3000:]
    trials = optuna.load_study(study_name="opt", storage=open_storage(str(sweep / "optuna.journal"))).get_trials()
    by_lr = {t.params["train.lr"]: t for t in trials}
    assert len(trials) == 3 and set(by_lr) == {0.001, 0.002}, [t.params for t in trials]
    assert by_lr[0.002].state == TrialState.FAIL and by_lr[0.002].user_attrs["status"] == "unreadable"
    assert "not a JSON object but an array" in by_lr[0.002].user_attrs["error"]
    assert by_lr[0.001].state == TrialState.COMPLETE
    assert f"slm-train: {corrupt}: not a JSON object but an array; job skipped" in out.stderr
