"""slm-workers: N copies of a command at once, output prefixed per copy, signals passed on, worst status out."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

WORKERS = [sys.executable, "-m", "slm.cli.workers"]


def script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "copy.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def test_copies_run_at_once_prefixed_and_the_worst_status_wins(tmp_path):
    # the copy that creates `first` exits 0, the other 3; each says so, and they overlap in time
    copy = script(tmp_path, f"""
        import os, sys, time
        try:
            os.close(os.open({str(tmp_path / 'first')!r}, os.O_CREAT | os.O_EXCL)); code = 0
        except FileExistsError:
            code = 3
        open({str(tmp_path)!r} + f"/started.{{os.getpid()}}", "w").close()
        while len([p for p in os.listdir({str(tmp_path)!r}) if p.startswith("started.")]) < 2:
            time.sleep(0.05)  # both copies are running at once, or this never ends
        print("exit", code, flush=True)
        sys.exit(code)
    """)
    out = subprocess.run([*WORKERS, "2", "--stagger", "0.1", "--", *copy], capture_output=True, text=True, timeout=60)
    assert out.returncode == 3, out.stderr
    assert sorted(out.stdout.splitlines()) == ["[1] exit 0", "[2] exit 3"]


def test_one_copy_is_not_prefixed(tmp_path):
    out = subprocess.run([*WORKERS, "1", "--", sys.executable, "-c", "print('hello')"], capture_output=True,
                         text=True, timeout=60)
    assert (out.returncode, out.stdout) == (0, "hello\n")


def test_a_signal_reaches_every_copys_processes_and_is_waited_for(tmp_path):
    # each copy is a shell running a child that takes a moment to "checkpoint" on SIGTERM, as slm-train does;
    # the shell itself dies at once, so only signalling the process group and reading to EOF waits for the child
    child = script(tmp_path, f"""
        import os, signal, sys, time
        def stop(signum, frame):
            time.sleep(0.5)
            print("checkpointed", flush=True)
            sys.exit(143)
        signal.signal(signal.SIGTERM, stop)
        open({str(tmp_path)!r} + f"/ready.{{os.getpid()}}", "w").close()
        print("ready", flush=True)
        time.sleep(60)
        print("not stopped", flush=True)
    """)
    proc = subprocess.Popen([*WORKERS, "2", "--stagger", "0.1", "--", "sh", "-c", " ".join(child) + "; echo next"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while len(list(tmp_path.glob("ready.*"))) < 2 and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGINT, stderr
    lines = stdout.splitlines()
    for i in (1, 2):
        assert f"[{i}] ready" in lines and f"[{i}] checkpointed" in lines, stdout
    assert "not stopped" not in stdout and "next" not in stdout  # the shell did not go on to its next command
    for ready in tmp_path.glob("ready.*"):  # no child outlives the command (an unreaped zombie has ended too)
        status = Path(f"/proc/{ready.name.split('.')[1]}/status")
        deadline = time.time() + 2  # on a loaded machine a child may still be inside its exit for a moment
        while status.exists() and "\tZ" not in _state(status) and time.time() < deadline:
            time.sleep(0.05)
        assert not status.exists() or "\tZ" in _state(status)


def _state(status: Path) -> str:
    """The State: line of a /proc/<pid>/status file ('' once the process is gone)."""
    try:
        return status.read_text().split("State:")[1].splitlines()[0]
    except (OSError, IndexError):
        return ""


@pytest.mark.parametrize("argv, match", [
    (["0", "--", "true"], "copies='0'"),
    (["two", "--", "true"], "copies='two'"),
    (["2"], "no command"),
    (["2", "--stagger", "-1", "--", "true"], "--stagger=-1"),
])
def test_bad_input_is_one_line_and_exit_2(argv, match):
    out = subprocess.run([*WORKERS, *argv], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and match in out.stderr, out.stderr
