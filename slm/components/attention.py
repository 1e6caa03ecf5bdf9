"""Self-attention, chosen by `ModelConfig.attention`.

`mha` covers multi-head and grouped-query attention (n_kv_heads < n_heads), causal or bidirectional,
with an optional sliding window, per-head qk-norm (applied before RoPE, as Qwen3 and Gemma3), Canon B on
the fused q,k,v projection, and optional attention-logit soft-capping cap * tanh(s / cap) (Gemma 2).
It runs through `scaled_dot_product_attention` unless soft-capping is on, which SDPA cannot express.

With a KV cache (`slm.model.cache`), `kv` is this block application's slot in it: the new keys and values
are written there, queries attend over the S slots it returns, and `mask` (built by the cache) is
(B, 1, T, S), or None: causal when T == S (prefill of an empty cache), else every slot (one new token).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from slm.components.canon import canon_params, make_canon
from slm.components.norm import NORMS
from slm.components.position import Rotary, apply_rotary
from slm.components.registry import Registry

ATTENTIONS: Registry[type[nn.Module]] = Registry("attention")


def attention_mask(T: int, causal: bool, window: int | None, device: torch.device) -> torch.Tensor | None:
    """Boolean (T, T) mask, True where query i may attend to key j; None when plain causal suffices.

    A window W lets each query see W keys including itself (j > i - W), as transformers does.
    """
    if window is None or window >= T:
        return None
    i = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    mask = (i - j).abs() < window
    if causal:
        mask &= j <= i
    return mask


@ATTENTIONS.register("mha")
class MultiHeadAttention(nn.Module):
    def __init__(self, cfg, local: bool):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.causal = cfg.causal
        self.window = cfg.sliding_window if local else None
        self.softcap = cfg.attn_logit_softcap
        self.scale = cfg.attn_scale if cfg.attn_scale is not None else self.head_dim**-0.5
        self.dropout = cfg.dropout
        q_dim, kv_dim = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.qkv = nn.Linear(cfg.d_model, q_dim + 2 * kv_dim, bias=cfg.bias)
        self.canon_b = make_canon(cfg, "B", q_dim + 2 * kv_dim)
        if cfg.qk_norm:
            norm = NORMS.get(cfg.norm)
            self.q_norm = norm(self.head_dim, eps=cfg.norm_eps, bias=cfg.bias)
            self.k_norm = norm(self.head_dim, eps=cfg.norm_eps, bias=cfg.bias)
        else:
            self.q_norm = self.k_norm = None
        self.proj = nn.Linear(q_dim, cfg.d_model, bias=cfg.bias)

    @staticmethod
    def num_params(cfg) -> int:
        q_dim, kv_dim = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        n = cfg.d_model * (q_dim + 2 * kv_dim) + q_dim * cfg.d_model
        if cfg.bias:
            n += q_dim + 2 * kv_dim + cfg.d_model
        if cfg.qk_norm:
            n += 2 * NORMS.get(cfg.norm).num_params(cfg.head_dim, cfg.bias)
        return n + canon_params(cfg, "B", q_dim + 2 * kv_dim)

    def forward(self, x: torch.Tensor, rotary: Rotary | None, mask: torch.Tensor | None, kv=None) -> torch.Tensor:
        B, T, _ = x.shape
        H, KV, hd = self.n_heads, self.n_kv_heads, self.head_dim
        qkv = self.qkv(x)  # (B, T, (H + 2 KV) hd)
        if self.canon_b is not None:
            qkv = self.canon_b(qkv) if kv is None else kv.canon("B", self.canon_b, qkv)
        q, k, v = qkv.split([H * hd, KV * hd, KV * hd], dim=-1)
        q, k, v = q.view(B, T, H, hd), k.view(B, T, KV, hd), v.view(B, T, KV, hd)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, T, hd)
        if rotary is not None:
            q, k = apply_rotary(q, rotary), apply_rotary(k, rotary)
        if kv is not None:
            k, v = kv.write(k, v)  # (B, KV, S, hd): the cached slots to attend over, these T included
        dropout = self.dropout if self.training else 0.0
        causal = self.causal and mask is None and T == k.shape[2]
        if self.softcap is None:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal,
                scale=self.scale, enable_gqa=H != KV,
            )
        else:
            y = self._softcapped(q, k, v, mask, dropout, causal)
        return self.proj(y.transpose(1, 2).reshape(B, T, H * hd))  # (B, T, d)

    def _softcapped(self, q, k, v, mask, dropout, causal) -> torch.Tensor:
        """Explicit attention: scores, cap * tanh(scores / cap), mask, softmax in float32."""
        groups = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        scores = (q @ k.transpose(-2, -1)) * self.scale  # (B, H, T, S)
        scores = self.softcap * torch.tanh(scores / self.softcap)
        T = q.shape[2]
        if causal:
            mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        probs = F.dropout(scores.float().softmax(dim=-1).to(q.dtype), dropout, self.training)
        return probs @ v
