"""The LLaMA-style decoders <-> slm: LlamaForCausalLM, Qwen3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM
(one weight table, `decoder_table`); slm -> transformers goes to LlamaForCausalLM."""

from __future__ import annotations

from slm.interop.hf_common import (ACTIVATIONS, Entry, attention_layout, common_problems, decoder_fields,
                                   decoder_kwargs, default_scale, model_config, rope_theta, unsupported)
from slm.model.config import ModelConfig


def llama_config(c) -> ModelConfig:
    """LlamaConfig -> ModelConfig: RoPE, pre-RMSNorm, SwiGLU, GQA. LlamaForCausalLM attends globally in every
    layer (it ignores any layer_types / sliding_window in its config), so the pattern is all G."""
    unsupported("LlamaForCausalLM", [problem for bad, problem in (
        (c.hidden_act != "silu", f"hidden_act={c.hidden_act!r} (SwiGLU needs 'silu')"),
        (c.mlp_bias != c.attention_bias, f"mlp_bias={c.mlp_bias} with attention_bias={c.attention_bias} "
                                         "(slm's `bias` switches every linear layer's bias together)"),
    ) if bad])
    return model_config(family="llama3", **decoder_fields(c), **{
        "norm.kind": "rmsnorm", "mlp.kind": "swiglu", "block.bias": bool(c.attention_bias),
        "position.rope_theta": rope_theta(c.rope_parameters, "rope_parameters")})


def qwen3_config(c) -> ModelConfig:
    """Qwen3Config -> ModelConfig: LLaMA plus per-head RMSNorm on q and k, and optional sliding-window
    layers (use_sliding_window / layer_types)."""
    unsupported("Qwen3ForCausalLM", [problem for bad, problem in (
        (c.hidden_act != "silu", f"hidden_act={c.hidden_act!r} (SwiGLU needs 'silu')"),
        (c.attention_bias, "attention_bias=True (Qwen3's MLP has none; slm's `bias` covers every linear layer)"),
    ) if bad])
    layer_types, window = attention_layout(c, c.max_position_embeddings)
    return model_config(family="qwen3", **decoder_fields(c), layer_types=layer_types, **{
        "norm.kind": "rmsnorm", "mlp.kind": "swiglu", "attention.qk_norm": True, "attention.sliding_window": window,
        "position.rope_theta": rope_theta(c.rope_parameters, "rope_parameters")})


def gemma_fields(c, name: str) -> dict:
    """ModelConfig fields (dotted) shared by Gemma2 and Gemma3: (1 + w) RMSNorm before and after each sublayer,
    GeGLU, embeddings scaled by sqrt(d), q.k scaled by query_pre_attn_scalar ** -0.5, local/global layers."""
    mlp, approximate = ACTIVATIONS.get(c.hidden_activation, (None, None))
    unsupported(name, [problem for bad, problem in (
        (mlp != "gelu", f"hidden_activation={c.hidden_activation!r}"),
        (c.attention_bias, "attention_bias=True (Gemma's MLP has none; slm's `bias` covers every linear layer)"),
        (c.use_bidirectional_attention, "use_bidirectional_attention=True (an encoder, not a causal LM)"),
    ) if bad])
    layer_types, window = attention_layout(c, c.max_position_embeddings)
    return {
        **decoder_fields(c), "norm.kind": "rmsnorm_gemma", "norm.placement": "sandwich", "mlp.kind": "geglu",
        "mlp.gelu_approximate": approximate, "embedding.scale": True,
        "attention.scale": c.query_pre_attn_scalar**-0.5, "layer_types": layer_types,
        "attention.sliding_window": window, "embedding.logit_softcap": c.final_logit_softcapping,
    }


def gemma2_config(c) -> ModelConfig:
    """Gemma2Config -> ModelConfig: Gemma fields, one RoPE base, attention-logit soft-capping."""
    return model_config(family="gemma2", **gemma_fields(c, "Gemma2ForCausalLM"), **{
        "position.rope_theta": rope_theta(c.rope_parameters, "rope_parameters"),
        "attention.logit_softcap": c.attn_logit_softcapping})


def gemma3_config(c) -> ModelConfig:
    """Gemma3TextConfig -> ModelConfig: Gemma fields, qk-norm, RoPE bases per layer type (rope_parameters
    is a dict keyed by 'full_attention' / 'sliding_attention').

    attn_logit_softcapping is not mapped: transformers' Gemma3Attention stores it but never passes it to
    the attention function, so the model transformers runs has no attention soft-capping (checked on
    transformers 5.23; Gemma 3 checkpoints set it to None anyway). final_logit_softcapping is applied.
    """
    fields = gemma_fields(c, "Gemma3ForCausalLM")
    params = c.rope_parameters or {}
    theta = {kind: rope_theta(params.get(kind), f"rope_parameters[{kind!r}]") for kind in set(c.layer_types)}
    local = theta.get("sliding_attention")
    return model_config(family="gemma3", **fields, **{
        "attention.qk_norm": True, "position.rope_theta": theta.get("full_attention", local),
        "position.rope_theta_local": local})


def decoder_table(cfg: ModelConfig) -> list[Entry]:
    """slm <- LlamaForCausalLM / Qwen3ForCausalLM / Gemma{2,3}ForCausalLM (same names under `model.`).

    qkv = [q_proj; k_proj; v_proj]: (H hd + 2 KV hd, d);  fc_in = [gate_proj; up_proj]: (2 d_ff, d).
    Pre-norm (Llama, Qwen3): input_layernorm -> attn_norm, post_attention_layernorm -> mlp_norm (it sits
    before the MLP). Sandwich (Gemma): input -> attn_norm, post_attention -> attn_out_norm,
    pre_feedforward -> mlp_norm, post_feedforward -> mlp_out_norm.
    """
    sandwich = cfg.norm.placement == "sandwich"
    norms = ({"attn_norm": "input_layernorm", "attn_out_norm": "post_attention_layernorm",
              "mlp_norm": "pre_feedforward_layernorm", "mlp_out_norm": "post_feedforward_layernorm"}
             if sandwich else {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm"})
    t = [Entry("tok_emb.weight", ("model.embed_tokens.weight",))]      # (V, d)
    for i in range(cfg.n_layers):
        hf, slm = f"model.layers.{i}.", f"blocks.{i}."
        t += [Entry(f"{slm}{ours}.weight", (f"{hf}{theirs}.weight",)) for ours, theirs in norms.items()]
        kinds = ("weight", "bias") if cfg.block.bias else ("weight",)
        t += [Entry(f"{slm}attn.qkv.{k}", tuple(f"{hf}self_attn.{p}_proj.{k}" for p in "qkv")) for k in kinds]
        t += [Entry(f"{slm}attn.proj.{k}", (f"{hf}self_attn.o_proj.{k}",)) for k in kinds]   # (d, H hd)
        if cfg.attention.qk_norm:
            t += [Entry(f"{slm}attn.{p}_norm.weight", (f"{hf}self_attn.{p}_norm.weight",)) for p in "qk"]  # (hd,)
        t += [Entry(f"{slm}mlp.fc_in.{k}", (f"{hf}mlp.gate_proj.{k}", f"{hf}mlp.up_proj.{k}")) for k in kinds]
        t += [Entry(f"{slm}mlp.fc_out.{k}", (f"{hf}mlp.down_proj.{k}",)) for k in kinds]     # (d, d_ff)
    t += [Entry("norm.weight", ("model.norm.weight",)),
          Entry("lm_head.weight", ("model.embed_tokens.weight" if cfg.embedding.tie else "lm_head.weight",))]
    return t


def llama_to_hf(cfg: ModelConfig):
    """An untrained LlamaForCausalLM shaped like `cfg`; ValueError if LLaMA cannot express it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    a = cfg.attention
    unsupported("to LlamaForCausalLM", common_problems(cfg) + [problem for bad, problem in (
        (cfg.norm.kind != "rmsnorm", f"norm.kind={cfg.norm.kind!r} (needs 'rmsnorm')"),
        (cfg.mlp.kind != "swiglu", f"mlp.kind={cfg.mlp.kind!r} (needs 'swiglu')"),
        (cfg.position.rotary_fraction != 1.0, f"position.rotary_fraction={cfg.position.rotary_fraction} (partial "
                                              "rotary)"),
        (not default_scale(cfg), f"attention.scale={a.scale} (LLaMA uses 1/sqrt(head_dim))"),
        (cfg.d_model % a.n_heads != 0, f"d_model={cfg.d_model} not a multiple of attention.n_heads={a.n_heads}"),
    ) if bad])
    bias = cfg.block.bias
    hf_cfg = LlamaConfig(**decoder_kwargs(cfg), intermediate_size=cfg.mlp.d_ff, attention_bias=bias, mlp_bias=bias)
    return LlamaForCausalLM(hf_cfg).float()
