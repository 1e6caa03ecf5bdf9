"""`slm-workers N [--stagger S] -- COMMAND...`: run one command in N copies at once, for a local sweep.

A local `slm-train -m` trains its jobs one after another. N copies of the same sweep share its jobs: each
copy trains the next job that no other copy holds (the run's .lock, slm.runs.job) and skips the rest, so N
1-thread copies keep N cores busy with models too small to use more threads well (`make reproduce-2512`).

    OMP_NUM_THREADS=1 slm-workers 2 -- slm-train -m sweep=arxiv2512_table1
    slm-workers 2 -- sh -c 'slm-train -m sweep=arxiv2512_table1; slm-train -m sweep=arxiv2512_rope'

Each line a copy prints is prefixed `[i] ` (copies 1..N). The copies start `--stagger` seconds apart (default
2), so that they take different jobs and their sweeps' timestamped files differ. Ctrl-C or SIGTERM is passed
on to each copy's whole process group as SIGTERM (slm-train checkpoints at the next step and exits 143; a
second signal stops it at once); the command waits until every process of every copy has closed its output,
then exits with the worst exit status among the copies (a copy stopped by a signal counts 128 + its number),
or with 128 + the number of the signal that stopped it.

A sweep's copies know they are copies ($SLM_WORKERS: how many; its progress lines count every copy's jobs and
divide the time left among them). With more than one copy, a copy's sweep ends with one line instead of its
summary, since other copies may still train its jobs; once every copy has ended, slm-workers prints each sweep's
summary, read from its run directories.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from slm.bad_input import OneLineParser, fail
from slm.pipes import quiet_on_closed_pipe

PROG = "slm-workers"


def _exit_status(returncode: int) -> int:
    """A Popen return code as a shell reports it: killed by signal s -> 128 + s."""
    return 128 - returncode if returncode < 0 else returncode


def _pump(stream, prefix: bytes, lock: threading.Lock) -> None:
    """Copy a copy's output to stdout line by line, each line prefixed, until every writer has closed it."""
    out = sys.stdout.buffer
    for line in iter(stream.readline, b""):
        with lock:
            out.write(prefix + line)
            out.flush()
    stream.close()


def sweep_summary(notes_dir: Path) -> list[str]:
    """The summary of every sweep the copies noted in `notes_dir` (slm.sweeps.progress.note_for_workers:
    name, sweep directory, job keys), each read from its run directories now; a note that cannot be read is skipped."""
    from slm.runs.record import RecordError, read_object
    from slm.runs.states import states_of
    from slm.sweeps.status import summary_lines

    sweeps: dict[str, tuple[str, list[str]]] = {}
    for path in sorted(notes_dir.glob("*.json"), key=lambda p: p.stat().st_mtime):
        try:
            note = read_object(path)
            name, sweep_dir, keys = str(note["name"]), str(note["sweep_dir"]), [str(k) for k in note["keys"]]
        except (RecordError, KeyError, TypeError):
            continue
        known = sweeps.setdefault(sweep_dir, (name, []))[1]
        known.extend(k for k in keys if k not in known)
    lines = []
    for sweep_dir, (name, keys) in sweeps.items():
        states = states_of([Path(sweep_dir) / k for k in keys])
        lines += summary_lines(name, sweep_dir, [(s.key, s.status, s.error) for s in states])
    return lines


def run(copies: int, command: list[str], stagger: float = 2.0) -> int:
    """Run `command` in `copies` copies at once; the worst exit status (see the module docstring)."""
    if copies == 1:  # nothing to share: the copy says everything itself
        return _run(copies, command, stagger, None)
    with tempfile.TemporaryDirectory(prefix="slm-workers-") as notes:
        code = _run(copies, command, stagger, Path(notes))
        lines = sweep_summary(Path(notes))
    if lines:
        print(f"{PROG}: every copy has ended (exit status {code}); the sweeps they ran, from their run directories:")
        print("\n".join(lines), flush=True)
    return code


def _run(copies: int, command: list[str], stagger: float, notes: Path | None) -> int:
    """Start the copies (telling each how many there are and, with `notes`, where its sweeps note themselves), pass
    signals on, wait for every copy's output to close; the worst exit status."""
    from slm.sweeps.status import WORKERS_DIR_ENV, WORKERS_ENV

    lock = threading.Lock()
    procs: list[subprocess.Popen] = []
    pumps: list[threading.Thread] = []
    stopped: list[int] = []
    env = {**os.environ, WORKERS_ENV: str(copies)}
    if notes is not None:
        env[WORKERS_DIR_ENV] = str(notes)

    def stop(signum, frame) -> None:
        stopped.append(signum)
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:  # that copy has already ended
                pass

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for i in range(copies):
            if stopped:
                break
            if i:
                time.sleep(stagger)
            # its own session: a terminal's Ctrl-C reaches this process only, which passes it on as SIGTERM
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, env=env)
            procs.append(proc)
            prefix = f"[{i + 1}] ".encode() if copies > 1 else b""
            pump = threading.Thread(target=_pump, args=(proc.stdout, prefix, lock), daemon=True)
            pump.start()
            pumps.append(pump)
        for pump in pumps:
            while pump.is_alive():  # a timed join, so that a signal is handled at once
                pump.join(0.2)
        codes = [_exit_status(proc.wait()) for proc in procs]
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 128 + stopped[0] if stopped else max(codes, default=0)


@quiet_on_closed_pipe
def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0],
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("copies", help="how many copies of the command run at once (a positive integer)")
    parser.add_argument("--stagger", type=float, default=2.0, help="seconds between the copies' starts (default 2)")
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = parser.parse_args(argv[:split]), argv[split + 1:]
    try:
        copies = int(args.copies)
    except ValueError:
        copies = 0
    if copies < 1:
        fail(PROG, f"copies={args.copies!r}: give a positive integer (how many copies run at once)")
    if not math.isfinite(args.stagger) or args.stagger < 0:
        fail(PROG, f"--stagger={args.stagger}: give a finite number of seconds >= 0 (between the copies' starts)")
    if not command:
        fail(PROG, "no command: give it after --, e.g. slm-workers 2 -- slm-train -m sweep=arxiv2512_table1")
    try:
        sys.exit(run(copies, command, args.stagger))
    except FileNotFoundError as err:
        fail(PROG, f"{command[0]!r} cannot be run: {err.strerror}", code=127)


if __name__ == "__main__":
    main()
