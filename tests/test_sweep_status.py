"""slm-status: job states from run directories (records, the run lock, train_log.jsonl, sweep.json)."""

from __future__ import annotations

import json
from pathlib import Path

from slm.cli.status import report
from slm.cli.status import run as status_cli
from slm.runs.record import update_record
from slm.runs.lock import lock_held, run_lock
from slm.runs.states import last_step
from slm.sweeps.status import sweep_states
from slm.sweeps.store import list_jobs


def _run(sweep: Path, key: str, steps: int | None = None, **record) -> Path:
    run_dir = sweep / key
    run_dir.mkdir(parents=True)
    update_record(run_dir, **record)
    if steps:
        (run_dir / "train_log.jsonl").write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n"
                                                         for s in range(1, steps + 1)))
    return run_dir


def _sweep(tmp_path: Path) -> Path:
    sweep = tmp_path / "runs" / "demo"
    _run(sweep, "a=1", 40, status="completed", error=None, training={"max_steps": 40, "steps": 40},
         eval={"val_nll": 1.25})
    _run(sweep, "a=2", 7, status="diverged", error="non-finite training loss nan at step 7",
         training={"max_steps": 40, "steps": 7})
    _run(sweep, "a=3", None, status="failed", error="TrainConfigError: train.lr=-1 is invalid: must be > 0")
    _run(sweep, "a=4", 12, status="running", error=None, training={"max_steps": 40})
    _run(sweep, "a=5", 30, status="running", error=None, training={
        "max_steps": 40, "interrupted": {"step": 30, "signal": "SIGUSR2", "at": "now"}})
    list_jobs(sweep, {f"a={i}": [f"a={i}"] for i in range(1, 7)})
    return sweep


def test_states_from_records_lock_and_listing(tmp_path):
    sweep = _sweep(tmp_path)
    with run_lock(sweep / "a=4") as held:
        assert held and lock_held(sweep / "a=4") and not lock_held(sweep / "a=5")
        states = {s.key: s for s in sweep_states(sweep)}
    assert {k: s.status for k, s in states.items()} == {
        "a=1": "completed", "a=2": "diverged", "a=3": "failed", "a=4": "running", "a=5": "stopped", "a=6": "pending"}
    assert (states["a=4"].step, states["a=4"].max_steps) == (12, 40)
    assert states["a=2"].error.startswith("non-finite") and states["a=1"].val_nll == 1.25
    assert "SIGUSR2 at step 30" in states["a=5"].note
    # nobody holds a=4's lock any more: it is stopped, to be resumed
    assert {s.key: s.status for s in sweep_states(sweep)}["a=4"] == "stopped"


def test_report_groups_by_status_with_errors_and_progress(tmp_path):
    lines = report(_sweep(tmp_path))
    text = "\n".join(lines)
    assert lines[0].endswith("6 jobs: 1 failed, 1 diverged, 2 stopped, 1 pending, 1 completed")
    order = [line for line in lines if not line.startswith((" ", "progress: "))][1:]
    assert order == ["failed (1)", "diverged (1)", "stopped (2)", "pending (1)", "completed (1)"]
    assert "train.lr=-1 is invalid" in text and "7/40" in text and "40/40  val_nll 1.2500" in text


def test_json_output_and_bad_directory(tmp_path, capsys):
    sweep = _sweep(tmp_path)
    status_cli([str(sweep), "--json"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 6 and {r["status"] for r in rows} >= {"failed", "pending", "completed"}
    try:
        status_cli([str(tmp_path / "nothing")])
        raise AssertionError("a missing directory must fail")
    except SystemExit as exit_:
        assert exit_.code == 2
    assert "slm-status: error:" in capsys.readouterr().err


def test_last_step_reads_the_end_of_a_long_log(tmp_path):
    log = tmp_path / "train_log.jsonl"
    log.write_text("".join(json.dumps({"step": s, "loss": 0.5, "lr": 1e-3}) + "\n" for s in range(1, 5001))
                   + '{"step": 50')  # a line being written
    assert last_step(tmp_path) == 5000
    assert last_step(tmp_path / "none") is None


def test_the_store_reads_an_earlier_versions_halving_decisions_in_todays_form(tmp_path):
    """sweep.json's `halving` from before decisions held `jobs` and `labels` (rungs counted from 0): its readers get
    both from the sweep's jobs, and rungs from 1; today's decisions are read as pinned."""
    from slm.sweeps.store import halving_decisions, save_halving_decisions, upgraded_decisions

    list_jobs(tmp_path, {"a0": ["x=a", "train.seed=0"], "a1": ["x=a", "train.seed=1"], "b0": ["x=b", "train.seed=0"]})
    old = {"rung": 0, "fraction": 0.5, "kept": ["x=a"], "scores": {"x=a": 3.0, "x=b": 3.5}}
    save_halving_decisions(tmp_path, [old])
    assert halving_decisions(tmp_path) == [old]  # as pinned: the sweeper renames them itself
    (read,) = upgraded_decisions(tmp_path)
    assert read["rung"] == 1 and read["jobs"] == {"x=a": ["a0", "a1"], "x=b": ["b0"]}
    assert set(read["labels"]) == {"x=a", "x=b"}
    today = {**old, "rung": 1, "rungs": 2, "jobs": {"x=a": ["a0", "a1"], "x=b": ["b0"]}, "labels": {"x=a": "a", "x=b": "b"}}
    save_halving_decisions(tmp_path, [today])
    assert upgraded_decisions(tmp_path) == [today]
