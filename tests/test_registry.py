"""Registries: unknown keys fail with the valid list; every entry builds and trains on a tiny config."""

import pytest
import torch

from slm.components import CANON_POSITIONS, FFNS, INITS, MIXERS, MLPS, NORMS, POSITIONS, REGISTRIES, Registry, UnknownKeyError
from slm.model import ModelConfig, Transformer

TINY = dict(n_layers=2, d_model=32, n_heads=4, vocab_size=50, context_length=16)


def _train_step(cfg: ModelConfig) -> None:
    model = Transformer(cfg)
    idx = torch.randint(0, cfg.vocab_size, (2, 12))
    logits = model(idx)
    assert logits.shape == (2, 12, cfg.vocab_size)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx.flatten())
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_unknown_key_lists_choices():
    with pytest.raises(ValueError, match=r"^model.norm=rsmnorm: unknown norm 'rsmnorm'; choose one of: layernorm, rmsnorm, "
                                         r"rmsnorm_gemma$"):
        ModelConfig(**TINY, norm="rsmnorm")
    with pytest.raises(UnknownKeyError, match=r"^unknown norm 'rsmnorm'; choose one of: layernorm, rmsnorm, rmsnorm_gemma$"):
        NORMS.get("rsmnorm")
    for field, registry in [("position", POSITIONS), ("mlp", MLPS), ("init", INITS)]:
        with pytest.raises(ValueError, match=f"^model.{field}=nope: unknown {registry.kind} 'nope'; choose one of: "):
            ModelConfig(**TINY, **{field: "nope"})
    for field, registry in [("layer_types", MIXERS), ("mlp_types", FFNS)]:
        with pytest.raises(ValueError, match=f"model.{field}=\\['nope'\\] is invalid: unknown {registry.kind} 'nope'"):
            ModelConfig(**TINY, **{field: ["nope"]})


def test_duplicate_registration_rejected():
    reg = Registry("thing")
    reg.register("a")(object)
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("a")(object)


def test_registries_are_complete():
    assert set(NORMS.keys()) == {"layernorm", "rmsnorm", "rmsnorm_gemma"}
    assert set(POSITIONS.keys()) == {"learned", "rope", "none"}
    assert set(MLPS.keys()) == {"gelu", "relu", "swiglu", "geglu"}
    assert set(MIXERS.keys()) == {"attn", "local_attn", "conv", "mac"}
    assert set(FFNS.keys()) == {"dense", "moe"}
    assert set(REGISTRIES) == {"norm", "position", "mlp", "mlp type", "mixer", "canon", "init scheme", "parametrization"}


@pytest.mark.parametrize("norm", NORMS.keys())
@pytest.mark.parametrize("placement", ["pre", "post", "sandwich"])
def test_norms_and_placements(norm, placement):
    _train_step(ModelConfig(**TINY, norm=norm, norm_placement=placement, qk_norm=True))


@pytest.mark.parametrize("position", POSITIONS.keys())
def test_positions(position):
    _train_step(ModelConfig(**TINY, position=position))


def test_partial_rotary_leaves_other_channels_alone():
    from slm.components.position import RoPE, apply_rotary

    rope = RoPE(head_dim=8, theta=10000.0, fraction=0.5)
    x = torch.randn(1, 2, 5, 8)
    y = apply_rotary(x, rope.rotary(torch.arange(5), False, x.dtype))
    assert torch.equal(y[..., 4:], x[..., 4:])
    assert not torch.allclose(y[..., :4], x[..., :4])
    _train_step(ModelConfig(**TINY, rotary_fraction=0.5))


@pytest.mark.parametrize("mlp", MLPS.keys())
def test_mlps(mlp):
    _train_step(ModelConfig(**TINY, mlp=mlp, bias=True))


@pytest.mark.parametrize(
    "variant",
    [dict(), dict(n_kv_heads=2), dict(n_kv_heads=1, causal=False), dict(sliding_window=4, layer_types=["local_attn", "attn"]),
     dict(attn_logit_softcap=5.0, final_logit_softcap=3.0, n_kv_heads=2), dict(head_dim=4), dict(attn_scale=0.3)],
)
def test_attention_variants(variant):
    _train_step(ModelConfig(**{**TINY, **variant}))


@pytest.mark.parametrize("layer_types", [["conv"], ["conv", "conv", "attn"], ["local_attn", "conv"]])
@pytest.mark.parametrize("bias", [False, True])
def test_mixers(layer_types, bias):
    _train_step(ModelConfig(**{**TINY, "n_layers": 3}, layer_types=layer_types, bias=bias, qk_norm=True,
                            sliding_window=4 if "local_attn" in layer_types else None))


@pytest.mark.parametrize("canon_set", ["A", "B", "C", "D", "ABCD"])
@pytest.mark.parametrize("mlp", ["gelu", "swiglu"])
def test_canon_positions(canon_set, mlp):
    assert set(canon_set) <= set(CANON_POSITIONS)
    _train_step(ModelConfig(**TINY, canon_set=canon_set, mlp=mlp))


def test_untied_embeddings_and_sharing():
    _train_step(ModelConfig(**TINY, tie_embeddings=False, layer_repeat=3))
