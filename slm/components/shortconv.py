"""LFM2's gated short convolution (Liquid AI 2025; transformers' `Lfm2ShortConv`), the `conv` mixer.

    b, c, x = in_proj(h).chunk(3)        # d -> 3d, split in the order B, C, x
    y = out_proj(c * conv(b * x))        # conv: depthwise, causal, kernel `model.conv.kernel`; no nonlinearity

With a KV cache it keeps the last kernel - 1 inputs of the convolution (b * x), per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from slm.components.canon import conv_continue
from slm.components.init import residual_out
from slm.components.mixer import MIXERS, Mixer
from slm.settings import Settings, setting


@dataclass
class ConvSettings(Settings):
    """`model.conv`: the conv mixer (the `conv` entries of model.layer_types)."""

    kernel: int = setting(3, gt=0)
    """Kernel of the conv mixer (LFM2's conv_L_cache): positions mixed, itself included."""


class ConvState:
    """A conv layer's slot in a KV cache: the convolution's last kernel - 1 inputs (B, kernel - 1, d)."""

    def __init__(self, cache, inputs: torch.Tensor):
        self.cache, self.inputs = cache, inputs

    def conv(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """The causal convolution of x (B, T, d) continuing the cached inputs, which move on past x."""
        return conv_continue(self.inputs, x, weight, self.cache.lengths, self.cache.peeking)

    def select(self, cache, rows: torch.Tensor) -> "ConvState":
        return ConvState(cache, self.inputs.index_select(0, rows))

    def reset(self) -> None:
        self.inputs.zero_()

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.inputs,)


@MIXERS.register("conv")
class ShortConv(Mixer):
    """Input-gated depthwise causal convolution: out_proj(C * conv(B * x)), [B; C; x] = in_proj(h)."""

    slot = "conv"

    def __init__(self, cfg):
        super().__init__()
        d, kernel, bias = cfg.d_model, cfg.conv.kernel, cfg.block.bias
        self.in_proj = nn.Linear(d, 3 * d, bias=bias)  # (3d, d): rows [B; C; x]
        self.conv = nn.Conv1d(d, d, kernel, groups=d, bias=bias, padding=kernel - 1)  # weight (d, 1, kernel)
        self.out_proj = residual_out(nn.Linear(d, d, bias=bias))

    def init_weights(self, init) -> None:
        """The convolution: normal under transformers' scheme (init.mixer_convs), else PyTorch's default."""
        if init.mixer_convs:
            init.normal(self.conv.weight)
            if self.conv.bias is not None:
                nn.init.zeros_(self.conv.bias)

    @staticmethod
    def num_params(cfg) -> int:
        d = cfg.d_model
        n = d * 3 * d + d * cfg.conv.kernel + d * d
        return n + (3 * d + d + d if cfg.block.bias else 0)

    @classmethod
    def new_state(cls, cfg, cache) -> ConvState:
        return ConvState(cache, torch.zeros(cache.batch, cfg.conv.kernel - 1, cfg.d_model, device=cache.device,
                                            dtype=cache.dtype))

    def forward(self, x: torch.Tensor, seq, kv=None) -> torch.Tensor:
        T = x.shape[1]
        b, c, h = self.in_proj(x).chunk(3, dim=-1)  # (B, T, d) each
        bx = b * h
        if kv is None:
            mixed = self.conv(bx.transpose(1, 2))[..., :T].transpose(1, 2)  # left padding only: causal
        else:
            mixed = kv.state.conv(bx, self.conv.weight[:, 0, :])
            if self.conv.bias is not None:
                mixed = mixed + self.conv.bias
        return self.out_proj(c * mixed)  # (B, T, d)
