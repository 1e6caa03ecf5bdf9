"""Registries: unknown keys fail with the valid list; every entry builds, counts the parameters it holds and trains
on a tiny config; norms, placements and Canon positions compute what their formulas say."""

import pytest
import torch

from slm.components import CANONS, FFNS, INITS, MIXERS, MLPS, NORMS, POSITIONS, REGISTRIES, Registry, UnknownKeyError
from slm.model import ModelConfig, Transformer
from slm.model.counting import count
from slm.model.transformer import SequenceContext
from slm.settings import nested

TINY = {"n_layers": 2, "d_model": 32, "attention.n_heads": 4, "vocab_size": 50, "context_length": 16}


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
    """A misspelt key is one line listing the registry's keys (read from the registry: adding a norm breaks no test)."""
    assert {"layernorm", "rmsnorm", "rmsnorm_gemma"} <= set(NORMS.keys())
    norms = ", ".join(NORMS.keys())
    with pytest.raises(ValueError, match=f"^model.norm.kind='rsmnorm' is invalid: one of: {norms}$"):
        ModelConfig(**nested({**TINY, "norm.kind": "rsmnorm"}))
    with pytest.raises(UnknownKeyError, match=f"^unknown norm 'rsmnorm'; choose one of: {norms}$"):
        NORMS.get("rsmnorm")
    for field in ("position.kind", "mlp.kind", "parametrization.init", "parametrization.kind", "canon.kind"):
        with pytest.raises(ValueError, match=f"^model.{field}='nope' is invalid: one of: "):
            ModelConfig(**nested({**TINY, field: "nope"}))
    for field, registry in [("layer_types", MIXERS), ("mlp_types", FFNS)]:
        with pytest.raises(ValueError, match=f"model.{field}=\\['nope'\\] is invalid: every item one of: "
                                             f"{', '.join(registry.keys())}$"):
            ModelConfig(**nested({**TINY, field: ["nope"]}))


def test_duplicate_registration_rejected():
    reg = Registry("thing")
    reg.register("a")(object)
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("a")(object)


USES = {  # how a tiny model uses a key of each registry
    "norm": lambda key: {"norm.kind": key},
    "position": lambda key: {"position.kind": key},
    "mlp": lambda key: {"mlp.kind": key},
    "mlp type": lambda key: dict(mlp_types=[key], **({"moe": dict(n_experts=3, top_k=2)} if key == "moe" else {})),
    "mixer": lambda key: dict(layer_types=[key], **{"local_attn": {"attention.sliding_window": 4},
                                                     "mac": dict(memory=dict(segment=8))}.get(key, {})),
    "canon": lambda key: {"canon": dict(kind=key, set="ABCD"), "attention.causal": CANONS.get(key).causal},
    "init scheme": lambda key: {"parametrization.init": key},
    "parametrization": lambda key: {"parametrization.kind": key},
}


@pytest.mark.parametrize("kind, key", [(kind, key) for kind, registry in REGISTRIES.items() for key in registry.keys()])
def test_every_registered_key_builds_and_counts_what_it_holds(kind, key):
    """The count from the config alone (slm.model.counting, each component's num_params) equals the parameters of
    the built model, and the model trains."""
    assert kind in USES, f"registry {kind!r}: add to USES how a tiny model uses its keys"
    cfg = ModelConfig(**nested({**TINY, **USES[kind](key)}))
    assert count(cfg).params_total == sum(p.numel() for p in Transformer(cfg).parameters())
    _train_step(cfg)


def _randomized(module: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(1)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.5)
    return module


NORM_FORMULAS = {  # in float64: x / sqrt(mean(x^2) + eps) * w (RMSNorm), Gemma's scale (1 + w), LayerNorm's
    "rmsnorm": lambda x, w, b, eps: x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * w,
    "rmsnorm_gemma": lambda x, w, b, eps: x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * (1 + w),
    "layernorm": lambda x, w, b, eps: (x - x.mean(-1, keepdim=True))
    / (x.var(-1, unbiased=False, keepdim=True) + eps).sqrt() * w + b,
}


@pytest.mark.parametrize("norm", sorted(NORM_FORMULAS))
def test_norm_is_its_formula(norm):
    """Each norm with a formula written here (a new norm may add its own) computes it. Random weights (and bias), an eps large enough to matter; float32, and bfloat16 weights and inputs."""
    eps = 0.25
    layer = _randomized(NORMS.get(norm)(16, eps=eps, bias=True))
    x = torch.randn(3, 5, 16) * 0.7 + 0.3
    for dtype, tolerance in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        layer = layer.to(dtype)
        w, b = layer.weight.double(), getattr(layer, "bias", None)
        want = NORM_FORMULAS[norm](x.to(dtype).double(), w, None if b is None else b.double(), eps)
        got = layer(x.to(dtype))
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), want, rtol=tolerance, atol=tolerance)


def _by_hand(model: Transformer, idx: torch.Tensor, placement: str) -> torch.Tensor:
    """The logits with each block wired by hand from its own sublayers, as its placement says:
    pre h + f(norm(h)); post norm(h + f(h)); sandwich h + norm_out(f(norm_in(h)))."""
    seq = SequenceContext(model.cfg, model.position, torch.arange(idx.shape[1]), torch.float32)
    h = model.position.embed(model.tok_emb(idx), seq.pos)
    for block in model.blocks:
        for f, norm_in, norm_out in ((block.attn, block.attn_norm, block.attn_out_norm),
                                     (block.mlp, block.mlp_norm, block.mlp_out_norm)):
            if placement == "pre":
                h = h + f(norm_in(h), seq, None)
            elif placement == "post":
                h = norm_out(h + f(h, seq, None))
            else:
                h = h + norm_out(f(norm_in(h), seq, None))
    if model.cfg.has_final_norm:
        h = model.norm(h)
    return model.lm_head(h)


@pytest.mark.parametrize("norm", NORMS.keys())
@pytest.mark.parametrize("placement", ["pre", "post", "sandwich"])
def test_placement_is_its_wiring(norm, placement):
    """The model against the same weights wired by hand: the norms of each placement where it puts them (and only
    those: the others are absent), the final norm with pre and sandwich, none after a post-norm block."""
    cfg = ModelConfig(**nested({**TINY, "norm.kind": norm, "norm.placement": placement, "attention.qk_norm": True,
                                "block.bias": norm == "layernorm"}))
    model = _randomized(Transformer(cfg)).eval()
    wanted = {"pre": ("in",), "post": ("out",), "sandwich": ("in", "out")}[placement]
    for block in model.blocks:
        assert (block.attn_norm is not None, block.attn_out_norm is not None) == ("in" in wanted, "out" in wanted)
        assert (block.mlp_norm is not None, block.mlp_out_norm is not None) == ("in" in wanted, "out" in wanted)
    assert (model.norm is not None) == (placement != "post")
    idx = torch.randint(0, cfg.vocab_size, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(model(idx), _by_hand(model, idx, placement), rtol=1e-5, atol=1e-5)
    _train_step(cfg)


@pytest.mark.parametrize("position", POSITIONS.keys())
def test_positions(position):
    _train_step(ModelConfig(**nested({**TINY, "position.kind": position})))


def test_partial_rotary_leaves_other_channels_alone():
    from slm.components.position import RoPE, apply_rotary

    rope = RoPE(head_dim=8, theta=10000.0, fraction=0.5)
    x = torch.randn(1, 2, 5, 8)
    y = apply_rotary(x, rope.rotary(torch.arange(5), False, x.dtype))
    assert torch.equal(y[..., 4:], x[..., 4:])
    assert not torch.allclose(y[..., :4], x[..., :4])
    _train_step(ModelConfig(**nested({**TINY, "position.rotary_fraction": 0.5})))


@pytest.mark.parametrize("mlp", MLPS.keys())
def test_mlps(mlp):
    _train_step(ModelConfig(**nested({**TINY, "mlp.kind": mlp, "block.bias": True})))


@pytest.mark.parametrize(
    "variant",
    [dict(), {"attention.n_kv_heads": 2}, {"attention.n_kv_heads": 1, "attention.causal": False}, {"attention.sliding_window": 4,
                                                                    "layer_types": ["local_attn", "attn"]},
     {"attention.logit_softcap": 5.0, "embedding.logit_softcap": 3.0, "attention.n_kv_heads": 2}, {"attention.head_dim": 4}, {"attention.scale": 0.3}],
)
def test_attention_variants(variant):
    _train_step(ModelConfig(**nested({**TINY, **variant})))


@pytest.mark.parametrize("layer_types", [["conv"], ["conv", "conv", "attn"], ["local_attn", "conv"]])
@pytest.mark.parametrize("bias", [False, True])
def test_mixers(layer_types, bias):
    _train_step(ModelConfig(**nested({**{**TINY, "n_layers": 3}, "layer_types": layer_types, "block.bias": bias,
                                      "attention.qk_norm": True,
                                      "attention.sliding_window": 4 if "local_attn" in layer_types else None})))


CANON_LAYERS = {"A": "canon_a", "B": "attn.canon_b", "C": "canon_c", "D": "mlp.canon_d"}
"""Where a block holds the Canon layer of each position."""
CANON_INPUTS = {"A": "attn_norm", "B": "attn.qkv", "C": "mlp_norm", "D": "mlp.fc_in"}
"""Per Canon position, the block's module whose output the Canon layer mixes."""
CANON_OUTPUTS = {"A": "attn", "C": "mlp"}
"""Per position, the module that takes the Canon layer's output (B and D: inside attention and the MLP)."""


def _causal_mix(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x + sum_j w[:, j] * x[t - (k - 1) + j] (positions before 0 read as zero), x (B, T, C), weight (C, 1, k)."""
    k, T = weight.shape[-1], x.shape[1]
    padded = torch.nn.functional.pad(x, (0, 0, k - 1, 0))
    return x + sum(padded[:, j:j + T] * weight[:, 0, j] for j in range(k))


@pytest.mark.parametrize("canon_set", ["A", "B", "C", "D", "ABCD"])
@pytest.mark.parametrize("mlp", ["gelu", "swiglu"])
def test_canon_positions(canon_set, mlp):
    """Each Canon layer mixes what its position names (the output of the module before it, by the causal
    depthwise formula, handed to the module after it); with zero weights the model is the one without Canon (the
    same other weights); the mix never reads a later token."""
    cfg = ModelConfig(**nested({**TINY, "canon": dict(set=canon_set), "mlp.kind": mlp}))
    model = _randomized(Transformer(cfg)).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, 12))
    seen, hooks = {}, []
    for i, block in enumerate(model.blocks):
        for position in canon_set:
            canon = block.get_submodule(CANON_LAYERS[position])
            for name, module in [("before", block.get_submodule(CANON_INPUTS[position])), ("canon", canon)] + (
                    [("after", block.get_submodule(CANON_OUTPUTS[position]))] if position in CANON_OUTPUTS else []):
                key = (i, position, name)
                hooks.append(module.register_forward_hook(
                    lambda m, args, out, key=key: seen.__setitem__(key, (args[0], out))))
    with torch.no_grad():
        logits = model(idx)
    for hook in hooks:
        hook.remove()
    for i, block in enumerate(model.blocks):
        for position in canon_set:
            canon_in, canon_out = seen[i, position, "canon"]
            assert torch.equal(canon_in, seen[i, position, "before"][1])
            weight = block.get_submodule(CANON_LAYERS[position]).conv.weight
            torch.testing.assert_close(canon_out, _causal_mix(canon_in, weight), rtol=1e-5, atol=1e-6)
            if position in CANON_OUTPUTS:
                assert torch.equal(seen[i, position, "after"][0], canon_out)

    later = idx.clone()
    later[:, 6:] = (later[:, 6:] + 1) % cfg.vocab_size
    with torch.no_grad():
        torch.testing.assert_close(model(later)[:, :6], logits[:, :6], rtol=1e-6, atol=1e-6)
        plain = Transformer(ModelConfig(**nested({**TINY, "mlp.kind": mlp}))).eval()
        plain.load_state_dict({k: v for k, v in model.state_dict().items() if ".canon_" not in k})
        assert not torch.equal(plain(idx), logits)
        for name, p in model.named_parameters():
            if ".canon_" in name:
                p.zero_()
        assert torch.equal(plain(idx), model(idx))
    _train_step(cfg)


def test_untied_embeddings_and_sharing():
    _train_step(ModelConfig(**nested({**TINY, "embedding.tie": False, "block.repeat": 3})))


def test_importing_the_components_package_imports_every_component_module():
    """A component in a new file of slm/components registers itself: the package imports every module beside it."""
    import pkgutil
    import sys

    import slm.components

    names = [m.name for m in pkgutil.iter_modules(slm.components.__path__)]
    assert "shortconv" in names and all(f"slm.components.{name}" in sys.modules for name in names)
