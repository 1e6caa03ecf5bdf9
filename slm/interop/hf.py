"""Convert between transformers causal LMs and slm `Transformer`s, weights included.

    from_hf(hf_model) -> Transformer       GPT2LMHeadModel, LlamaForCausalLM, Qwen3ForCausalLM,
                                           Gemma2ForCausalLM, Gemma3ForCausalLM (text only), Lfm2ForCausalLM,
                                           Qwen3MoeForCausalLM, MixtralForCausalLM
    to_hf(model) -> PreTrainedModel         GPT-2 style -> GPT2LMHeadModel, LLaMA style -> LlamaForCausalLM,
                                           conv mixers (LFM2) -> Lfm2ForCausalLM, experts -> Qwen3Moe / Mixtral

Each family has a config mapping and a weight table (hf_gpt2, hf_decoders, hf_lfm2, hf_moe; shared pieces in
hf_common). A weight table lists, for every slm parameter, the
transformers tensors it is made of: one tensor, or several stacked along rows because slm fuses them
(attention `qkv` = [q; k; v], gated MLP `fc_in` = [gate; up]), optionally transposed (GPT-2's Conv1D
stores (in, out), the transpose of nn.Linear). The same table drives both directions, and every tensor
on the transformers side must be used exactly once, so a feature we do not know cannot be dropped
silently. Whatever one side cannot represent raises ValueError naming it; nothing is approximated.

transformers is imported only inside the functions, so `import slm` never needs it.
"""

from __future__ import annotations

import torch

from slm.interop.hf_common import Entry
from slm.interop.hf_decoders import (decoder_table, gemma2_config, gemma3_config, llama_config, llama_to_hf,
                                     qwen3_config)
from slm.interop.hf_gpt2 import gpt2_config, gpt2_table, gpt2_to_hf
from slm.interop.hf_lfm2 import lfm2_config, lfm2_table, lfm2_to_hf
from slm.interop.hf_moe import mixtral_config, moe_table, moe_to_hf, qwen3_moe_config
from slm.model.transformer import Transformer

__all__ = ["Entry", "from_hf", "to_hf"]


# =================================================================================== transformers -> slm
def from_hf(hf_model) -> Transformer:
    """An slm `Transformer` computing the same logits as `hf_model`, with its weights copied (float32).

    Supported: GPT2LMHeadModel, LlamaForCausalLM, Qwen3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM
    (text-only Gemma3TextConfig), Lfm2ForCausalLM, Qwen3MoeForCausalLM and MixtralForCausalLM. Raises ValueError for any other class, and for a config
    of a supported class that slm cannot reproduce exactly (naming the setting).
    """
    from transformers import (Gemma2ForCausalLM, Gemma3ForCausalLM, GPT2LMHeadModel, Lfm2ForCausalLM,
                              LlamaForCausalLM, MixtralForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM)

    families = (
        (GPT2LMHeadModel, gpt2_config, gpt2_table),
        (Lfm2ForCausalLM, lfm2_config, lfm2_table),
        (Qwen3MoeForCausalLM, qwen3_moe_config, moe_table),
        (MixtralForCausalLM, mixtral_config, moe_table),
        (LlamaForCausalLM, llama_config, decoder_table),
        (Qwen3ForCausalLM, qwen3_config, decoder_table),
        (Gemma3ForCausalLM, gemma3_config, decoder_table),
        (Gemma2ForCausalLM, gemma2_config, decoder_table),
    )
    for cls, config_fn, table_fn in families:
        if isinstance(hf_model, cls):
            break
    else:
        names = ", ".join(cls.__name__ for cls, _, _ in families)
        raise ValueError(f"cannot convert {type(hf_model).__name__}: supported transformers models are {names}")

    cfg = config_fn(hf_model.config)
    hf_weights = hf_model.state_dict()
    unused = set(hf_weights) - ({"lm_head.weight"} if cfg.embedding.tie else set())  # tied: the embedding
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


# =================================================================================== slm -> transformers
def to_hf(model: Transformer):
    """A transformers model (float32, eval mode) computing the same logits as `model`, weights copied.

    Conv mixers (LFM2) -> Lfm2ForCausalLM; routed experts -> Qwen3MoeForCausalLM (with qk-norm) or
    MixtralForCausalLM (without); otherwise learned positions + LayerNorm + GELU/ReLU ->
    GPT2LMHeadModel, RoPE + RMSNorm + SwiGLU -> LlamaForCausalLM. Raises ValueError listing everything the
    target cannot represent (Canon layers, block.repeat > 1, qk_norm, sliding windows, soft-capping, ...).
    """
    cfg = model.cfg
    if cfg.parametrization.kind != "sp":
        raise ValueError(f"cannot convert to transformers: model.parametrization.kind={cfg.parametrization.kind} "
                         "multiplies the logits (and, completep, the residual branches) by factors transformers' "
                         "models do not have")
    if "conv" in cfg.layer_types:
        hf_model, table = lfm2_to_hf(cfg), lfm2_table(cfg)
    elif "moe" in cfg.mlp_types:
        hf_model, table = moe_to_hf(cfg), moe_table(cfg)
    elif cfg.position.kind == "learned":
        hf_model, table = gpt2_to_hf(cfg), gpt2_table(cfg)
    elif cfg.position.kind == "rope":
        hf_model, table = llama_to_hf(cfg), decoder_table(cfg)
    else:
        raise ValueError(f"cannot convert to transformers: position.kind={cfg.position.kind!r} "
                         "(GPT-2 needs 'learned', LLaMA needs 'rope')")

    ours = model.state_dict()
    target = hf_model.state_dict()
    state = {}
    for entry in table:
        sizes = [target[name].shape[1 if entry.transposed else 0] for name in entry.hf]
        for name, part in zip(entry.hf, ours[entry.slm].split(sizes, dim=0)):  # undo the row stacking
            state[name] = part.T if entry.transposed else part
    if cfg.embedding.tie:
        state["lm_head.weight"] = state[table[0].hf[0]]  # transformers lists the tied head too
    if not cfg.block.bias and hf_model.config.model_type == "gpt2":
        # GPT-2 always has biases: zeros compute exactly what a bias-free slm model does
        state.update({name: torch.zeros_like(t) for name, t in target.items() if name.endswith(".bias")})
    hf_model.load_state_dict(state, strict=True)
    return hf_model.eval()
