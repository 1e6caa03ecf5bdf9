"""A job's key from its overrides: one spelling per value, and only what changes what is trained.

conf/config.yaml names run directories `${slm_job_key:${hydra.overrides.task},<exclude_keys>}`: the
resolver below turns the job's override list into the string that slm.runs.keys.job_key makes a
directory name. Two things make the same run get the same key however it was asked for:

- values are spelt as Hydra's own parser spells them, which is how a `-m` sweep hands them to its jobs:
  `train.tokens=2e5` and `train.tokens=200000.0` are both `train.tokens=200000.0`, `true` is `True`,
  `[1e-3, 2]` is `[0.001,2]`; so a single run and a sweep job resume each other; an integer given to a
  float field of ModelConfig or TrainConfig is that float (`train.tokens=1000000` is `train.tokens=1000000.0`);
- settings that do not change what is trained (hydra.job.config.override_dirname.exclude_keys in
  conf/config.yaml: the run group, loggers, the progress display, logging and checkpoint cadence, the
  eval suite...) are left out, each with everything under it (`eval` also drops `eval.limit=10`).

- a setting is keyed in today's spelling (`train.length.steps=30`; an old spelling on a command line is read as
  today's, slm.renames), and a run directory made while the key spelt moved settings the flat way
  (`train.steps=30`, before this rule) is still found: `key_from_overrides` with the run group's directory
  answers with that directory's name when it exists and today's does not, so such a run resumes or is skipped
  where it is.

The overrides are then sorted, as Hydra sorts its override_dirname.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Iterable
from pathlib import Path

from slm.renames import FORMER_KEY_RULES, key_spelling, upgrade_override
from slm.runs.keys import full_key, job_key


@functools.cache
def float_fields() -> frozenset[str]:
    """`train.<field>` and `model.<field>` of the float (or float | None) fields of TrainConfig and ModelConfig."""
    from slm.model.config import ModelConfig
    from slm.training.config import TrainConfig

    out = set()
    todo = [("train", TrainConfig), ("model", ModelConfig)]
    while todo:
        prefix, cls = todo.pop()
        for name, hint in typing.get_type_hints(cls).items():
            if hint == float or hint == typing.Optional[float]:
                out.add(f"{prefix}.{name}")
            elif dataclasses.is_dataclass(hint):  # a nested group: model.moe.aux_coef
                todo.append((f"{prefix}.{name}", hint))
    return frozenset(out)


def _spelling(override) -> str:
    value = override.value()
    if _today(override.key_or_group) in float_fields() and isinstance(value, int) and not isinstance(value, bool):
        return str(float(value))
    return override.get_value_element_as_str()


def excluded(key: str, exclude: Iterable[str]) -> bool:
    """Whether an override of `key` is left out of the job key: `key` is in `exclude` or under one of them."""
    key = key.lstrip("+~").split("@")[0]
    return any(key == e or key.startswith(e + ".") for e in exclude)


def canonical_overrides(overrides: Iterable[str], exclude: Iterable[str] = (),
                        legacy: str | bool | None = None) -> list[str]:
    """The overrides that define what is trained, each as `key=value` with Hydra's spelling of the value and the
    key in today's spelling (`legacy`: a former rule of slm.renames.FORMER_KEY_RULES, moved settings spelt as keys
    were made under it; True: the oldest, every moved setting flat), sorted; an override Hydra cannot parse is kept
    as given (composing it fails and says why)."""
    rule = FORMER_KEY_RULES[-1] if legacy is True else legacy or None
    exclude = tuple(str(e) for e in exclude)
    lines = (_canonical_line(str(line), exclude, rule) for line in overrides)
    return sorted(line for line in lines if line is not None)


@functools.lru_cache(maxsize=65536)
def _canonical_line(line: str, exclude: tuple[str, ...], rule: str | None) -> str | None:
    """One override as canonical_overrides spells it, None when it is left out of the key (cached: a sweep of
    10,000 jobs spells the same few hundred overrides again and again, and Hydra's parser takes ~0.5 ms a line)."""
    from hydra.errors import HydraException

    try:
        override = _parser().parse_override(line)
    except HydraException:
        return None if excluded(line.split("=", 1)[0], exclude) else line
    if excluded(override.key_or_group, exclude) or excluded(_today(override.key_or_group), exclude):
        return None
    if override.is_delete() or override.value_type is None:
        return line  # `~key`, `~key=value`: nothing to spell differently
    prefix = "++" if override.is_force_add() else "+" if override.is_add() else ""
    package = f"@{override.package}" if override.package else ""
    key = _today(override.key_or_group)
    key = key_spelling(key, rule) if rule else key  # model.moe.n_experts -> model.n_experts: a former rule
    return f"{prefix}{key}{package}={_spelling(override)}"


@functools.cache
def _parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def _today(key: str) -> str:
    """A setting's key in today's spelling (`train.steps` -> `train.length.steps`); others as they are."""
    new, note = upgrade_override(f"{key}=x")
    return new.rpartition("=")[0] if note else key


def whole_key(overrides: Iterable[str], exclude: Iterable[str] = ()) -> str:
    """The job key of these overrides in full, not cut to slm.runs.keys.MAX_LEN (what a cut key's hash stands for)."""
    return full_key(",".join(canonical_overrides([str(o) for o in overrides], exclude)))


def key_from_overrides(overrides: Iterable[str], exclude: Iterable[str] = (), parent=None) -> str:
    """The run-directory name of a job with these overrides (the `slm_job_key` resolver). With `parent`, the run
    group's directory: when no run directory of today's key is there but one of the key a run made under a former
    spelling rule got (moved settings spelt flat: FORMER_KEY_RULES, newest first) or under the former cut of a long
    key (slm.runs.keys.job_key's former_cut) is, that one's name, so the run is found where it is."""
    overrides = [str(o) for o in overrides]
    dirname = ",".join(canonical_overrides(overrides, exclude))
    key = job_key(dirname)
    if parent is None or not str(parent) or (Path(str(parent)) / key).exists():
        return key
    spellings = [dirname] + [",".join(sorted(canonical_overrides(overrides, exclude, legacy=rule)))
                             for rule in FORMER_KEY_RULES]
    for spelling in spellings:  # a long key cut as runs made before "...sha1-" were, then former spelling rules
        for former_cut in (False, True):
            legacy = job_key(spelling, former_cut=former_cut)
            if legacy != key and (Path(str(parent)) / legacy).is_dir():
                return legacy
    return key
