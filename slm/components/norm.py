"""Normalisation layers, chosen by `model.norm.kind`, and the `model.norm` settings (`NormSettings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from slm.components.registry import Registry
from slm.settings import Settings, setting

NORMS: Registry[type[nn.Module]] = Registry("norm")


@dataclass
class NormSettings(Settings):
    """`model.norm`: the normalisation layers of the blocks, the qk-norm and the final norm."""

    kind: str = setting("rmsnorm", choices=NORMS)
    """Normalisation: layernorm, rmsnorm, rmsnorm_gemma (scale by 1 + w)."""
    eps: float = setting(1e-6, gt=0)
    """Epsilon of every norm."""
    placement: Literal["pre", "post", "sandwich"] = "pre"
    """pre (norm before each sublayer), post (after the residual add), sandwich (before and after)."""
    final: bool | None = None
    """A norm before the head; None: with pre and sandwich placement, not with post (a post-norm block ends
    normalised). arXiv 2512.20877's post-norm models add one."""

    @property
    def has_final(self) -> bool:
        """Whether the network normalises before the head (`final`, or its default by placement)."""
        return self.placement != "post" if self.final is None else self.final


def make_norm(cfg, dim: int) -> nn.Module:
    """A norm of the model's kind over `dim` channels (eps model.norm.eps; a bias where model.block.bias asks and
    the kind has one)."""
    return NORMS.get(cfg.norm.kind)(dim, eps=cfg.norm.eps, bias=cfg.block.bias)


def norm_params(cfg, dim: int) -> int:
    """Parameters of `make_norm(cfg, dim)`."""
    return NORMS.get(cfg.norm.kind).num_params(dim, cfg.block.bias)


@NORMS.register("layernorm")
class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (GPT-2 has one)."""

    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    @staticmethod
    def num_params(dim: int, bias: bool) -> int:
        return dim * (2 if bias else 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


@NORMS.register("rmsnorm")
class RMSNorm(nn.Module):
    """RMSNorm (Zhang & Sennrich 2019): x / rms(x) * w, computed in float32 as LLaMA does."""

    def __init__(self, dim: int, eps: float = 1e-6, bias: bool = False):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    @staticmethod
    def num_params(dim: int, bias: bool) -> int:
        return dim

    def _normalize(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # the same arithmetic without the no-op casts (batch-1 decode counts ops)
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))
        return self.weight * self._normalize(x).to(x.dtype)


@NORMS.register("rmsnorm_gemma")
class GemmaRMSNorm(RMSNorm):
    """Gemma's RMSNorm: scale by (1 + w), w initialised at zero, all in float32."""

    def __init__(self, dim: int, eps: float = 1e-6, bias: bool = False):
        super().__init__(dim, eps)
        nn.init.zeros_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self._normalize(x) * (1.0 + self.weight.float())).to(x.dtype)
