"""Width solver for a parameter budget: given a family's config, a depth and a target parameter count,
choose d_model (a multiple of `width_step`) whose exact count is closest to the target.

Heads follow the width through head_dim (n_heads = d_model / head_dim, n_kv_heads kept), and a derived
d_ff is re-derived at each candidate width, so a depth/width sweep stays inside one family's design.
"""

from __future__ import annotations

import math

from slm.model.config import ConfigError, ModelConfig, upgrade_fields
from slm.model.counting import count
from slm.typecheck import did_you_mean

MAX_WIDTH = 16384


BUDGET_COUNTS = ("total", "active")
SOLVER_KEYS = {"param_budget": None, "width_step": 64, "budget_count": "total", "budget_tolerance": 0.25}
"""The `model` node's keys that are not ModelConfig fields, with their defaults (conf/model_base/base.yaml)."""


def heads_follow_width(spec: dict) -> dict:
    """`spec` (ModelConfig fields, None for derived sizes) with head_dim fixed at the preset's and n_heads derived,
    so that any d_model keeps the family's head size (n_heads = d_model / head_dim)."""
    spec = dict(spec)
    head_dim = spec.get("head_dim") or ModelConfig(**spec).head_dim  # keep the preset's head size
    spec.update(head_dim=head_dim, n_heads=None)
    return spec


def solve_width(spec: dict, budget: float, step: int = 64, counted: str = "total",
                tolerance: float | None = None) -> ModelConfig:
    """Return the config from `spec` with d_model chosen so that params_<counted> (total, or active per token
    for a mixture of experts) is closest to `budget`.

    `spec` holds ModelConfig fields as given by the user (None for derived sizes). Ties go to the
    narrower model. Raises ConfigError if no width fits the constraints, or if the closest one misses the
    budget by more than `tolerance` (a fraction of it; None: any distance).
    """
    if not (isinstance(budget, (int, float)) and math.isfinite(budget) and budget > 0):
        raise ConfigError(f"model.param_budget={budget!r} is invalid: a finite number of parameters > 0")
    if tolerance is not None and not (isinstance(tolerance, (int, float)) and tolerance >= 0):
        raise ConfigError(f"model.budget_tolerance={tolerance!r} is invalid: a fraction >= 0 (0.25: within 25%), "
                          "or null (any distance)")
    if not isinstance(step, int) or step <= 0:
        raise ConfigError(f"model.width_step={step!r} is invalid: must be a positive integer")
    if counted not in BUDGET_COUNTS:
        raise ConfigError(f"model.budget_count={counted!r} is invalid: choose one of: {', '.join(BUDGET_COUNTS)}")
    spec = heads_follow_width(spec)
    head_dim = spec["head_dim"]
    best: tuple[float, ModelConfig] | None = None
    for width in range(step, MAX_WIDTH + 1, step):
        try:
            cfg = ModelConfig(**{**spec, "d_model": width})
        except ConfigError:
            continue  # width incompatible with head_dim or kv heads
        params = getattr(count(cfg), f"params_{counted}")
        gap = abs(params - budget)
        if best is None or gap < best[0]:
            best = (gap, cfg)
        elif params > budget:
            break  # counts grow with width: past the budget and getting worse
    if best is None:
        raise ConfigError(
            f"model.param_budget={budget:g} is invalid: no width that is a multiple of width_step={step} "
            f"and of head_dim={head_dim} (with n_kv_heads={spec.get('n_kv_heads')}) up to {MAX_WIDTH}"
        )
    cfg = best[1]
    params = getattr(count(cfg), f"params_{counted}")
    if tolerance is not None and abs(params - budget) > tolerance * budget:
        off = params / budget - 1
        off = f"{off:+.1%}" if abs(off) < 10 else f"{params / budget:.3g}x the budget"
        raise ConfigError(
            f"model.param_budget={budget:g} is out of reach: the closest width, d_model={cfg.d_model}, has "
            f"{params:,} {counted} parameters ({off}; allowed: ±"
            f"{tolerance:.0%}, model.budget_tolerance); change n_layers or the budget"
        )
    return cfg


def config_from_spec(spec: dict) -> ModelConfig:
    """Build a ModelConfig from a Hydra `model` node: the fields plus the solver keys `param_budget`
    (None: use d_model as given), `width_step` and `budget_count` (total or active parameters)."""
    spec = upgrade_fields(spec)
    budget = spec.pop("param_budget", None)
    step = spec.pop("width_step", SOLVER_KEYS["width_step"])
    counted = spec.pop("budget_count", SOLVER_KEYS["budget_count"])
    tolerance = spec.pop("budget_tolerance", SOLVER_KEYS["budget_tolerance"])
    unknown = sorted(set(spec) - set(ModelConfig.field_names()))
    if unknown:
        hint = did_you_mean(unknown[0], [*ModelConfig.field_names(), *SOLVER_KEYS], "model.")
        raise ConfigError(f"model.{unknown[0]} is not a model field{hint}; see conf/model_base/base.yaml for the fields")
    if budget is None:
        return ModelConfig(**spec)
    try:
        budget = float(budget)  # a YAML 1.1 file reads 70e6 as a string
    except (TypeError, ValueError):
        raise ConfigError(f"model.param_budget={budget!r} is invalid: a finite number of parameters > 0") from None
    return solve_width(spec, budget, step, counted, tolerance)



