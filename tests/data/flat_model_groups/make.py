"""Run with the code BEFORE issue 40's model groups (commit 67fd61f): tiny models with flat ModelConfig fields,
saved as slm checkpoint directories, and their logits on fixed tokens."""
import json, sys
from pathlib import Path
import torch
from slm.model import ModelConfig, Transformer, build_model
from slm.model.weights import save_model

OUT = Path(sys.argv[1])
BASE = dict(n_layers=2, d_model=32, n_heads=4, vocab_size=61, context_length=16)
CASES = {
    "gpt2_post_norm": dict(position="learned", norm="layernorm", norm_eps=1e-5, mlp="gelu", gelu_approximate="none",
                           bias=True, tie_embeddings=False, head_bias=True, init="gpt2", init_std=0.03, dropout=0.1,
                           dropout_at=["attention", "mlp"], norm_placement="post", final_norm=True),
    "gemma_sandwich": dict(n_heads=None, head_dim=8, n_kv_heads=2, norm="rmsnorm_gemma", norm_placement="sandwich",
                           qk_norm=True, qk_norm_scope="all_heads", mlp="geglu", mlp_ratio=2.5, d_ff_multiple=16,
                           scale_embeddings=True, layer_types=["local_attn", "attn"], sliding_window=8,
                           rope_theta=500.0, rope_theta_local=100.0, rotary_fraction=0.5, attn_scale=0.3,
                           attn_logit_softcap=20.0, final_logit_softcap=15.0, embedding_padding_idx=0, init="normal",
                           layer_repeat=2),
    "lfm2_completep_loop": dict(n_layers=3, layer_types=["conv", "attn"], conv_kernel=4, parametrization="completep",
                                mup=dict(base_width=16, base_depth=1, depth_alpha=0.5, base_head_dim=4,
                                         decay="with_lr"), loop_layers=1, loop_steps=2, init="normal", d_ff=40),
    "dllm_block_canon": dict(causal=False, attention_block=4, mask_token_id=60, document_end_id=1,
                             canon=dict(set="AC"), n_kv_heads=1),
    "window_mlp": dict(kind="mlp", window_hidden=[16, 8], d_model=8, dropout=0.1, init="torch", tie_embeddings=False,
                       n_heads=None),
}
idx = torch.randint(1, 60, (2, 16), generator=torch.Generator().manual_seed(3))
expected = {}
for name, fields in CASES.items():
    cfg = ModelConfig(**{**BASE, **fields})
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():  # weights far from init, so every part moves the logits
            p.add_(0.05 * torch.randn_like(p))
        logits = model(idx).float()
    save_model(model, OUT / name)
    expected[name] = {"logits": [round(v, 6) for v in logits.flatten().tolist()[:64]],
                      "sum": float(logits.double().sum()), "count": sum(p.numel() for p in model.parameters())}
(OUT / "expected.json").write_text(json.dumps({"tokens": idx.tolist(), "cases": expected}, indent=1) + "\n")
print("wrote", OUT)
