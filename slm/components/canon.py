"""Canon layers (Allen-Zhu, "Physics of Language Models: Part 4.1", 2025).

A Canon layer mixes each channel with its previous `kernel - 1` positions: a depthwise causal conv1d
with no bias and no activation, added residually (h + conv(h)), with PyTorch's default conv init. Where
it sits in a block is set by `model.canon.set` (A, B, C, D; `CanonSettings`).

`conv` is causal, as the paper's autoregressive models need. In a bidirectional model (masked diffusion) the
padding is a choice: `conv_centered` mixes a window centred on each position (kernel 4: two positions
before, itself, one after), so a masked position sees its neighbours on both sides. A centred layer reads
future positions, so a causal model refuses it, and it has no cached (token by token) form.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from slm.components.registry import Registry
from slm.settings import Settings, require, setting

CANONS: Registry[type[nn.Module]] = Registry("canon")

CANON_POSITIONS = "ABCD"


@dataclass
class CanonSettings(Settings):
    """`model.canon`: where a model has Canon layers and of which kind."""

    kind: str = setting("conv", choices=CANONS)
    """Canon layer kind (CANONS): conv (depthwise causal conv1d, residual) or conv_centered (the window centred on
    each position: a bidirectional model's choice)."""
    set: str = ""
    """Canon positions, any of ABCD: A before the mixer, B on attention's fused qkv, C before the MLP, D inside
    it; empty: no Canon layer."""
    b_after_qk_norm: bool = False
    """Canon B on cat(q, k, v) after the qk-norm, as the Canon reference (PhysicsLM4) orders them; false: on the
    fused projection before it. The two coincide without qk_norm."""
    kernel: int = setting(4, gt=0)
    """Canon convolution width (positions mixed, itself included)."""

    def check(self, key: str, cfg) -> None:
        """Against the model `cfg` (attention.causal, attention.block)."""
        centred = bool(self.set) and not CANONS.get(self.kind).causal
        require((len(set(self.set)) == len(self.set) and not set(self.set) - set(CANON_POSITIONS), f"{key}.set",
                 self.set, f"distinct letters from {CANON_POSITIONS!r}, e.g. 'AC'"),
                (not centred or cfg.attention.block is None, f"{key}.kind", self.kind,
                 "reads the next block: block-causal attention needs canon.kind=conv"),
                (not centred or not cfg.attention.causal, f"{key}.kind", self.kind,
                 "reads future positions: a causal model needs canon.kind=conv (conv_centered is for bidirectional "
                 "models, model.attention.causal=false)"))


@CANONS.register("conv")
class CausalConvCanon(nn.Module):
    """h + depthwise_causal_conv(h) over the time axis of (B, T, C)."""

    causal = True

    def __init__(self, channels: int, kernel: int = 4):
        super().__init__()
        self.kernel = kernel
        self.conv = nn.Conv1d(channels, channels, kernel, groups=channels, bias=False, padding=kernel - 1)

    @staticmethod
    def num_params(channels: int, kernel: int) -> int:
        return channels * kernel

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        T = h.shape[1]
        mixed = self.conv(h.transpose(1, 2))[..., :T]  # left padding only: position t sees t-k+1..t
        return h + mixed.transpose(1, 2)


@CANONS.register("conv_centered")
class CenteredConvCanon(CausalConvCanon):
    """h + depthwise conv(h) over a window centred on each position: kernel - 1 - (kernel - 1) // 2 positions
    before it and (kernel - 1) // 2 after (the same weights and count as `conv`)."""

    causal = False

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        after = (self.kernel - 1) // 2
        x = F.pad(h.transpose(1, 2), (self.kernel - 1 - after, after))  # (B, C, T + kernel - 1)
        return h + F.conv1d(x, self.conv.weight, groups=x.shape[1]).transpose(1, 2)


def conv_continue(state: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                  lengths: torch.Tensor | None, keep_state: bool = False) -> torch.Tensor:
    """Depthwise causal convolution of x (B, T, C) continuing a sequence whose last kernel - 1 inputs are
    `state` (B, kernel - 1, C; zeros at the start); weight (C, kernel). Returns the convolution (B, T, C)
    and moves `state` on, in place, to the last kernel - 1 real inputs: those before each row's padding
    when `lengths` (B,) says row b has lengths[b] real tokens (0: the state is kept). keep_state: leave
    `state` as it is (a chunk that will not stay in the cache)."""
    B, T, C = x.shape
    kernel = weight.shape[1]
    keep = kernel - 1
    full = torch.cat([state, x], dim=1)  # (B, keep + T, C)
    # the convolution as kernel shifted products: F.conv1d here is miscompiled by torch.compile
    # (inductor, torch 2.13) when a block has two Canon layers
    mixed = sum(full[:, j:j + T] * weight[:, j] for j in range(kernel))  # (B, T, C)
    if keep and not keep_state:
        if lengths is None:
            new_state = full[:, T:]
        else:  # the last `keep` inputs before each row's padding
            idx = lengths[:, None] + torch.arange(keep, device=x.device)  # (B, keep)
            new_state = full.gather(1, idx[:, :, None].expand(B, keep, C))
        state.copy_(new_state)
    return mixed


def make_canon(cfg, position: str, channels: int) -> nn.Module | None:
    """The Canon layer at `position` ("A".."D") if the config asks for one there, else None."""
    if position not in cfg.canon.set:
        return None
    return CANONS.get(cfg.canon.kind)(channels, cfg.canon.kernel)


def canon_params(cfg, position: str, channels: int) -> int:
    """Parameter count of `make_canon(cfg, position, channels)`, without building it."""
    canon = cfg.canon
    return CANONS.get(canon.kind).num_params(channels, canon.kernel) if position in canon.set else 0
