"""slm-dashboard (slm/cli/dashboard.py): an Optuna study served by optuna-dashboard, found from its sweep directory,
read over HTTP on localhost; bad input as one line and exit 2."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("optuna_dashboard")

ROOT = Path(__file__).resolve().parents[1]
VALUES = [4.2, 3.9, 3.7]  # the COMPLETE trials' objective; a fourth trial is pruned at step 4


def make_study(storage: str, name: str) -> None:
    """Three trials COMPLETE with their curves, one PRUNED after two validations (as the sweeper's runs report them)."""
    import optuna

    from slm.training.trial_link import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=name, storage=open_storage(storage), direction="minimize")
    lr = optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)
    for i, value in enumerate(VALUES):
        trial = study.ask({"train.lr": lr})
        for step in (2, 4, 6):
            trial.report(value + (6 - step) / 10, step)
        study.tell(trial, value)
    pruned = study.ask({"train.lr": lr})
    pruned.report(5.0, 2)
    pruned.report(4.9, 4)
    study.tell(pruned, state=optuna.trial.TrialState.PRUNED)


def _get(url: str, data: bytes | None = None):
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=30) as reply:
        return reply.status, reply.read()


def _serve(*args: str) -> tuple[subprocess.Popen, str]:
    """slm-dashboard started as the console script runs it; (the process, its one line) once it serves."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "slm.cli.dashboard", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    line = proc.stdout.readline() if ready else ""
    return proc, line


def _stop(proc: subprocess.Popen) -> int:
    """Ctrl-C; killed if it does not end."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def test_serves_the_sweeps_study_and_its_trials(tmp_path):
    sweep = tmp_path / "look"
    sweep.mkdir()
    make_study(str(sweep / "optuna.journal"), "look")
    proc, line = _serve(str(sweep), "--port", "0")
    try:
        assert line.startswith("slm-dashboard: http://127.0.0.1:"), (line, proc.stderr.read() if proc.poll() else "")
        assert "study look (4 trials: 3 complete, 1 pruned)" in line and str(sweep / "optuna.journal") in line
        url = line.split()[1]  # http://127.0.0.1:<port>/dashboard/studies/<id>: the study's own page
        base, study_id = url.split("/dashboard/studies/")
        status, page = _get(url)
        assert status == 200 and b"<html" in page.lower()  # the page (its JavaScript reads the API below)
        studies = json.loads(_get(f"{base}/api/studies")[1])["study_summaries"]
        assert [(s["study_id"], s["study_name"]) for s in studies] == [(int(study_id), "look")]
        detail = json.loads(_get(f"{base}/api/studies/{study_id}")[1])
        trials = sorted(detail["trials"], key=lambda t: t["number"])
        assert [t["state"] for t in trials] == ["Complete"] * 3 + ["Pruned"]
        assert [t["values"] for t in trials[:3]] == [[v] for v in VALUES]
        assert trials[3]["intermediate_values"] == [{"step": 2, "value": 5.0}, {"step": 4, "value": 4.9}]
        assert detail["has_intermediate_values"] and [t["number"] for t in detail["best_trials"]] == [2]
        with pytest.raises(urllib.error.HTTPError) as refused:  # read-only: the sweeper owns the study
            _get(f"{base}/api/studies/{study_id}/rename", data=b'{"study_name": "x"}')
        assert refused.value.code == 403 and "read-only" in json.loads(refused.value.read())["reason"]
        assert len(json.loads(_get(f"{base}/api/studies")[1])["study_summaries"]) == 1
        import optuna  # live: a trial the sweep adds now is served once optuna-dashboard's cache expires (2 s)

        from slm.training.trial_link import open_storage

        study = optuna.load_study(study_name="look", storage=open_storage(str(sweep / "optuna.journal")))
        running = study.ask({"train.lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)})
        running.report(4.5, 2)
        for _ in range(40):
            trials = json.loads(_get(f"{base}/api/studies/{study_id}")[1])["trials"]
            if len(trials) == 5:
                break
            time.sleep(0.5)
        assert [(t["state"], t["intermediate_values"]) for t in trials if t["number"] == 4] == [
            ("Running", [{"step": 2, "value": 4.5}])]
    finally:
        assert _stop(proc) == 0


def test_finds_the_storage_as_the_sweeper_does(tmp_path, monkeypatch):
    """A study begun in SQLite keeps optuna.db; hydra.sweeper.storage in the saved config wins over both files."""
    from slm.cli.dashboard import find_storage

    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "old"
    sweep.mkdir()
    make_study(f"sqlite:///{sweep / 'optuna.db'}", "old")
    (sweep / "optuna.journal").write_text("")
    assert find_storage(str(sweep)).storage == f"sqlite:///{sweep / 'optuna.db'}"
    assert find_storage(str(sweep / "optuna.db")).storage == f"sqlite:///{sweep / 'optuna.db'}"
    shared = tmp_path / "shared" / "study.journal"
    shared.parent.mkdir()
    make_study(str(shared), "mine")
    (sweep / "multirun.yaml").write_text("run_group: old\nhydra:\n  sweeper:\n    _target_: hydra_plugins."
                                         "slm_optuna_sweeper.optuna_sweeper.OptunaSweeper\n    storage: "
                                         "shared/study.journal\n    study_name: mine\n")
    found = find_storage(str(sweep))
    assert (found.storage, found.study) == (str(shared), "mine") and "multirun.yaml" in found.where
    monkeypatch.setenv("SLM_RUNS", str(tmp_path))  # a run group's name under $SLM_RUNS
    assert find_storage("old").storage == str(shared)
    assert find_storage("postgresql://u@db/x").storage == "postgresql://u@db/x"


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    from slm.cli.dashboard import run

    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "look"
    sweep.mkdir()
    (tmp_path / "grid").mkdir()
    (tmp_path / "empty.journal").write_text("")
    (tmp_path / "junk.journal").write_text("not a journal\n")
    cases = [
        ([str(tmp_path / "nowhere")], ["nowhere: no such sweep directory or study storage"]),
        ([str(tmp_path / "grid")], ["grid: no Optuna study there (no optuna.journal, optuna.db, nor a storage named "
                                    "in optuna_best.yaml or multirun.yaml)",
                                    "give a sweep directory of hydra/sweeper=optuna"]),
        ([str(tmp_path / "empty.journal")], ["empty.journal (from the command line) holds no Optuna study yet"]),
        ([str(tmp_path / "junk.journal")], ["junk.journal (from the command line) is neither an Optuna journal nor a "
                                                 "SQLite file"]),
        (["sqlite:///" + str(tmp_path / "none.db")], ["none.db: no such SQLite file"]),
        ([str(sweep), "--port", "70000"], ["--port", "70000: must be <= 65535"]),
    ]
    for argv, needles in cases:
        with pytest.raises(SystemExit) as exit_:
            run(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("slm-dashboard: error:"), err
        assert all(n in err for n in needles), err
    assert not (tmp_path / "none.db").exists()  # nothing written
    (sweep / "multirun.yaml").write_text("hydra:\n  sweeper:\n    _target_: x.OptunaSweeper\n"
                                         "    storage: gone.journal\n")
    with pytest.raises(SystemExit):
        run([str(sweep)])
    assert "gone.journal, which does not exist" in capsys.readouterr().err
    (sweep / "multirun.yaml").unlink()
    make_study(str(sweep / "optuna.journal"), "look")
    with socket.socket() as taken:  # a port in use
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as exit_:
            run([str(sweep), "--port", str(port)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err == (f"slm-dashboard: error: --port {port} is in use: give a free port, e.g. "
                                             f"--port {port + 1}, or --port 0 for any free one\n")
