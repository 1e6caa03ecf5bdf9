"""Check a config dataclass's values against its field annotations, so that a string in a numeric field or an
infinite learning rate is one line naming the field (`model.position.rope_theta='abc' is invalid: expected a finite
number`) rather than a TypeError deep inside the model or a run that trains on nonsense.

Handles the annotations the configs use: bool, int (not bool), float (an int is fine; NaN and infinity are
not), str, Literal[...] (one of the listed values), list[X] (list[str] also takes a comma-separated string), and
X | None. Other types (nested config objects) are left to their own checks.
"""

from __future__ import annotations

import math
import types
import typing

_NAMES = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string", type(None): "null"}


def expected(value, annotation) -> str | None:
    """What `annotation` expects, in words, when `value` does not satisfy it; None when it does (or when the
    annotation is not one this module checks)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        arms = typing.get_args(annotation)
        wanted = [expected(value, arm) for arm in arms]
        if any(w is None for w in wanted):
            return None
        return " or ".join(wanted)
    if origin is typing.Literal:
        allowed = typing.get_args(annotation)
        if any(value == a and type(value) is type(a) for a in allowed):
            return None
        return "one of: " + ", ".join(str(a) for a in allowed)
    if origin is list:
        (item,) = typing.get_args(annotation) or (typing.Any,)
        what = f"a list of {_plural(item)}"
        if item is str and isinstance(value, str):
            return None  # a comma-separated string: the config splits it (layer_types: "local_attn,attn")
        if not isinstance(value, (list, tuple)):
            return what
        return what if any(expected(v, item) is not None for v in value) else None
    if annotation is bool:
        return None if isinstance(value, bool) else _NAMES[bool]
    if annotation is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else _NAMES[int]
    if annotation is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return None if ok else _NAMES[float]
    if annotation is str:
        return None if isinstance(value, str) else _NAMES[str]
    if annotation is type(None):
        return None if value is None else _NAMES[type(None)]
    return None  # a nested config: checked by its own class


def _plural(annotation) -> str:
    return {bool: "booleans", int: "integers", float: "finite numbers", str: "strings"}.get(annotation, "values")


def did_you_mean(name: str, options, prefix: str = "", spelt: dict | None = None) -> str:
    """' (did you mean <prefix><closest>?)' for the option closest to a misspelt `name`, or '' if none is close;
    `spelt` maps an option to how it is written today (an old field name to its new place)."""
    import difflib

    close = difflib.get_close_matches(name, [str(o) for o in options], n=1, cutoff=0.6)
    return f" (did you mean {prefix}{(spelt or {}).get(close[0], close[0])}?)" if close else ""

