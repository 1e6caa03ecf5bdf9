"""Weight initialisation schemes, chosen by `model.parametrization.init` (each preset uses its reference's scheme).

    gpt2     normal(0, init_std) for linear and embedding weights, residual output projections (attention's
             proj, the MLP's fc_out, a conv mixer's out_proj, the experts' w_out) at init_std / sqrt(2 * depth):
             GPT-2 (Radford et al. 2019) and transformers' GPT2LMHeadModel
    normal   normal(0, init_std) for every linear, embedding and mixer-convolution weight, nothing scaled:
             transformers' _init_weights for LLaMA, Qwen3, Gemma3, LFM2, Mixtral and Qwen3-MoE, and the Canon
             reference (PhysicsLM4)
    torch    PyTorch's module defaults (Kaiming-uniform Linear, N(0, 1) embeddings and positions): arXiv
             2512.20877's reference code, which sets no init of its own (its RoPE-ablation blocks)
    torch_mha  torch, with attention as nn.MultiheadAttention initialises it (Xavier-uniform q/k/v as one
             matrix, zero q/k/v and output biases): arXiv 2512.20877's post-LN models, built on that module

gpt2 and normal zero the biases; all keep what a component initialises itself: norms (ones, Gemma's zeros), Canon
layers (PyTorch's Kaiming-uniform conv init, as the Canon reference does), learned positions (normal).
A module with parameters outside an nn.Linear / nn.Embedding initialises them in `init_weights(init)`
(stacked experts, a conv mixer's convolution); a component marks its residual output projection with
`residual_out(linear)`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from slm.components.registry import Registry

INITS: Registry[type["Init"]] = Registry("init scheme")

_RESIDUAL_OUT = "_slm_residual_out"
_ATTENTION = "_slm_attention_projection"


def residual_out(linear: nn.Linear) -> nn.Linear:
    """Mark `linear` as a projection back into the residual stream (GPT-2's scheme scales its init)."""
    setattr(linear, _RESIDUAL_OUT, True)
    return linear


def attention_projection(linear: nn.Linear, side: str) -> nn.Linear:
    """Mark `linear` as attention's fused q/k/v projection (side "in") or its output projection ("out"):
    torch_mha initialises them as nn.MultiheadAttention does."""
    setattr(linear, _ATTENTION, side)
    return linear


class Init:
    """A scheme: `module(m)` initialises one module's own weights (call it on every module, in order)."""

    scale_residual = False
    """Residual output projections at init_std / sqrt(2 * depth)."""
    mixer_convs = False
    """Normal-initialise the convolutions of conv mixers (transformers does; else PyTorch's default)."""

    def __init__(self, cfg, depth: int):
        """`depth`: the block applications GPT-2's residual init divides by (the parametrization's init_depth:
        completep's base depth)."""
        self.std = cfg.parametrization.init_std
        self.out_std = self.std / math.sqrt(2 * depth) if self.scale_residual else self.std

    def normal(self, weight: torch.Tensor, residual: bool = False) -> None:
        nn.init.normal_(weight, 0.0, self.out_std if residual else self.std)

    def position(self, weight: torch.Tensor) -> None:
        """Learned position embeddings: normal(0, std)."""
        nn.init.normal_(weight, 0.0, self.std)

    def module(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            self.normal(module.weight, getattr(module, _RESIDUAL_OUT, False))
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif hasattr(module, "init_weights"):
            module.init_weights(self)


@INITS.register("gpt2")
class GPT2Init(Init):
    """GPT-2's: normal(0, std), residual output projections std / sqrt(2 * depth)."""

    scale_residual = True


@INITS.register("normal")
class NormalInit(Init):
    """transformers' LLaMA family: normal(0, std) for every weight, mixer convolutions included."""

    mixer_convs = True


@INITS.register("torch")
class TorchInit(Init):
    """PyTorch's own defaults, as a model built from torch.nn with no init of its own gets (arXiv 2512.20877's
    reference code): Linear Kaiming-uniform weights and uniform biases (+-1/sqrt(fan_in)), embeddings and
    learned positions N(0, 1); other components as under `normal`."""

    def position(self, weight: torch.Tensor) -> None:
        nn.init.normal_(weight, 0.0, 1.0)

    def module(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.reset_parameters()
        else:
            super().module(module)


@INITS.register("torch_mha")
class TorchMHAInit(TorchInit):
    """`torch`, with attention initialised as torch.nn.MultiheadAttention._reset_parameters does: the fused
    q/k/v weight Xavier-uniform as one (q + 2 kv, d) matrix and its bias zero; the output projection's weight
    Kaiming-uniform (PyTorch's Linear default) and its bias zero (arXiv 2512.20877's post-LN models)."""

    def module(self, module: nn.Module) -> None:
        side = getattr(module, _ATTENTION, None)
        if side is None:
            return super().module(module)
        if side == "in":
            nn.init.xavier_uniform_(module.weight)
        else:
            module.reset_parameters()
        if module.bias is not None:
            nn.init.zeros_(module.bias)
