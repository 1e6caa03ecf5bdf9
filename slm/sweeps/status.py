"""Where a sweep stands: its jobs' states (slm.runs.states, with the jobs its sweep.json lists that have not started),
a paused job's rung, its configuration's score and its rank there (sweep.json's pinned halving decisions), and the
summary the sweepers and slm-workers print, which ends with a halving sweep's winner once its last rung has ended.

slm-workers runs copies of one sweep: $SLM_WORKERS (WORKERS_ENV) tells each copy how many share it (its progress lines
count them), $SLM_WORKERS_DIR (WORKERS_DIR_ENV) where each copy notes its sweep for the summary slm-workers prints.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from pathlib import Path

from slm.runs.health import describe as describe_health
from slm.runs.record import RESULT_FILE, RecordError, load_record
from slm.runs.states import (COMPLETED, DIVERGED, FAILED, ORDER, PAUSED, PENDING, PRUNED, JobState, number,
                             run_state)
from slm.sweeps.store import halving_decisions, listed_jobs

log = logging.getLogger(__name__)
WORKERS_ENV = "SLM_WORKERS"  # set by slm-workers for its copies: how many copies share the sweep
WORKERS_DIR_ENV = "SLM_WORKERS_DIR"  # set by slm-workers (2 copies or more): where each copy's sweep notes itself


def _rank_paused(states: list[JobState], decisions: list[dict], records: dict[str, float]) -> None:
    """A paused job's rung, its configuration's score and rank there (sweep.json's pinned decisions), or that its
    rung is not decided yet; `records`: {job key: its pause's fraction}."""
    for state in states:
        if state.status != PAUSED or state.key not in records:
            continue
        fraction = records[state.key]
        for i, d in enumerate(decisions):
            name = next((n for n, keys in (d.get("jobs") or {}).items() if state.key in keys), None)
            if name is not None and isinstance(d.get("fraction"), (int, float)) and math.isclose(d["fraction"], fraction):
                scores = d.get("scores") or {}
                order = sorted(scores, key=lambda n: (math.inf if scores[n] is None else scores[n], n))
                score = "failed" if scores.get(name) is None else f"{scores[name]:.4f}"
                went = "goes on" if name in d.get("kept", []) else "pruned"
                of = f" of {d['rungs']}" if d.get("rungs") else ""
                state.note = (f"rung {i + 1}{of} (step {state.step}): score {score} (its "
                              f"configuration's mean over seeds), rank {order.index(name) + 1} of {len(order)}: {went}")
                break
        else:
            state.note = (f"rung {len(decisions) + 1}" + (f" of {decisions[0]['rungs']}" if decisions and
                                                           decisions[0].get("rungs") else "")
                          + f": {state.note or 'paused'}; ranked once every job of the rung has reached it")


def sweep_states(sweep_dir: str | os.PathLike, warn: Callable[[str], None] = log.warning) -> list[JobState]:
    """Every job of a sweep directory: its run directories, and the jobs its sweep.json lists (a run
    whose record cannot be read is `unreadable`; an unreadable sweep.json is one `warn` line)."""
    sweep_dir = Path(sweep_dir)
    if (sweep_dir / RESULT_FILE).exists():  # a run directory itself
        return [run_state(sweep_dir)]
    states = {}
    for run_dir in sorted(p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if (run_dir / RESULT_FILE).exists() or (run_dir / ".hydra").exists():
            states[run_dir.name] = run_state(run_dir)
    try:
        listed = listed_jobs(sweep_dir)
    except RecordError as err:
        warn(f"{err}; the jobs not started yet are unknown")
        listed = {}
    for key, overrides in listed.items():
        states.setdefault(key, JobState(key=key, status=PENDING, overrides=overrides))
    paused = {k: s.pause_fraction for k, s in states.items() if s.status == PAUSED and s.pause_fraction}
    if paused:
        _rank_paused(list(states.values()), halving_decisions(sweep_dir), paused)
    return sorted(states.values(), key=lambda s: (ORDER.index(s.status) if s.status in ORDER else len(ORDER), s.key))


def summary_lines(name: str, sweep_dir: str | os.PathLike, jobs: list[tuple[str, str, str | None]]) -> list[str]:
    """A sweep's summary: one line with its jobs' tally, then one per job (key, status, error line) not completed, then
    one per run whose training health was flagged (health_lines)."""
    tally: dict[str, int] = {}
    for _, status, _ in jobs:
        tally[status] = tally.get(status, 0) + 1
    parts = ", ".join(f"{n} {s}" for s, n in tally.items())
    lines = [f"sweep {name}: {len(jobs)} job{'' if len(jobs) == 1 else 's'}: {parts} (details: slm-status {sweep_dir})"]
    lines += [f"  {status:9s} {key}: {error or ''}".rstrip() for key, status, error in jobs if status != COMPLETED]
    lines += health_lines(sweep_dir, [key for key, status, _ in jobs if status in (COMPLETED, DIVERGED, PAUSED, PRUNED)])
    winner = halving_winner(name, sweep_dir)
    return lines + ([winner] if winner else [])


def halving_winner(name: str, sweep_dir: str | os.PathLike) -> str | None:
    """A halving sweep's answer once its last rung has ended: the configuration with the lowest final validation loss
    (the mean over its seeds) among those trained to the end, its score, and what was pruned (sweep.json's decisions,
    the survivors' records); None before, or without decisions that list their jobs."""
    decisions = halving_decisions(sweep_dir)
    if not decisions or not isinstance(decisions[-1].get("jobs"), dict):
        return None
    last, finals, seeds = decisions[-1], {}, {}
    for config in last["kept"]:
        values = []
        for key in last["jobs"].get(config, []):
            try:
                record = load_record(Path(sweep_dir) / key) or {}
            except RecordError:
                return None
            if record.get("status") not in (COMPLETED, FAILED, DIVERGED):
                return None  # not trained to the end yet
            value = number((record.get("eval") or {}).get("val_nll"))
            ok = record.get("status") == COMPLETED and value is not None and math.isfinite(value)
            values.append(value if ok else math.inf)
        if values:
            finals[config], seeds[config] = sum(values) / len(values), len(values)
    order = sorted(finals, key=lambda c: (finals[c], c))
    if not order or not math.isfinite(finals[order[0]]):
        return None
    label = (last.get("labels") or {}).get
    best, total = order[0], len(decisions[0].get("scores") or {})
    others = "; ".join(f"{label(c, c)} {finals[c]:.4f}" for c in order[1:4])
    pruned = ", ".join(f"rung {i + 1}: {len(d.get('scores') or {}) - len(d.get('kept') or [])}"
                       for i, d in enumerate(decisions))
    return (f"sweep {name}: halving chose {label(best, best)}: final validation loss {finals[best]:.4f} (the mean of "
            f"{seeds[best]} seed{'s' if seeds[best] != 1 else ''}), "
            + ("the only one trained to the end" if len(finals) == 1 else
               f"the best of the {len(finals)} trained to the end (then {others})")
            + f"; {total - len(finals)} of {total} configurations pruned ({pruned})")


def health_lines(sweep_dir: str | os.PathLike, keys: list[str]) -> list[str]:
    """`  health    <key>: <what went wrong>` for each of these runs whose record's health section flags it
    (slm.runs.health); a record that cannot be read is left out (the summary's own lines name it)."""
    lines = []
    for key in keys:
        try:
            found = describe_health((load_record(Path(sweep_dir) / key) or {}).get("health"))
        except RecordError:
            continue
        if found:
            lines.append(f"  {'health':9s} {key}: {found}")
    return lines
