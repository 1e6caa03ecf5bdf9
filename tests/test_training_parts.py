"""Training pieces without data: config, schedules, optimizer groups, objective, the run record."""

import dataclasses
import json
import math

import pytest
import torch
import yaml

from slm.cli.config import CONF_DIR
from slm.model import ModelConfig, Transformer
from slm.objectives import OBJECTIVES
from slm.runs.record import load_record, update_record, write_json_atomic
from slm.training.config import TrainConfig, TrainConfigError
from slm.training.optim import param_groups
from slm.training.schedules import SCHEDULES


def test_train_yaml_mirrors_dataclass_defaults():
    base = yaml.safe_load((CONF_DIR / "train" / "default.yaml").read_text())
    defaults = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
                for f in dataclasses.fields(TrainConfig)}
    defaults = {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for k, v in defaults.items()}
    # the objective: the model preset's (model.objective, e.g. the dllm presets' mdlm), else the dataclass default
    assert base.pop("objective") == "${oc.select:model.objective,causal_lm}" and defaults.pop("objective") == "causal_lm"
    assert base == defaults


@pytest.mark.parametrize(
    "bad, key, value",
    [
        (dict(batch_size=0), "train.batch_size", 0),
        (dict(precision="fp8"), "train.precision", "fp8"),
        (dict(schedule="linear"), "train.schedule.kind", "linear"),
        (dict(objective="mlm"), "train.objective", "mlm"),
        (dict(tokens=None), "train.length.tokens", None),
        (dict(loggers=["csv", "mlflow"]), "train.logging.loggers", ["csv", "mlflow"]),
        (dict(windows_per_epoch=10), "train.length.epochs", None),
        (dict(epochs=0, windows_per_epoch=10), "train.length.epochs", 0),
        (dict(window_sampling="strided"), "train.window_sampling", "strided"),
    ],
)
def test_invalid_train_configs(bad, key, value):
    with pytest.raises(TrainConfigError) as err:
        TrainConfig.from_node(bad)
    assert (err.value.key, err.value.value) == (key, value) and "\n" not in str(err.value)


def test_epochs_without_their_size_are_for_records_runs():
    cfg = TrainConfig.from_node(dict(epochs=3))  # a records run (data.records) sets the size from its records
    with pytest.raises(TrainConfigError) as err:
        cfg.max_steps(32)  # a window run never gets one: one line, when its length is asked for
    assert err.value.key == "train.length.windows_per_epoch" and "set it with train.length.epochs" in str(err.value)


def test_length_in_epochs_of_windows():
    """arXiv 2512.20877: 50,000 windows per epoch at batch 64 is 782 steps an epoch, validated at its end."""
    cfg = TrainConfig(length=dict(epochs=3, windows_per_epoch=50_000, steps=5, tokens=None), batch_size=64)
    assert cfg.steps_per_epoch() == 782 and cfg.max_steps(128) == 3 * 782
    assert cfg.validation_interval(cfg.max_steps(128)) == 782
    assert TrainConfig(length={"steps": 10}, validation={"interval": 0}).validation_interval(10) == 10


def test_window_sampling_keys_match_the_data_layer():
    from slm.data.mix import SAMPLINGS
    import typing

    assert tuple(SAMPLINGS) == typing.get_args(typing.get_type_hints(TrainConfig)["window_sampling"])


def test_length_from_token_budget():
    assert TrainConfig(length={"tokens": 1e6}, batch_size=16).max_steps(128) == 488
    assert TrainConfig(length={"tokens": 1e6, "steps": 7}).max_steps(128) == 7
    with pytest.raises(TrainConfigError, match=r"train.length.tokens=100 is invalid: smaller than one batch \(batch_size 16 x context 128 = 2048 tokens\)"):
        TrainConfig(length={"tokens": 100}).max_steps(128)


def test_schedules():
    cos = SCHEDULES.get("cosine")(max_steps=100, warmup=10, min_ratio=0.1, decay_fraction=0.2)
    assert cos(0) == pytest.approx(0.1) and cos(9) == pytest.approx(1.0)
    assert cos(10) == pytest.approx(1.0) and cos(99) == pytest.approx(0.1)
    assert cos(55) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 45 / 89)))
    wsd = SCHEDULES.get("wsd")(max_steps=100, warmup=10, min_ratio=0.0, decay_fraction=0.2)
    assert [wsd(s) for s in (10, 50, 79)] == [1.0, 1.0, 1.0]
    assert wsd(80) == pytest.approx(1 - 1 / 20) and wsd(99) == pytest.approx(0.0)
    const = SCHEDULES.get("constant")(max_steps=100, warmup=0, min_ratio=0.1, decay_fraction=0.2)
    assert {const(s) for s in range(100)} == {1.0}


def test_no_decay_on_norms_biases_embeddings():
    model = Transformer(ModelConfig(n_layers=1, d_model=32, attention=dict(n_heads=4),
                                    block=dict(bias=True), position=dict(kind="learned"),
                                    norm=dict(kind="layernorm")))
    decay, no_decay = param_groups(model, TrainConfig())
    decayed = {id(p) for p in decay["params"]}
    assert id(model.tok_emb.weight) not in decayed and id(model.position.weight) not in decayed
    assert id(model.blocks[0].attn.qkv.weight) in decayed and id(model.blocks[0].attn.qkv.bias) not in decayed
    assert id(model.blocks[0].attn_norm.weight) not in decayed
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    with_emb, _ = param_groups(model, TrainConfig(optim={"adamw": {"decay_embeddings": True}}))
    assert id(model.tok_emb.weight) in {id(p) for p in with_emb["params"]}


def test_causal_lm_objective_matches_manual_cross_entropy():
    model = Transformer(ModelConfig(n_layers=1, d_model=32, attention=dict(n_heads=4), vocab_size=40))
    tokens = torch.randint(0, 40, (3, 17))
    objective = OBJECTIVES.get("causal_lm")()
    logits = model(tokens[:, :-1])
    logp = logits.log_softmax(-1).gather(-1, tokens[:, 1:, None]).squeeze(-1)
    assert objective.loss(model, tokens).item() == pytest.approx(-logp.mean().item(), rel=1e-5)
    total, n = objective.nll(model, tokens)
    assert n == 48 and total.item() == pytest.approx(-logp.sum().item(), rel=1e-5)


def test_record_is_strict_json_and_merges(tmp_path):
    update_record(tmp_path, status="running", training={"max_steps": 10})
    update_record(tmp_path, status="diverged", training={"diverged": {"step": 3, "loss": float("nan")}})
    raw = (tmp_path / "result.json").read_text()
    json.loads(raw, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    record = load_record(tmp_path)
    assert record["schema_version"] == 1 and record["status"] == "diverged"
    assert record["training"] == {"max_steps": 10, "diverged": {"step": 3, "loss": "nan"}}
    with pytest.raises(ValueError, match="status 'done' is not one of"):
        update_record(tmp_path, status="done")


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    path = tmp_path / "result.json"
    write_json_atomic(path, {"a": 1})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"a": object.__new__(type("Unserialisable", (), {"__str__": None}))})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]
