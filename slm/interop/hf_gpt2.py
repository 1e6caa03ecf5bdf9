"""GPT-2 <-> slm: GPT2LMHeadModel (learned positions, pre-LayerNorm, GELU/ReLU MLP, biases, Conv1D weights)."""

from __future__ import annotations

from slm.interop.hf_common import ACTIVATIONS, Entry, common_problems, default_scale, model_config, unsupported
from slm.model.config import ModelConfig


def gpt2_config(c) -> ModelConfig:
    """GPT2Config -> ModelConfig: learned positions, pre-LayerNorm, two-matrix GELU MLP, biases everywhere."""
    mlp, approximate = ACTIVATIONS.get(c.activation_function, (None, None))
    unsupported("GPT2LMHeadModel", [problem for bad, problem in (
        (mlp not in ("gelu", "relu"), f"activation_function={c.activation_function!r}"),
        (c.scale_attn_by_inverse_layer_idx, "scale_attn_by_inverse_layer_idx=True (a per-layer attention scale)"),
        (c.add_cross_attention, "add_cross_attention=True"),
    ) if bad])
    return model_config(**{
        "family": "gpt2", "n_layers": c.n_layer, "d_model": c.n_embd, "attention.n_heads": c.n_head,
        "mlp.d_ff": c.n_inner or 4 * c.n_embd, "vocab_size": c.vocab_size, "context_length": c.n_positions,
        "embedding.tie": bool(c.tie_word_embeddings), "norm.kind": "layernorm", "norm.eps": c.layer_norm_epsilon,
        "norm.placement": "pre", "position.kind": "learned", "mlp.kind": mlp, "mlp.gelu_approximate": approximate,
        "attention.scale": None if c.scale_attn_weights else 1.0, "block.bias": True,
        "parametrization.init_std": c.initializer_range,
    })


def gpt2_table(cfg: ModelConfig) -> list[Entry]:
    """slm <- GPT2LMHeadModel. Conv1D weights are (in, out): transposed into nn.Linear's (out, in).
    c_attn (d, 3d) already holds [q | k | v] along its output axis, so qkv = c_attn.T, (3d, d).
    Bias entries only when cfg.block.bias (to_hf zero-fills GPT-2's biases for a bias-free model)."""
    kinds = ("weight", "bias") if cfg.block.bias else ("weight",)
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
    t += [Entry("lm_head.weight", ("transformer.wte.weight" if cfg.embedding.tie else "lm_head.weight",))]
    return t


def gpt2_to_hf(cfg: ModelConfig):
    """An untrained GPT2LMHeadModel shaped like `cfg`; ValueError if GPT-2 cannot express it."""
    from transformers import GPT2Config, GPT2LMHeadModel

    a, mlp, dropout = cfg.attention, cfg.mlp, cfg.block.dropout
    scaled = default_scale(cfg)
    unsupported("to GPT2LMHeadModel", common_problems(cfg) + [problem for bad, problem in (
        (cfg.norm.kind != "layernorm", f"norm.kind={cfg.norm.kind!r} (needs 'layernorm')"),
        (mlp.kind not in ("gelu", "relu"), f"mlp.kind={mlp.kind!r} (needs 'gelu' or 'relu')"),
        (a.n_kv_heads != a.n_heads, f"attention.n_kv_heads={a.n_kv_heads} != n_heads={a.n_heads} (GQA)"),
        (a.n_heads * a.head_dim != cfg.d_model,
         f"attention.n_heads * head_dim = {a.n_heads * a.head_dim} != d_model={cfg.d_model}"),
        (not scaled and a.scale != 1.0, f"attention.scale={a.scale} (needs 1/sqrt(head_dim) or 1)"),
        (cfg.embedding.padding_idx is not None, f"embedding.padding_idx={cfg.embedding.padding_idx} (GPT-2's "
                                                "embedding has no padding row)"),
    ) if bad])
    activation = "relu" if mlp.kind == "relu" else {"tanh": "gelu_new", "none": "gelu"}[mlp.gelu_approximate]
    hf_cfg = GPT2Config(
        vocab_size=cfg.vocab_size, n_positions=cfg.context_length, n_embd=cfg.d_model, n_layer=cfg.n_layers,
        n_head=a.n_heads, n_inner=mlp.d_ff, activation_function=activation, layer_norm_epsilon=cfg.norm.eps,
        resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout, scale_attn_weights=scaled,
        initializer_range=cfg.parametrization.init_std, tie_word_embeddings=cfg.embedding.tie, bos_token_id=None,
        eos_token_id=None,
    )
    return GPT2LMHeadModel(hf_cfg).float()
