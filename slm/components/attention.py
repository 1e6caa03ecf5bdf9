"""Self-attention mixers (slm.components.mixer): `attn` attends to every earlier position, `local_attn` to
the last `sliding_window` positions only (Gemma's local layers; `layer_types` mixes the two); their settings,
`AttentionSettings` (model.attention).

Both are multi-head / grouped-query attention (n_kv_heads < n_heads), causal or bidirectional, with
optional qk-norm before RoPE (per head, as Qwen3 and Gemma3, or one norm over all heads, as the Canon
reference PhysicsLM4), Canon B on the fused q,k,v projection (or on cat(q, k, v) after the qk-norm, as
PhysicsLM4), and optional attention-logit soft-capping cap * tanh(s / cap) (Gemma 2).

In a whole-sequence forward the mask is a `slm.components.flex.Masking` (causal, window, block, documents),
and `slm.components.flex.choose` picks the kernel: `scaled_dot_product_attention` (fused causal or full
attention without a mask, else with a dense boolean mask; explicit scores when soft-capped, which SDPA cannot
express) or FlexAttention with a block mask (and soft-capping as its score_mod): compiled flex on CUDA where a
mask or a soft-cap is needed, SDPA elsewhere.

With a KV cache (`slm.model.cache`), the layer's `KVState` holds its keys and values: the new ones are
written there, queries attend over the S slots it returns, and the mask (built by the cache) is
(B, 1, T, S), or None: causal when T == S (prefill of an empty cache), else every slot (one new token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from slm.components.canon import canon_params, make_canon
from slm.components.flex import Masking, attention_kind, choose, flex_attend, record
from slm.components.init import attention_projection, residual_out
from slm.components.mixer import MIXERS, Mixer
from slm.components.norm import make_norm, norm_params
from slm.components.parametrization import scheme_of
from slm.components.position import apply_rotary
from slm.settings import Settings, require, setting


@dataclass
class AttentionSettings(Settings):
    """`model.attention`: the attention layers (the attn, local_attn and mac entries of model.layer_types)."""

    n_heads: int | None = setting(None, gt=0, null="d_model // head_dim")
    """Query heads; None derives d_model // head_dim."""
    n_kv_heads: int | None = setting(None, gt=0, null="n_heads")
    """Key/value heads (grouped-query attention when < n_heads); None means n_heads (MHA)."""
    head_dim: int | None = setting(None, gt=0, null="d_model // n_heads")
    """Channels per head; None derives d_model // n_heads. n_heads * head_dim may differ from d_model."""
    causal: bool = True
    """Causal (autoregressive) or bidirectional attention."""
    block: int | None = setting(None, gt=0, null="per causal")
    """Block-causal attention (block diffusion, an AR model converted to diffusion): each position sees its
    own block of this many positions, both ways, and every earlier block (1 = causal, >= context = fully
    bidirectional); None: per `causal`. Needs causal=false and causal Canon layers."""
    sliding_window: int | None = setting(None, gt=0, null="no local_attn layer")
    """Keys each query of a local_attn layer sees, itself included (required when layer_types has one)."""
    scale: float | None = setting(None, gt=0, null="1 / sqrt(head_dim)")
    """Scale of q.k; None means 1 / sqrt(head_dim)."""
    logit_softcap: float | None = setting(None, gt=0, null="disabled")
    """Soft-cap attention logits as cap * tanh(s / cap); None disables."""
    qk_norm: bool = False
    """Norm (of kind model.norm.kind) on queries and keys, before RoPE (Qwen3, Gemma3, PhysicsLM4)."""
    qk_norm_scope: Literal["head", "all_heads"] = "head"
    """head: one norm per head over head_dim (Qwen3, Gemma3); all_heads: one norm over all heads, H * head_dim
    for q and KV * head_dim for k (the Canon reference, PhysicsLM4)."""

    def derive(self, cfg) -> None:
        """Heads from head_dim or the reverse (a window model, which has no attention, gets one head), kv heads
        from heads; a size that does not divide d_model is left null for `check` to name."""
        if self.n_heads is None and self.head_dim is None and cfg.kind != "transformer":
            self.n_heads = 1  # a window model: the attention fields only need to be valid
        if self.n_heads is None and self.head_dim is not None and cfg.d_model % self.head_dim == 0:
            self.n_heads = cfg.d_model // self.head_dim
        if self.head_dim is None and self.n_heads is not None and cfg.d_model % self.n_heads == 0:
            self.head_dim = cfg.d_model // self.n_heads
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads

    def check(self, key: str, cfg) -> None:
        """Heads that fit d_model, the sliding window against layer_types and the context, block-causal
        attention against causal."""
        both = self.n_heads is None and self.head_dim is None
        require((not both, f"{key}.n_heads", None, "set n_heads or head_dim (or both)"),
                (self.n_heads is not None, "model.d_model", cfg.d_model,
                 f"must be a multiple of head_dim={self.head_dim} when n_heads is derived"),
                (self.head_dim is not None, "model.d_model", cfg.d_model,
                 f"must be a multiple of n_heads={self.n_heads} when head_dim is derived"))
        local = "local_attn" in cfg.layer_types
        require((self.n_heads % self.n_kv_heads == 0, f"{key}.n_kv_heads", self.n_kv_heads,
                 f"must divide n_heads={self.n_heads}"),
                (not local or self.sliding_window is not None, f"{key}.sliding_window", None,
                 f"layer_types {cfg.layer_types} has local_attn layers; set a window"),
                (local or self.sliding_window is None, f"{key}.sliding_window", self.sliding_window,
                 "layer_types has no local_attn layer to use it; add one or set null"),
                (self.sliding_window is None or self.sliding_window <= cfg.context_length, f"{key}.sliding_window",
                 self.sliding_window, f"must be <= context_length={cfg.context_length}"),
                (self.block is None or not self.causal, f"{key}.block", self.block,
                 "block-causal attention needs model.attention.causal=false"))


class KVState:
    """An attention layer's slot in a KV cache: keys and values (B, KV, S, hd) of every cached position."""

    def __init__(self, cache, k: torch.Tensor, v: torch.Tensor, window: int | None):
        self.cache, self.k, self.v, self.window = cache, k, v, window

    def write(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the chunk's k, v (B, KV, T, hd) in its slots; return the slots to attend over (B, KV, S, hd):
        all filled ones (all of them when static), or for one unpadded token in a sliding-window layer,
        the last `window`."""
        c = self.cache
        if c.static:
            self.k.index_copy_(2, c.slots, k.to(self.k.dtype))
            self.v.index_copy_(2, c.slots, v.to(self.v.dtype))
        else:
            start = c.filled - k.shape[2]  # begin() already advanced `filled`
            self.k[:, :, start:c.filled] = k
            self.v[:, :, start:c.filled] = v
        lo = 0
        if self.window is not None and k.shape[2] == 1 and not c.ragged and not c.static:
            lo = max(0, c.visible - self.window)
        return self.k[:, :, lo:c.visible], self.v[:, :, lo:c.visible]

    def select(self, cache, rows: torch.Tensor) -> "KVState":
        return KVState(cache, self.k.index_select(0, rows), self.v.index_select(0, rows), self.window)

    def reset(self) -> None:
        """Nothing to clear: stale slots are masked by the cache's positions."""

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.k, self.v


@MIXERS.register("attn")
class MultiHeadAttention(Mixer):
    """Global attention: every query sees every key it may (all earlier ones when causal)."""

    slot = "attn"
    local = False  # True: keys limited to the last `sliding_window` positions

    def __init__(self, cfg):
        super().__init__()
        a = cfg.attention
        self.n_heads, self.n_kv_heads, self.head_dim = a.n_heads, a.n_kv_heads, a.head_dim
        self.causal = a.causal
        self.window = a.sliding_window if self.local else None
        self.softcap = a.logit_softcap
        scale = a.scale if a.scale is not None else self.head_dim**-0.5
        self.scale = scheme_of(cfg).attention_scale(scale, self.head_dim)  # μP: 1 / head_dim
        self.dropout = cfg.block.dropout if "attention" in cfg.block.dropout_at else 0.0  # on the probabilities
        q_dim, kv_dim = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        bias = cfg.block.bias
        self.qkv = attention_projection(nn.Linear(cfg.d_model, q_dim + 2 * kv_dim, bias=bias), "in")
        self.canon_b = make_canon(cfg, "B", q_dim + 2 * kv_dim)
        self.canon_b_after_norm = cfg.canon.b_after_qk_norm
        self.norm_heads = a.qk_norm_scope == "head"  # else one norm over all heads (H hd, resp. KV hd)
        if a.qk_norm:
            self.q_norm = make_norm(cfg, self.head_dim if self.norm_heads else q_dim)
            self.k_norm = make_norm(cfg, self.head_dim if self.norm_heads else kv_dim)
        else:
            self.q_norm = self.k_norm = None
        self.proj = attention_projection(residual_out(nn.Linear(q_dim, cfg.d_model, bias=bias)), "out")

    @staticmethod
    def num_params(cfg) -> int:
        a = cfg.attention
        q_dim, kv_dim = a.n_heads * a.head_dim, a.n_kv_heads * a.head_dim
        n = cfg.d_model * (q_dim + 2 * kv_dim) + q_dim * cfg.d_model
        if cfg.block.bias:
            n += q_dim + 2 * kv_dim + cfg.d_model
        if a.qk_norm and a.qk_norm_scope == "head":
            n += 2 * norm_params(cfg, a.head_dim)
        elif a.qk_norm:
            n += norm_params(cfg, q_dim) + norm_params(cfg, kv_dim)
        return n + canon_params(cfg, "B", q_dim + 2 * kv_dim)

    @classmethod
    def keys_seen(cls, cfg) -> int:
        """Keys a query attends to at full context: the context length, or the window of a local layer."""
        return min(cfg.attention.sliding_window, cfg.context_length) if cls.local else cfg.context_length

    @classmethod
    def flops_per_token(cls, cfg) -> int:
        """PaLM's attention term: 12 * H * hd * T (q.k and the weighted sum of v, forward and backward)."""
        return 12 * cfg.attention.n_heads * cfg.attention.head_dim * cls.keys_seen(cfg)

    @classmethod
    def new_state(cls, cfg, cache) -> KVState:
        a = cfg.attention
        shape = (cache.batch, a.n_kv_heads, cache.capacity, a.head_dim)
        zeros = lambda: torch.zeros(shape, device=cache.device, dtype=cache.dtype)  # noqa: E731
        return KVState(cache, zeros(), zeros(), a.sliding_window if cls.local else None)

    def project(self, x: torch.Tensor, kv=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, d) -> q (B, H, T, hd), k and v (B, KV, T, hd): projected, Canon B and qk-norm applied, before
        RoPE."""
        B, T, _ = x.shape
        H, KV, hd = self.n_heads, self.n_kv_heads, self.head_dim
        qkv = self.qkv(x)  # (B, T, (H + 2 KV) hd)
        if self.canon_b is not None and not self.canon_b_after_norm:
            qkv = self.canon_b(qkv) if kv is None else kv.canon("B", self.canon_b, qkv)
        q, k, v = qkv.split([H * hd, KV * hd, KV * hd], dim=-1)
        if self.q_norm is not None and not self.norm_heads:  # one norm over all heads (PhysicsLM4)
            q, k = self.q_norm(q), self.k_norm(k)
        if self.canon_b is not None and self.canon_b_after_norm:  # on cat(q, k, v) after the norm (PhysicsLM4)
            qkv = torch.cat([q, k, v], dim=-1)
            qkv = self.canon_b(qkv) if kv is None else kv.canon("B", self.canon_b, qkv)
            q, k, v = qkv.split([H * hd, KV * hd, KV * hd], dim=-1)
        q, k, v = q.view(B, T, H, hd), k.view(B, T, KV, hd), v.view(B, T, KV, hd)
        if self.q_norm is not None and self.norm_heads:  # per head (Qwen3, Gemma3)
            q, k = self.q_norm(q), self.k_norm(k)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, T, hd)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
               causal: bool) -> torch.Tensor:
        """Queries (B, H, T, hd) over keys and values (B, KV, S, hd) -> (B, T, H * hd), before `proj`; mask
        (bool, True: may attend) broadcasts to (B, H, T, S), or is a whole-sequence forward's `Masking` (which
        also decides `causal`); dropout on the probabilities when training."""
        B, H, T, hd = q.shape
        dropout = self.dropout if self.training else 0.0
        if isinstance(mask, Masking):
            backend = choose(mask, q.device, self.softcap is not None, dropout)
            record(attention_kind(mask, self.softcap is not None), backend)
            if backend != "sdpa":
                y = flex_attend(q, k, v, mask, self.scale, self.softcap, compiled=backend == "flex")
                return y.transpose(1, 2).reshape(B, T, H * hd)
            mask = mask.dense()
            causal = self.causal and mask is None
        if self.softcap is None:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal,
                scale=self.scale, enable_gqa=H != self.n_kv_heads,
            )
        else:
            y = self._softcapped(q, k, v, mask, dropout, causal)
        return y.transpose(1, 2).reshape(B, T, H * hd)

    def forward(self, x: torch.Tensor, seq, kv=None) -> torch.Tensor:
        rotary, mask = seq.rotary(self.local), seq.mask(self.window)
        q, k, v = self.project(x, kv)  # (B, heads, T, hd)
        if rotary is not None:
            q, k = apply_rotary(q, rotary), apply_rotary(k, rotary)
        if kv is not None:
            k, v = kv.state.write(k, v)  # (B, KV, S, hd): the cached slots to attend over, these T included
        causal = self.causal and mask is None and q.shape[2] == k.shape[2]
        return self.proj(self.attend(q, k, v, mask, causal))  # (B, T, d)

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


@MIXERS.register("local_attn")
class SlidingWindowAttention(MultiHeadAttention):
    """Local attention: each query sees the last `sliding_window` positions, itself included."""

    local = True
