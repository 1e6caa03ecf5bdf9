"""String-keyed registries: a decorator adds an entry, an unknown key raises and lists the valid ones."""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class UnknownKeyError(ValueError):
    """Raised for a key that is not in a registry; the message lists the valid keys."""


class Registry(Generic[T]):
    """A named mapping from string keys to component classes.

    >>> NORMS = Registry("norm")
    >>> @NORMS.register("rmsnorm")
    ... class RMSNorm: ...
    >>> NORMS.get("rsmnorm")
    Traceback (most recent call last):
    UnknownKeyError: unknown norm 'rsmnorm'; choose one of: rmsnorm
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, key: str) -> Callable[[T], T]:
        def add(entry: T) -> T:
            if key in self._entries:
                raise ValueError(f"{self.kind} '{key}' is registered twice")
            self._entries[key] = entry
            return entry

        return add

    def get(self, key: str) -> T:
        if key not in self._entries:
            raise UnknownKeyError(f"unknown {self.kind} {key!r}; choose one of: {', '.join(self.keys())}")
        return self._entries[key]

    def check(self, key, setting: str, error: type[ValueError] = UnknownKeyError) -> T:
        """`get` for a config setting: an unknown key raises `error`, led by the setting and its value, e.g.
        "train.schedule.kind=linear: unknown schedule 'linear'; choose one of: constant, cosine, wsd"."""
        if not isinstance(key, str) or key not in self._entries:
            shown = key if isinstance(key, str) else repr(key)
            err = error(f"{setting}={shown}: unknown {self.kind} {key!r}; choose one of: {', '.join(self.keys())}")
            err.key, err.value = setting, key  # as slm.settings.SettingsError says them
            raise err
        return self._entries[key]

    def keys(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __iter__(self):
        """The keys, in registration order (a registry is the `choices` of a setting: slm.settings)."""
        return iter(list(self._entries))
