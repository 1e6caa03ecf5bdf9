"""Job keys: stable, readable, one-to-one, bounded in length, and what a sweep's run directories use."""

from __future__ import annotations

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra._internal.config_loader_impl import get_overrides_dirname

from slm.runs.keys import DEFAULT_KEY, MAX_LEN, job_key


def dirname(*overrides: str) -> str:
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    return get_overrides_dirname(parsed, exclude_keys=["run_group", "sweep"], item_sep=",", kv_sep="=")


def test_readable_and_stable_across_override_order():
    a = job_key(dirname("model.n_layers=32", "model.d_model=384", "sweep=families_70m"))
    b = job_key(dirname("model.d_model=384", "model.n_layers=32"))
    assert a == b == "model.d_model=384,model.n_layers=32"
    assert job_key("") == DEFAULT_KEY


def test_paths_stay_readable_and_unsafe_characters_are_escaped():
    key = job_key(dirname("data.sources.0.paths=[/data/a b.txt]"))
    assert key == "data.sources.0.paths=[~data~a%20b.txt]"
    assert "/" not in job_key("x='a/b'*?$") and " " not in job_key("x=a b")


def test_distinct_overrides_give_distinct_keys():
    pairs = [("x=a/b", "x=a~b"), ("x=a%2Fb", "x=a/b"), ("x=a b", "x=a%20b"), ("x=é", "x=%C3%A9")]
    for one, two in pairs:
        assert job_key(one) != job_key(two), (one, two)


def test_long_keys_keep_their_start_and_a_hash_of_the_whole():
    base = ",".join(f"model.field_{i}=value_{i}" for i in range(20))
    a, b = job_key(base + ",x=1"), job_key(base + ",x=2")
    assert len(a) <= MAX_LEN and len(b) <= MAX_LEN
    assert a != b and a[:50] == base[:50]
    assert job_key(base + ",x=1") == a  # stable
