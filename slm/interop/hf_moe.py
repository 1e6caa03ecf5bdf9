"""Mixtures of experts <-> slm: Qwen3MoeForCausalLM (qk-norm; dense layers via mlp_only_layers /
decoder_sparse_step; norm_topk_prob either way) and MixtralForCausalLM (no qk-norm, every layer routed,
top-k probabilities always renormalised). Both store the experts stacked, as slm does: mlp.gate.weight
(E, d) -> router, mlp.experts.gate_up_proj (E, 2f, d) -> w_in, mlp.experts.down_proj (E, d, f) -> w_out.

Both compute the balancing loss pooled over all layers' tokens (load_balancing_loss_func), so from_hf sets
moe.aux_scope=pooled; to_hf converts a model trained with the per-layer loss or a z-loss too (the logits do
not depend on them), and transformers then trains it with its own pooled loss and no z-loss.
"""

from __future__ import annotations

from slm.interop.hf_common import (Entry, common_problems, decoder_fields, decoder_kwargs, default_scale, model_config,
                                   repeating_unit, rope_theta, unsupported)
from slm.interop.hf_decoders import decoder_table
from slm.model.config import ModelConfig


def _window(c) -> dict:
    """Sliding window on every layer (both apply one window to all layers when it is set)."""
    if getattr(c, "sliding_window", None) is None:
        return {}
    return {"layer_types": ["local_attn"], "attention.sliding_window": min(c.sliding_window, c.max_position_embeddings)}


def qwen3_moe_config(c) -> ModelConfig:
    """Qwen3MoeConfig -> ModelConfig: Qwen3's block with per-layer dense or routed feed-forwards."""
    unsupported("Qwen3MoeForCausalLM", [problem for bad, problem in (
        (c.hidden_act != "silu", f"hidden_act={c.hidden_act!r} (SwiGLU experts need 'silu')"),
        (c.attention_bias, "attention_bias=True (the experts have no biases; slm's `bias` covers every layer)"),
    ) if bad])
    routed = [c.num_experts > 0 and i not in c.mlp_only_layers and (i + 1) % c.decoder_sparse_step == 0
              for i in range(c.num_hidden_layers)]
    mlp_types = repeating_unit(["moe" if r else "dense" for r in routed])
    moe = dict(n_experts=c.num_experts, top_k=c.num_experts_per_tok, expert_d_ff=c.moe_intermediate_size,
               norm_topk_prob=bool(c.norm_topk_prob), aux_coef=c.router_aux_loss_coef, aux_scope="pooled")
    return model_config(family="qwen3_moe", **decoder_fields(c), mlp_types=mlp_types, moe=moe if any(routed) else None,
                        **{"norm.kind": "rmsnorm", "mlp.kind": "swiglu", "attention.qk_norm": True,
                           "position.rope_theta": rope_theta(c.rope_parameters, "rope_parameters"), **_window(c)})


def mixtral_config(c) -> ModelConfig:
    """MixtralConfig -> ModelConfig: LLaMA's block with every feed-forward routed."""
    unsupported("MixtralForCausalLM", [problem for bad, problem in (
        (c.hidden_act != "silu", f"hidden_act={c.hidden_act!r} (SwiGLU experts need 'silu')"),
        (c.router_jitter_noise, f"router_jitter_noise={c.router_jitter_noise} (multiplicative noise on the "
                                "router input while training)"),
    ) if bad])
    return model_config(family="mixtral", **decoder_fields(c), mlp_types=["moe"],
                        moe=dict(n_experts=c.num_local_experts, top_k=c.num_experts_per_tok,
                                 expert_d_ff=c.intermediate_size, norm_topk_prob=True,
                                 aux_coef=c.router_aux_loss_coef, aux_scope="pooled"),
                        **{"norm.kind": "rmsnorm", "mlp.kind": "swiglu",
                           "position.rope_theta": rope_theta(c.rope_parameters, "rope_parameters"), **_window(c)})


def moe_table(cfg: ModelConfig) -> list[Entry]:
    """decoder_table, with the feed-forward of each routed layer replaced by its router and stacked experts."""
    routed = {i for i in range(cfg.n_layers) if cfg.mlp_type(i) == "moe"}
    table = [e for e in decoder_table(cfg) if not any(e.slm.startswith(f"blocks.{i}.mlp.") for i in routed)]
    for i in sorted(routed):
        hf, slm = f"model.layers.{i}.mlp.", f"blocks.{i}.mlp."
        table += [Entry(f"{slm}router.weight", (f"{hf}gate.weight",)),              # (E, d)
                  Entry(f"{slm}w_in", (f"{hf}experts.gate_up_proj",)),             # (E, 2f, d): [gate; up]
                  Entry(f"{slm}w_out", (f"{hf}experts.down_proj",))]               # (E, d, f)
    return table


def moe_to_hf(cfg: ModelConfig):
    """An untrained Qwen3MoeForCausalLM (qk_norm) or MixtralForCausalLM (no qk-norm) shaped like `cfg`;
    ValueError listing what the target cannot express."""
    from transformers import MixtralConfig, MixtralForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    qwen = cfg.attention.qk_norm
    target = "Qwen3MoeForCausalLM" if qwen else "MixtralForCausalLM"
    local = set(cfg.layer_types) == {"local_attn"}
    problems = common_problems(cfg, mixers=("attn", "local_attn"), qk_norm=qwen, mlps=("dense", "moe"))
    unsupported(f"to {target}", problems + [problem for bad, problem in (
        (cfg.norm.kind != "rmsnorm", f"norm.kind={cfg.norm.kind!r} (needs 'rmsnorm')"),
        (cfg.mlp.kind != "swiglu", f"mlp.kind={cfg.mlp.kind!r} (needs 'swiglu' experts)"),
        (cfg.position.kind != "rope" or cfg.position.rotary_fraction != 1.0,
         "needs full RoPE (position.kind='rope', rotary_fraction=1)"),
        (not default_scale(cfg), f"attention.scale={cfg.attention.scale} (needs 1/sqrt(head_dim))"),
        (cfg.moe.shared_expert_d_ff > 0, f"moe.shared_expert_d_ff={cfg.moe.shared_expert_d_ff} (no shared expert)"),
        (len(set(cfg.layer_types)) > 1, f"layer_types={cfg.layer_types} (one sliding window for all layers or none)"),
        (not qwen and set(cfg.mlp_types) != {"moe"}, f"mlp_types={cfg.mlp_types} (Mixtral routes every layer)"),
        (not qwen and not cfg.moe.norm_topk_prob, "moe.norm_topk_prob=False (Mixtral always renormalises; "
                                              "attention.qk_norm=True converts to Qwen3-MoE instead)"),
    ) if bad])
    common = dict(**decoder_kwargs(cfg), num_experts_per_tok=cfg.moe.top_k, router_aux_loss_coef=cfg.moe.aux_coef)
    if qwen:
        hf_cfg = Qwen3MoeConfig(
            **common, intermediate_size=cfg.mlp.d_ff, moe_intermediate_size=cfg.moe.expert_d_ff,
            num_experts=cfg.moe.n_experts,
            norm_topk_prob=cfg.moe.norm_topk_prob, decoder_sparse_step=1,
            mlp_only_layers=[i for i in range(cfg.n_layers) if cfg.mlp_type(i) == "dense"],
            use_sliding_window=local, sliding_window=cfg.attention.sliding_window if local else None)
        return Qwen3MoeForCausalLM(hf_cfg).float()
    hf_cfg = MixtralConfig(**common, intermediate_size=cfg.moe.expert_d_ff, num_local_experts=cfg.moe.n_experts,
                           sliding_window=cfg.attention.sliding_window if local else None)
    return MixtralForCausalLM(hf_cfg).float()
