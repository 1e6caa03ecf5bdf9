"""`slm-status [run group or directory]...`: the jobs of a sweep by status, with error lines and progress.

    slm-status                      # every run group under $SLM_RUNS (default runs/), with its counts
    slm-status smoke                # the run group runs/smoke (a name under $SLM_RUNS, or any path)
    slm-status runs/depth_width_gpt2_70m --json       # one JSON object per job, one per line

Statuses (slm.runs.states.STATES, the words slm-collect and the sweepers use too): completed, failed and
diverged as recorded in each result.json; running (a process holds the run's lock); stopped (started,
nothing runs it now: killed, interrupted, or preempted and waiting for its requeue; the next attempt
resumes it); pending (a job of the sweep not started yet); unreadable (its result.json cannot be read or
is not a record: the line says why); paused and pruned (successive halving), each with its rung, its configuration's
score and its rank there. Progress is the last logged optimizer step over the run's max_steps. A run whose training
health was flagged (slm.runs.health: a loss spike, a validation rise) has a `health:` line under it.

While a run group has jobs left (running, stopped or pending), a `progress:` line under its counts says how many
of its jobs are done and when the rest should be: the jobs left (a running one less the steps it has done) x the
mean time of its completed jobs (slm.runs.states.job_seconds: training, and where the record has it the final
validation, the saved weights and the eval suite; a paused or pruned job's pace over all its steps) / the jobs running
at once; data preparation is not counted.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from slm.bad_input import OneLineParser, fail
from slm.cli.paths import resolve_group, runs_root
from slm.pipes import quiet_on_closed_pipe
from slm.runs.keys import read_full_key
from slm.runs.progress import progress_text, sweep_progress
from slm.runs.states import STATES, counts
from slm.sweeps.status import sweep_states

PROG = "slm-status"


def _progress(state) -> str:
    if state.max_steps is None:
        return "-"
    return f"{state.step or 0}/{state.max_steps}"


def _warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def _tally(states) -> str:
    tally = counts(states)
    return f"{len(states)} job{'' if len(states) == 1 else 's'}" + (": " + ", ".join(f"{n} {s}" for s, n in tally.items()) if states else "")


def report(sweep_dir: Path) -> list[str]:
    states = sweep_states(sweep_dir, warn=_warn)
    tally = counts(states)
    lines = [f"{sweep_dir}: {_tally(states)}"]
    progress = sweep_progress(states)
    if progress.unfinished:
        lines.append(f"progress: {progress_text(progress, why=True)}")
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
        if state.health:
            lines.append(f"  {'':{width}s}  health: {state.health}")
        whole = read_full_key(sweep_dir / state.key)
        if whole:  # a key cut to a start and a hash: what the hash stands for
            lines.append(f"  {'':{width}s}  whole key: {whole}")
    return lines


def run_groups(root: Path) -> list[Path]:
    """The run groups under root: its directories (not hidden), by name."""
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def overview(root: Path) -> list[str]:
    """One line per run group under root with its job counts."""
    groups = run_groups(root)
    if not groups:
        return [f"{root}: no run groups yet (slm-train writes {root}/<run_group>/<job key>/)"]
    width = max(len(g.name) for g in groups)
    lines = [f"{root}: {len(groups)} run group{'s' if len(groups) != 1 else ''}"]
    for group in groups:
        lines.append(f"  {group.name:{width}s}  {_tally(sweep_states(group, warn=_warn))}")
    lines.append(f"details: {PROG} <run group>, e.g. {PROG} {groups[0].name}")
    return lines


def run(argv: list[str]) -> None:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0],
                           epilog="statuses: " + "; ".join(f"{s}: {d}" for s, d in STATES.items()))
    parser.add_argument("dirs", nargs="*", help="run groups (a name under $SLM_RUNS, default runs/, or a path "
                        "runs/<run_group>) or run directories; none: every run group with its counts")
    parser.add_argument("--json", action="store_true", help="one JSON object per job (per run group without "
                        "arguments) instead of the table")
    args = parser.parse_args(argv)
    root = runs_root()
    if not args.dirs:
        if not root.is_dir():
            fail(PROG, f"{root}: no such directory: no runs yet, or set SLM_RUNS to where slm-train writes them")
        if args.json:
            for group in run_groups(root):
                states = sweep_states(group, warn=_warn)
                print(json.dumps({"group": group.name, "dir": str(group), "jobs": len(states),
                                  "counts": counts(states)}))
        else:
            print("\n".join(overview(root)))
        return
    dirs = [resolve_group(d, PROG) for d in args.dirs]  # a path, or a run group or run under $SLM_RUNS
    for d in dirs:
        if args.json:
            for state in sweep_states(d, warn=_warn):
                print(json.dumps({"sweep": str(d), **state.to_dict(), "whole_key": read_full_key(d / state.key)}))
        else:
            print("\n".join(report(d)))


@quiet_on_closed_pipe
def main() -> None:
    try:
        run(sys.argv[1:])
    except BrokenPipeError:  # e.g. `slm-status runs/x | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()
