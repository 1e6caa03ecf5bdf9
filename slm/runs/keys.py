"""Job keys: the run-directory name of a job, made from the overrides that define it.

A sweep writes each job to `runs/<run_group>/<job key>/`. The key is Hydra's `override_dirname` of the
job (its overrides sorted and joined by ",", keys listed in `hydra.job.config.override_dirname.exclude_keys`
left out: run_group, sweep, rerun_failed, progress bar), made filesystem-safe:

- stable: the same overrides give the same key in any order, on any machine, in any later run;
- readable: `model.d_model=384,model.n_layers=32` stays as it is, "/" becomes "~";
- distinct: different overrides never share a key ("~" and "%" and characters that are awkward in a
  file name are %-escaped, so the mapping is one-to-one; keys over MAX_LEN characters keep the overrides that fit
  whole, then "...sha1-" and a hash of the whole).

Concurrent sweeps do not collide because each writes under its own run_group; two processes that reach
the same job (the same sweep started twice) are kept apart by the run's lock (slm.runs.job).
"""

from __future__ import annotations

import hashlib
import string

DEFAULT_KEY = "default"  # the job with no overrides (an override always holds "=" or starts with "~")
MAX_LEN = 200  # file names may have 255 bytes; leave room for suffixes
FULL_KEY_FILE = "job_key.txt"
"""In a run directory whose name was cut (a key over MAX_LEN characters): the whole key, what the hash stands for."""
_KEEP = frozenset(string.ascii_letters + string.digits + "._,=+-@:[]{}")


def configuration(overrides, lr: float | None = None) -> str:
    """A job's configuration: its overrides less train.seed and less the sweep file's name (sweep=...), sorted and
    joined by "," (successive halving's unit, slm/sweeps/halving.py, and analysis.halving's). `lr`: the
    job's lr where the sweep searches lr (hydra.sweeper.lr_search), added as train.lr=<lr> when its overrides do not
    name it (the search's x1 job keeps the point's own overrides). Never "": a job with no other override is
    DEFAULT_KEY."""
    return ",".join(configuration_parts(overrides, lr)) or DEFAULT_KEY


def configuration_parts(overrides, lr: float | None = None) -> list[str]:
    """The sorted overrides `configuration` joins."""
    parts = sorted(str(o) for o in overrides if not str(o).lstrip("+").startswith(("train.seed=", "sweep=")))
    if lr is not None and not any(p.lstrip("+").startswith("train.lr=") for p in parts):
        parts = sorted(parts + [f"train.lr={lr:.6g}"])
    return parts


def short_names(parts: dict[str, list[str]]) -> dict[str, str]:
    """{configuration: what tells it from the others} for {configuration: configuration_parts}: its overrides less
    those every configuration shares (a configuration alone, or one with nothing of its own, keeps its whole name)."""
    shared = set.intersection(*(set(p) for p in parts.values())) if len(parts) > 1 else set()
    return {name: ",".join(o for o in p if o not in shared) or name for name, p in parts.items()}


def _escape(char: str) -> str:
    if char in _KEEP:
        return char
    if char == "/":
        return "~"
    return "".join(f"%{byte:02X}" for byte in char.encode())


def full_key(override_dirname: str) -> str:
    """The job key before it is cut to MAX_LEN characters (the same as job_key for a key that fits)."""
    return "".join(_escape(c) for c in override_dirname) if override_dirname else DEFAULT_KEY


CUT_MARK = "...sha1-"
"""Between a cut key's kept overrides and the hash of the whole: no override holds "...", so the hash never reads as
a setting's value (the former cut, `train.length.tokens=2-a9b1b185bbf5`, did)."""


def job_key(override_dirname: str, former_cut: bool = False) -> str:
    """The run-directory name for a job whose Hydra `override_dirname` is given ("" -> "default"); a key over
    MAX_LEN characters keeps its whole overrides that fit, then CUT_MARK and a hash of the whole (the whole is written
    beside: FULL_KEY_FILE). `former_cut`: the name such a key got before (its start cut mid-value, "-" and the hash),
    which runs made then still have."""
    key = full_key(override_dirname)
    if len(key) <= MAX_LEN:
        return key
    digest = hashlib.sha1(override_dirname.encode()).hexdigest()[:12]
    if former_cut:
        return key[: MAX_LEN - 20] + "-" + digest
    room = MAX_LEN - len(CUT_MARK) - len(digest)
    kept = key[:room]
    whole = kept.rfind(",", 0, room + 1) if key[room] != "," else room
    return (kept[:whole] + "," if whole > 0 else kept) + CUT_MARK + digest


def read_full_key(run_dir) -> str | None:
    """The whole key of a run whose directory name was cut (FULL_KEY_FILE), or None."""
    from pathlib import Path

    try:
        return (Path(run_dir) / FULL_KEY_FILE).read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None
