"""ModelConfig validation and derived sizes; conf/model_base/base.yaml mirrors the dataclass."""

import dataclasses

import pytest
import yaml

from slm.cli.config import CONF_DIR
from slm.model import ConfigError, ModelConfig
from slm.settings import SettingsError, group_fields, nested

TINY = {"n_layers": 2, "d_model": 32, "attention.n_heads": 4, "vocab_size": 50, "context_length": 16}


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"n_layers": 0}, r"model.n_layers=0 is invalid: must be an integer > 0"),
        ({"d_model": -8}, r"model.d_model=-8 is invalid"),
        ({"vocab_size": "many"}, r"model.vocab_size='many' is invalid"),
        ({"attention.n_heads": 3}, r"model.d_model=32 is invalid: must be a multiple of n_heads=3"),
        ({"attention.n_kv_heads": 3}, r"model.attention.n_kv_heads=3 is invalid: must divide n_heads=4"),
        ({"attention.n_heads": None}, r"model.attention.n_heads=None is invalid: set n_heads or head_dim"),
        ({"attention.sliding_window": 32, "layer_types": ["local_attn", "attn"]},
         r"model.attention.sliding_window=32 is invalid: must be <= context_length=16"),
        ({"layer_types": "local_attn,attn"},
         r"model.attention.sliding_window=None is invalid: layer_types \['local_attn', 'attn'\] has local_attn"),
        ({"attention.sliding_window": 8}, r"model.attention.sliding_window=8 is invalid: layer_types has no local_attn"),
        ({"layer_types": ["attn", "lstm"]},
         r"model.layer_types=\['attn', 'lstm'\] is invalid: every item one of: attn, local_attn, conv, mac"),
        ({"layer_types": ["attn"] * 3},
         r"model.layer_types=.* is invalid: has 3 entries for n_layers=2: give one per layer or a shorter unit"),
        ({"layer_types": []}, r"model.layer_types=\[\] is invalid: a non-empty list of mixers, e.g. \[attn\]"),
        ({"mlp_types": "dense,sparse"}, r"model.mlp_types=\['dense', 'sparse'\] is invalid: every item one of: dense, moe"),
        ({"canon.set": "AE"}, r"model.canon.set='AE' is invalid: distinct letters from 'ABCD'"),
        ({"attention.qk_norm_scope": "global"},
         r"model.attention.qk_norm_scope='global' is invalid: choose one of: head, all_heads"),
        ({"conv.kernel": 0}, r"model.conv.kernel=0 is invalid: must be an integer > 0"),
        ({"embedding.padding_idx": 50}, r"model.embedding.padding_idx=50 is invalid: must be null or a token id in 0..49"),
        ({"canon.set": "AA"}, r"model.canon.set='AA' is invalid"),
        ({"norm.placement": "middle"}, r"model.norm.placement='middle' is invalid: choose one of: pre, post, sandwich"),
        ({"norm.kind": "batchnorm"}, r"model.norm.kind='batchnorm' is invalid: one of: layernorm, rmsnorm"),
        ({"mlp.gelu_approximate": "fast"}, r"model.mlp.gelu_approximate='fast' is invalid"),
        ({"position.rotary_fraction": 1.5}, r"model.position.rotary_fraction=1.5 is invalid: must be a number in \(0, 1\]"),
        ({"block.dropout": 1.0}, r"model.block.dropout=1.0 is invalid: must be a number in \[0, 1\)"),
        ({"block.dropout_at": ["mlp", "ffn"]}, r"model.block.dropout_at=\['mlp', 'ffn'\] is invalid: every item one of"),
        ({"block.dropout_at": "embedding,embedding"}, r"'embedding' may appear once"),
        ({"block.loop_layers": 3}, r"model.block.loop_layers=3 is invalid: must be an integer in 0..n_layers=2"),
        ({"embedding.logit_softcap": 0.0}, r"model.embedding.logit_softcap=0.0 is invalid: must be a number > 0, or null"),
        ({"block.repeat": 0}, r"model.block.repeat=0 is invalid"),
        ({"attention.block": 4}, r"model.attention.block=4 is invalid: block-causal attention needs "
                                 r"model.attention.causal=false"),
        ({"mlp.window_hidden": [8]}, r"model.mlp.window_hidden=\[8\] is invalid: model.kind='transformer' takes none"),
        ({"parametrization.depth_alpha": 1.5}, r"model.parametrization.depth_alpha=1.5 is invalid"),
        ({"attention": {"heads": 4}}, r"model.attention has unknown key 'heads' \(did you mean n_heads\?\)"),
    ],
)
def test_invalid_configs_name_field_and_value(bad, message):
    """The line names the dotted key and the value (what is allowed may be reworded: only `key=value is invalid`
    is checked)."""
    with pytest.raises(ConfigError, match=message.split(" is invalid: ")[0] + (" is invalid" if " is invalid: " in
                                                                                message else "")) as err:
        ModelConfig(**nested({**TINY, **bad}))
    assert "\n" not in str(err.value) and str(err.value).startswith(f"{err.value.key}=") or "unknown key" in str(err.value)


def test_the_top_level_is_the_network_and_its_groups():
    """Issue 40: at most 20 top-level fields; everything else sits in the group of the component that reads it."""
    assert len(dataclasses.fields(ModelConfig)) <= 20
    network = ["family", "kind", "n_layers", "d_model", "vocab_size", "context_length", "layer_types", "mlp_types"]
    assert ModelConfig.field_names()[:len(network)] == network
    groups = ModelConfig.field_names()[len(network):]  # every other field is a component's settings group
    assert set(groups) >= {"attention", "position", "mlp", "conv", "norm", "embedding", "block", "parametrization",
                           "moe", "memory", "canon"}
    assert set(groups) == set(group_fields(ModelConfig))
    assert ConfigError is SettingsError


def test_derived_sizes():
    cfg = ModelConfig(n_layers=1, d_model=384, attention=dict(head_dim=48, n_kv_heads=4),
                      mlp=dict(kind="swiglu"))
    assert (cfg.attention.n_heads, cfg.attention.n_kv_heads, cfg.mlp.d_ff) == (8, 4, 1024)
    cfg = ModelConfig(n_layers=1, d_model=320, attention=dict(n_heads=8),
                      mlp=dict(kind="swiglu", d_ff_multiple=1))
    assert (cfg.attention.head_dim, cfg.attention.n_kv_heads, cfg.mlp.d_ff) == (40, 8, 854)
    assert ModelConfig(n_layers=1, d_model=64, attention=dict(n_heads=4), mlp=dict(kind="gelu")).mlp.d_ff == 256
    assert ModelConfig(n_layers=1, d_model=384, attention=dict(n_heads=8), mlp=dict(ratio=3.0)).mlp.d_ff == 1152
    # heads * head_dim may differ from d_model when both are given (as Qwen3 does)
    assert ModelConfig(n_layers=1, d_model=64, attention=dict(n_heads=4, head_dim=32)).attention.head_dim == 32
    # a window model has no attention: its heads need no setting
    assert ModelConfig(kind="linear", d_model=16).attention.n_heads == 1


def test_resolved_config_is_a_fixed_point():
    cfg = ModelConfig(n_layers=2, d_model=96, attention=dict(head_dim=32, sliding_window=8),
                      mlp=dict(kind="geglu"), layer_types="local_attn, attn")
    assert cfg.layer_types == ["local_attn", "attn"]
    assert ModelConfig(**cfg.to_dict()) == cfg


def test_layer_patterns_repeat_over_the_layers():
    cfg = ModelConfig(n_layers=5, d_model=32, attention=dict(n_heads=4, sliding_window=4),
                      layer_types=["local_attn", "local_attn", "attn"])
    assert [cfg.layer_type(i) for i in range(5)] == ["local_attn", "local_attn", "attn", "local_attn", "local_attn"]
    assert [cfg.mlp_type(i) for i in range(5)] == ["dense"] * 5


def test_configs_stored_before_layer_types_still_load():
    """config.json of older runs has `attention: mha` and an L/G `attention_pattern`."""
    flat = {"n_layers": 2, "d_model": 32, "n_heads": 4, "vocab_size": 50, "context_length": 16}
    old = {**flat, "attention": "mha", "attention_pattern": "LG", "sliding_window": 4}
    cfg = ModelConfig.from_dict(old)
    assert cfg.layer_types == ["local_attn", "attn"] and cfg.attention.sliding_window == 4
    assert ModelConfig.from_dict({**flat, "attention": "mha", "attention_pattern": "G"}).layer_types == ["attn"]
    with pytest.raises(ConfigError, match="model.attention_pattern='LX' is invalid"):
        ModelConfig.from_dict({**flat, "attention_pattern": "LX"})
    with pytest.raises(ConfigError, match="set layer_types instead"):
        ModelConfig.from_dict({**flat, "attention_pattern": "G", "layer_types": ["attn"]})


def test_base_yaml_mirrors_dataclass_defaults():
    base = yaml.safe_load((CONF_DIR / "model_base" / "base.yaml").read_text())
    from slm.model.budget import SOLVER_KEYS as solver_keys
    defaults = {f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
                for f in dataclasses.fields(ModelConfig)}
    defaults = {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for k, v in defaults.items()}
    assert base == {**defaults, **solver_keys}


def test_every_field_is_documented():
    """Every field of ModelConfig and of each of its groups has a doc line (the string under it)."""
    from slm.cli.conf_defaults import field_docs
    from slm.settings import group_fields

    for cls in (ModelConfig, *group_fields(ModelConfig).values()):
        missing = [f.name for f in dataclasses.fields(cls) if not field_docs(cls).get(f.name)]
        assert not missing, f"{cls.__name__}: fields without a doc line: {missing}"
