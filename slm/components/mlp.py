"""Feed-forward sublayers.

Each layer's feed-forward kind comes from FFNS by `model.mlp_types`: `dense` is one MLP of the kind `model.mlp.kind`
(MLPS below; its settings, model.mlp, are `MlpSettings`); `moe` (slm.components.moe) a mixture of experts of that
kind. An FFNS entry provides `build(cfg)` (the module), `num_params(cfg)` and `active_params(cfg)` (the parameters
one token uses), and its module runs `forward(x, seq, kv)` like a mixer (slm.components.mixer).

MLPS: two-matrix MLPs (`gelu`, `relu`): down(act(up(x))). Gated MLPs (`swiglu`, `geglu`, Shazeer 2020):
down(act(gate(x)) * up(x)), with gate and up fused into one matrix `fc_in` of 2 * d_ff rows,
[gate; up]. Canon D, when asked for, mixes the output of `fc_in` before the activation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from slm.components.canon import canon_params, make_canon
from slm.components.init import residual_out
from slm.components.registry import Registry
from slm.settings import Settings, require, setting

MLPS: Registry[type["MLP"]] = Registry("mlp")
FFNS: Registry[type["FeedForward"]] = Registry("mlp type")


@dataclass
class MlpSettings(Settings):
    """`model.mlp`: the MLP of the dense layers and of every expert, and the hidden layers of an mlp window model."""

    kind: str = setting("swiglu", choices=MLPS)
    """MLP kind (of the dense layers and of every expert): gelu, relu (two matrices), swiglu, geglu (gated)."""
    d_ff: int | None = setting(None, gt=0, null="derived")
    """MLP hidden size; None derives ratio * d, else 4 d (two-matrix MLPs) or 8/3 d (gated), rounded up to
    d_ff_multiple for gated MLPs."""
    d_ff_multiple: int = setting(64, gt=0)
    """Rounding multiple for a derived gated d_ff (LLaMA's multiple_of)."""
    ratio: float | None = setting(None, gt=0, null="the MLP kind's rule")
    """A derived d_ff is ratio * d_model rounded up to d_ff_multiple (LFM2: 3); None: the MLP kind's rule."""
    gelu_approximate: Literal["none", "tanh"] = "tanh"
    """GELU form for gelu/geglu: tanh (GPT-2's gelu_new, Gemma) or none (exact erf)."""
    window_hidden: list[int] = setting(factory=list, gt=0, each=True)
    """Hidden widths of an mlp window model (model.kind=mlp: Linear, ReLU, dropout each); empty for the other
    kinds."""

    def derive(self, cfg) -> None:
        """d_ff from d_model when left null."""
        if self.d_ff is None and self.ratio is not None:
            self.d_ff = self.d_ff_multiple * math.ceil(self.ratio * cfg.d_model / self.d_ff_multiple)
        elif self.d_ff is None:
            self.d_ff = MLPS.get(self.kind).default_d_ff(cfg.d_model, self.d_ff_multiple)

    def check(self, key: str, cfg) -> None:
        """window_hidden against the network kind."""
        window = cfg.kind == "mlp"
        require((bool(self.window_hidden) == window, f"{key}.window_hidden", self.window_hidden,
                 f"model.kind={cfg.kind!r} " + ("needs at least one hidden width, e.g. [256, 256]" if window
                                                else "takes none; set []")))


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
    """One MLP of kind `cfg.mlp.kind` for every token."""

    @classmethod
    def build(cls, cfg) -> nn.Module:
        return MLPS.get(cfg.mlp.kind)(cfg)

    @staticmethod
    def num_params(cfg) -> int:
        return MLPS.get(cfg.mlp.kind).num_params(cfg)


class MLP(nn.Module):
    """Two-matrix MLP; subclasses set the activation and whether the MLP is gated."""

    gated = False

    def __init__(self, cfg, d_ff: int | None = None):
        """An MLP of hidden size `d_ff` (default cfg.mlp.d_ff; a mixture of experts' shared expert has its own)."""
        super().__init__()
        d_ff = cfg.mlp.d_ff if d_ff is None else d_ff
        n_in = 2 * d_ff if self.gated else d_ff
        self.gelu_approximate = cfg.mlp.gelu_approximate
        bias = cfg.block.bias
        self.fc_in = nn.Linear(cfg.d_model, n_in, bias=bias)  # (d -> [gate; up]) or (d -> d_ff)
        self.canon_d = make_canon(cfg, "D", n_in)
        self.fc_out = residual_out(nn.Linear(d_ff, cfg.d_model, bias=bias))

    @classmethod
    def default_d_ff(cls, d_model: int, multiple: int) -> int:
        """4d for two-matrix MLPs; 8/3 d rounded up to `multiple` for gated ones (same matmul cost)."""
        if not cls.gated:
            return 4 * d_model
        return multiple * -(-8 * d_model // (3 * multiple))  # integer ceil

    @classmethod
    def num_params(cls, cfg) -> int:
        d_ff = cfg.mlp.d_ff
        n_in = 2 * d_ff if cls.gated else d_ff
        bias = n_in + cfg.d_model if cfg.block.bias else 0
        return cfg.d_model * n_in + d_ff * cfg.d_model + bias + canon_params(cfg, "D", n_in)

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
