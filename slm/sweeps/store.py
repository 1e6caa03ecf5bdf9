"""A sweep's sweep.json: the sweepers write it into the sweep directory, and slm-status, slm-collect and the analysis
read it. Each section is an object (SECTIONS: what of what); `jobs` is every job key with its overrides, so the jobs not
started yet are known; the others are what an lr search, a ladder and successive halving pinned for the sweep.

Every section is merged in (update_sweep_file), the others kept; a sweep.json that cannot be read is one warning line
and rewritten with what is given, and its readers raise RecordError (the carried lrs and the halving decisions count it
as none, since the sweep rewrites it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from slm.runs.keys import configuration_parts, short_names
from slm.runs.record import RecordError, read_object, write_json_atomic

log = logging.getLogger(__name__)
SWEEP_FILE = "sweep.json"  # written by the sweepers into the sweep directory: every job key and its overrides
SECTIONS = {"jobs": "job key -> overrides", "lr_multipliers": "job key -> multiplier", "ladder": "job key -> rung",
            "carried": "configuration -> carried lr", "halving": "rung index -> its decision"}
"""What a sweep's sweep.json holds: each section an object (what of what)."""


def _section(sweep_dir: str | os.PathLike, name: str, listing: dict | None = None) -> dict:
    """One section of sweep.json ({} without the file or the section); RecordError when the file cannot be read or
    the section is not an object. `listing`: the file's content, read already."""
    path = Path(sweep_dir) / SWEEP_FILE
    if listing is None:
        listing = read_object(path) if path.exists() else {}
    found = listing.get(name, {})
    if not isinstance(found, dict) or (name == "jobs" and not all(isinstance(o, list) for o in found.values())):
        raise RecordError(f"{path}: \"{name}\" is not an object of {SECTIONS[name]}")
    return found


def sweep_sections(sweep_dir: str | os.PathLike, names=tuple(SECTIONS)) -> dict[str, dict]:
    """The sections `names` of the sweep's sweep.json ({} each without the file), read once; RecordError when it
    cannot be read or one of them is not what it should be."""
    path = Path(sweep_dir) / SWEEP_FILE
    listing = read_object(path) if path.exists() else {}
    return {name: _section(sweep_dir, name, listing) for name in names}


def update_sweep_file(sweep_dir: str | os.PathLike, warn: Callable[[str], None] = log.warning, **sections: dict) -> None:
    """Merge `sections` ({section: {key: value}}) into the sweep's sweep.json, read once; the other sections are kept,
    and an unreadable file is one `warn` line and rewritten with what is given."""
    try:
        old = sweep_sections(sweep_dir)
    except RecordError as err:
        warn(f"{err}; rewritten with this sweep's jobs")
        old = {}
    merged = {name: {**old.get(name, {}), **(sections.get(name) or {})} for name in SECTIONS}
    write_json_atomic(Path(sweep_dir) / SWEEP_FILE, {"jobs": merged["jobs"], **{k: v for k, v in merged.items() if k != "jobs" and v}})


def list_jobs(sweep_dir: str | os.PathLike, jobs: dict[str, list[str]],
              warn: Callable[[str], None] = log.warning, lr_multipliers: dict[str, float] | None = None,
              ladder: dict[str, dict] | None = None) -> None:
    """Add jobs (key -> overrides) to the sweep's sweep.json, so that slm-status shows those not started
    (an unreadable sweep.json is one `warn` line and replaced), with `lr_multipliers` (key -> multiplier
    of the point's lr, hydra.sweeper.lr_search) which lr each job of an lr search was trained at, and with `ladder`
    (key -> {rung, rung_index, lr_rule, config, lr_from}: hydra.sweeper.ladder) each ladder job's rung and lr rule."""
    update_sweep_file(sweep_dir, warn, jobs=jobs, lr_multipliers=lr_multipliers, ladder=ladder)


def listed_jobs(sweep_dir: str | os.PathLike) -> dict[str, list[str]]:
    """The jobs the sweep's sweep.json lists (key -> overrides), {} without one; RecordError when it
    cannot be read or is not such a listing."""
    return _section(sweep_dir, "jobs")


def sweep_lr_multipliers(sweep_dir: str | os.PathLike, sections: dict | None = None) -> dict[str, float]:
    """{job key: multiplier of its point's lr} of the sweep's lr searches (sweep.json, or its `sections` read
    already), {} without any; RecordError when sweep.json cannot be read."""
    found = _section(sweep_dir, "lr_multipliers") if sections is None else sections["lr_multipliers"]
    return {str(k): float(v) for k, v in found.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def sweep_ladder(sweep_dir: str | os.PathLike, sections: dict | None = None) -> dict[str, dict]:
    """{job key: {rung, rung_index, lr_rule, config, lr_from}} of a ladder sweep (sweep.json, or its `sections` read
    already), {} without one; RecordError when sweep.json cannot be read."""
    found = _section(sweep_dir, "ladder") if sections is None else sections["ladder"]
    return {str(k): v for k, v in found.items() if isinstance(v, dict)}


def carried_lrs(sweep_dir: str | os.PathLike) -> dict[str, dict]:
    """{configuration: the lr multiplier a transfer ladder carried up for it, and from where} (sweep.json's
    `carried`), {} without; a sweep.json that cannot be read counts as none (it is rewritten)."""
    try:
        return {str(k): v for k, v in _section(sweep_dir, "carried").items() if isinstance(v, dict)}
    except RecordError:
        return {}


def save_carried_lrs(sweep_dir: str | os.PathLike, carried: dict[str, dict]) -> None:
    """Write a transfer ladder's carried lrs into sweep.json (`carried`), the rest of the file kept."""
    if carried:
        update_sweep_file(sweep_dir, carried=carried)


def halving_decisions(sweep_dir: str | os.PathLike) -> list[dict]:
    """A halving sweep's pinned decisions, rung by rung from the first (sweep.json's `halving`: {rung index: {rung,
    fraction, scores, kept}}), [] without; a sweep.json that cannot be read counts as none (it is rewritten)."""
    try:
        found = _section(sweep_dir, "halving")
    except RecordError:
        return []
    out = []
    while isinstance(found.get(str(len(out))), dict):
        out.append(found[str(len(out))])
    return out


def upgraded_decisions(sweep_dir: str | os.PathLike) -> list[dict]:
    """A halving sweep's pinned decisions in today's form, for its readers: each with its rung's number (from 1), and
    an earlier version's, which hold neither, with `jobs` (configuration -> job keys) and `labels` (configuration ->
    what tells it from the others) from the sweep's jobs, its configurations named as that version named them (without
    an lr search's lr). The sweeper going on with such a sweep reads halving_decisions and renames those configurations
    to today's names itself (slm/sweeps/halving.py)."""
    decisions = halving_decisions(sweep_dir)
    if decisions and not all("jobs" in d and "labels" in d for d in decisions):
        parts: dict[str, list[str]] = {}
        jobs: dict[str, list[str]] = {}
        for key, overrides in sweep_sections(sweep_dir, ("jobs",))["jobs"].items():
            name = ",".join(configuration_parts(overrides))  # that version's name
            parts.setdefault(name, configuration_parts(overrides))
            jobs.setdefault(name, []).append(key)
        labels = short_names(parts)
        decisions = [{"jobs": jobs, "labels": labels, **d} for d in decisions]
    return [{**d, "rung": i + 1} for i, d in enumerate(decisions)]


def save_halving_decisions(sweep_dir: str | os.PathLike, decisions: list[dict]) -> None:
    """Pin a halving sweep's decisions in sweep.json (`halving`), the rest of the file kept."""
    update_sweep_file(sweep_dir, halving={str(i): d for i, d in enumerate(decisions)})
