"""ModelConfig validation and derived sizes; conf/model_base/base.yaml mirrors the dataclass."""

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
        (dict(sliding_window=32, layer_types=["local_attn", "attn"]), r"model.sliding_window=32 is invalid: must be <= context_length=16"),
        (dict(layer_types="local_attn,attn"), r"model.sliding_window=None is invalid: layer_types \['local_attn', 'attn'\] has local_attn"),
        (dict(sliding_window=8), r"model.sliding_window=8 is invalid: layer_types has no local_attn layer"),
        (dict(layer_types=["attn", "lstm"]), r"model.layer_types=\['attn', 'lstm'\] is invalid: unknown mixer 'lstm'; choose one of: attn, local_attn"),
        (dict(layer_types=["attn"] * 3), r"model.layer_types=.* is invalid: has 3 entries for n_layers=2: give one per layer or a shorter unit"),
        (dict(layer_types=[]), r"model.layer_types=\[\] is invalid: a non-empty list of mixers"),
        (dict(mlp_types="dense,sparse"), r"model.mlp_types='dense,sparse' is invalid: unknown mlp type 'sparse'; choose one of: dense, moe"),
        (dict(canon=dict(set="AE")), r"model.canon.set='AE' is invalid: distinct letters from 'ABCD'"),
        (dict(qk_norm_scope="global"), r"model.qk_norm_scope='global' is invalid: choose one of: head, all_heads"),
        (dict(conv_kernel=0), r"model.conv_kernel=0 is invalid: must be a positive integer"),
        (dict(embedding_padding_idx=50), r"model.embedding_padding_idx=50 is invalid: must be null or a token id in 0..49"),
        (dict(canon=dict(set="AA")), r"model.canon.set='AA' is invalid"),
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
    cfg = ModelConfig(n_layers=2, d_model=96, head_dim=32, mlp="geglu", layer_types="local_attn, attn", sliding_window=8)
    assert cfg.layer_types == ["local_attn", "attn"]
    assert ModelConfig(**cfg.to_dict()) == cfg


def test_layer_patterns_repeat_over_the_layers():
    cfg = ModelConfig(n_layers=5, d_model=32, n_heads=4, layer_types=["local_attn", "local_attn", "attn"], sliding_window=4)
    assert [cfg.layer_type(i) for i in range(5)] == ["local_attn", "local_attn", "attn", "local_attn", "local_attn"]
    assert [cfg.mlp_type(i) for i in range(5)] == ["dense"] * 5


def test_configs_stored_before_layer_types_still_load():
    """config.json of older runs has `attention: mha` and an L/G `attention_pattern`."""
    old = {**TINY, "attention": "mha", "attention_pattern": "LG", "sliding_window": 4}
    cfg = ModelConfig.from_dict(old)
    assert cfg.layer_types == ["local_attn", "attn"] and cfg.sliding_window == 4
    assert ModelConfig.from_dict({**TINY, "attention": "mha", "attention_pattern": "G"}).layer_types == ["attn"]
    with pytest.raises(ConfigError, match="model.attention_pattern='LX' is invalid"):
        ModelConfig.from_dict({**TINY, "attention_pattern": "LX"})
    with pytest.raises(ConfigError, match="set layer_types instead"):
        ModelConfig.from_dict({**TINY, "attention_pattern": "G", "layer_types": ["attn"]})


def test_base_yaml_mirrors_dataclass_defaults():
    base = yaml.safe_load((CONF_DIR / "model_base" / "base.yaml").read_text())
    from slm.model.budget import SOLVER_KEYS as solver_keys
    defaults = {f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
                for f in dataclasses.fields(ModelConfig)}
    defaults = {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for k, v in defaults.items()}
    assert base == {**defaults, **solver_keys}


def test_every_field_is_documented():
    import inspect

    source = inspect.getsource(ModelConfig)
    for name in ModelConfig.field_names():
        line = next(i for i, l in enumerate(source.splitlines()) if l.strip().startswith(f"{name}:"))
        assert source.splitlines()[line + 1].strip().startswith('"""'), f"field {name} has no docstring"
