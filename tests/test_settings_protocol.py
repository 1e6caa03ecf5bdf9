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


def test_a_stored_flat_train_section_reads_as_todays_groups():
    """A config.json written before train's settings moved into groups (flat val_interval, betas, devices, ...)
    gives the same TrainConfig as today's spelling; the top level keeps at most 20 fields."""
    import dataclasses

    from slm.training.config import TrainConfig

    flat = {"val_interval": 6, "val_batches": 2, "eval_windows": 7, "restore_best": True, "log_interval": 3,
            "loggers": ["csv"], "progress_bar": False, "print_interval": 0, "peak_flops": 1e12,
            "detect_anomaly": False, "ckpt_interval": 9, "keep_every": 4, "keep_steps": [8], "accelerator": "cpu",
            "devices": 1, "num_nodes": 1, "strategy": "auto", "micro_batch_size": 4, "betas": [0.8, 0.9],
            "eps": 1e-6, "weight_decay": 0.05, "decay_embeddings": True, "batch_size": 8, "steps": 12}
    today = {"validation": {"interval": 6, "batches": 2, "windows": 7, "restore_best": True},
             "logging": {"interval": 3, "loggers": ["csv"], "progress_bar": False, "print_interval": 0,
                         "peak_flops": 1e12, "detect_anomaly": False},
             "checkpoint": {"interval": 9, "keep_every": 4, "keep_steps": [8]},
             "parallel": {"accelerator": "cpu", "devices": 1, "num_nodes": 1, "strategy": "auto",
                          "micro_batch_size": 4},
             "optim": {"adamw": {"betas": [0.8, 0.9], "eps": 1e-6, "weight_decay": 0.05, "decay_embeddings": True}},
             "batch_size": 8, "length": {"steps": 12}}
    assert TrainConfig.from_node(flat) == TrainConfig.from_node(today)
    assert len(dataclasses.fields(TrainConfig)) <= 20


def test_a_run_keyed_just_before_the_training_groups_is_found(tmp_path):
    """Keys made just before this change spelt train.val_interval (and AdamW's betas, ...) flat but train.length.*
    nested (rule 'issue 40'); a run directory so named is found by today's spelling of the same job."""
    from slm.cli.job_keys import key_from_overrides
    from slm.renames import key_spelling

    assert key_spelling("train.validation.interval", "issue 40") == "train.val_interval"
    assert key_spelling("train.optim.adamw.betas", "issue 40") == "train.betas"
    assert key_spelling("train.length.steps", "issue 40") == "train.length.steps"  # nested before this change
    today = ["model=debug", "train.length.steps=4", "train.validation.interval=2", "train.optim.adamw.eps=1e-6"]
    former = "model=debug,train.eps=1e-06,train.length.steps=4,train.val_interval=2"
    assert key_from_overrides(today) != former
    (tmp_path / former).mkdir()
    assert key_from_overrides(today, parent=tmp_path) == former
