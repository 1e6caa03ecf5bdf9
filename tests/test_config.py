"""ModelConfig validation and derived sizes; conf/model/base.yaml mirrors the dataclass."""

import dataclasses

import pytest
import yaml

from slm.cli.config import CONF_DIR
from slm.model import ConfigError, ModelConfig

TINY = dict(n_layers=2, d_model=32, n_heads=4, vocab_size=50, context_length=16)


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(n_layers=0), r"model.n_layers=0 is invalid: must be a positive integer"),
        (dict(d_model=-8), r"model.d_model=-8 is invalid"),
        (dict(vocab_size="many"), r"model.vocab_size='many' is invalid"),
        (dict(n_heads=3), r"model.d_model=32 is invalid: must be a multiple of n_heads=3"),
        (dict(n_kv_heads=3), r"model.n_kv_heads=3 is invalid: must divide n_heads=4"),
        (dict(n_heads=None), r"model.d_model=32 is invalid: must be a multiple of head_dim=None|set n_heads or head_dim"),
        (dict(sliding_window=32, attention_pattern="LG"), r"model.sliding_window=32 is invalid: must be <= context_length=16"),
        (dict(attention_pattern="LG"), r"model.sliding_window=None is invalid: attention_pattern 'LG' has local layers"),
        (dict(sliding_window=8), r"model.sliding_window=8 is invalid: attention_pattern has no local"),
        (dict(attention_pattern="LX", sliding_window=4), r"model.attention_pattern='LX' is invalid"),
        (dict(canon_set="AE"), r"model.canon_set='AE' is invalid: distinct letters from 'ABCD'"),
        (dict(canon_set="AA"), r"model.canon_set='AA' is invalid"),
        (dict(norm_placement="middle"), r"model.norm_placement='middle' is invalid: choose one of: pre, post, sandwich"),
        (dict(gelu_approximate="fast"), r"model.gelu_approximate='fast' is invalid"),
        (dict(rotary_fraction=1.5), r"model.rotary_fraction=1.5 is invalid: must be in \(0, 1\]"),
        (dict(dropout=1.0), r"model.dropout=1.0 is invalid"),
        (dict(final_logit_softcap=0.0), r"model.final_logit_softcap=0.0 is invalid"),
        (dict(layer_repeat=0), r"model.layer_repeat=0 is invalid"),
    ],
)
def test_invalid_configs_name_field_value_and_rule(bad, message):
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**{**TINY, **bad})


def test_derived_sizes():
    cfg = ModelConfig(n_layers=1, d_model=384, head_dim=48, n_kv_heads=4, mlp="swiglu")
    assert (cfg.n_heads, cfg.n_kv_heads, cfg.d_ff) == (8, 4, 1024)
    cfg = ModelConfig(n_layers=1, d_model=320, n_heads=8, mlp="swiglu", d_ff_multiple=1)
    assert (cfg.head_dim, cfg.n_kv_heads, cfg.d_ff) == (40, 8, 854)
    assert ModelConfig(n_layers=1, d_model=64, n_heads=4, mlp="gelu").d_ff == 256
    # heads * head_dim may differ from d_model when both are given (as Qwen3 does)
    assert ModelConfig(n_layers=1, d_model=64, n_heads=4, head_dim=32).head_dim == 32


def test_resolved_config_is_a_fixed_point():
    cfg = ModelConfig(n_layers=2, d_model=96, head_dim=32, mlp="geglu")
    assert ModelConfig(**cfg.to_dict()) == cfg


def test_base_yaml_mirrors_dataclass_defaults():
    base = yaml.safe_load((CONF_DIR / "model" / "base.yaml").read_text())
    solver_keys = {"param_budget": None, "width_step": 64}
    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    assert base == {**defaults, **solver_keys}


def test_every_field_is_documented():
    import inspect

    source = inspect.getsource(ModelConfig)
    for name in ModelConfig.field_names():
        line = next(i for i, l in enumerate(source.splitlines()) if l.strip().startswith(f"{name}:"))
        assert source.splitlines()[line + 1].strip().startswith('"""'), f"field {name} has no docstring"
