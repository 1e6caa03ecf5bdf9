"""Width solver for a parameter budget: given a family's config, a depth and a target parameter count,
choose d_model (a multiple of `width_step`) whose exact count is closest to the target.

Heads follow the width through head_dim (n_heads = d_model / head_dim, n_kv_heads kept), and a derived
d_ff is re-derived at each candidate width, so a depth/width sweep stays inside one family's design.
"""

from __future__ import annotations

from slm.model.config import ConfigError, ModelConfig, upgrade_fields
from slm.model.counting import count

MAX_WIDTH = 16384


BUDGET_COUNTS = ("total", "active")


def solve_width(spec: dict, budget: float, step: int = 64, counted: str = "total") -> ModelConfig:
    """Return the config from `spec` with d_model chosen so that params_<counted> (total, or active per token
    for a mixture of experts) is closest to `budget`.

    `spec` holds ModelConfig fields as given by the user (None for derived sizes). Ties go to the
    narrower model. Raises ConfigError if no width fits the constraints.
    """
    if not budget > 0:
        raise ConfigError(f"model.param_budget={budget!r} is invalid: must be > 0")
    if not isinstance(step, int) or step <= 0:
        raise ConfigError(f"model.width_step={step!r} is invalid: must be a positive integer")
    if counted not in BUDGET_COUNTS:
        raise ConfigError(f"model.budget_count={counted!r} is invalid: choose one of: {', '.join(BUDGET_COUNTS)}")
    spec = dict(spec)
    head_dim = spec.get("head_dim")
    if head_dim is None:
        # keep the preset's head size while the width moves
        head_dim = ModelConfig(**spec).head_dim
    spec.update(head_dim=head_dim, n_heads=None)
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
    return best[1]


def config_from_spec(spec: dict) -> ModelConfig:
    """Build a ModelConfig from a Hydra `model` node: the fields plus the solver keys `param_budget`
    (None: use d_model as given), `width_step` and `budget_count` (total or active parameters)."""
    spec = upgrade_fields(spec)
    budget = spec.pop("param_budget", None)
    step = spec.pop("width_step", 64)
    counted = spec.pop("budget_count", "total")
    unknown = sorted(set(spec) - set(ModelConfig.field_names()))
    if unknown:
        raise ConfigError(f"model.{unknown[0]} is not a model field; see conf/model_base/base.yaml for the fields")
    if budget is None:
        return ModelConfig(**spec)
    return solve_width(spec, float(budget), step, counted)



