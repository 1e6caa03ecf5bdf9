"""slm.settings: one base for a settings group: declared limits are data, one error type naming the dotted key."""

from dataclasses import dataclass

import pytest

from slm.settings import Settings, SettingsError, setting


@dataclass
class Inner(Settings):
    size: int | None = setting(None, gt=0, null="derived")
    """A size left null is derived."""
    keep: list[int] = setting(factory=list, gt=0, each=True)
    """Positive steps."""

    def derive(self, root) -> None:
        if self.size is None:
            self.size = root.width * 2

    def check(self, key, root) -> None:
        if self.size > root.width * 4:
            raise SettingsError.invalid(f"{key}.size", self.size, f"at most 4 x width={root.width}")


@dataclass
class Outer(Settings):
    width: int = setting(8, gt=0)
    """Width."""
    rate: float = setting(0.0, ge=0, lt=1)
    """A fraction."""
    kind: str = setting("a", choices=("a", "b"))
    """One of two."""
    inner: Inner = setting(factory=Inner)
    """The nested group."""

    def __post_init__(self):
        self.settle("top")


def test_defaults_derived_from_the_enclosing_config():
    assert Outer(width=3).inner.size == 6
    assert Outer(inner={"size": 5}).inner == Inner(size=5)


@pytest.mark.parametrize("kwargs, key, value", [
    ({"width": 0}, "top.width", 0),
    ({"rate": 1.0}, "top.rate", 1.0),
    ({"rate": -0.5}, "top.rate", -0.5),
    ({"kind": "c"}, "top.kind", "c"),
    ({"width": "wide"}, "top.width", "wide"),
    ({"inner": {"size": 0}}, "top.inner.size", 0),
    ({"inner": {"keep": [3, -1]}}, "top.inner.keep", [3, -1]),
    ({"inner": {"size": 40}}, "top.inner.size", 40),
])
def test_a_bad_value_names_its_dotted_key_and_value(kwargs, key, value):
    with pytest.raises(SettingsError) as err:
        Outer(**kwargs)
    assert err.value.key == key and err.value.value == value
    assert str(err.value).startswith(f"{key}={value!r} is invalid: ")


def test_an_unknown_key_names_the_closest_known_one():
    with pytest.raises(SettingsError) as err:
        Outer(inner={"sise": 3})
    assert err.value.key == "top.inner.sise" and "size" in str(err.value)


def test_validation_changes_nothing_but_what_derive_fills_in():
    given = Inner(size=5, keep=[1, 2])
    out = Outer(inner=given)
    assert out.inner == given and out.inner is not given  # a copy: two configs never share a group
