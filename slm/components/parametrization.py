"""Parametrizations, chosen by `model.parametrization.kind` (the group's settings, `ParametrizationSettings`, live
here): how init, learning rates and forward multipliers change with width and depth, so that one learning rate can
serve models of different shapes.

    sp         the standard parametrization: nothing changes with shape (every preset's own behaviour)
    mup        μP (Yang et al. 2022, Tensor Programs V, arXiv 2203.03466) in the form microsoft/mup's MuReadout
               and MuAdam and the EleutherAI/Cerebras nanoGPT-mup guide use; m = d_model / base_width:
                 hidden matrices    init std x m^-1/2, Adam learning rate x 1/m
                 readout            logits x 1/m (tied or not; the head's own init and lr unscaled)
                 attention          q.k scale x (base_head_dim / head_dim)^1/2: 1/head_dim instead of
                                    1/sqrt(head_dim), equal to SP's at base_head_dim
                 embeddings, learned positions, norms, biases, depthwise (Canon, short) convolutions: unscaled
                 (Gemma's sqrt(d_model) embedding multiplier becomes sqrt(base_width))
                 hidden matrices' AdamW decay (`decay`): "with_lr" (mup's default) leaves weight_decay x1, so
                 the decoupled shrinkage lr x weight_decay falls with the hidden lr as 1/m, as nanoGPT-mup and
                 microsoft/mup's MuAdamW(decoupled_wd=True) do; "width_independent" multiplies weight_decay by m,
                 so lr x weight_decay stays the base model's, as the released microsoft/mup's default
                 (decoupled_wd=False) and CompleteP do
    completep  CompleteP (Dey et al. 2025, arXiv 2505.01618): mup, plus depth; r = depth / base_depth
               (block applications), α = depth_alpha (1: CompleteP, 0.5: the earlier depth-μP):
                 residual branches  x r^-α (every mixer and feed-forward output before its residual add)
                 hidden matrices    learning rate x 1/m x r^(α-1), AdamW weight decay x m (lr x decay, the
                                    step's shrinkage, stays width-independent: `decay` "width_independent",
                                    completep's default)
                 norms, biases inside blocks   learning rate x r^(α-1)
                 AdamW ε            x 1/m x r^-α
                 GPT-2's residual init   std / sqrt(2 base_depth) at every depth (SP's shrinks with depth)
               following the paper's reference implementation (EleutherAI/nanoGPT-mup, branch completep).

A parameter's role (`roles`) is read from where it sits, not from per-family rules: embeddings and learned
positions are inputs; the untied head is the readout; a matrix (2-D or more: linear weights, stacked experts)
inside the network is hidden unless it is a depthwise convolution; everything else (norms, biases) is a vector.
`in_block` marks the parameters inside a residual branch. The same roles give the optimizer its parameter groups
(slm.training.optim), so the scheme's init and learning-rate rules always agree on which tensor is which.

Width is d_model: every hidden matrix is scaled by the same m, as nanoGPT-mup does, which is exact when the sizes
that follow d_model (heads via head_dim, a derived d_ff) do. A size held fixed while d_model moves (an explicit
d_ff, n_kv_heads) is scaled as if it followed, which is not μP for that matrix: an MLP whose d_ff stays fixed while
d_model grows sees its down-projection's init and lr shrink with a fan-in that does not grow (leave mlp.d_ff null,
or set mlp.ratio, for a width sweep). The MoE router (d_model -> n_experts) takes the hidden rule (its logits stay
O(1) at init; strict μP would start them at 0 like the readout's). Models these rules do not cover are refused by
`check`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from slm.components.init import INITS
from slm.components.registry import Registry
from slm.settings import Settings, require, setting

PARAMETRIZATIONS: Registry[type["Parametrization"]] = Registry("parametrization")

ROLES = ("embedding", "readout", "hidden", "vector")


@dataclass
class ParametrizationSettings(Settings):
    """`model.parametrization`: how the weights start and how init, learning rates and forward multipliers scale
    with shape, and the base shape that the μP family (mup, completep) scales from (`sp` ignores it)."""

    kind: str = setting("sp", choices=PARAMETRIZATIONS)
    """How init, learning rates and forward multipliers scale with shape: sp (standard: none), mup (μP over width,
    from base_width) or completep (μP and CompleteP's depth rule, from base_depth)."""
    init: str = setting("gpt2", choices=INITS)
    """Init scheme (slm.components.init): gpt2 (residual output projections scaled by 1 / sqrt(2 * depth)), normal
    (transformers' LLaMA family: nothing scaled), torch (PyTorch's module defaults) or torch_mha (torch, attention
    as nn.MultiheadAttention's); presets use their reference implementation's."""
    init_std: float = setting(0.02, gt=0)
    """Std of the normal init of linear, embedding (and, under `normal`, conv-mixer) weights."""
    base_width: int = setting(256, gt=0)
    """mup, completep: d_model of the base model, the width at which the learning rate was tuned (m = d_model /
    base_width)."""
    base_depth: int = setting(2, gt=0)
    """completep: block applications of the base model (r = depth / base_depth)."""
    depth_alpha: float = setting(1.0, gt=0, le=1)
    """completep: residual branches x r^-alpha; 1 is CompleteP, 0.5 the earlier depth-μP (Yang et al. 2023)."""
    base_head_dim: int | None = setting(None, gt=0, null="the model's own head_dim")
    """mup, completep: head_dim of the base model, anchoring the 1/head_dim attention scale; None: the model's own
    head_dim (slm's presets and the budget solver widen by adding heads at a fixed head_dim)."""
    decay: Literal["with_lr", "width_independent"] | None = None
    """mup, completep: hidden matrices' AdamW weight decay: with_lr (x1: lr x decay falls as 1/m, nanoGPT-mup,
    microsoft/mup's MuAdamW(decoupled_wd=True)), width_independent (x m: lr x decay is the base model's,
    microsoft/mup's default and CompleteP's); None: the parametrization's own (mup with_lr, completep
    width_independent)."""

    def check(self, key: str, cfg) -> None:
        """Whether the scheme applies to the model `cfg` (Parametrization.check)."""
        PARAMETRIZATIONS.get(self.kind).check(f"{key}.kind", cfg)


@dataclass(frozen=True)
class Role:
    """What a parameter is to a parametrization: its kind (ROLES) and whether it sits in a residual branch."""

    kind: str
    in_block: bool = False


@dataclass(frozen=True)
class GroupScale:
    """Multipliers of one parameter's optimizer settings: lr (the width factor `lr_width` apart, which optimizers
    that set their own per-shape step, such as Muon, leave out), weight decay and AdamW ε."""

    lr: float = 1.0
    lr_width: float = 1.0
    weight_decay: float = 1.0
    eps: float = 1.0


def roles(model: nn.Module) -> list[tuple[str, nn.Parameter, Role]]:
    """(name, parameter, role) of each distinct trainable parameter, in `model.named_parameters()` order (a tied
    weight once, under its first name)."""
    inputs = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    position = getattr(model, "position", None)
    if isinstance(position, nn.Module):
        inputs |= {id(p) for p in position.parameters()}
    head = getattr(model, "lm_head", None)
    readout = {id(head.weight)} if isinstance(head, nn.Linear) and id(head.weight) not in inputs else set()
    depthwise = {id(m.weight) for m in model.modules()
                 if isinstance(m, nn.Conv1d) and m.groups == m.in_channels and m.groups > 1}
    blocks = getattr(model, "blocks", None)
    in_blocks = {id(p) for p in blocks.parameters()} if isinstance(blocks, nn.Module) else set()
    out = []
    for name, p in model.named_parameters():  # tied weights are yielded once
        if not p.requires_grad:
            continue
        if id(p) in inputs:
            kind = "embedding"
        elif id(p) in readout:
            kind = "readout"
        elif p.ndim >= 2 and id(p) not in depthwise:
            kind = "hidden"
        else:
            kind = "vector"
        out.append((name, p, Role(kind, id(p) in in_blocks)))
    return out


class Parametrization:
    """A scheme: its forward multipliers, init rule and per-role optimizer multipliers. The base class is `sp`
    (nothing scaled); each method returns the neutral value there, so the model skips the extra work."""

    def __init__(self, cfg):
        self.cfg = cfg

    @classmethod
    def check(cls, key: str, cfg) -> None:
        """Raise SettingsError naming (`key`: the model's parametrization.kind) why this scheme does not apply to
        `cfg` (nothing for sp)."""

    # ------------------------------------------------------------------ forward
    def residual_multiplier(self) -> float | None:
        """Multiplier of every residual branch's output; None: none (1)."""
        return None

    def readout_multiplier(self) -> float | None:
        """Multiplier of the final hidden state before the head (so of the logits); None: none (1)."""
        return None

    def attention_scale(self, scale: float, head_dim: int) -> float:
        """The q.k scale given the standard one (`attention.scale`, or 1/sqrt(head_dim))."""
        return scale

    def embedding_scale(self, scale: float) -> float:
        """The token embeddings' multiplier given the model's (`embedding.scale`: sqrt(d_model), Gemma)."""
        return scale

    # ------------------------------------------------------------------ init
    def init_depth(self) -> int:
        """The depth that GPT-2's residual init (std / sqrt(2 depth)) uses."""
        return self.cfg.depth

    def init_multiplier(self, role: Role) -> float:
        """Multiplier of a parameter's initial values (its init std) after the init scheme drew them."""
        return 1.0

    # ------------------------------------------------------------------ optimizer
    def group_scale(self, role: Role) -> GroupScale:
        return GroupScale()

    def describe(self) -> dict:
        """The scheme's multipliers at this shape, for the run record."""
        return {}


PARAMETRIZATIONS.register("sp")(Parametrization)


@PARAMETRIZATIONS.register("mup")
class MuP(Parametrization):
    """μP over width (see the module docstring)."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.settings = cfg.parametrization
        self.width = cfg.d_model / self.settings.base_width  # m

    @classmethod
    def check(cls, key: str, cfg) -> None:
        name = cfg.parametrization.kind
        require((cfg.kind == "transformer", key, name, f"not defined for model.kind={cfg.kind}: a window model has no "
                 "residual stream whose width μP scales; use sp"),
                (cfg.parametrization.init not in ("torch", "torch_mha"), key, name,
                 f"not defined with model.parametrization.init={cfg.parametrization.init}: PyTorch's fan-in init "
                 "already scales with width, and μP here rescales the init_std schemes (gpt2, normal); use one of "
                 "those or sp"),
                ("mac" not in cfg.layer_types, key, name, "not defined for mac layers (Titans): no μP rule is "
                 "published for the memory's inner learning rate and weights; use sp"))

    def readout_multiplier(self) -> float | None:
        return 1.0 / self.width

    def attention_scale(self, scale: float, head_dim: int) -> float:
        base = self.settings.base_head_dim or head_dim
        return scale if base == head_dim else scale * math.sqrt(base / head_dim)

    def embedding_scale(self, scale: float) -> float:
        return scale / math.sqrt(self.width)  # sqrt(d_model) -> sqrt(base_width): the input layer's output stays O(1)

    def init_multiplier(self, role: Role) -> float:
        return self.width**-0.5 if role.kind == "hidden" else 1.0

    DEFAULT_DECAY = "with_lr"

    def decay_multiplier(self) -> float:
        """Hidden matrices' weight-decay multiplier: 1 (with_lr) or m (width_independent), `parametrization.decay`."""
        rule = self.settings.decay or self.DEFAULT_DECAY
        return self.width if rule == "width_independent" else 1.0

    def group_scale(self, role: Role) -> GroupScale:
        if role.kind == "hidden":
            return GroupScale(lr_width=1.0 / self.width, weight_decay=self.decay_multiplier())
        return GroupScale()

    def describe(self) -> dict:
        return {"width_multiplier": self.width, "readout_multiplier": self.readout_multiplier(),
                "hidden_init_multiplier": self.width**-0.5, "hidden_lr_multiplier": 1.0 / self.width,
                "hidden_weight_decay_multiplier": self.decay_multiplier()}


@PARAMETRIZATIONS.register("completep")
class CompleteP(MuP):
    """μP over width and CompleteP's depth rule (see the module docstring)."""

    DEFAULT_DECAY = "width_independent"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.depth = cfg.depth / self.settings.base_depth  # r
        self.alpha = self.settings.depth_alpha

    @classmethod
    def check(cls, key: str, cfg) -> None:
        super().check(key, cfg)
        require((cfg.norm.placement != "post", key, cfg.parametrization.kind, "not defined with "
                 "model.norm.placement=post: CompleteP scales residual branches of pre-norm blocks (a post-norm block "
                 "normalises the sum); use pre or sandwich, or mup"))

    def residual_multiplier(self) -> float | None:
        return self.depth**-self.alpha

    def init_depth(self) -> int:
        return self.settings.base_depth

    def group_scale(self, role: Role) -> GroupScale:
        depth_lr = self.depth ** (self.alpha - 1)
        eps = 1.0 / self.width * self.depth**-self.alpha
        if role.kind == "hidden":
            return GroupScale(lr=depth_lr, lr_width=1.0 / self.width, weight_decay=self.decay_multiplier(), eps=eps)
        if role.in_block:
            return GroupScale(lr=depth_lr, eps=eps)
        return GroupScale(eps=eps)

    def describe(self) -> dict:
        return {**super().describe(), "depth_multiplier": self.depth, "residual_multiplier": self.residual_multiplier(),
                "hidden_lr_multiplier": 1.0 / self.width * self.depth ** (self.alpha - 1),
                "eps_multiplier": 1.0 / self.width * self.depth**-self.alpha}


def scheme_of(cfg) -> Parametrization:
    """The parametrization instance for a model config."""
    return PARAMETRIZATIONS.get(cfg.parametrization.kind)(cfg)


@torch.no_grad()
def rescale_init(model: nn.Module, scheme: Parametrization) -> None:
    """Multiply each parameter's freshly drawn values by the scheme's init multiplier for its role."""
    for _, p, role in roles(model):
        factor = scheme.init_multiplier(role)
        if factor != 1.0:
            p.mul_(factor)
