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

- a setting that moved into a nested group keeps its flat spelling in the key (slm.renames.key_spelling:
  `model.moe.n_experts=8` is keyed `model.n_experts=8`), so run directories made before the move are found.

The overrides are then sorted, as Hydra sorts its override_dirname.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Iterable

from slm.renames import key_spelling
from slm.runs.keys import job_key


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
    if override.key_or_group in float_fields() and isinstance(value, int) and not isinstance(value, bool):
        return str(float(value))
    return override.get_value_element_as_str()


def excluded(key: str, exclude: Iterable[str]) -> bool:
    """Whether an override of `key` is left out of the job key: `key` is in `exclude` or under one of them."""
    key = key.lstrip("+~").split("@")[0]
    return any(key == e or key.startswith(e + ".") for e in exclude)


def canonical_overrides(overrides: Iterable[str], exclude: Iterable[str] = ()) -> list[str]:
    """The overrides that define what is trained, each as `key=value` with Hydra's spelling of the value,
    sorted; an override Hydra cannot parse is kept as given (composing it fails and says why)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    exclude = [str(e) for e in exclude]
    lines = []
    for line in overrides:
        line = str(line)
        try:
            override = parser.parse_override(line)
        except HydraException:
            if not excluded(line.split("=", 1)[0], exclude):
                lines.append(line)
            continue
        if excluded(override.key_or_group, exclude):
            continue
        if override.is_delete() or override.value_type is None:
            lines.append(line)  # `~key`, `~key=value`: nothing to spell differently
            continue
        prefix = "++" if override.is_force_add() else "+" if override.is_add() else ""
        package = f"@{override.package}" if override.package else ""
        key = key_spelling(override.key_or_group)  # model.moe.n_experts -> model.n_experts: run directories stay
        lines.append(f"{prefix}{key}{package}={_spelling(override)}")
    return sorted(lines)


def key_from_overrides(overrides: Iterable[str], exclude: Iterable[str] = ()) -> str:
    """The run-directory name of a job with these overrides (the `slm_job_key` resolver)."""
    return job_key(",".join(canonical_overrides(overrides, exclude)))
