"""Canon layers (Allen-Zhu, "Physics of Language Models: Part 4.1", 2025).

A Canon layer mixes each channel with its previous `kernel - 1` positions: a depthwise causal conv1d
with no bias and no activation, added residually (h + conv(h)), with PyTorch's default conv init. Where
it sits in a block is set by `ModelConfig.canon_set` (A, B, C, D; see `slm.model.config`).
"""

from __future__ import annotations

import torch
from torch import nn

from slm.components.registry import Registry

CANONS: Registry[type[nn.Module]] = Registry("canon")

CANON_POSITIONS = "ABCD"


@CANONS.register("conv")
class CausalConvCanon(nn.Module):
    """h + depthwise_causal_conv(h) over the time axis of (B, T, C)."""

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


def make_canon(cfg, position: str, channels: int) -> nn.Module | None:
    """The Canon layer at `position` ("A".."D") if the config asks for one there, else None."""
    if position not in cfg.canon_set:
        return None
    return CANONS.get(cfg.canon)(channels, cfg.canon_kernel)


def canon_params(cfg, position: str, channels: int) -> int:
    """Parameter count of `make_canon(cfg, position, channels)`, without building it."""
    return CANONS.get(cfg.canon).num_params(channels, cfg.canon_kernel) if position in cfg.canon_set else 0
