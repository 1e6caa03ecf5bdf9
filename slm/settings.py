"""One way to own settings: a `Settings` dataclass per group, its bounds and choices declared as data, one error.

A group (`model.moe`, `train.checkpoint`, `train.optim.adamw`, ...) is a dataclass that subclasses `Settings`; each
field has a doc line (the string under it, which `make conf` copies into the YAML defaults) and, where a value has
limits, declares them with `setting(...)` instead of a `raise`:

    interval: int = setting(200, gt=0)
    \"\"\"Write last.ckpt every this many steps.\"\"\"
    keep_every: int | None = setting(None, gt=0, null="none")

A config is made in four steps, always in this order (`Settings.settle`, called by ModelConfig and TrainConfig
when they are created):

1. `from_node`: each nested group from its mapping (groups are found by a loop over the fields whose type is a
   Settings subclass); an unknown key is refused with the closest known one; a list given as a tuple or, of
   strings, as one comma-separated string is read as its list;
2. types and declared bounds, at every level (`check_fields`);
3. `derive(root)`: sizes left null filled in, top level first (the only step that may change values);
4. `check(key, root)`: the checks that read several fields or the enclosing config, innermost groups first; each
   is a rule as data where it can be (`require((holds, key, value, allowed), ...)`).

`nested` turns a mapping with dotted keys (`{"attention.n_heads": 4}`, as a command line spells a setting) into
the nested mappings a Settings class takes.

Every bad value raises `SettingsError`, whose message names the full dotted key, the value and what is allowed
(`train.checkpoint.interval=0 is invalid: must be an integer > 0`), and whose `key` and `value` say the same to
code and tests.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from typing import Any, ClassVar

from slm.typecheck import did_you_mean, expected

MISSING = dataclasses.MISSING


class SettingsError(ValueError):
    """An invalid setting: the message names its full dotted key (`key`), the value (`value`) and what is
    allowed; one line."""

    def __init__(self, message: str, *, key: str | None = None, value: Any = None):
        super().__init__(message)
        self.key, self.value = key, value

    @classmethod
    def invalid(cls, key: str, value, allowed: str) -> "SettingsError":
        """`<key>=<value!r> is invalid: <allowed>`."""
        return cls(f"{key}={value!r} is invalid: {allowed}", key=key, value=value)


def nested(fields: dict) -> dict:
    """A mapping whose keys may be dotted (`attention.n_heads`) as nested mappings ({"attention": {"n_heads": ...}}),
    the form a Settings class takes; a key both dotted and given as a mapping is merged."""
    out: dict = {}
    for key, value in fields.items():
        *groups, leaf = key.split(".")
        node = out
        for group in groups:
            node[group] = dict(node.get(group) or {})
            node = node[group]
        node[leaf] = {**node[leaf], **value} if isinstance(value, dict) and isinstance(node.get(leaf), dict) else value
    return out


def differing_fields(a: dict, b: dict, prefix: str = ""):
    """Dotted names of the fields both mappings hold with different values, in sorted order (nested groups compared
    field by field; a list equals a tuple of the same items)."""
    for key in sorted(a.keys() & b.keys()):
        name = f"{prefix}{key}"
        old, new = a[key], b[key]
        if isinstance(old, dict) and isinstance(new, dict):
            yield from differing_fields(old, new, f"{name}.")
        elif old != new and not (isinstance(old, (list, tuple)) and isinstance(new, (list, tuple))
                                 and list(old) == list(new)):
            yield name


def field_at(fields: dict, name: str):
    """The value at a dotted name of a nested mapping (None where a part is missing)."""
    for part in name.split("."):
        fields = fields.get(part) if isinstance(fields, dict) else None
    return fields


def require(*rules: tuple[bool, str, Any, str]) -> None:
    """Cross-field checks as data: each rule is (holds, key, value, allowed); the first that does not hold raises
    `SettingsError.invalid(key, value, allowed)`."""
    for holds, key, value, allowed in rules:
        if not holds:
            raise SettingsError.invalid(key, value, allowed)


def setting(default=MISSING, *, factory=None, gt=None, ge=None, lt=None, le=None, choices=None,
            null: str | None = None, each: bool = False):
    """A dataclass field with declared limits: gt/ge/lt/le (numbers), choices (the allowed values: a tuple, or a
    registry, any container that iterates over its keys, read when a value is checked), null (what None means,
    for the message of an optional field), each (the limits apply to every item of a list)."""
    meta = {k: v for k, v in dict(gt=gt, ge=ge, lt=lt, le=le, choices=choices, null=null, each=each).items()
            if v is not None and v is not False}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _rule(meta: dict, integer: bool) -> str:
    """The declared limits in words: `an integer > 0`, `a number in [0, 1)`, `one of: a, b`."""
    if "choices" in meta:
        return ("every item " if meta.get("each") else "") + "one of: " + ", ".join(str(c) for c in meta["choices"])
    lo = ("gt", meta["gt"]) if "gt" in meta else ("ge", meta["ge"]) if "ge" in meta else None
    hi = ("lt", meta["lt"]) if "lt" in meta else ("le", meta["le"]) if "le" in meta else None
    noun = "an integer" if integer else "a number"
    if lo and hi:
        text = f"{noun} in {'(' if lo[0] == 'gt' else '['}{lo[1]}, {hi[1]}{')' if hi[0] == 'lt' else ']'}"
    elif lo:
        text = f"{noun} {'>' if lo[0] == 'gt' else '>='} {lo[1]}"
    elif hi:
        text = f"{noun} {'<' if hi[0] == 'lt' else '<='} {hi[1]}"
    else:
        return ""
    return ("must be " + text) if not meta.get("each") else ("every item " + text)


def _within(value, meta: dict) -> bool:
    if "choices" in meta:
        return value in meta["choices"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float)
                                                                          and math.isnan(value)):
        return False
    return not (("gt" in meta and not value > meta["gt"]) or ("ge" in meta and not value >= meta["ge"])
                or ("lt" in meta and not value < meta["lt"]) or ("le" in meta and not value <= meta["le"]))


def _group_type(annotation) -> type | None:
    """The Settings subclass an annotation names (`MoeSettings`, `BlockCurriculum | None`), else None (also for a
    list of groups, `data.sources`: the class that holds it settles each item, as `<key>.<N>`)."""
    if typing.get_origin(annotation) is list:
        return None
    for arm in typing.get_args(annotation) or (annotation,):
        if isinstance(arm, type) and issubclass(arm, Settings):
            return arm
    return None


@functools.cache
def type_hints(cls) -> dict[str, object]:
    """typing.get_type_hints of the dataclass `cls`, once per class (~0.1 ms a call, and a sweep's plan settles
    thousands of configs, each with a dozen groups)."""
    return typing.get_type_hints(cls)


@functools.cache
def group_fields(cls) -> dict[str, type]:
    """{field name: its Settings class} for the nested groups of the dataclass `cls` (once per class: a config is
    settled many times in a sweep's plan)."""
    hints = type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        group = _group_type(hints[f.name])
        if group is not None:
            out[f.name] = group
    return out


class Settings:
    """Base of a settings group (a dataclass). Subclasses declare fields (with `setting(...)` limits) and may
    override `derive` (fill in what was left null: the only place values change) and `check` (what reads several
    fields or the enclosing config)."""

    optional: ClassVar[bool] = False
    """A group whose field may be None (absent), e.g. train.block_curriculum."""

    # ------------------------------------------------------------------ the protocol
    @classmethod
    def from_node(cls, node, key: str):
        """The group from a config mapping (None: its defaults, or None for an optional group; an instance: a copy),
        with its nested groups; an unknown key is one line naming `key`, the key and the known ones. Values are not
        checked here (settle does)."""
        from collections.abc import Mapping

        if node is None:
            return None if cls.optional else cls()
        if isinstance(node, cls):
            return dataclasses.replace(node)  # a copy: two configs never share (and fill in) one group
        known = [f.name for f in dataclasses.fields(cls)]
        if not isinstance(node, Mapping):
            raise SettingsError.invalid(key, node, f"a mapping of {', '.join(known)}")
        unknown = sorted(set(node) - set(known))
        if unknown:
            raise SettingsError(f"{key} has unknown key {unknown[0]!r}{did_you_mean(str(unknown[0]), known)}: "
                                f"choose from {', '.join(known)}", key=f"{key}.{unknown[0]}")
        return cls(**dict(node))

    def adopt_groups(self, key: str) -> None:
        """Each nested group's mapping (from YAML or a stored config) made into its Settings object, and a list
        given as a tuple, or a list of strings as one comma-separated string (the command line's
        `layer_types=local_attn,attn`), made into its list."""
        hints = type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, str) and hints[f.name] == list[str]:
                setattr(self, f.name, [part.strip() for part in value.split(",") if part.strip()])
            elif isinstance(value, tuple) and typing.get_origin(hints[f.name]) is list:
                setattr(self, f.name, list(value))
        for name, group in group_fields(type(self)).items():
            value = group.from_node(getattr(self, name), f"{key}.{name}")
            setattr(self, name, value)
            if value is not None:
                value.adopt_groups(f"{key}.{name}")

    def groups(self) -> list[tuple[str, "Settings"]]:
        """(field name, group) for every nested group that is set."""
        return [(name, getattr(self, name)) for name in group_fields(type(self)) if getattr(self, name) is not None]

    def check_fields(self, key: str) -> None:
        """Each field's type (its annotation) and declared limits, then the nested groups'."""
        hints = type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            wanted = expected(value, hints[f.name])
            if wanted is not None:
                verb = "choose" if wanted.startswith("one of: ") else "expected"
                raise SettingsError(f"{key}.{f.name}={value!r} is invalid: {verb} {wanted}", key=f"{key}.{f.name}",
                                    value=value)
            meta = f.metadata
            if value is None or not meta:
                continue
            items = value if meta.get("each") and isinstance(value, (list, tuple)) else [value]
            if not all(_within(item, meta) for item in items):
                integer = all(isinstance(i, int) and not isinstance(i, bool) for i in items) \
                    and "int" in str(hints[f.name])
                rule = _rule(dict(meta), integer)
                if "null" in meta:
                    rule += f", or null ({meta['null']})"
                raise SettingsError.invalid(f"{key}.{f.name}", value, rule)
        for name, group in self.groups():
            group.check_fields(f"{key}.{name}")

    def derive(self, root) -> None:
        """Fill in what was left null (sizes derived from others); `root` is the whole config. The default: none."""

    def check(self, key: str, root) -> None:
        """The checks that read several fields or the enclosing config `root`; raise SettingsError naming the full
        key (`key` is this group's). Changes nothing. The default: none."""

    def settle(self, key: str) -> None:
        """Make this config valid and complete, or raise SettingsError: groups adopted, types and limits checked,
        sizes derived (this level, then its groups), cross-field checks (groups first, then this level)."""
        self.adopt_groups(key)
        self.check_fields(key)
        self._derive_all(self)
        self._check_all(key, self)

    def _derive_all(self, root) -> None:
        self.derive(root)
        for _, group in self.groups():
            group._derive_all(root)

    def _check_all(self, key: str, root) -> None:
        for name, group in self.groups():
            group._check_all(f"{key}.{name}", root)
        self.check(key, root)
