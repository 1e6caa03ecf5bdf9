"""One block of the transformer (a sequence mixer, then a feed-forward, each a residual sublayer with its norms),
and the `model.block` settings: how blocks are built (biases, dropout) and stacked (repeats, a refinement loop).
Plain PyTorch; reads the model config by attribute (slm.model.config builds the settings, this file never imports
it)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from slm.components import FFNS, MIXERS
from slm.components.canon import make_canon
from slm.components.norm import make_norm
from slm.components.parametrization import scheme_of
from slm.settings import Settings, require, setting

DROPOUT_SITES = ("embedding", "attention", "mixer", "mlp")
"""Where model.block.dropout may apply (model.block.dropout_at)."""


@dataclass
class BlockSettings(Settings):
    """`model.block`: how each block is built (biases, dropout) and how the blocks are stacked (MobileLLM's
    repeats, a recursive refinement loop)."""

    bias: bool = False
    """Biases in every linear layer and in LayerNorm (GPT-2 has them)."""
    dropout: float = setting(0.0, ge=0, lt=1)
    """Dropout probability at each site in `dropout_at` (a window model: after each hidden layer)."""
    dropout_at: list[str] = setting(factory=lambda: list(DROPOUT_SITES), choices=DROPOUT_SITES, each=True)
    """Where `dropout` applies: embedding (after the position embedding), attention (the probabilities),
    mixer (the mixer's output, before the residual add), mlp (the MLP's output, likewise); mixer or mlp listed
    twice drops out twice (arXiv 2512.20877's RoPE-ablation blocks do this to the FFN output)."""
    repeat: int = setting(1, gt=0)
    """MobileLLM's immediate block-wise sharing: each block is applied this many times in a row."""
    loop_layers: int = setting(0, ge=0)
    """The last loop_layers blocks form a recursive refinement module: applied loop_steps times as a group,
    with the same weights each time (0: none)."""
    loop_steps: int = setting(1, gt=0)
    """Applications of the loop_layers group (1: once, an ordinary stack)."""

    def check(self, key: str, cfg) -> None:
        """loop_layers within the stack; embedding and attention dropout once at most."""
        sites = self.dropout_at
        require((self.loop_layers <= cfg.n_layers, f"{key}.loop_layers", self.loop_layers,
                 f"must be an integer in 0..n_layers={cfg.n_layers}"),
                *((sites.count(site) <= 1, f"{key}.dropout_at", sites,
                   f"'{site}' may appear once (only mixer and mlp may repeat)") for site in ("embedding", "attention")))

    def schedule(self, n_layers: int) -> list[int]:
        """The block run by each application, in order: every block `repeat` times in a row, and the last
        loop_layers blocks, as a group, loop_steps times (MobileLLM-LS: 0,0,1,1,...; a loop of 2 over 3
        steps at the end of 4 blocks: 0,1,2,3,2,3,2,3)."""
        stack = list(range(n_layers - self.loop_layers))
        stack += list(range(n_layers - self.loop_layers, n_layers)) * self.loop_steps
        return [i for i in stack for _ in range(self.repeat)]


class Block(nn.Module):
    """One block: a sequence mixer (attention, short conv, ... from MIXERS by `layer_types`), then a
    feed-forward (dense or mixture of experts, from FFNS by `mlp_types`), each a residual sublayer with norms
    placed per config:

    pre:      h = h + f(norm(h))
    post:     h = norm(h + f(h))
    sandwich: h = h + norm_out(f(norm_in(h)))          (Gemma3)
    A parametrization may multiply each branch before the add (completep: f(...) x (base_depth / depth)^alpha).
    Canon A / C mix the sublayer input right before the mixer / the MLP (B and D sit inside them).
    The mixer sits at `self.<slot>` (attn, conv) with its norms at `<slot>_norm` and `<slot>_out_norm`.
    `kv` is this application's slot of a KV cache, or None (whole-sequence forward).
    """

    def __init__(self, cfg, layer: int):
        super().__init__()
        mixer = MIXERS.get(cfg.layer_type(layer))
        self.slot = mixer.slot
        self.placement = cfg.norm.placement

        def norm(where: str) -> nn.Module | None:
            wanted = {"before": ("pre", "sandwich"), "after": ("post", "sandwich")}[where]
            return make_norm(cfg, cfg.d_model) if self.placement in wanted else None

        setattr(self, f"{self.slot}_norm", norm("before"))
        setattr(self, f"{self.slot}_out_norm", norm("after"))
        self.canon_a = make_canon(cfg, "A", cfg.d_model)
        setattr(self, self.slot, mixer(cfg))
        self.mlp_norm, self.mlp_out_norm = norm("before"), norm("after")
        self.canon_c = make_canon(cfg, "C", cfg.d_model)
        self.mlp = FFNS.get(cfg.mlp_type(layer)).build(cfg)
        self.drop = nn.Dropout(cfg.block.dropout)
        # times each sublayer's output is dropped out (model.block.dropout_at: usually 1 each, or 0)
        self.drops = {"A": cfg.block.dropout_at.count("mixer"), "C": cfg.block.dropout_at.count("mlp")}
        self.branch_scale = scheme_of(cfg).residual_multiplier()  # completep: (base_depth / depth)^alpha; else None

    @property
    def mixer(self) -> nn.Module:
        return getattr(self, self.slot)

    def _sublayer(self, h, norm_in, canon, where, fn, norm_out, seq, kv) -> torch.Tensor:
        x = h if norm_in is None else norm_in(h)
        if canon is not None:
            x = canon(x) if kv is None else kv.canon(where, canon, x)
        y = fn(x, seq, kv)
        for _ in range(self.drops[where]):
            y = self.drop(y)
        if self.placement == "post":
            return norm_out(h + y)
        if norm_out is not None:
            y = norm_out(y)
        return h + (y if self.branch_scale is None else y * self.branch_scale)

    def forward(self, h: torch.Tensor, seq, kv=None) -> torch.Tensor:
        mixer_norm, mixer_out_norm = getattr(self, f"{self.slot}_norm"), getattr(self, f"{self.slot}_out_norm")
        h = self._sublayer(h, mixer_norm, self.canon_a, "A", self.mixer, mixer_out_norm, seq, kv)
        return self._sublayer(h, self.mlp_norm, self.canon_c, "C", self.mlp, self.mlp_out_norm, seq, kv)
