"""Feed-forward sublayers.

Each layer's feed-forward kind comes from FFNS by `ModelConfig.mlp_types`: `dense` is one MLP of the kind
`ModelConfig.mlp` (MLPS below); `moe` (slm.components.moe) a mixture of experts of that kind. An FFNS entry
provides `build(cfg)` (the module), `num_params(cfg)` and `active_params(cfg)` (the parameters one token
uses), and its module runs `forward(x, seq, kv)` like a mixer (slm.components.mixer).

MLPS: two-matrix MLPs (`gelu`, `relu`): down(act(up(x))). Gated MLPs (`swiglu`, `geglu`, Shazeer 2020):
down(act(gate(x)) * up(x)), with gate and up fused into one matrix `fc_in` of 2 * d_ff rows,
[gate; up]. Canon D, when asked for, mixes the output of `fc_in` before the activation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from slm.components.canon import canon_params, make_canon
from slm.components.init import residual_out
from slm.components.registry import Registry

MLPS: Registry[type["MLP"]] = Registry("mlp")
FFNS: Registry[type["FeedForward"]] = Registry("mlp type")


class FeedForward:
    """Base of the FFNS entries: builds a layer's feed-forward module and counts it."""

    @classmethod
    def build(cls, cfg) -> nn.Module:
        return cls(cfg)

    @staticmethod
    def num_params(cfg) -> int:
        raise NotImplementedError

    @classmethod
    def active_params(cls, cfg) -> int:
        """Parameters applied to each token (all of them, unless the layer routes tokens)."""
        return cls.num_params(cfg)


@FFNS.register("dense")
class Dense(FeedForward):
    """One MLP of kind `cfg.mlp` for every token."""

    @classmethod
    def build(cls, cfg) -> nn.Module:
        return MLPS.get(cfg.mlp)(cfg)

    @staticmethod
    def num_params(cfg) -> int:
        return MLPS.get(cfg.mlp).num_params(cfg)


class MLP(nn.Module):
    """Two-matrix MLP; subclasses set the activation and whether the MLP is gated."""

    gated = False

    def __init__(self, cfg, d_ff: int | None = None):
        """An MLP of hidden size `d_ff` (default cfg.d_ff; a mixture of experts' shared expert has its own)."""
        super().__init__()
        d_ff = cfg.d_ff if d_ff is None else d_ff
        n_in = 2 * d_ff if self.gated else d_ff
        self.gelu_approximate = cfg.gelu_approximate
        self.fc_in = nn.Linear(cfg.d_model, n_in, bias=cfg.bias)  # (d -> [gate; up]) or (d -> d_ff)
        self.canon_d = make_canon(cfg, "D", n_in)
        self.fc_out = residual_out(nn.Linear(d_ff, cfg.d_model, bias=cfg.bias))

    @classmethod
    def default_d_ff(cls, d_model: int, multiple: int) -> int:
        """4d for two-matrix MLPs; 8/3 d rounded up to `multiple` for gated ones (same matmul cost)."""
        if not cls.gated:
            return 4 * d_model
        return multiple * -(-8 * d_model // (3 * multiple))  # integer ceil

    @classmethod
    def num_params(cls, cfg) -> int:
        n_in = 2 * cfg.d_ff if cls.gated else cfg.d_ff
        bias = n_in + cfg.d_model if cfg.bias else 0
        return cfg.d_model * n_in + cfg.d_ff * cfg.d_model + bias + canon_params(cfg, "D", n_in)

    @staticmethod
    def activation(x: torch.Tensor, gelu_approximate: str) -> torch.Tensor:
        """The nonlinearity (on the gate of a gated MLP)."""
        raise NotImplementedError

    def act(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(x, self.gelu_approximate)

    def forward(self, x: torch.Tensor, seq=None, kv=None) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d). `kv`: the block application's KV-cache slot (slm.model.cache), which
        runs Canon D over its cached past inputs; None for a whole-sequence forward. `seq` is unused."""
        h = self.fc_in(x)
        if self.canon_d is not None:
            h = self.canon_d(h) if kv is None else kv.canon("D", self.canon_d, h)
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            h = self.act(gate) * up
        else:
            h = self.act(h)
        return self.fc_out(h)


@MLPS.register("gelu")
class GeluMLP(MLP):
    @staticmethod
    def activation(x, gelu_approximate):
        return F.gelu(x, approximate=gelu_approximate)


@MLPS.register("relu")
class ReluMLP(MLP):
    @staticmethod
    def activation(x, gelu_approximate):
        return F.relu(x)


@MLPS.register("swiglu")
class SwiGLU(MLP):
    gated = True

    @staticmethod
    def activation(x, gelu_approximate):
        return F.silu(x)


@MLPS.register("geglu")
class GeGLU(MLP):
    gated = True

    @staticmethod
    def activation(x, gelu_approximate):
        return F.gelu(x, approximate=gelu_approximate)
