"""Optimizers, chosen by `train.optimizer`, over parameter groups made in one place (`parameter_groups`) from
the roles the model's parametrization assigns (slm.components.parametrization).

    adamw  torch.optim.AdamW: decoupled weight decay on matrices (not norms, biases or, by default, embeddings)
    muon   torch.optim.Muon (momentum orthogonalised by Newton-Schulz; Jordan et al. 2024) for the hidden 2-D
           matrices, at train.optim.muon.lr / momentum / weight_decay; AdamW (train.lr, train.optim.adamw) for
           embeddings, the head, norms, biases and matrices that are not 2-D (stacked experts,
           depthwise convolutions), as modded-nanogpt splits them. Under mup / completep the Muon matrices keep
           the depth factor of their learning rate but not μP's Adam width factor 1/m: an orthogonalised update
           has a width-independent spectral norm, so its effect on the activations does not grow with width
           (torch's adjust_lr_fn="original" adds sqrt(max(1, rows / cols)) for non-square matrices)
    lion   Lion (Chen et al. 2023, arXiv 2302.06675): p <- p (1 - lr wd) - lr sign(b1 m + (1 - b1) g), then
           m <- b2 m + (1 - b2) g; train.lr, train.optim.lion (betas, weight_decay). Its update is a sign
           per coordinate, so μP's Adam rules apply to it unchanged

Each optimizer owns its settings (a slm.settings.Settings group under `train.optim.<name>`, its class the registered
optimizer's `Settings`; `OptimSettings` has one field per registered optimizer that has settings). train.lr is the
one peak lr that the schedule and lr_search scale. The learning-rate schedule scales every group's lr by the same factor (LambdaLR over `param_groups`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, make_dataclass

import torch
from torch import nn

from slm.components.parametrization import GroupScale, roles, scheme_of
from slm.components.registry import Registry
from slm.settings import Settings, SettingsError, setting

OPTIMIZERS: Registry[type["Optimizer"]] = Registry("optimizer")
OptimSettingsError = SettingsError  # the name this module's callers knew


@dataclass(frozen=True)
class ParamEntry:
    """One parameter with what the optimizers need to know of it."""

    param: nn.Parameter
    decay: bool
    """Weight decay applies (matrices; embeddings only with train.optim.adamw.decay_embeddings)."""
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
        decay = p.ndim >= 2 and (cfg.optim.adamw.decay_embeddings or role.kind != "embedding")
        scale = scheme.group_scale(role) if scheme is not None else GroupScale()
        out.append(ParamEntry(p, decay, scale, role.kind == "hidden" and p.ndim == 2))
    return out


def param_groups(model: nn.Module, cfg) -> list[dict]:
    """AdamW-style groups (lr from train.lr, weight_decay, eps) for every parameter: under the standard
    parametrization two groups, weight-decayed and not; otherwise one per distinct scale as well."""
    adamw = cfg.optim.adamw
    return _groups(parameter_entries(model, cfg), cfg.lr, adamw.weight_decay, adamw.eps)


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


@dataclass
class AdamWSettings(Settings):
    """`train.optim.adamw`: AdamW's own settings (its lr is train.lr); also Muon's AdamW for the rest, and the
    decay Muon's and Lion's fall back to."""

    betas: list[float] = setting(factory=lambda: [0.9, 0.95], ge=0, lt=1, each=True)
    """(b1, b2): the moments' decay rates."""
    eps: float = setting(1.0e-8, gt=0)
    """Added to the second moment's square root."""
    weight_decay: float = setting(0.1, ge=0)
    """Decoupled weight decay on matrices."""
    decay_embeddings: bool = False
    """Also decay embeddings (norm weights and biases are never decayed)."""

    def check(self, key: str, root) -> None:
        if len(self.betas) != 2:
            raise SettingsError.invalid(f"{key}.betas", self.betas, "two numbers in [0, 1), e.g. [0.9, 0.95]")


@OPTIMIZERS.register("adamw")
class AdamW(Optimizer):
    """torch.optim.AdamW (fused on CUDA)."""

    Settings = AdamWSettings

    @classmethod
    def build(cls, model, cfg):
        fused = next(model.parameters()).is_cuda
        s: AdamWSettings = cfg.optim.adamw
        return torch.optim.AdamW(param_groups(model, cfg), lr=cfg.lr, betas=tuple(s.betas), eps=s.eps,
                                 fused=fused or None)


@dataclass
class MuonSettings(Settings):
    """`train.optim.muon`: the hidden matrices' optimizer (torch.optim.Muon)."""

    lr: float = setting(0.02, gt=0)
    """Peak learning rate of the Muon matrices (the schedule scales it with train.lr's)."""
    momentum: float = setting(0.95, ge=0, lt=1)
    """Momentum coefficient."""
    nesterov: bool = True
    """Nesterov momentum."""
    ns_steps: int = setting(5, gt=0)
    """Newton-Schulz iterations of the orthogonalisation."""
    weight_decay: float | None = setting(None, ge=0, null="train.optim.adamw.weight_decay")
    """Decoupled weight decay of the Muon matrices; None: train.optim.adamw.weight_decay."""
    adjust_lr: str = setting("original", choices=("original", "match_rms_adamw"))
    """Per-shape lr factor: original (sqrt(max(1, rows / cols)), Keller Jordan's) or match_rms_adamw
    (0.2 sqrt(max(rows, cols)): an AdamW-sized update, so lr can be AdamW's)."""


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
        s: MuonSettings = cfg.optim.muon
        entries = parameter_entries(model, cfg)
        matrices = [e for e in entries if e.matrix]
        rest = [e for e in entries if not e.matrix]
        if not matrices:
            raise SettingsError.invalid("train.optimizer", "muon", "the model has no hidden 2-D matrix for Muon; use "
                                        "adamw")
        adamw_s: AdamWSettings = cfg.optim.adamw
        decay = adamw_s.weight_decay if s.weight_decay is None else s.weight_decay
        groups = [g for g in _groups(matrices, s.lr, decay, None, width=False) if g["params"]]
        muon = torch.optim.Muon(groups, lr=s.lr, weight_decay=decay,
                                momentum=s.momentum, nesterov=s.nesterov, ns_steps=s.ns_steps,
                                adjust_lr_fn=s.adjust_lr)
        fused = next(model.parameters()).is_cuda
        adamw = torch.optim.AdamW(_groups(rest, cfg.lr, adamw_s.weight_decay, adamw_s.eps), lr=cfg.lr,
                                  betas=tuple(adamw_s.betas), eps=adamw_s.eps, fused=fused or None)
        return Combined([muon, adamw])


@dataclass
class LionSettings(Settings):
    """`train.optim.lion`: Lion's momentum coefficients and decay (its lr is train.lr)."""

    betas: list[float] = setting(factory=lambda: [0.9, 0.99], ge=0, lt=1, each=True)
    """(b1, b2): b1 interpolates the update's momentum, b2 is the momentum's own decay (the paper's 0.9, 0.99)."""
    weight_decay: float | None = setting(None, ge=0, null="train.optim.adamw.weight_decay")
    """Decoupled weight decay; None: train.optim.adamw.weight_decay."""

    def check(self, key: str, root) -> None:
        if len(self.betas) != 2:
            raise SettingsError.invalid(f"{key}.betas", self.betas, "two numbers in [0, 1), e.g. [0.9, 0.99]")


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
        s: LionSettings = cfg.optim.lion
        decay = cfg.optim.adamw.weight_decay if s.weight_decay is None else s.weight_decay
        groups = _groups(parameter_entries(model, cfg), cfg.lr, decay, None)
        return LionOptimizer(groups, lr=cfg.lr, betas=s.betas, weight_decay=decay)


OptimSettings = make_dataclass(
    "OptimSettings",
    [(name, OPTIMIZERS.get(name).Settings, field(default_factory=OPTIMIZERS.get(name).Settings))
     for name in OPTIMIZERS.keys() if OPTIMIZERS.get(name).Settings],
    bases=(Settings,))
OptimSettings.__doc__ = """`train.optim`: one group per optimizer that has settings (train.optim.<name>.<field>), made from
OPTIMIZERS: an optimizer registered above with a `Settings` class gets its group here."""


def optim_defaults() -> dict:
    """Every optimizer's default settings as plain values (conf/train/default.yaml's `optim`)."""
    return asdict(OptimSettings())


def build_optimizer(model: nn.Module, cfg) -> torch.optim.Optimizer:
    """The optimizer `cfg.optimizer` over `model`'s parameters; `cfg` is the run's TrainConfig (slm.training.config,
    which imports this module: the annotation is left off rather than imported back)."""
    return OPTIMIZERS.get(cfg.optimizer).build(model, cfg)
