"""Job keys: stable, readable, one-to-one, bounded in length, and what a sweep's run directories use."""

from __future__ import annotations

import re

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


def test_a_cut_keys_hash_never_reads_as_a_value(tmp_path):
    """A cut key keeps whole overrides, then "...sha1-<hash>" (the former cut read `train.length.tokens=2-a9b1b185bbf5`:
    a tokens value of "2-a9b1..."); a run made under the former cut is still found in its run group."""
    from slm.cli.job_keys import key_from_overrides
    from slm.runs.keys import CUT_MARK

    overrides = [f"model.field_{i}=value_{i}" for i in range(15)] + ["train.length.tokens=250000.0"]
    key = key_from_overrides(overrides)
    kept, mark, digest = key.partition(CUT_MARK)
    assert mark and len(key) <= MAX_LEN and len(digest) == 12 and kept.endswith(",")
    assert all(part in overrides for part in kept[:-1].split(","))  # every kept override whole
    former = job_key(",".join(sorted(overrides)), former_cut=True)
    assert former != key and re.search(r"=[^,=]*-[0-9a-f]{12}$", former)  # the former: a value, "-" and the hash
    (tmp_path / former).mkdir()
    assert key_from_overrides(overrides, parent=tmp_path) == former  # resumed where it is
    (tmp_path / key).mkdir()
    assert key_from_overrides(overrides, parent=tmp_path) == key


# ---------------------------------------------------------------- one run, one key (slm.cli.job_keys)

def sweep_lines(*arguments: str) -> list[list[str]]:
    """The override lists Hydra's basic sweeper hands its jobs for these command-line arguments."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    parsed = OverridesParser.create().parse_overrides(list(arguments))
    return BasicSweeper.split_arguments(parsed, None)[0]


def test_a_value_has_one_spelling_the_one_a_sweep_gives_its_jobs():
    from slm.cli.job_keys import key_from_overrides

    typed = ["train.length.tokens=2e5", "train.compile=true", "train.optim.adamw.betas=[0.9, 9.5e-1]", "model.position.rope_theta=1e4"]
    (swept,) = sweep_lines(*typed)
    assert swept != typed  # Hydra's sweeper respells them: what made single runs and sweep jobs differ
    assert key_from_overrides(typed) == key_from_overrides(swept) == \
        "model.position.rope_theta=10000.0,train.compile=True,train.length.tokens=200000.0,train.optim.adamw.betas=[0.9,0.95]"
    # an integer given to a float field is that float; an int field keeps its integer
    assert key_from_overrides(["train.length.tokens=200000"]) == key_from_overrides(["train.length.tokens=2.0e5"])
    assert key_from_overrides(["train.length.steps=12"]) == "train.length.steps=12"  # as it is typed today
    assert key_from_overrides(["train.steps=12"]) == "train.length.steps=12"  # an old spelling, read as today's
    assert key_from_overrides(["train.length.tokens=2e5"]) != key_from_overrides(["train.length.tokens=3e5"])


def test_settings_that_do_not_change_what_is_trained_are_left_out_with_what_is_under_them():
    from hydra import compose, initialize_config_dir

    from slm.cli.config import CONF_DIR
    from slm.cli.job_keys import key_from_overrides

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        exclude = list(compose("config", return_hydra_config=True).hydra.job.config.override_dirname.exclude_keys)
    base = ["model=debug", "train.length.steps=12"]
    quiet = key_from_overrides(base, exclude)
    for extra in ("train.logging.loggers=[csv,tensorboard]", "train.logging.progress_bar=false", "train.logging.interval=3",
                  "eval=none", "eval.limit=10", "+eval.throughput.new_tokens=4", "run_group=x", "train.checkpoint.interval=5"):
        assert key_from_overrides([*base, extra], exclude) == quiet, extra
    assert key_from_overrides([*base, "train.evalx=1"], exclude) != quiet  # a prefix of a name is not its group


def test_a_single_run_and_a_sweep_of_the_same_settings_are_one_run(tmp_path):
    from tests.test_sweep_grid import TINY, slm

    one = slm(tmp_path, "run_group=k", *TINY, "train.length.steps=4", "train.length.tokens=2e5", "train.logging.loggers=[csv]")
    assert one.returncode == 0, one.stderr[-2000:]
    (run,) = (tmp_path / "runs" / "k").iterdir()
    assert "train.length.steps=4,train.length.tokens=200000.0" in run.name and "loggers" not in run.name and \
        "eval" not in run.name
    again = slm(tmp_path, "-m", "run_group=k", *TINY, "train.length.steps=4", "train.length.tokens=200000.0,2.0e5",
                "train.logging.loggers=[csv,tensorboard]")
    assert again.returncode == 0 and "launching 0 of 1 jobs" in again.stdout, again.stdout + again.stderr[-2000:]
    third = slm(tmp_path, "-m", "run_group=k", *TINY, "train.length.steps=4", "train.length.tokens=2e5")
    assert third.returncode == 0 and "launching 0 of 1 jobs" in third.stdout
    sweep = tmp_path / "runs" / "k"
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == sorted(["multirun", run.name])
    kept = sorted((sweep / "multirun").glob("*.yaml"))  # each sweep's config is kept, the latest is multirun.yaml
    assert len(kept) == 2 and (sweep / "multirun.yaml").read_text() == kept[-1].read_text() != kept[0].read_text()
