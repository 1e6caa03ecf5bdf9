"""`slm-status <sweep dir>...`: the jobs of a sweep by status, with error lines and progress.

    slm-status runs/smoke
    slm-status runs/depth_width_gpt2_70m --json       # one JSON object per job, one per line

Statuses (slm.runs.status): completed, failed and diverged as recorded in each result.json; running
(a process holds the run's lock); stopped (started, nothing runs it now: killed, interrupted, or
preempted and waiting for its requeue; the next attempt resumes it); pending (listed by the sweep, not
started); unreadable (its result.json cannot be read or is not a record: the line says why). Progress
is the last logged optimizer step over the run's max_steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from slm.cli.config import fail
from slm.runs.status import counts, sweep_states

PROG = "slm-status"


def _progress(state) -> str:
    if state.max_steps is None:
        return "-"
    return f"{state.step or 0}/{state.max_steps}"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        fail(self.prog, f"{message} (see {self.prog} --help)")


def _warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def report(sweep_dir: Path) -> list[str]:
    states = sweep_states(sweep_dir, warn=_warn)
    tally = counts(states)
    lines = [f"{sweep_dir}: {len(states)} jobs" + (": " + ", ".join(f"{n} {s}" for s, n in tally.items()) if states else "")]
    width = max([len(s.key) for s in states] + [3])
    current = None
    for state in states:
        if state.status != current:
            current = state.status
            lines.append(f"{current} ({tally[current]})")
        detail = state.error or state.note or ""
        if state.val_nll is not None:
            detail = f"val_nll {state.val_nll:.4f}" + (f"  {detail}" if detail else "")
        lines.append(f"  {state.key:{width}s}  {_progress(state):>13s}  {detail}".rstrip())
    return lines


def run(argv: list[str]) -> None:
    parser = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="sweep directories (runs/<run_group>) or run directories")
    parser.add_argument("--json", action="store_true", help="one JSON object per job instead of the table")
    args = parser.parse_args(argv)
    for d in args.dirs:
        if not d.is_dir():
            fail(PROG, f"{d} is not a directory (a sweep is runs/<run_group>, e.g. runs/smoke)")
    for d in args.dirs:
        if args.json:
            for state in sweep_states(d, warn=_warn):
                print(json.dumps({"sweep": str(d), **state.to_dict()}))
        else:
            print("\n".join(report(d)))


def main() -> None:
    try:
        run(sys.argv[1:])
    except BrokenPipeError:  # e.g. `slm-status runs/x | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()
