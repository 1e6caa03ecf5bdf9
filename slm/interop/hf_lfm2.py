"""LFM2 <-> slm: Lfm2ForCausalLM (gated short-conv and attention layers; transformers' Lfm2ShortConv)."""

from __future__ import annotations

from slm.interop.hf_common import (Entry, common_problems, default_scale, model_config, repeating_unit, rope_theta,
                                   unsupported)
from slm.model.config import ModelConfig


def lfm2_config(c) -> ModelConfig:
    """Lfm2Config -> ModelConfig: per-layer conv / full_attention mixers, pre-RMSNorm, SwiGLU, qk-norm (per
    head, before RoPE) in the attention layers, RoPE from rope_parameters (its default base is 1e6, read
    from the config, never assumed), pad_token_id -> embedding.padding_idx (transformers zeroes that
    embedding row at init and the lookup never updates it).

    The MLP width is what transformers built: with block_auto_adjust_ff_dim (the default) intermediate_size
    is rescaled (2/3, block_ffn_dim_multiplier, rounded up to block_multiple_of), so the converter reads the
    width of the built w1 (the config passed in is the model's own)."""
    kinds = {"conv": "conv", "full_attention": "attn"}
    unknown = sorted(set(c.layer_types) - set(kinds))
    unsupported("Lfm2ForCausalLM", [f"{kind!r} layers" for kind in unknown] + (
        ["conv_bias=True (biases in the conv layers only; slm's `bias` switches every linear layer)"]
        if c.conv_bias else []))
    head_dim = c.hidden_size // c.num_attention_heads
    return model_config(**{
        "family": "lfm2", "n_layers": c.num_hidden_layers, "d_model": c.hidden_size,
        "attention.n_heads": c.num_attention_heads, "attention.n_kv_heads": c.num_key_value_heads,
        "attention.head_dim": head_dim, "mlp.d_ff": lfm2_ff_dim(c), "vocab_size": c.vocab_size,
        "context_length": c.max_position_embeddings, "embedding.tie": bool(c.tie_word_embeddings),
        "norm.kind": "rmsnorm", "norm.eps": c.norm_eps, "position.kind": "rope",
        "position.rope_theta": rope_theta(c.rope_parameters, "rope_parameters"), "mlp.kind": "swiglu",
        "attention.qk_norm": True, "layer_types": repeating_unit([kinds[k] for k in c.layer_types]),
        "conv.kernel": c.conv_L_cache, "parametrization.init_std": c.initializer_range,
        "embedding.padding_idx": c.pad_token_id,
    })


def lfm2_ff_dim(c) -> int:
    """The MLP width Lfm2MLP builds from Lfm2Config (block_auto_adjust_ff_dim rescales intermediate_size)."""
    width = c.intermediate_size
    if c.block_auto_adjust_ff_dim:
        width = int(2 * width / 3)
        if c.block_ffn_dim_multiplier is not None:
            width = int(c.block_ffn_dim_multiplier * width)
            width = c.block_multiple_of * -(-width // c.block_multiple_of)
    return width


def lfm2_table(cfg: ModelConfig) -> list[Entry]:
    """slm <- Lfm2ForCausalLM. Every layer: operator_norm -> <slot>_norm (before the mixer), ffn_norm ->
    mlp_norm, feed_forward w1 (gate), w3 (up) -> fc_in, w2 -> fc_out. Attention layers: q/k/v_proj -> qkv,
    out_proj -> proj, q/k_layernorm -> q/k_norm (hd,). Conv layers: in_proj (3d, d) rows [B; C; x], conv
    (d, 1, kernel) and out_proj keep their names. The final norm is transformers' `embedding_norm`."""
    t = [Entry("tok_emb.weight", ("model.embed_tokens.weight",))]      # (V, d)
    for i in range(cfg.n_layers):
        hf, slm = f"model.layers.{i}.", f"blocks.{i}."
        if cfg.layer_type(i) == "conv":
            t += [Entry(f"{slm}conv_norm.weight", (f"{hf}operator_norm.weight",))]
            t += [Entry(f"{slm}conv.{name}.weight", (f"{hf}conv.{name}.weight",)) for name in ("in_proj", "conv", "out_proj")]
        else:
            t += [Entry(f"{slm}attn_norm.weight", (f"{hf}operator_norm.weight",)),
                  Entry(f"{slm}attn.qkv.weight", tuple(f"{hf}self_attn.{p}_proj.weight" for p in "qkv")),
                  Entry(f"{slm}attn.proj.weight", (f"{hf}self_attn.out_proj.weight",))]
            t += [Entry(f"{slm}attn.{p}_norm.weight", (f"{hf}self_attn.{p}_layernorm.weight",)) for p in "qk"]
        t += [Entry(f"{slm}mlp_norm.weight", (f"{hf}ffn_norm.weight",)),
              Entry(f"{slm}mlp.fc_in.weight", (f"{hf}feed_forward.w1.weight", f"{hf}feed_forward.w3.weight")),
              Entry(f"{slm}mlp.fc_out.weight", (f"{hf}feed_forward.w2.weight",))]
    t += [Entry("norm.weight", ("model.embedding_norm.weight",)),
          Entry("lm_head.weight", ("model.embed_tokens.weight" if cfg.embedding.tie else "lm_head.weight",))]
    return t


def lfm2_to_hf(cfg: ModelConfig):
    """An untrained Lfm2ForCausalLM shaped like `cfg`; ValueError if LFM2 cannot express it. Every setting
    whose transformers default differs is passed explicitly: the RoPE base (default 1e6), the MLP width
    (block_auto_adjust_ff_dim=False, else intermediate_size is rescaled), pad_token_id (default 0, which
    would make embedding row 0 a padding row)."""
    from transformers import Lfm2Config, Lfm2ForCausalLM

    a, position = cfg.attention, cfg.position
    unsupported("to Lfm2ForCausalLM", common_problems(cfg, mixers=("conv", "attn"), qk_norm=True) + [
        problem for bad, problem in (
            (cfg.norm.kind != "rmsnorm", f"norm.kind={cfg.norm.kind!r} (needs 'rmsnorm')"),
            (cfg.mlp.kind != "swiglu", f"mlp.kind={cfg.mlp.kind!r} (needs 'swiglu')"),
            (cfg.block.bias, "block.bias=True (LFM2's attention and MLP have none)"),
            (position.kind != "rope", f"position.kind={position.kind!r} (needs 'rope')"),
            (position.rotary_fraction != 1.0, f"position.rotary_fraction={position.rotary_fraction} (partial "
                                              "rotary)"),
            (not default_scale(cfg), f"attention.scale={a.scale} (LFM2 uses 1/sqrt(head_dim))"),
            (a.n_heads * a.head_dim != cfg.d_model, f"attention.n_heads * head_dim = {a.n_heads * a.head_dim} != "
                                                    f"d_model={cfg.d_model} (LFM2 derives head_dim)"),
        ) if bad])
    hf_cfg = Lfm2Config(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.mlp.d_ff,
        block_auto_adjust_ff_dim=False, num_hidden_layers=cfg.n_layers, num_attention_heads=a.n_heads,
        num_key_value_heads=a.n_kv_heads, max_position_embeddings=cfg.context_length, norm_eps=cfg.norm.eps,
        initializer_range=cfg.parametrization.init_std,
        rope_parameters={"rope_type": "default", "rope_theta": position.rope_theta}, conv_bias=False,
        conv_L_cache=cfg.conv.kernel, tie_word_embeddings=cfg.embedding.tie,
        layer_types=["conv" if cfg.layer_type(i) == "conv" else "full_attention" for i in range(cfg.n_layers)],
        pad_token_id=cfg.embedding.padding_idx, bos_token_id=None, eos_token_id=None,
    )
    return Lfm2ForCausalLM(hf_cfg).float()
