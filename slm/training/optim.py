"""Optimizers, chosen by `train.optimizer`, over parameter groups made in one place (`parameter_groups`) from
the roles the model's parametrization assigns (slm.components.parametrization).

    adamw  torch.optim.AdamW: decoupled weight decay on matrices (not norms, biases or, by default, embeddings)
    muon   torch.optim.Muon (momentum orthogonalised by Newton-Schulz; Jordan et al. 2024) for the hidden 2-D
           matrices, at train.optim.muon.lr / momentum / weight_decay; AdamW (train.lr, betas, eps,
           weight_decay) for embeddings, the head, norms, biases and matrices that are not 2-D (stacked experts,
           depthwise convolutions), as modded-nanogpt splits them. Under mup / completep the Muon matrices keep
           the depth factor of their learning rate but not μP's Adam width factor 1/m: an orthogonalised update
           has a width-independent spectral norm, so its effect on the activations does not grow with width
           (torch's adjust_lr_fn="original" adds sqrt(max(1, rows / cols)) for non-square matrices)
    lion   Lion (Chen et al. 2023, arXiv 2302.06675): p <- p (1 - lr wd) - lr sign(b1 m + (1 - b1) g), then
           m <- b2 m + (1 - b2) g; train.lr, train.weight_decay, train.optim.lion.betas. Its update is a sign
           per coordinate, so μP's Adam rules apply to it unchanged

Each optimizer owns its settings (a dataclass under `train.optim.<name>`, checked when the config is made). The
learning-rate schedule scales every group's lr by the same factor (LambdaLR over `param_groups`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from slm.components.parametrization import GroupScale, roles, scheme_of
from slm.components.registry import Registry
from slm.typecheck import check_types, settings_from_node

OPTIMIZERS: Registry[type["Optimizer"]] = Registry("optimizer")


class OptimSettingsError(ValueError):
    """Bad `train.optim.*` settings; the message names the field, the value and what is allowed."""


@dataclass(frozen=True)
class ParamEntry:
    """One parameter with what the optimizers need to know of it."""

    param: nn.Parameter
    decay: bool
    """Weight decay applies (matrices; embeddings only with train.decay_embeddings)."""
    scale: GroupScale
    """The parametrization's multipliers of its lr, decay and ε."""
    matrix: bool
    """A hidden 2-D matrix (Muon takes these)."""


def parameter_entries(model: nn.Module, cfg) -> list[ParamEntry]:
    """Every trainable parameter once (tied weights once), in model order, with its decay and the scheme's scale."""
    model_cfg = getattr(model, "cfg", None)
    scheme = scheme_of(model_cfg) if model_cfg is not None and hasattr(model_cfg, "parametrization") else None
    out = []
    for _, p, role in roles(model):
        decay = p.ndim >= 2 and (cfg.decay_embeddings or role.kind != "embedding")
        scale = scheme.group_scale(role) if scheme is not None else GroupScale()
        out.append(ParamEntry(p, decay, scale, role.kind == "hidden" and p.ndim == 2))
    return out


def param_groups(model: nn.Module, cfg) -> list[dict]:
    """AdamW-style groups (lr from train.lr, weight_decay, eps) for every parameter: under the standard
    parametrization two groups, weight-decayed and not; otherwise one per distinct scale as well."""
    return _groups(parameter_entries(model, cfg), cfg.lr, cfg.weight_decay, cfg.eps)


def _groups(entries: list[ParamEntry], lr: float, weight_decay: float, eps: float | None,
            width: bool = True) -> list[dict]:
    """Torch parameter groups, decayed ones first; a group's lr, decay and eps carry its scale (width: apply
    the lr's width factor). All scales neutral: exactly two groups, with no per-group lr or eps."""
    if all(e.scale == GroupScale() for e in entries):
        decay = [e.param for e in entries if e.decay]
        no_decay = [e.param for e in entries if not e.decay]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    keyed: dict[tuple, list] = {}
    for e in sorted(entries, key=lambda e: not e.decay):  # stable: model order within each
        keyed.setdefault((e.decay, e.scale), []).append(e.param)
    groups = []
    for (decay, s), params in keyed.items():
        # without the lr's width factor (Muon), the decay takes it instead, so lr x decay stays the scheme's
        lr_factor, decay_factor = (s.lr_width, s.weight_decay) if width else (1.0, s.weight_decay * s.lr_width)
        group = {"params": params, "lr": lr * s.lr * lr_factor,
                 "weight_decay": weight_decay * decay_factor if decay else 0.0}
        if eps is not None:
            group["eps"] = eps * s.eps
        groups.append(group)
    return groups


class Optimizer:
    """A registry entry: `build(model, cfg)` returns the torch optimizer; `Settings` (or None) its own settings."""

    Settings = None

    @classmethod
    def build(cls, model: nn.Module, cfg) -> torch.optim.Optimizer:
        raise NotImplementedError


@OPTIMIZERS.register("adamw")
class AdamW(Optimizer):
    """torch.optim.AdamW (fused on CUDA)."""

    @classmethod
    def build(cls, model, cfg):
        fused = next(model.parameters()).is_cuda
        return torch.optim.AdamW(param_groups(model, cfg), lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps,
                                 fused=fused or None)


@dataclass
class MuonSettings:
    """`train.optim.muon`: the hidden matrices' optimizer (torch.optim.Muon)."""

    lr: float = 0.02
    """Peak learning rate of the Muon matrices (the schedule scales it with train.lr's)."""
    momentum: float = 0.95
    """Momentum coefficient."""
    nesterov: bool = True
    """Nesterov momentum."""
    ns_steps: int = 5
    """Newton-Schulz iterations of the orthogonalisation."""
    weight_decay: float | None = None
    """Decoupled weight decay of the Muon matrices; None: train.weight_decay."""
    adjust_lr: str = "original"
    """Per-shape lr factor: original (sqrt(max(1, rows / cols)), Keller Jordan's) or match_rms_adamw
    (0.2 sqrt(max(rows, cols)): an AdamW-sized update, so lr can be AdamW's)."""

    def __post_init__(self) -> None:
        check_types(self, "train.optim.muon", OptimSettingsError)
        if not self.lr > 0:
            raise OptimSettingsError(f"train.optim.muon.lr={self.lr!r} is invalid: must be > 0")
        if not 0 <= self.momentum < 1:
            raise OptimSettingsError(f"train.optim.muon.momentum={self.momentum!r} is invalid: must be in [0, 1)")
        if self.ns_steps < 1:
            raise OptimSettingsError(f"train.optim.muon.ns_steps={self.ns_steps!r} is invalid: a positive integer")
        if self.weight_decay is not None and not self.weight_decay >= 0:
            raise OptimSettingsError(f"train.optim.muon.weight_decay={self.weight_decay!r} is invalid: >= 0, or null "
                                     "(train.weight_decay)")
        if self.adjust_lr not in ("original", "match_rms_adamw"):
            raise OptimSettingsError(f"train.optim.muon.adjust_lr={self.adjust_lr!r} is invalid: choose one of: "
                                     "original, match_rms_adamw")


class Combined(torch.optim.Optimizer):
    """Optimizers over disjoint parameters that step, zero and checkpoint as one (Muon's matrices and AdamW's
    rest). `param_groups` is theirs, in order, so one LR scheduler drives them all."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]):
        self.optimizers = optimizers
        self.defaults = {}
        self._optimizer_step_pre_hooks, self._optimizer_step_post_hooks = {}, {}
        self._optimizer_state_dict_pre_hooks, self._optimizer_state_dict_post_hooks = {}, {}
        self._optimizer_load_state_dict_pre_hooks, self._optimizer_load_state_dict_post_hooks = {}, {}

    @property
    def param_groups(self) -> list[dict]:
        return [g for o in self.optimizers for g in o.param_groups]

    @property
    def state(self) -> dict:
        return {p: s for o in self.optimizers for p, s in o.state.items()}

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for o in self.optimizers:
            o.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {"optimizers": [o.state_dict() for o in self.optimizers]}

    def load_state_dict(self, state_dict: dict) -> None:
        saved = state_dict["optimizers"]
        if len(saved) != len(self.optimizers):
            raise ValueError(f"a checkpoint of {len(saved)} combined optimizers loaded into {len(self.optimizers)}")
        for o, s in zip(self.optimizers, saved):
            o.load_state_dict(s)

    def __repr__(self) -> str:
        return f"Combined({', '.join(type(o).__name__ for o in self.optimizers)})"


@OPTIMIZERS.register("muon")
class Muon(Optimizer):
    """torch.optim.Muon for the hidden 2-D matrices, AdamW for the rest."""

    Settings = MuonSettings

    @classmethod
    def build(cls, model, cfg):
        s: MuonSettings = cfg.optim["muon"]
        entries = parameter_entries(model, cfg)
        matrices = [e for e in entries if e.matrix]
        rest = [e for e in entries if not e.matrix]
        if not matrices:
            raise OptimSettingsError("train.optimizer=muon: the model has no hidden 2-D matrix for Muon; use adamw")
        decay = cfg.weight_decay if s.weight_decay is None else s.weight_decay
        groups = [g for g in _groups(matrices, s.lr, decay, None, width=False) if g["params"]]
        muon = torch.optim.Muon(groups, lr=s.lr, weight_decay=decay,
                                momentum=s.momentum, nesterov=s.nesterov, ns_steps=s.ns_steps,
                                adjust_lr_fn=s.adjust_lr)
        fused = next(model.parameters()).is_cuda
        adamw = torch.optim.AdamW(_groups(rest, cfg.lr, cfg.weight_decay, cfg.eps), lr=cfg.lr,
                                  betas=tuple(cfg.betas), eps=cfg.eps, fused=fused or None)
        return Combined([muon, adamw])


@dataclass
class LionSettings:
    """`train.optim.lion`: Lion's momentum coefficients (lr and weight decay are train.lr, train.weight_decay)."""

    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])
    """(b1, b2): b1 interpolates the update's momentum, b2 is the momentum's own decay (the paper's 0.9, 0.99)."""

    def __post_init__(self) -> None:
        check_types(self, "train.optim.lion", OptimSettingsError)
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise OptimSettingsError(f"train.optim.lion.betas={self.betas!r} is invalid: two numbers in [0, 1)")


class LionOptimizer(torch.optim.Optimizer):
    """Lion (Chen et al. 2023, Algorithm 2, with decoupled weight decay)."""

    def __init__(self, params, lr: float, betas=(0.9, 0.99), weight_decay: float = 0.0):
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (b1, b2), wd = group["lr"], group["betas"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                m = state["exp_avg"]
                if wd:
                    p.mul_(1 - lr * wd)
                p.add_(torch.sign(m * b1 + p.grad * (1 - b1)), alpha=-lr)
                m.lerp_(p.grad, 1 - b2)  # m <- b2 m + (1 - b2) g
        return loss


@OPTIMIZERS.register("lion")
class Lion(Optimizer):
    """Lion over the same groups as AdamW."""

    Settings = LionSettings

    @classmethod
    def build(cls, model, cfg):
        groups = _groups(parameter_entries(model, cfg), cfg.lr, cfg.weight_decay, None)
        return LionOptimizer(groups, lr=cfg.lr, betas=cfg.optim["lion"].betas, weight_decay=cfg.weight_decay)


def optim_settings(node) -> dict:
    """`train.optim` as {optimizer: its Settings}, every optimizer with settings present (defaults filled in);
    an unknown optimizer or field is one line."""
    if node is None:
        node = {}
    if not isinstance(node, Mapping):
        raise OptimSettingsError(f"train.optim={node!r} is invalid: a mapping of optimizer name to its settings")
    owners = {name: OPTIMIZERS.get(name).Settings for name in OPTIMIZERS.keys() if OPTIMIZERS.get(name).Settings}
    unknown = sorted(set(node) - set(owners))
    if unknown:
        raise OptimSettingsError(f"train.optim.{unknown[0]} is invalid: only these optimizers have settings: "
                                 f"{', '.join(owners)}")
    out = {}
    for name, Settings in owners.items():
        out[name] = settings_from_node(Settings, node.get(name), f"train.optim.{name}", OptimSettingsError)
    return out


def optim_defaults() -> dict:
    """Every optimizer's default settings as plain values (conf/train/default.yaml's `optim`)."""
    return {name: asdict(s) for name, s in optim_settings({}).items()}


def build_optimizer(model: nn.Module, cfg) -> torch.optim.Optimizer:
    """The optimizer `cfg.optimizer` over `model`'s parameters; `cfg` is the run's TrainConfig (slm.training.config,
    which imports this module: the annotation is left off rather than imported back)."""
    return OPTIMIZERS.get(cfg.optimizer).build(model, cfg)
