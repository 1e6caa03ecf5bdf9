"""Position information, chosen by `model.position.kind`, and the `model.position` settings (`PositionSettings`).

A position component acts at one or both of two places: `embed` adds to the token embeddings at the
input (learned absolute positions), and `rotary` returns the (cos, sin) tables that attention applies to
queries and keys (RoPE). Components read what they need from the model config (duck-typed; this layer
never imports the model).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from slm.components.registry import Registry
from slm.settings import Settings, require, setting

POSITIONS: Registry[type["Position"]] = Registry("position")


@dataclass
class PositionSettings(Settings):
    """`model.position`: how the network knows where a token is."""

    kind: str = setting("rope", choices=POSITIONS)
    """Position information: learned (absolute), rope, none."""
    rope_theta: float = setting(10000.0, gt=0)
    """RoPE base."""
    rope_theta_local: float | None = setting(None, gt=0, null="rope_theta")
    """RoPE base of sliding-window layers; None means rope_theta (Gemma3 uses 10k local, 1M global)."""
    rotary_fraction: float = setting(1.0, gt=0, le=1)
    """Fraction of each head's channels that RoPE rotates (partial rotary)."""

    def check(self, key: str, cfg) -> None:
        """Whether the kind applies to the model `cfg` (Position.check)."""
        POSITIONS.get(self.kind).check(key, cfg)

Rotary = tuple[torch.Tensor, torch.Tensor]  # (cos, sin), each (T, rot_dim), or (B, 1, T, rot_dim) per row


class Position(nn.Module):
    """Base class: no position information at all."""

    @classmethod
    def from_config(cls, cfg) -> "Position":
        return cls()

    @staticmethod
    def num_params(cfg) -> int:
        return 0

    @classmethod
    def check(cls, key: str, cfg) -> None:
        """Raise SettingsError (naming `key`.<field>, the model's position settings) where this kind cannot serve
        `cfg`; nothing for most."""

    def embed(self, h: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """h: (B, T, d), pos: (T,) or, with a KV cache, (B, T) absolute positions -> (B, T, d)."""
        return h

    def rotary(self, pos: torch.Tensor, local: bool, dtype: torch.dtype) -> Rotary | None:
        """Tables for attention layers at positions (T,) or (B, T); `local` selects the sliding-window
        layers' base."""
        return None


@POSITIONS.register("none")
class NoPosition(Position):
    """NoPE: causal attention alone carries order."""


@POSITIONS.register("learned")
class LearnedPosition(Position):
    """Absolute learned position embeddings added to the token embeddings (GPT-2's wpe)."""

    def __init__(self, context_length: int, d_model: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(context_length, d_model))

    @classmethod
    def from_config(cls, cfg) -> "LearnedPosition":
        return cls(cfg.context_length, cfg.d_model)

    @staticmethod
    def num_params(cfg) -> int:
        return cfg.context_length * cfg.d_model

    def embed(self, h: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return h + self.weight[pos]


@POSITIONS.register("rope")
class RoPE(Position):
    """Rotary embeddings (Su et al. 2021) in the half-split layout used by LLaMA in transformers.

    `fraction` < 1 rotates only the first `fraction * head_dim` channels of each head (partial rotary,
    as GPT-NeoX); sliding-window layers may use their own base `theta_local` (Gemma3).
    """

    def __init__(self, head_dim: int, theta: float, theta_local: float | None = None, fraction: float = 1.0):
        super().__init__()
        self.rot_dim = int(head_dim * fraction)
        self.rot_dim -= self.rot_dim % 2
        idx = torch.arange(0, self.rot_dim, 2, dtype=torch.float32) / self.rot_dim
        self.register_buffer("inv_freq", 1.0 / theta**idx, persistent=False)
        local = theta if theta_local is None else theta_local
        self.register_buffer("inv_freq_local", 1.0 / local**idx, persistent=False)

    @classmethod
    def from_config(cls, cfg) -> "RoPE":
        p = cfg.position
        return cls(cfg.attention.head_dim, p.rope_theta, p.rope_theta_local, p.rotary_fraction)

    @classmethod
    def check(cls, key: str, cfg) -> None:
        fraction, head_dim = cfg.position.rotary_fraction, cfg.attention.head_dim
        require((int(head_dim * fraction) >= 2, f"{key}.rotary_fraction", fraction,
                 f"rotates < 2 of head_dim={head_dim} channels"))

    def rotary(self, pos: torch.Tensor, local: bool, dtype: torch.dtype) -> Rotary:
        inv_freq = self.inv_freq_local if local else self.inv_freq
        freqs = pos.float()[..., None] * inv_freq  # (T, rot_dim/2) or (B, T, rot_dim/2)
        emb = torch.cat([freqs, freqs], dim=-1)  # (T, rot_dim) or (B, T, rot_dim)
        if pos.dim() == 2:  # one row of positions per sequence (KV cache): broadcast over heads
            emb = emb[:, None]  # (B, 1, T, rot_dim)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x: torch.Tensor, rotary: Rotary) -> torch.Tensor:
    """Rotate the first rot_dim channels of x: (B, H, T, hd) with cos/sin (T, rot_dim) or (B, 1, T, rot_dim)."""
    cos, sin = rotary
    rot_dim = cos.shape[-1]
    if rot_dim == x.shape[-1]:  # full rotary: no pass-through channels to put back
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin
    x_rot, x_pass = x[..., :rot_dim], x[..., rot_dim:]
    x1, x2 = x_rot.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return torch.cat([x_rot * cos + rotated * sin, x_pass], dim=-1)
