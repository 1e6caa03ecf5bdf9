"""Canon layers against their reference implementation (Allen-Zhu, PhysicsLM4's LlamaCanonForCausalLM).

The fixtures in tests/data hold random weights, token ids and the logits the reference computed on them
(tests/data/README.md says how they were made). slm reproduces them with the reference's order and norm:
Canon B on cat(q, k, v) after a qk-norm taken over all heads at once (canon_b_after_qk_norm=true,
qk_norm_scope=all_heads). Without qk-norm (the llama3_canon preset's Canon A + C) the orders coincide.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from slm.model import ModelConfig, Transformer

DATA = Path(__file__).parent / "data"


def _load(name: str, reference_order: bool) -> tuple[Transformer, torch.Tensor, torch.Tensor]:
    path = DATA / f"physlm4_canon_{name}.safetensors"
    with safe_open(str(path), "pt") as f:
        c = json.loads(f.metadata()["config"])
        w = {k: f.get_tensor(k) for k in f.keys()}
    cfg = ModelConfig(n_layers=c["num_hidden_layers"], d_model=c["hidden_size"],
                      attention=dict(n_heads=c["num_attention_heads"], n_kv_heads=c["num_key_value_heads"],
                                     qk_norm=c["qk_norm"], qk_norm_scope="all_heads" if reference_order else "head"),
                      mlp=dict(d_ff=c["intermediate_size"]), vocab_size=c["vocab_size"],
                      context_length=c["max_position_embeddings"], norm=dict(eps=c["rms_norm_eps"]),
                      position=dict(rope_theta=c["rope_theta"]),
                      canon=dict(set=c["canon_set"], kernel=c["canon_kernel"], b_after_qk_norm=reference_order))
    sd = {"tok_emb.weight": w["model.embed_tokens.weight"], "lm_head.weight": w["model.embed_tokens.weight"],
          "norm.weight": w["model.norm.weight"]}
    for i in range(cfg.n_layers):
        h, s = f"model.layers.{i}.", f"blocks.{i}."
        sd[f"{s}attn.qkv.weight"] = torch.cat([w[f"{h}self_attn.{p}_proj.weight"] for p in "qkv"])
        sd[f"{s}attn.proj.weight"] = w[f"{h}self_attn.o_proj.weight"]
        sd[f"{s}attn_norm.weight"] = w[f"{h}input_layernorm.weight"]
        sd[f"{s}mlp_norm.weight"] = w[f"{h}post_attention_layernorm.weight"]
        sd[f"{s}mlp.fc_in.weight"] = torch.cat([w[f"{h}mlp.gate_proj.weight"], w[f"{h}mlp.up_proj.weight"]])
        sd[f"{s}mlp.fc_out.weight"] = w[f"{h}mlp.down_proj.weight"]
        if cfg.attention.qk_norm:
            for p in "qk":
                weight = w[f"{h}self_attn.{p}_norm.weight"]  # (heads * hd,)
                sd[f"{s}attn.{p}_norm.weight"] = weight if reference_order else weight[:cfg.attention.head_dim]
        ours = {"A": "canon_a", "C": "canon_c", "B": "attn.canon_b", "D": "mlp.canon_d"}
        theirs = {"A": "canonA", "C": "canonC", "B": "self_attn.canonB", "D": "mlp.canonD"}
        for letter in cfg.canon.set:
            sd[f"{s}{ours[letter]}.conv.weight"] = w[f"{h}{theirs[letter]}.weight"]  # (C, 1, kernel)
    model = Transformer(cfg).eval()
    model.load_state_dict(sd, strict=True)
    return model, w["test.tokens"], w["test.logits"]


@pytest.mark.parametrize("name", ["abcd_qknorm", "ac"])
def test_reference_order_matches_physicslm4(name):
    model, tokens, logits = _load(name, reference_order=True)
    with torch.no_grad():
        assert (model(tokens) - logits).abs().max().item() < 1e-5


def test_qwen3_style_order_is_a_different_model():
    """The default (Canon B on the fused projection, then a per-head norm) is not the reference's model:
    with qk-norm the two disagree by far more than rounding."""
    model, tokens, logits = _load("abcd_qknorm", reference_order=False)
    with torch.no_grad():
        assert (model(tokens) - logits).abs().max().item() > 1e-2


def test_reference_order_decodes_with_the_kv_cache():
    from slm.model.cache import KVCache

    model, tokens, logits = _load("abcd_qknorm", reference_order=True)
    with torch.no_grad():
        cache = KVCache(model.cfg, batch=2, capacity=16)
        steps = [model(tokens[:, :5], cache)] + [model(tokens[:, t:t + 1], cache) for t in range(5, 16)]
    assert (torch.cat(steps, dim=1) - logits).abs().max().item() < 1e-5
