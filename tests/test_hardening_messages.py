"""Every registry-backed setting names itself when its value is unknown (`train.schedule.kind=linear: unknown schedule
'linear'; choose one of: ...`), through slm-train in one line, exit 2 and no run directory; and a model.vocab_size
the tokenizer overrides is said to be replaced."""

from __future__ import annotations

import dataclasses
import io
from contextlib import redirect_stdout

import pytest

from slm.components.registry import Registry
from slm.model.config import ConfigError, ModelConfig
from slm.settings import group_fields, nested
from slm.training.config import TrainConfig, TrainConfigError
from tests.test_bad_input import RUN, _train, snapshot, workdir  # noqa: F401 - workdir is a fixture

CASES = [  # (override, how the one line starts after "slm-train: error: ")
    ("train.schedule.kind=linear", "train.schedule.kind=linear: unknown schedule 'linear'; choose one of: constant, cosine, wsd"),
    ("train.objective=mlm", "train.objective=mlm: unknown objective 'mlm'; choose one of: causal_lm,"),
    ("train.optimizer=adam", "train.optimizer=adam: unknown optimizer 'adam'; choose one of: adamw,"),
    ("model.norm.kind=batchnorm", "model.norm.kind='batchnorm' is invalid: one of: layernorm, rmsnorm,"),
    ("model.norm=batchnorm", "model.norm.kind='batchnorm' is invalid: one of: layernorm,"),  # the old spelling
    ("model.mlp.kind=swish", "model.mlp.kind='swish' is invalid: one of: gelu,"),
    ("model.parametrization.init=xavier", "model.parametrization.init='xavier' is invalid: one of: gpt2,"),
    ("model.position.kind=alibi", "model.position.kind='alibi' is invalid: one of: none,"),
    ("model.canon.kind=dense", "model.canon.kind='dense' is invalid: one of: conv,"),
    ("model.canon=dense", "model.canon.kind='dense' is invalid: one of: conv,"),  # the old spelling
    ("model.parametrization.kind=mvp", "model.parametrization.kind='mvp' is invalid: one of: sp,"),
    ("model.kind=cnn", "model.kind='cnn' is invalid: one of: transformer,"),
    ("model.layer_types=[attn,mamba]", "model.layer_types=['attn', 'mamba'] is invalid: every item one of: attn,"),
    ("model.mlp_types=[dense,sparse]", "model.mlp_types=['dense', 'sparse'] is invalid: every item one of: dense, moe"),
]


def registry_fields(cls=ModelConfig, prefix: str = "") -> dict:
    """{dotted field: its registry} of every setting of the model whose choices are a registry's keys."""
    out = {}
    for f in dataclasses.fields(cls):
        if isinstance(f.metadata.get("choices"), Registry):
            out[prefix + f.name] = f.metadata["choices"]
    for name, group in group_fields(cls).items():
        out.update(registry_fields(group, f"{prefix}{name}."))
    return out


REGISTRY_FIELDS = registry_fields()


@pytest.mark.parametrize("override, start", CASES, ids=[c[0] for c in CASES])
def test_an_unknown_component_names_its_setting(workdir, capsys, override, start):  # noqa: F811
    before = snapshot(workdir)
    with pytest.raises(SystemExit) as exit_:
        _train([*RUN, override])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert exit_.value.code == 2, err
    assert "Traceback" not in err
    assert lines[-1].startswith(f"slm-train: error: {start}"), lines[-1]
    assert len([line for line in lines if ": error:" in line]) == 1
    assert snapshot(workdir) == before, "a refused run left files behind"
    runs = workdir / "runs"
    assert not runs.exists() or not [p for p in runs.rglob("*") if p.parent != runs], "a run directory was left"


def test_every_registry_of_the_model_backs_a_setting():
    from slm.components import REGISTRIES

    assert {r.kind for r in REGISTRY_FIELDS.values()} == {*REGISTRIES} | {"model kind"}
    assert {"kind", "norm.kind", "position.kind", "mlp.kind", "parametrization.init", "parametrization.kind",
            "canon.kind", "layer_types", "mlp_types"} == set(REGISTRY_FIELDS)


@pytest.mark.parametrize("name", sorted(REGISTRY_FIELDS))
def test_every_registry_field_of_the_model_is_checked_by_name(name):
    value = ["nope"] if name.endswith("_types") else "nope"
    with pytest.raises(ConfigError, match=rf"^model\.{name}={value!r} is invalid: (every item )?one of: ".replace("[", r"\[")
                       .replace("]", r"\]")):
        ModelConfig(**nested({"attention.n_heads": 2, name: value}))


@pytest.mark.parametrize("name, spelt", [("objective", "objective"), ("schedule", "schedule.kind"),
                                         ("optimizer", "optimizer")])
def test_every_registry_field_of_training_is_checked_by_name(name, spelt):
    with pytest.raises(TrainConfigError, match=rf"^train\.{spelt}=nope: unknown .* 'nope'; choose one of: "):
        TrainConfig.from_node({name: "nope"})


def test_the_registry_itself_keeps_its_plain_message():
    from slm.components import NORMS, UnknownKeyError

    with pytest.raises(UnknownKeyError, match=r"^unknown norm 'x'; choose one of: "):
        NORMS.get("x")
    with pytest.raises(ConfigError, match=r"^model.norm.kind=\['x'\]: unknown norm \['x'\]; choose one of: "):
        NORMS.check(["x"], "model.norm.kind", ConfigError)  # an unhashable value is refused, not a TypeError


def test_a_vocab_size_smaller_than_the_tokenizers_is_said_to_be_replaced(workdir):  # noqa: F811
    out = io.StringIO()
    with redirect_stdout(out):
        _train([*(a for a in RUN if not a.startswith("train.length.steps=")), "train.length.steps=1", "model.vocab_size=10"])
    model_line = next(line for line in out.getvalue().splitlines() if line.startswith("slm-train: model "))
    assert "vocabulary 65 (the tokenizer's; model.vocab_size=10 is replaced);" in model_line, model_line
