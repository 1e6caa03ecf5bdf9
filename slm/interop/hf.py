"""Convert between transformers causal LMs and slm `Transformer`s, weights included.

    from_hf(hf_model) -> Transformer       GPT2LMHeadModel, LlamaForCausalLM, Qwen3ForCausalLM,
                                           Gemma2ForCausalLM, Gemma3ForCausalLM (text only), Lfm2ForCausalLM
    to_hf(model) -> PreTrainedModel         GPT-2 style -> GPT2LMHeadModel, LLaMA style -> LlamaForCausalLM,
                                           conv mixers (LFM2) -> Lfm2ForCausalLM

Each family has a config mapping and a weight table. A weight table lists, for every slm parameter, the
transformers tensors it is made of: one tensor, or several stacked along rows because slm fuses them
(attention `qkv` = [q; k; v], gated MLP `fc_in` = [gate; up]), optionally transposed (GPT-2's Conv1D
stores (in, out), the transpose of nn.Linear). The same table drives both directions, and every tensor
on the transformers side must be used exactly once, so a feature we do not know cannot be dropped
silently. Whatever one side cannot represent raises ValueError naming it; nothing is approximated.

transformers is imported only inside the functions, so `import slm` never needs it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from slm.model.config import ModelConfig
from slm.model.transformer import Transformer

# Gelu forms in transformers' ACT2FN that slm computes exactly: name -> (slm mlp kind, gelu_approximate).
_ACTIVATIONS = {
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


def _unsupported(what: str, problems: list[str]) -> None:
    """Raise one ValueError listing every reason `what` cannot be converted (no-op if none)."""
    if problems:
        raise ValueError(f"cannot convert {what}: " + "; ".join(problems))


# =================================================================================== transformers -> slm
def from_hf(hf_model) -> Transformer:
    """An slm `Transformer` computing the same logits as `hf_model`, with its weights copied (float32).

    Supported: GPT2LMHeadModel, LlamaForCausalLM, Qwen3ForCausalLM, Gemma2ForCausalLM,
    Gemma3ForCausalLM (text-only Gemma3TextConfig) and Lfm2ForCausalLM. Raises ValueError for any other class, and for a
    config of a supported class that slm cannot reproduce exactly (naming the setting).
    """
    from transformers import (Gemma2ForCausalLM, Gemma3ForCausalLM, GPT2LMHeadModel, Lfm2ForCausalLM,
                              LlamaForCausalLM, Qwen3ForCausalLM)

    families = (
        (GPT2LMHeadModel, _gpt2_config, _gpt2_table),
        (Lfm2ForCausalLM, _lfm2_config, _lfm2_table),
        (LlamaForCausalLM, _llama_config, _decoder_table),
        (Qwen3ForCausalLM, _qwen3_config, _decoder_table),
        (Gemma3ForCausalLM, _gemma3_config, _decoder_table),
        (Gemma2ForCausalLM, _gemma2_config, _decoder_table),
    )
    for cls, config_fn, table_fn in families:
        if isinstance(hf_model, cls):
            break
    else:
        names = ", ".join(cls.__name__ for cls, _, _ in families)
        raise ValueError(f"cannot convert {type(hf_model).__name__}: supported transformers models are {names}")

    cfg = config_fn(hf_model.config)
    hf_weights = hf_model.state_dict()
    unused = set(hf_weights) - ({"lm_head.weight"} if cfg.tie_embeddings else set())  # tied: the embedding
    state = {}
    for entry in table_fn(cfg):
        missing = [name for name in entry.hf if name not in hf_weights]
        if missing:
            raise ValueError(f"cannot convert {type(hf_model).__name__}: no weight {', '.join(missing)}")
        unused -= set(entry.hf)
        state[entry.slm] = torch.cat([hf_weights[n].T if entry.transposed else hf_weights[n] for n in entry.hf])
    if unused:
        raise ValueError(f"cannot convert {type(hf_model).__name__}: weights slm has no place for: "
                         + ", ".join(sorted(unused)))

    model = Transformer(cfg)
    model.load_state_dict(state, strict=True)  # copies into float32; keeps the tie if any
    return model


def _rope_theta(rope_parameters: dict | None, what: str) -> float:
    """The base of a plain RoPE parameter dict; ValueError for scaled or partial RoPE."""
    params = rope_parameters or {}
    problems = []
    if params.get("rope_type", "default") != "default":
        problems.append(f"{what} rope_type={params['rope_type']!r} (RoPE scaling; only 'default' is supported)")
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        problems.append(f"{what} partial_rotary_factor={params['partial_rotary_factor']} (partial rotary)")
    if "rope_theta" not in params:
        problems.append(f"{what} has no rope_theta")
    _unsupported("RoPE parameters", problems)
    return float(params["rope_theta"])


def _attention_layout(c, context_length: int) -> tuple[list[str], int | None]:
    """(layer_types, sliding_window) from transformers' `layer_types`: sliding_attention -> local_attn,
    full_attention -> attn, shortened to the shortest unit that repeats over the layers. The window is capped
    at the context length, which changes nothing (a query never has more keys than that)."""
    kinds = {"sliding_attention": "local_attn", "full_attention": "attn"}
    layer_types = getattr(c, "layer_types", None) or ["full_attention"] * c.num_hidden_layers
    unknown = sorted(set(layer_types) - set(kinds))
    _unsupported("layer_types", [f"{kind!r} layers" for kind in unknown])
    ours = _repeating_unit([kinds[kind] for kind in layer_types])
    if "local_attn" not in ours:
        return ours, None
    if c.sliding_window is None:
        raise ValueError("cannot convert layer_types: sliding_attention layers but sliding_window is None")
    return ours, min(c.sliding_window, context_length)


def _repeating_unit(items: list[str]) -> list[str]:
    """The shortest prefix of `items` that, repeated, gives `items` (the form presets use)."""
    n = len(items)
    period = next(p for p in range(1, n + 1) if all(items[i] == items[i % p] for i in range(n)))
    return items[:period]


def _decoder_fields(c) -> dict:
    """ModelConfig fields shared by the LLaMA-style decoders (Llama, Qwen3, Gemma2/3)."""
    return dict(
        n_layers=c.num_hidden_layers, d_model=c.hidden_size, n_heads=c.num_attention_heads,
        n_kv_heads=c.num_key_value_heads, head_dim=c.head_dim, d_ff=c.intermediate_size,
        vocab_size=c.vocab_size, context_length=c.max_position_embeddings,
        tie_embeddings=bool(c.tie_word_embeddings), norm_eps=c.rms_norm_eps, position="rope",
        init_std=c.initializer_range, embedding_padding_idx=c.pad_token_id,
    )


def _gpt2_config(c) -> ModelConfig:
    """GPT2Config -> ModelConfig: learned positions, pre-LayerNorm, two-matrix GELU MLP, biases everywhere."""
    mlp, approximate = _ACTIVATIONS.get(c.activation_function, (None, None))
    _unsupported("GPT2LMHeadModel", [problem for bad, problem in (
        (mlp not in ("gelu", "relu"), f"activation_function={c.activation_function!r}"),
        (c.scale_attn_by_inverse_layer_idx, "scale_attn_by_inverse_layer_idx=True (a per-layer attention scale)"),
        (c.add_cross_attention, "add_cross_attention=True"),
    ) if bad])
    return ModelConfig(
        family="gpt2", n_layers=c.n_layer, d_model=c.n_embd, n_heads=c.n_head, d_ff=c.n_inner or 4 * c.n_embd,
        vocab_size=c.vocab_size, context_length=c.n_positions, tie_embeddings=bool(c.tie_word_embeddings),
        norm="layernorm", norm_eps=c.layer_norm_epsilon, norm_placement="pre", position="learned",
        mlp=mlp, gelu_approximate=approximate, attn_scale=None if c.scale_attn_weights else 1.0,
        bias=True, init_std=c.initializer_range,
    )


def _llama_config(c) -> ModelConfig:
    """LlamaConfig -> ModelConfig: RoPE, pre-RMSNorm, SwiGLU, GQA. LlamaForCausalLM attends globally in every
    layer (it ignores any layer_types / sliding_window in its config), so the pattern is all G."""
    _unsupported("LlamaForCausalLM", [problem for bad, problem in (
        (c.hidden_act != "silu", f"hidden_act={c.hidden_act!r} (SwiGLU needs 'silu')"),
        (c.mlp_bias != c.attention_bias, f"mlp_bias={c.mlp_bias} with attention_bias={c.attention_bias} "
                                         "(slm's `bias` switches every linear layer's bias together)"),
    ) if bad])
    return ModelConfig(family="llama3", **_decoder_fields(c), norm="rmsnorm", mlp="swiglu",
                       rope_theta=_rope_theta(c.rope_parameters, "rope_parameters"), bias=bool(c.attention_bias))


def _qwen3_config(c) -> ModelConfig:
    """Qwen3Config -> ModelConfig: LLaMA plus per-head RMSNorm on q and k, and optional sliding-window
    layers (use_sliding_window / layer_types)."""
    _unsupported("Qwen3ForCausalLM", [problem for bad, problem in (
        (c.hidden_act != "silu", f"hidden_act={c.hidden_act!r} (SwiGLU needs 'silu')"),
        (c.attention_bias, "attention_bias=True (Qwen3's MLP has none; slm's `bias` covers every linear layer)"),
    ) if bad])
    layer_types, window = _attention_layout(c, c.max_position_embeddings)
    return ModelConfig(family="qwen3", **_decoder_fields(c), norm="rmsnorm", mlp="swiglu", qk_norm=True,
                       rope_theta=_rope_theta(c.rope_parameters, "rope_parameters"),
                       layer_types=layer_types, sliding_window=window)


def _gemma_fields(c, name: str) -> dict:
    """ModelConfig fields shared by Gemma2 and Gemma3: (1 + w) RMSNorm before and after each sublayer,
    GeGLU, embeddings scaled by sqrt(d), q.k scaled by query_pre_attn_scalar ** -0.5, local/global layers."""
    mlp, approximate = _ACTIVATIONS.get(c.hidden_activation, (None, None))
    _unsupported(name, [problem for bad, problem in (
        (mlp != "gelu", f"hidden_activation={c.hidden_activation!r}"),
        (c.attention_bias, "attention_bias=True (Gemma's MLP has none; slm's `bias` covers every linear layer)"),
        (c.use_bidirectional_attention, "use_bidirectional_attention=True (an encoder, not a causal LM)"),
    ) if bad])
    layer_types, window = _attention_layout(c, c.max_position_embeddings)
    return dict(
        **_decoder_fields(c), norm="rmsnorm_gemma", norm_placement="sandwich", mlp="geglu",
        gelu_approximate=approximate, scale_embeddings=True, attn_scale=c.query_pre_attn_scalar**-0.5,
        layer_types=layer_types, sliding_window=window, final_logit_softcap=c.final_logit_softcapping,
    )


def _gemma2_config(c) -> ModelConfig:
    """Gemma2Config -> ModelConfig: Gemma fields, one RoPE base, attention-logit soft-capping."""
    return ModelConfig(family="gemma2", **_gemma_fields(c, "Gemma2ForCausalLM"),
                       rope_theta=_rope_theta(c.rope_parameters, "rope_parameters"),
                       attn_logit_softcap=c.attn_logit_softcapping)


def _gemma3_config(c) -> ModelConfig:
    """Gemma3TextConfig -> ModelConfig: Gemma fields, qk-norm, RoPE bases per layer type (rope_parameters
    is a dict keyed by 'full_attention' / 'sliding_attention').

    attn_logit_softcapping is not mapped: transformers' Gemma3Attention stores it but never passes it to
    the attention function, so the model transformers runs has no attention soft-capping (checked on
    transformers 5.23; Gemma 3 checkpoints set it to None anyway). final_logit_softcapping is applied.
    """
    fields = _gemma_fields(c, "Gemma3ForCausalLM")
    params = c.rope_parameters or {}
    theta = {kind: _rope_theta(params.get(kind), f"rope_parameters[{kind!r}]") for kind in set(c.layer_types)}
    local = theta.get("sliding_attention")
    return ModelConfig(family="gemma3", **fields, qk_norm=True,
                       rope_theta=theta.get("full_attention", local), rope_theta_local=local)


def _lfm2_config(c) -> ModelConfig:
    """Lfm2Config -> ModelConfig: per-layer conv / full_attention mixers, pre-RMSNorm, SwiGLU, qk-norm (per
    head, before RoPE) in the attention layers, RoPE from rope_parameters (its default base is 1e6, read
    from the config, never assumed), pad_token_id -> embedding_padding_idx (transformers zeroes that
    embedding row at init and the lookup never updates it).

    The MLP width is what transformers built: with block_auto_adjust_ff_dim (the default) intermediate_size
    is rescaled (2/3, block_ffn_dim_multiplier, rounded up to block_multiple_of), so the converter reads the
    width of the built w1 (the config passed in is the model's own)."""
    kinds = {"conv": "conv", "full_attention": "attn"}
    unknown = sorted(set(c.layer_types) - set(kinds))
    _unsupported("Lfm2ForCausalLM", [f"{kind!r} layers" for kind in unknown] + (
        ["conv_bias=True (biases in the conv layers only; slm's `bias` switches every linear layer)"]
        if c.conv_bias else []))
    head_dim = c.hidden_size // c.num_attention_heads
    return ModelConfig(
        family="lfm2", n_layers=c.num_hidden_layers, d_model=c.hidden_size, n_heads=c.num_attention_heads,
        n_kv_heads=c.num_key_value_heads, head_dim=head_dim, d_ff=_lfm2_ff_dim(c), vocab_size=c.vocab_size,
        context_length=c.max_position_embeddings, tie_embeddings=bool(c.tie_word_embeddings), norm="rmsnorm",
        norm_eps=c.norm_eps, position="rope", rope_theta=_rope_theta(c.rope_parameters, "rope_parameters"),
        mlp="swiglu", qk_norm=True, layer_types=_repeating_unit([kinds[k] for k in c.layer_types]),
        conv_kernel=c.conv_L_cache, init_std=c.initializer_range, embedding_padding_idx=c.pad_token_id,
    )


def _lfm2_ff_dim(c) -> int:
    """The MLP width Lfm2MLP builds from Lfm2Config (block_auto_adjust_ff_dim rescales intermediate_size)."""
    width = c.intermediate_size
    if c.block_auto_adjust_ff_dim:
        width = int(2 * width / 3)
        if c.block_ffn_dim_multiplier is not None:
            width = int(c.block_ffn_dim_multiplier * width)
            width = c.block_multiple_of * -(-width // c.block_multiple_of)
    return width


# ------------------------------------------------------------------------------------ weight tables
def _gpt2_table(cfg: ModelConfig) -> list[Entry]:
    """slm <- GPT2LMHeadModel. Conv1D weights are (in, out): transposed into nn.Linear's (out, in).
    c_attn (d, 3d) already holds [q | k | v] along its output axis, so qkv = c_attn.T, (3d, d).
    Bias entries only when cfg.bias (to_hf zero-fills GPT-2's biases for a bias-free model)."""
    kinds = ("weight", "bias") if cfg.bias else ("weight",)
    t = [Entry("tok_emb.weight", ("transformer.wte.weight",)),           # (V, d)
         Entry("position.weight", ("transformer.wpe.weight",))]          # (context, d)
    for i in range(cfg.n_layers):
        hf, slm = f"transformer.h.{i}.", f"blocks.{i}."
        for k in kinds:
            t += [Entry(f"{slm}attn_norm.{k}", (f"{hf}ln_1.{k}",)),                      # (d,)
                  Entry(f"{slm}mlp_norm.{k}", (f"{hf}ln_2.{k}",))]
        # weights: Conv1D (in, out).T -> Linear (out, in); biases (out,) as they are
        t += [Entry(f"{slm}attn.qkv.{k}", (f"{hf}attn.c_attn.{k}",), k == "weight") for k in kinds]   # (3d, d)
        t += [Entry(f"{slm}attn.proj.{k}", (f"{hf}attn.c_proj.{k}",), k == "weight") for k in kinds]  # (d, d)
        t += [Entry(f"{slm}mlp.fc_in.{k}", (f"{hf}mlp.c_fc.{k}",), k == "weight") for k in kinds]     # (d_ff, d)
        t += [Entry(f"{slm}mlp.fc_out.{k}", (f"{hf}mlp.c_proj.{k}",), k == "weight") for k in kinds]  # (d, d_ff)
    t += [Entry(f"norm.{k}", (f"transformer.ln_f.{k}",)) for k in kinds]
    t += [Entry("lm_head.weight", ("transformer.wte.weight" if cfg.tie_embeddings else "lm_head.weight",))]
    return t


def _decoder_table(cfg: ModelConfig) -> list[Entry]:
    """slm <- LlamaForCausalLM / Qwen3ForCausalLM / Gemma{2,3}ForCausalLM (same names under `model.`).

    qkv = [q_proj; k_proj; v_proj]: (H hd + 2 KV hd, d);  fc_in = [gate_proj; up_proj]: (2 d_ff, d).
    Pre-norm (Llama, Qwen3): input_layernorm -> attn_norm, post_attention_layernorm -> mlp_norm (it sits
    before the MLP). Sandwich (Gemma): input -> attn_norm, post_attention -> attn_out_norm,
    pre_feedforward -> mlp_norm, post_feedforward -> mlp_out_norm.
    """
    sandwich = cfg.norm_placement == "sandwich"
    norms = ({"attn_norm": "input_layernorm", "attn_out_norm": "post_attention_layernorm",
              "mlp_norm": "pre_feedforward_layernorm", "mlp_out_norm": "post_feedforward_layernorm"}
             if sandwich else {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm"})
    t = [Entry("tok_emb.weight", ("model.embed_tokens.weight",))]      # (V, d)
    for i in range(cfg.n_layers):
        hf, slm = f"model.layers.{i}.", f"blocks.{i}."
        t += [Entry(f"{slm}{ours}.weight", (f"{hf}{theirs}.weight",)) for ours, theirs in norms.items()]
        kinds = ("weight", "bias") if cfg.bias else ("weight",)
        t += [Entry(f"{slm}attn.qkv.{k}", tuple(f"{hf}self_attn.{p}_proj.{k}" for p in "qkv")) for k in kinds]
        t += [Entry(f"{slm}attn.proj.{k}", (f"{hf}self_attn.o_proj.{k}",)) for k in kinds]   # (d, H hd)
        if cfg.qk_norm:
            t += [Entry(f"{slm}attn.{p}_norm.weight", (f"{hf}self_attn.{p}_norm.weight",)) for p in "qk"]  # (hd,)
        t += [Entry(f"{slm}mlp.fc_in.{k}", (f"{hf}mlp.gate_proj.{k}", f"{hf}mlp.up_proj.{k}")) for k in kinds]
        t += [Entry(f"{slm}mlp.fc_out.{k}", (f"{hf}mlp.down_proj.{k}",)) for k in kinds]     # (d, d_ff)
    t += [Entry("norm.weight", ("model.norm.weight",)),
          Entry("lm_head.weight", ("model.embed_tokens.weight" if cfg.tie_embeddings else "lm_head.weight",))]
    return t


def _lfm2_table(cfg: ModelConfig) -> list[Entry]:
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
          Entry("lm_head.weight", ("model.embed_tokens.weight" if cfg.tie_embeddings else "lm_head.weight",))]
    return t


# =================================================================================== slm -> transformers
def to_hf(model: Transformer):
    """A transformers model (float32, eval mode) computing the same logits as `model`, weights copied.

    Conv mixers (LFM2) -> Lfm2ForCausalLM; otherwise learned positions + LayerNorm + GELU/ReLU ->
    GPT2LMHeadModel, RoPE + RMSNorm + SwiGLU -> LlamaForCausalLM. Raises ValueError listing everything the
    target cannot represent (Canon layers, layer_repeat > 1, qk_norm, sliding windows, soft-capping, ...).
    """
    cfg = model.cfg
    if "conv" in cfg.layer_types:
        hf_model, table = _lfm2_to_hf(cfg), _lfm2_table(cfg)
    elif cfg.position == "learned":
        hf_model, table = _gpt2_to_hf(cfg), _gpt2_table(cfg)
    elif cfg.position == "rope":
        hf_model, table = _llama_to_hf(cfg), _decoder_table(cfg)
    else:
        raise ValueError(f"cannot convert to transformers: position={cfg.position!r} "
                         "(GPT-2 needs 'learned', LLaMA needs 'rope')")

    ours = model.state_dict()
    target = hf_model.state_dict()
    state = {}
    for entry in table:
        sizes = [target[name].shape[1 if entry.transposed else 0] for name in entry.hf]
        for name, part in zip(entry.hf, ours[entry.slm].split(sizes, dim=0)):  # undo the row stacking
            state[name] = part.T if entry.transposed else part
    if cfg.tie_embeddings:
        state["lm_head.weight"] = state[table[0].hf[0]]  # transformers lists the tied head too
    if not cfg.bias and cfg.position == "learned":
        # GPT-2 always has biases: zeros compute exactly what a bias-free slm model does
        state.update({name: torch.zeros_like(t) for name, t in target.items() if name.endswith(".bias")})
    hf_model.load_state_dict(state, strict=True)
    return hf_model.eval()


def _common_problems(cfg: ModelConfig, mixers: tuple[str, ...] = ("attn",), qk_norm: bool = False) -> list[str]:
    """Settings the transformers targets cannot express (the mixers and qk-norm setting each one has)."""
    return [problem for bad, problem in (
        (cfg.canon_set != "", f"Canon layers (canon_set={cfg.canon_set!r})"),
        (cfg.layer_repeat > 1, f"layer_repeat={cfg.layer_repeat} (block sharing)"),
        (cfg.norm_placement != "pre", f"norm_placement={cfg.norm_placement!r} (needs 'pre')"),
        (cfg.qk_norm != qk_norm and "attn" in cfg.layer_types, f"qk_norm={cfg.qk_norm} (needs {qk_norm})"),
        (not cfg.causal, "causal=False"),
        (not set(cfg.layer_types) <= set(mixers), f"layer_types={cfg.layer_types} (needs {', '.join(mixers)} only)"),
        (set(cfg.mlp_types) != {"dense"}, f"mlp_types={cfg.mlp_types} (needs dense MLPs only)"),
        (cfg.attn_logit_softcap is not None, f"attn_logit_softcap={cfg.attn_logit_softcap}"),
        (cfg.final_logit_softcap is not None, f"final_logit_softcap={cfg.final_logit_softcap}"),
        (cfg.scale_embeddings, "scale_embeddings=True"),
    ) if bad]


def _gpt2_to_hf(cfg: ModelConfig):
    """An untrained GPT2LMHeadModel shaped like `cfg`; ValueError if GPT-2 cannot express it."""
    from transformers import GPT2Config, GPT2LMHeadModel

    default_scale = cfg.attn_scale is None or math.isclose(cfg.attn_scale, cfg.head_dim**-0.5, rel_tol=1e-6)
    _unsupported("to GPT2LMHeadModel", _common_problems(cfg) + [problem for bad, problem in (
        (cfg.norm != "layernorm", f"norm={cfg.norm!r} (needs 'layernorm')"),
        (cfg.mlp not in ("gelu", "relu"), f"mlp={cfg.mlp!r} (needs 'gelu' or 'relu')"),
        (cfg.n_kv_heads != cfg.n_heads, f"n_kv_heads={cfg.n_kv_heads} != n_heads={cfg.n_heads} (GQA)"),
        (cfg.n_heads * cfg.head_dim != cfg.d_model,
         f"n_heads * head_dim = {cfg.n_heads * cfg.head_dim} != d_model={cfg.d_model}"),
        (not default_scale and cfg.attn_scale != 1.0, f"attn_scale={cfg.attn_scale} (needs 1/sqrt(head_dim) or 1)"),
        (cfg.embedding_padding_idx is not None, f"embedding_padding_idx={cfg.embedding_padding_idx} (GPT-2's "
                                                "embedding has no padding row)"),
    ) if bad])
    activation = "relu" if cfg.mlp == "relu" else {"tanh": "gelu_new", "none": "gelu"}[cfg.gelu_approximate]
    hf_cfg = GPT2Config(
        vocab_size=cfg.vocab_size, n_positions=cfg.context_length, n_embd=cfg.d_model, n_layer=cfg.n_layers,
        n_head=cfg.n_heads, n_inner=cfg.d_ff, activation_function=activation, layer_norm_epsilon=cfg.norm_eps,
        resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout, attn_pdrop=cfg.dropout, scale_attn_weights=default_scale,
        initializer_range=cfg.init_std, tie_word_embeddings=cfg.tie_embeddings, bos_token_id=None,
        eos_token_id=None,
    )
    return GPT2LMHeadModel(hf_cfg).float()


def _llama_to_hf(cfg: ModelConfig):
    """An untrained LlamaForCausalLM shaped like `cfg`; ValueError if LLaMA cannot express it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    _unsupported("to LlamaForCausalLM", _common_problems(cfg) + [problem for bad, problem in (
        (cfg.norm != "rmsnorm", f"norm={cfg.norm!r} (needs 'rmsnorm')"),
        (cfg.mlp != "swiglu", f"mlp={cfg.mlp!r} (needs 'swiglu')"),
        (cfg.rotary_fraction != 1.0, f"rotary_fraction={cfg.rotary_fraction} (partial rotary)"),
        (cfg.attn_scale is not None and not math.isclose(cfg.attn_scale, cfg.head_dim**-0.5, rel_tol=1e-6),
         f"attn_scale={cfg.attn_scale} (LLaMA uses 1/sqrt(head_dim))"),
        (cfg.d_model % cfg.n_heads != 0, f"d_model={cfg.d_model} not a multiple of n_heads={cfg.n_heads}"),
    ) if bad])
    hf_cfg = LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads,
        head_dim=cfg.head_dim, max_position_embeddings=cfg.context_length, rms_norm_eps=cfg.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta}, attention_bias=cfg.bias,
        mlp_bias=cfg.bias, attention_dropout=cfg.dropout, initializer_range=cfg.init_std,
        tie_word_embeddings=cfg.tie_embeddings, hidden_act="silu", bos_token_id=None, eos_token_id=None,
        pad_token_id=cfg.embedding_padding_idx,
    )
    return LlamaForCausalLM(hf_cfg).float()


def _lfm2_to_hf(cfg: ModelConfig):
    """An untrained Lfm2ForCausalLM shaped like `cfg`; ValueError if LFM2 cannot express it. Every setting
    whose transformers default differs is passed explicitly: the RoPE base (default 1e6), the MLP width
    (block_auto_adjust_ff_dim=False, else intermediate_size is rescaled), pad_token_id (default 0, which
    would make embedding row 0 a padding row)."""
    from transformers import Lfm2Config, Lfm2ForCausalLM

    _unsupported("to Lfm2ForCausalLM", _common_problems(cfg, mixers=("conv", "attn"), qk_norm=True) + [
        problem for bad, problem in (
            (cfg.norm != "rmsnorm", f"norm={cfg.norm!r} (needs 'rmsnorm')"),
            (cfg.mlp != "swiglu", f"mlp={cfg.mlp!r} (needs 'swiglu')"),
            (cfg.bias, "bias=True (LFM2's attention and MLP have none)"),
            (cfg.position != "rope", f"position={cfg.position!r} (needs 'rope')"),
            (cfg.rotary_fraction != 1.0, f"rotary_fraction={cfg.rotary_fraction} (partial rotary)"),
            (cfg.attn_scale is not None and not math.isclose(cfg.attn_scale, cfg.head_dim**-0.5, rel_tol=1e-6),
             f"attn_scale={cfg.attn_scale} (LFM2 uses 1/sqrt(head_dim))"),
            (cfg.n_heads * cfg.head_dim != cfg.d_model,
             f"n_heads * head_dim = {cfg.n_heads * cfg.head_dim} != d_model={cfg.d_model} (LFM2 derives head_dim)"),
        ) if bad])
    hf_cfg = Lfm2Config(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff, block_auto_adjust_ff_dim=False,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads,
        max_position_embeddings=cfg.context_length, norm_eps=cfg.norm_eps, initializer_range=cfg.init_std,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta}, conv_bias=False,
        conv_L_cache=cfg.conv_kernel, tie_word_embeddings=cfg.tie_embeddings,
        layer_types=["conv" if cfg.layer_type(i) == "conv" else "full_attention" for i in range(cfg.n_layers)],
        pad_token_id=cfg.embedding_padding_idx, bos_token_id=None, eos_token_id=None,
    )
    return Lfm2ForCausalLM(hf_cfg).float()
