"""The decoder network assembled from the component registries. Plain PyTorch; takes only a ModelConfig.

`Transformer(cfg)(idx)` scores a whole sequence. Given a `slm.model.cache.KVCache`, the same call appends
`idx` to the cached sequence instead (prefill, then one token at a time), each block application reading
and writing its own slot of the cache.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from slm.components import ATTENTIONS, MLPS, NORMS, POSITIONS
from slm.components.attention import attention_mask
from slm.components.canon import make_canon
from slm.model.config import ModelConfig


class Block(nn.Module):
    """One transformer block: attention then MLP, each a residual sublayer with norms placed per config.

    pre:      h = h + f(norm(h))
    post:     h = norm(h + f(h))
    sandwich: h = h + norm_out(f(norm_in(h)))          (Gemma3)
    Canon A / C mix the sublayer input right before attention / the MLP (B and D sit inside them).
    `kv` is this application's slot of a KV cache, or None (whole-sequence forward).
    """

    def __init__(self, cfg: ModelConfig, local: bool):
        super().__init__()
        self.local = local
        self.placement = cfg.norm_placement

        def norm(where: str) -> nn.Module | None:
            wanted = {"before": ("pre", "sandwich"), "after": ("post", "sandwich")}[where]
            if cfg.norm_placement not in wanted:
                return None
            return NORMS.get(cfg.norm)(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)

        self.attn_norm, self.attn_out_norm = norm("before"), norm("after")
        self.canon_a = make_canon(cfg, "A", cfg.d_model)
        self.attn = ATTENTIONS.get(cfg.attention)(cfg, local)
        self.mlp_norm, self.mlp_out_norm = norm("before"), norm("after")
        self.canon_c = make_canon(cfg, "C", cfg.d_model)
        self.mlp = MLPS.get(cfg.mlp)(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def _sublayer(self, h, norm_in, canon, where, fn, norm_out, kv, *args) -> torch.Tensor:
        x = h if norm_in is None else norm_in(h)
        if canon is not None:
            x = canon(x) if kv is None else kv.canon(where, canon, x)
        y = self.drop(fn(x, *args))
        if self.placement == "post":
            return norm_out(h + y)
        return h + (y if norm_out is None else norm_out(y))

    def forward(self, h: torch.Tensor, rotary, mask, kv=None) -> torch.Tensor:
        h = self._sublayer(h, self.attn_norm, self.canon_a, "A", self.attn, self.attn_out_norm, kv, rotary, mask, kv)
        return self._sublayer(h, self.mlp_norm, self.canon_c, "C", self.mlp, self.mlp_out_norm, kv, kv)


class Transformer(nn.Module):
    """Token ids (B, T) -> next-token logits (B, T, vocab_size)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position = POSITIONS.get(cfg.position).from_config(cfg)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, cfg.is_local(i)) for i in range(cfg.n_layers))
        # post-norm blocks end normalised; pre and sandwich need a final norm before the head
        self.norm = None if cfg.norm_placement == "post" else NORMS.get(cfg.norm)(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, init_std) for linear and embedding weights, residual projections scaled by
        1 / sqrt(2 * depth) (GPT-2); norms and Canon convolutions keep their own init."""
        std = self.cfg.init_std
        for name, module in self.named_modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                scaled = name.endswith(("attn.proj", "mlp.fc_out"))
                nn.init.normal_(module.weight, 0.0, std / math.sqrt(2 * self.cfg.depth) if scaled else std)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
        for p in self.position.parameters():
            nn.init.normal_(p, 0.0, std)

    def forward(self, idx: torch.Tensor, cache=None, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """idx (B, T) -> logits (B, T, V). With `cache`, idx continues the cached sequences; `lengths` (B,)
        marks the first lengths[b] tokens of row b as real and the rest as padding (see KVCache.begin)."""
        return self.head(self.hidden(idx, cache, lengths))

    def hidden(self, idx: torch.Tensor, cache=None, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """idx (B, T) -> final hidden states (B, T, d), after the final norm: `head` turns them into logits."""
        B, T = idx.shape
        kinds = {block.local for block in self.blocks}
        if cache is None:
            if T > self.cfg.context_length:
                raise ValueError(f"sequence length {T} exceeds context_length={self.cfg.context_length}")
            pos = torch.arange(T, device=idx.device)
            window = self.cfg.sliding_window
            masks = {local: attention_mask(T, self.cfg.causal, window if local else None, idx.device)
                     for local in kinds}
        else:
            pos, masks = cache.begin(T, lengths)  # pos (B, T); masks {local: (B, 1, T, S) or None}
        h = self.tok_emb(idx)  # (B, T, d)
        if self.cfg.scale_embeddings:
            h = h * torch.tensor(self.cfg.d_model**0.5, dtype=h.dtype)
        h = self.drop(self.position.embed(h, pos))
        rotary = {local: self.position.rotary(pos, local, h.dtype) for local in kinds}
        for i, block in enumerate(self.blocks):
            for r in range(self.cfg.layer_repeat):
                kv = None if cache is None else cache.layers[i * self.cfg.layer_repeat + r]
                h = block(h, rotary[block.local], masks[block.local], kv)
        if self.norm is not None:
            h = self.norm(h)
        return h

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Final hidden states (..., d) -> logits (..., V), soft-capped if the config says so."""
        logits = self.lm_head(h)  # (..., V)
        if self.cfg.final_logit_softcap is not None:
            cap = self.cfg.final_logit_softcap
            logits = cap * torch.tanh(logits / cap)
        return logits

    def num_params(self) -> int:
        """Distinct trainable parameters (tied and shared weights counted once)."""
        return sum(p.numel() for p in self.parameters())
