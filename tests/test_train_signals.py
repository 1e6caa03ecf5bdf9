"""A second stop signal stops slm-train at once in every phase, even in the middle of a slow step
(slm.training.stop_guard), and bf16-mixed is refused before any work where the CPU would emulate it.

The slow step is a wait in C (os.system, injected by tests/faults/sitecustomize.py), where CPython runs no Python
signal handler, as in one long matrix product: two SIGTERMs sent then were one SIGTERM seen when the step ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from slm.training.config import TrainConfig, TrainConfigError
from tests.test_train_cli import FAST, record, run_dir

ROOT = Path(__file__).resolve().parents[1]
SLOW_S = 120  # the slow step's wait: a stop that waited for the step would take this long


def _end(proc: subprocess.Popen) -> None:
    """Kill what is left of the process group the test started (the slow step's child, if its parent is gone)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _seconds_to_exit(proc: subprocess.Popen, signals: list[int], pause: float = 0.3) -> float:
    """Send `signals` a pause apart; the seconds from the last one until the process exits."""
    for i, signum in enumerate(signals):
        if i:
            time.sleep(pause)
        proc.send_signal(signum)
    sent = time.monotonic()
    proc.wait(timeout=SLOW_S - 30)
    return time.monotonic() - sent


def test_two_sigterms_stop_slm_train_during_a_slow_step(tmp_path):
    mark = tmp_path / "slow-step-started"
    env = {**os.environ, "SLM_RUNS": str(tmp_path / "runs"), "SLM_CACHE": str(tmp_path.parent / "slm-cache"),
           "PYTHONPATH": str(ROOT / "tests" / "faults"), "SLM_FAULT_SLOW_STEP": "2", "SLM_FAULT_SLOW_MARK": str(mark),
           "SLM_FAULT_SLOW_SECONDS": str(SLOW_S), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "slm.cli.train", "run_group=t", *FAST, "train.length.steps=6"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mark.exists(), proc.communicate(timeout=30)[1][-2000:]
        time.sleep(0.5)  # inside the slow step's wait
        seconds = _seconds_to_exit(proc, [signal.SIGTERM, signal.SIGTERM])
        err = proc.communicate(timeout=30)[1]
    finally:
        _end(proc)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert seconds < 15, seconds  # the guard's 2 s grace, not the step's 120 s
    assert "slm-train: SIGTERM again: stopping now, without a checkpoint" in err and "Traceback" not in err
    r = record(run_dir(tmp_path))
    assert r["status"] == "running" and "interrupted" not in r["training"]  # no checkpoint: resumes from the last one


GUARDED = textwrap.dedent("""
    import os, signal, sys
    from slm.training.stop_guard import StopGuard
    signal.signal(signal.SIGTERM, lambda *a: print("handled", flush=True))  # a handler that does not stop
    print("ready", flush=True)
    with StopGuard(prog="guarded", grace=float(sys.argv[1])):
        os.system("exec sleep {seconds} </dev/null >/dev/null 2>&1")  # in C: no Python handler runs meanwhile
    print("finished", flush=True)
""")


def _guarded(grace: float, seconds: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", GUARDED.format(seconds=seconds), str(grace)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline() == "ready\n"
    time.sleep(0.5)  # in the wait
    return proc


def test_the_guard_ends_the_process_at_the_second_stop_signal_only():
    proc = _guarded(grace=0.5, seconds=SLOW_S)
    try:
        # (os.system ignores SIGINT while it waits, as C's system() does: two SIGTERMs)
        seconds = _seconds_to_exit(proc, [signal.SIGTERM, signal.SIGTERM])
        out, err = proc.communicate(timeout=30)
    finally:
        _end(proc)
    assert proc.returncode == 128 + signal.SIGTERM and seconds < 10, (seconds, err)
    assert err == ("guarded: SIGTERM again: stopping now, without a checkpoint (the process was busy in one long "
                   "operation; the run resumes from its last checkpoint)\n") and "finished" not in out
    proc = _guarded(grace=0.5, seconds=3)
    try:
        proc.send_signal(signal.SIGTERM)  # one: left to the handler, which runs when the wait ends
        out, err = proc.communicate(timeout=60)
    finally:
        _end(proc)
    assert proc.returncode == 0 and out == "handled\nfinished\n" and err == ""


def test_the_guard_leaves_a_second_signal_to_the_code_that_handles_it_in_time():
    """SignalCheckpoint raises SystemExit at the second signal as soon as Python runs: the guard only waits."""
    code = textwrap.dedent("""
        import os, signal, time
        from slm.training.stop_guard import StopGuard
        seen = []
        def stop(signum, frame):
            seen.append(signum)
            if len(seen) == 2:
                raise SystemExit(7)
        signal.signal(signal.SIGTERM, stop)
        try:
            with StopGuard(grace=5.0) as guard:
                os.kill(os.getpid(), signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
        except SystemExit as exit_:
            time.sleep(0.5)
            print(exit_.code, guard.stops, flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == "7 2\n" and out.stderr == "", out


# ---------------------------------------------------------------- bf16-mixed on a CPU
@pytest.mark.parametrize("accelerator", ["auto", "cpu"])
def test_bf16_mixed_is_refused_on_a_cpu_without_bfloat16(monkeypatch, accelerator):
    import torch

    import slm.training.devices as config

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setattr(config, "cpu_bf16", lambda: False)
    TrainConfig(parallel={"accelerator": accelerator}).parallel.check_machine("32")  # precision 32: fine
    with pytest.raises(TrainConfigError) as err:
        TrainConfig(parallel={"accelerator": accelerator}).parallel.check_machine("bf16-mixed")
    assert (err.value.key, err.value.value) == ("train.precision", "bf16-mixed")
    assert "train.precision=32" in str(err.value)  # the fix
    monkeypatch.setattr(config, "cpu_bf16", lambda: True)  # AVX512-BF16 or AMX: measured 2x faster than float32
    TrainConfig(parallel={"accelerator": accelerator}).parallel.check_machine("bf16-mixed")


def test_bf16_mixed_is_not_refused_where_a_gpu_trains(monkeypatch):
    import torch

    import slm.training.devices as config

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(config, "cpu_bf16", lambda: False)
    TrainConfig(precision="bf16-mixed").parallel.check_machine("bf16-mixed")


def test_slm_train_refuses_bf16_on_such_a_cpu_before_any_work(tmp_path, monkeypatch, capsys):
    """One line, exit 2, before the data is prepared and with no run directory left."""
    import torch

    import slm.data
    import slm.training.devices as config
    from slm.cli.train import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(config, "cpu_bf16", lambda: False)
    monkeypatch.setattr(slm.data, "prepare", lambda *a, **k: pytest.fail("data prepared before the precision check"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLM_RUNS", str(tmp_path / "runs"))
    monkeypatch.setattr(sys, "argv", ["slm-train", "model=debug", "eval=none", "train.length.steps=2",
                                      "train.precision=bf16-mixed"])
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err and err.count("\n") == 1
    assert err.startswith("slm-train: error: train.precision='bf16-mixed' is invalid")
    assert not [p for p in (tmp_path / "runs").rglob("*") if p.is_file()] if (tmp_path / "runs").exists() else True
