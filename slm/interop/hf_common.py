"""Shared pieces of the transformers converters (slm.interop.hf): the weight-table entry, refusals, and the
config fields several families map the same way."""

from __future__ import annotations

import math
from typing import NamedTuple

from slm.model.config import ModelConfig
from slm.settings import nested

# Gelu forms in transformers' ACT2FN that slm computes exactly: name -> (slm mlp kind, gelu_approximate).
ACTIVATIONS = {
    "gelu_new": ("gelu", "tanh"),
    "gelu_pytorch_tanh": ("gelu", "tanh"),
    "gelu": ("gelu", "none"),
    "relu": ("relu", "none"),
    "silu": ("swiglu", "none"),
}


class Entry(NamedTuple):
    """One slm parameter made of transformers tensors `hf`, stacked along dim 0 (after `.T` if
    `transposed`)."""

    slm: str
    hf: tuple[str, ...]
    transposed: bool = False


def unsupported(what: str, problems: list[str]) -> None:
    """Raise one ValueError listing every reason `what` cannot be converted (no-op if none)."""
    if problems:
        raise ValueError(f"cannot convert {what}: " + "; ".join(problems))


def rope_theta(rope_parameters: dict | None, what: str) -> float:
    """The base of a plain RoPE parameter dict; ValueError for scaled or partial RoPE."""
    params = rope_parameters or {}
    problems = []
    if params.get("rope_type", "default") != "default":
        problems.append(f"{what} rope_type={params['rope_type']!r} (RoPE scaling; only 'default' is supported)")
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        problems.append(f"{what} partial_rotary_factor={params['partial_rotary_factor']} (partial rotary)")
    if "rope_theta" not in params:
        problems.append(f"{what} has no rope_theta")
    unsupported("RoPE parameters", problems)
    return float(params["rope_theta"])


def attention_layout(c, context_length: int) -> tuple[list[str], int | None]:
    """(layer_types, sliding_window) from transformers' `layer_types`: sliding_attention -> local_attn,
    full_attention -> attn, shortened to the shortest unit that repeats over the layers. The window is capped
    at the context length, which changes nothing (a query never has more keys than that)."""
    kinds = {"sliding_attention": "local_attn", "full_attention": "attn"}
    layer_types = getattr(c, "layer_types", None) or ["full_attention"] * c.num_hidden_layers
    unknown = sorted(set(layer_types) - set(kinds))
    unsupported("layer_types", [f"{kind!r} layers" for kind in unknown])
    ours = repeating_unit([kinds[kind] for kind in layer_types])
    if "local_attn" not in ours:
        return ours, None
    if c.sliding_window is None:
        raise ValueError("cannot convert layer_types: sliding_attention layers but sliding_window is None")
    return ours, min(c.sliding_window, context_length)


def repeating_unit(items: list[str]) -> list[str]:
    """The shortest prefix of `items` that, repeated, gives `items` (the form presets use)."""
    n = len(items)
    period = next(p for p in range(1, n + 1) if all(items[i] == items[i % p] for i in range(n)))
    return items[:period]


def decoder_fields(c) -> dict:
    """ModelConfig fields (dotted: `attention.n_heads`, slm.settings.nested) shared by the LLaMA-style decoders
    (Llama, Qwen3, Gemma2/3, Qwen3-MoE, Mixtral); a config without head_dim has hidden_size / heads, as their
    attention derives it."""
    return {
        "n_layers": c.num_hidden_layers, "d_model": c.hidden_size, "attention.n_heads": c.num_attention_heads,
        "attention.n_kv_heads": c.num_key_value_heads,
        "attention.head_dim": getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
        "mlp.d_ff": c.intermediate_size, "vocab_size": c.vocab_size, "context_length": c.max_position_embeddings,
        "embedding.tie": bool(c.tie_word_embeddings), "norm.eps": c.rms_norm_eps, "position.kind": "rope",
        "parametrization.init_std": c.initializer_range, "embedding.padding_idx": c.pad_token_id,
    }


def model_config(**fields) -> ModelConfig:
    """A ModelConfig from fields some of which are dotted (`attention.qk_norm`): each converter's mapping is one
    flat table."""
    return ModelConfig(**nested(fields))


def decoder_kwargs(cfg: ModelConfig) -> dict:
    """The transformers config arguments of the LLaMA-style decoders that come from the same ModelConfig
    fields (the inverse of decoder_fields): shapes, RoPE, norms, init, tying, tokens."""
    a = cfg.attention
    return dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
        num_attention_heads=a.n_heads, num_key_value_heads=a.n_kv_heads, head_dim=a.head_dim,
        max_position_embeddings=cfg.context_length, rms_norm_eps=cfg.norm.eps,
        initializer_range=cfg.parametrization.init_std,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.position.rope_theta},
        attention_dropout=cfg.block.dropout, tie_word_embeddings=cfg.embedding.tie, hidden_act="silu",
        pad_token_id=cfg.embedding.padding_idx, bos_token_id=None, eos_token_id=None,
    )


def default_scale(cfg: ModelConfig) -> bool:
    """Whether attention scales q.k by 1/sqrt(head_dim) (model.attention.scale null or equal to it)."""
    scale = cfg.attention.scale
    return scale is None or math.isclose(scale, cfg.attention.head_dim**-0.5, rel_tol=1e-6)


def common_problems(cfg: ModelConfig, mixers: tuple[str, ...] = ("attn",), qk_norm: bool = False,
                    mlps: tuple[str, ...] = ("dense",)) -> list[str]:
    """Settings the transformers targets cannot express (the mixers, feed-forwards and qk-norm each one has)."""
    a = cfg.attention
    return [problem for bad, problem in (
        (cfg.canon.set != "", f"Canon layers (canon.set={cfg.canon.set!r})"),
        (cfg.block.repeat > 1, f"block.repeat={cfg.block.repeat} (block sharing)"),
        (cfg.norm.placement != "pre", f"norm.placement={cfg.norm.placement!r} (needs 'pre')"),
        (a.qk_norm != qk_norm and bool({"attn", "local_attn"} & set(cfg.layer_types)),
         f"attention.qk_norm={a.qk_norm} (needs {qk_norm})"),
        (not a.causal, "attention.causal=False"),
        (not set(cfg.layer_types) <= set(mixers), f"layer_types={cfg.layer_types} (needs {', '.join(mixers)} only)"),
        (not set(cfg.mlp_types) <= set(mlps), f"mlp_types={cfg.mlp_types} (needs {', '.join(mlps)} only)"),
        (a.logit_softcap is not None, f"attention.logit_softcap={a.logit_softcap}"),
        (cfg.embedding.logit_softcap is not None, f"embedding.logit_softcap={cfg.embedding.logit_softcap}"),
        (cfg.embedding.scale, "embedding.scale=True"),
    ) if bad]
