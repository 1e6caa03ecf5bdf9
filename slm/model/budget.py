"""Budget solver: given a family's config, a depth and a target parameter count, choose d_model (a multiple of
`width_step`), then the MLP hidden size (a multiple of `d_ff_step`), so that the exact count is closest to the
target.

1. The width: d_model whose count with the family's own MLP (the spec's mlp.d_ff, or its rule re-derived at that
   width) is closest to the budget. Heads follow the width through attention.head_dim (n_heads = d_model /
   head_dim, n_kv_heads kept), so a depth/width sweep stays inside one family's design.
2. The second knob, the MLP hidden size at that width: `mlp.d_ff`, or `moe.expert_d_ff` when the spec sets the
   experts' size (experts that derive theirs from d_ff move with it). It takes the multiple of d_ff_step (or the
   family's own value) that lands closest, within KNOB_RANGE (0.5x to 2x) of the family's value at that width,
   so a LLaMA stays a LLaMA; the family's value wins a tie, so a config already on budget keeps its MLP.
3. Only if that misses `budget_tolerance`: every width with its best MLP size, taking among those within the
   tolerance the one whose MLP moved least (the ratio to the family's value nearest 1).

`d_ff_step: null` turns the second knob off (the width alone). The solved config carries
a `BudgetFit` (`budget_fit(cfg)`) saying which knob moved, for slm-params, the dry run and the run record.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from slm.model.config import ConfigError, ModelConfig, upgrade_fields
from slm.model.counting import count
from slm.renames import closest

MAX_WIDTH = 16384
KNOB_RANGE = (0.5, 2.0)
"""How far the second knob may move the MLP hidden size: this range times the family's value at the width."""

BUDGET_COUNTS = ("total", "active", "non_embedding")
_WIDTH_ERRORS = ("model.d_model=", "model.attention.n_kv_heads=", "model.attention.n_heads=", "model.memory.heads=")
"""ModelConfig's errors about the width and the heads it sets (the no-width message explains those)."""
SOLVER_KEYS = {"param_budget": None, "width_step": 64, "d_ff_step": 8, "budget_count": "total",
               "budget_tolerance": 0.03}
"""The `model` node's keys that are not ModelConfig fields, with their defaults (conf/model_base/base.yaml)."""
SOLVER_DOCS = {
    "param_budget": "parameters to aim for; null: d_model as given",
    "width_step": "d_model is a multiple of this",
    "d_ff_step": "the tuned MLP size's step: 8, the alignment bf16 tensor cores want (null: width only)",
    "budget_count": "the count the budget is for: total | active (per token: a mixture of experts' fair size) | "
                    "non_embedding (total less the embeddings: Chinchilla's, OLMo's)",
    "budget_tolerance": "refuse a budget whose closest config misses it by more than this fraction (null: any)",
}
"""One line on each of SOLVER_KEYS (the comments of conf/model_base/base.yaml)."""
SOLVER_LEAD = ("Budget solver (slm.model.budget): with param_budget set, d_model is chosen (a multiple of width_step, "
               "heads = d_model / head_dim) so that the exact parameter count with the family's MLP is closest to the "
               "budget; then the MLP hidden size at that width (mlp.d_ff, or moe.expert_d_ff when set) is tuned to the "
               "multiple of d_ff_step that lands closest, within 0.5x-2x of the family's value (which wins a tie: a "
               "config already on budget keeps it). Only if that misses budget_tolerance are other widths tried, each "
               "with its best MLP.")
"""The comment above the solver keys in conf/model_base/base.yaml."""
PRESET_KEYS = ("objective",)
"""Keys a preset may add that are the run's, not the network's: `objective`, the training objective it brings
(conf/model/dllm.yaml: mdlm; train.objective follows it, slm.objectives). config_from_spec leaves them out."""


@dataclass(frozen=True)
class BudgetFit:
    """How a config was solved for its parameter budget."""

    d_model: int
    """The width chosen (step 1)."""
    knob: str | None
    """The MLP size tuned after the width: mlp.d_ff or moe.expert_d_ff; None when there is none to tune (no MLP in
    the network kind, or model.d_ff_step=null)."""
    family_value: int | None
    """The knob's value the spec gives at d_model (its rule re-derived there, or the value it sets)."""
    value: int | None
    """The knob's solved value."""

    @property
    def moved(self) -> str:
        """Which knobs moved: 'd_model', or 'd_model, mlp.d_ff 256→336'."""
        if self.knob is None or self.value == self.family_value:
            return "d_model"
        return f"d_model, {self.knob} {self.family_value}→{self.value}"

    def to_dict(self) -> dict:
        """slm-params' budget_fit."""
        return {"d_model": self.d_model, "knob": self.knob, "family_value": self.family_value, "value": self.value,
                "moved": self.moved}


def budget_fit(cfg: ModelConfig) -> BudgetFit | None:
    """How `cfg` was solved for a budget (None: d_model as given)."""
    return cfg.__dict__.get("_budget_fit")


def budget_knob(cfg: ModelConfig) -> str | None:
    """The run record's model.budget_knob: which sizes the solver moved (BudgetFit.moved), None when d_model was
    given."""
    fit = budget_fit(cfg)
    return None if fit is None else fit.moved


def heads_follow_width(spec: dict) -> dict:
    """`spec` (ModelConfig fields, None for derived sizes) with attention.head_dim fixed at the preset's and n_heads
    derived, so that any d_model keeps the family's head size (n_heads = d_model / head_dim)."""
    head_dim = _spec_get(spec, "attention.head_dim") or ModelConfig(**spec).attention.head_dim  # the preset's
    return _with(spec, **{"attention.head_dim": head_dim, "attention.n_heads": None})


def _spec_get(spec: dict, name: str):
    """A field of `spec` by its dotted name (attention.head_dim), None where not given."""
    group, _, field_ = name.rpartition(".")
    node = spec.get(group) if group else spec
    node = asdict(node) if node is not None and not isinstance(node, dict) else (node or {})
    return node.get(field_)


def _get(cfg: ModelConfig, name: str):
    """A field of `cfg` by its dotted name (mlp.d_ff, moe.expert_d_ff)."""
    for part in name.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _with(spec: dict, **changes) -> dict:
    """`spec` with fields changed, a dotted name (moe.expert_d_ff) changing one field of a nested group."""
    out = dict(spec)
    for name, value in changes.items():
        group, _, field_ = name.rpartition(".")
        if group:
            node = out.get(group)
            node = dict(node) if isinstance(node, dict) else ({} if node is None else asdict(node))
            out[group] = {**node, field_: value}
        else:
            out[name] = value
    return out


def _params(cfg: ModelConfig, counted: str) -> int:
    return getattr(count(cfg), f"params_{counted}")


def _knob(spec: dict, cfg: ModelConfig, counted: str) -> str | None:
    """The MLP size the second knob moves in `cfg` (built from `spec`), or None if the count does not depend on
    it (a network kind with no such MLP)."""
    experts_set = _spec_get(spec, "moe.expert_d_ff") is not None
    knob = "moe.expert_d_ff" if "moe" in cfg.mlp_types and experts_set else "mlp.d_ff"
    value = _get(cfg, knob)
    moved = ModelConfig(**_with(spec, d_model=cfg.d_model, **{knob: value + 1}))
    return knob if _params(moved, counted) != _params(cfg, counted) else None


def _tune(spec: dict, cfg: ModelConfig, knob: str, step: int, budget: float,
          counted: str) -> tuple[ModelConfig, int]:
    """`cfg` with `knob` at the multiple of `step` (or the family's value) in KNOB_RANGE of the family's value
    whose count is closest to `budget`, and that count. Counts are affine in an MLP's hidden size, so the
    closest multiple is one of the two around the solution of the line; both are counted exactly."""
    family = _get(cfg, knob)
    low = max(step, step * math.ceil(KNOB_RANGE[0] * family / step))
    high = step * math.floor(KNOB_RANGE[1] * family / step)
    at = {family: (cfg, _params(cfg, counted))}

    def build(value: int) -> None:
        if value not in at:
            other = ModelConfig(**_with(spec, d_model=cfg.d_model, **{knob: value}))
            at[value] = (other, _params(other, counted))

    if low <= high:
        build(family + step)
        slope = (at[family + step][1] - at[family][1]) / step
        if slope > 0:
            target = family + (budget - at[family][1]) / slope
            below = step * math.floor(target / step)
            for value in (below, below + step):
                build(min(max(value, low), high))
    candidates = [v for v in at if v == family or low <= v <= high]
    best = min(candidates, key=lambda v: (abs(at[v][1] - budget), v != family, abs(v - family)))
    return at[best]


def _check_solver_keys(budget, step, counted, tolerance, d_ff_step) -> None:
    if not (isinstance(budget, (int, float)) and math.isfinite(budget) and budget > 0):
        raise ConfigError(f"model.param_budget={budget!r} is invalid: a finite number of parameters > 0")
    if tolerance is not None and not (isinstance(tolerance, (int, float)) and tolerance >= 0):
        raise ConfigError(f"model.budget_tolerance={tolerance!r} is invalid: a fraction >= 0 (0.03: within 3%), "
                          "or null (any distance)")
    if isinstance(step, bool) or not isinstance(step, int) or step <= 0:
        raise ConfigError(f"model.width_step={step!r} is invalid: must be a positive integer")
    if d_ff_step is not None and (isinstance(d_ff_step, bool) or not isinstance(d_ff_step, int) or d_ff_step <= 0):
        raise ConfigError(f"model.d_ff_step={d_ff_step!r} is invalid: a positive integer (the MLP hidden size's "
                          "step), or null (tune the width only)")
    if counted not in BUDGET_COUNTS:
        raise ConfigError(f"model.budget_count={counted!r} is invalid: choose one of: {', '.join(BUDGET_COUNTS)}")


def _widths(spec: dict, step: int, errors: list | None = None):
    """The config with the family's MLP at every admissible width, narrowest first; (width, error) of the widths
    skipped go to `errors`."""
    for width in range(step, MAX_WIDTH + 1, step):
        try:
            yield ModelConfig(**{**spec, "d_model": width})
        except ConfigError as err:
            if errors is not None:
                errors.append((width, err))
            continue  # width incompatible with head_dim or kv heads


def _blocker(err: ConfigError, spec: dict) -> str:
    """The setting a width's refusal comes from, with its value and config: "the llama3 config's
    model.attention.n_kv_heads=4" (model.d_model=80 refused for head_dim=48 is head_dim's doing)."""
    text = str(err)
    setting = text.split(" is invalid")[0]
    if setting.startswith("model.d_model=") and "head_dim=" in text:
        setting = f"model.attention.head_dim={_spec_get(spec, 'attention.head_dim')}"
    family = spec.get("family")
    return f"the {family} config's {setting}" if family else setting


def _neighbours(spec: dict, step: int, width: int, down: bool) -> tuple[list, int | None]:
    """Going narrower (down) or wider from `width` in steps of `step`: the (width, error) refused before the next
    admissible width, and that width (None: none up to the bounds)."""
    refused = []
    for other in range(width - step, 0, -step) if down else range(width + step, MAX_WIDTH + 1, step):
        try:
            ModelConfig(**{**spec, "d_model": other})
        except ConfigError as err:
            refused.append((other, err))
            continue
        return refused, other
    return refused, None


def _smaller(value: int, least: int = 1) -> list[int]:
    """The divisors of `value` below it and at least `least`, largest first: the finer values to try of a setting."""
    return [d for d in range(value - 1, least - 1, -1) if value % d == 0]


def _hint(spec: dict, cfg: ModelConfig, params: int, budget: float, step: int, counted: str,
          tolerance: float | None, d_ff_step: int | None) -> str:
    """Why the closest config misses the budget and what would let it land: the setting that refuses the widths
    between it and the budget (named with its value and config), a large embedding, and the first value of that
    setting that fits (each tried with the solver)."""
    down = params > budget
    refused, neighbour = _neighbours(spec, step, cfg.d_model, down)
    way = "narrower" if down else "wider"
    relax: list[tuple[str, dict, int]] = []  # (override, spec, width_step) to try, in order
    if not down and neighbour is None:
        why = f"d_model={cfg.d_model} is the widest the solver tries (up to {MAX_WIDTH})"
    elif refused:
        which = (f"{way} widths are" if neighbour is None else
                 f"the widths between d_model={min(neighbour, cfg.d_model)} and {max(neighbour, cfg.d_model)} are")
        why = f"{which} refused by {_blocker(refused[0][1], spec)} (d_model={refused[0][0]}: {refused[0][1]})"
        setting = str(refused[0][1]).split("=")[0]
        kv, head_dim = _spec_get(spec, "attention.n_kv_heads"), _spec_get(spec, "attention.head_dim")
        fewer_kv = [(f"model.attention.n_kv_heads={k}", _with(spec, **{"attention.n_kv_heads": k}), step)
                    for k in range(int(kv or 0) - 1, 0, -1)]
        if setting == "model.attention.n_kv_heads":
            relax = fewer_kv
        elif "head_dim=" in str(refused[0][1]) and head_dim:
            relax = [(f"model.attention.head_dim={h}", _with(spec, **{"attention.head_dim": h}), step)
                     for h in _smaller(int(head_dim), 8)]
        if kv and setting == "model.d_model":  # head_dim x n_kv_heads also sets the step
            relax += fewer_kv
    else:
        why = (f"d_model={cfg.d_model} is the {'narrowest' if down else 'widest'} multiple of model.width_step={step}"
               if neighbour is None else f"the next {way} width, d_model={neighbour}, is model.width_step={step} away")
        relax = [(f"model.width_step={s}", spec, s) for s in _smaller(step, 8)]
    parts = [why]
    embedding = count(cfg).params_embedding
    if down and counted != "non_embedding" and embedding > params / 2:
        parts.append(f"most of it is the embeddings, {embedding:,} parameters (vocabulary {cfg.vocab_size:,})")
    for override, other, other_step in relax:
        try:
            fit, _ = solve_budget(other, budget, other_step, counted, tolerance, d_ff_step, explain=False)
        except ConfigError:
            continue
        got = _params(fit, counted)
        parts.append(f"{override} fits (d_model={fit.d_model}, {got:,} {counted} parameters, {got / budget - 1:+.1%}), "
                     "or change n_layers or the budget")
        break
    else:
        parts.append("change n_layers or the budget" + (", or use a smaller vocabulary (the tokenizer sets it)"
                                                         if len(parts) > 1 else ""))
    return "; ".join(parts)


def solve_budget(spec: dict, budget: float, step: int = 64, counted: str = "total", tolerance: float | None = None,
                 d_ff_step: int | None = SOLVER_KEYS["d_ff_step"],
                 explain: bool = True) -> tuple[ModelConfig, BudgetFit]:
    """The config from `spec` whose params_<counted> (total, or active per token for a mixture of experts) is
    closest to `budget` (the steps in this module's docstring), and how it was solved; counted "non_embedding":
    params_total less the embeddings (slm.model.counting).

    `spec` holds ModelConfig fields as given by the user (None for derived sizes). Ties go to the narrower
    model. Raises ConfigError if no width fits the constraints, or if the closest config misses the budget by
    more than `tolerance` (a fraction of it; None: any distance), naming what blocks it (`_hint`; explain=False:
    without the hint, which tries other settings).
    """
    _check_solver_keys(budget, step, counted, tolerance, d_ff_step)
    spec = heads_follow_width(spec)
    within = (lambda params: True) if tolerance is None else (lambda params: abs(params - budget) <= tolerance * budget)
    # 1. the width, the family's MLP at each
    best: tuple[float, ModelConfig] | None = None
    errors: list[ConfigError] = []
    narrowest = widest = None
    for cfg in _widths(spec, step, errors):
        narrowest = cfg if narrowest is None else narrowest
        params = _params(cfg, counted)
        if best is None or abs(params - budget) < best[0]:
            best = (abs(params - budget), cfg)
        elif params > budget:
            break  # counts grow with width: past the budget and getting worse
    else:
        widest = cfg if narrowest is not None else None  # every width counted: the last is the widest
    if best is None:
        other = next((err for _, err in errors if not str(err).startswith(_WIDTH_ERRORS)), None)
        if other is not None:  # invalid at every width for a reason of its own (e.g. layer_types too long)
            raise other
        width, err = errors[-1]
        raise ConfigError(
            f"model.param_budget={budget:g} is invalid: every d_model up to {MAX_WIDTH} in steps of "
            f"model.width_step={step} is refused by {_blocker(err, spec)} (d_model={width}: {err})")
    family_cfg = best[1]
    knob = None if d_ff_step is None else _knob(spec, family_cfg, counted)
    if knob is None:
        cfg, params = family_cfg, _params(family_cfg, counted)
    else:  # 2. the MLP at that width
        cfg, params = _tune(spec, family_cfg, knob, d_ff_step, budget, counted)
        edge = (params < budget and family_cfg is widest) or (params > budget and family_cfg is narrowest)
        if not within(params) and not edge:  # 3. (none beyond an edge it is short of) every width with its best
            # MLP: among those within tolerance, the one whose MLP moved least
            tuned = []
            for family_at in _widths(spec, step):
                other, got = _tune(spec, family_at, knob, d_ff_step, budget, counted)
                tuned.append((other, got, _get(family_at, knob)))
                if got > budget and not within(got):
                    break  # even its smallest MLP is past the budget: wider is further
            fits = [t for t in tuned if within(t[1])]
            if fits:
                cfg, params, _ = min(fits, key=lambda t: (abs(math.log(_get(t[0], knob) / t[2])),
                                                          abs(t[1] - budget)))
            else:
                cfg, params, _ = min(tuned, key=lambda t: abs(t[1] - budget))
    family_value = None if knob is None else _get(ModelConfig(**_with(spec, d_model=cfg.d_model)), knob)
    fit = BudgetFit(cfg.d_model, knob, family_value, None if knob is None else _get(cfg, knob))
    if not within(params):
        off = params / budget - 1
        off = f"{off:+.1%}" if abs(off) < 10 else f"{params / budget:.3g}x the budget"
        if knob is not None:
            closest = (f"the closest config, d_model={cfg.d_model} with {knob}={fit.value} (the family's "
                       f"{fit.family_value} at that width, moved within {KNOB_RANGE[0]:g}x-{KNOB_RANGE[1]:g}x of it)")
        elif d_ff_step is None:
            closest = (f"the closest width, d_model={cfg.d_model} (the MLP size is not tuned: "
                       f"model.d_ff_step=null)")
        else:
            closest = (f"the closest width, d_model={cfg.d_model} (kind={cfg.kind!r} has no MLP hidden size to "
                       f"tune as a second knob)")
        hint = _hint(spec, cfg, params, budget, step, counted, tolerance, d_ff_step) if explain else ""
        raise ConfigError(
            f"model.param_budget={budget:g} is out of reach: {closest}, has {params:,} {counted} parameters ({off}; "
            f"allowed: ±{tolerance * 100:.3g}%, model.budget_tolerance)" + (f"; {hint}" if hint else ""))
    cfg._budget_fit = fit  # not a field: budget_fit(cfg) reads it
    return cfg, fit


def solve_width(spec: dict, budget: float, step: int = 64, counted: str = "total", tolerance: float | None = None,
                d_ff_step: int | None = SOLVER_KEYS["d_ff_step"]) -> ModelConfig:
    """The config of solve_budget (budget_fit(cfg) says how it was solved)."""
    return solve_budget(spec, budget, step, counted, tolerance, d_ff_step)[0]


def config_from_spec(spec: dict) -> ModelConfig:
    """Build a ModelConfig from a Hydra `model` node: the fields plus the solver keys `param_budget`
    (None: use d_model as given), `width_step`, `d_ff_step` (the MLP hidden size's step; None: the width
    only), `budget_count` (total or active parameters) and `budget_tolerance`; PRESET_KEYS are left out."""
    spec = {k: v for k, v in upgrade_fields(spec).items() if k not in PRESET_KEYS}
    budget = spec.pop("param_budget", None)
    step = spec.pop("width_step", SOLVER_KEYS["width_step"])
    d_ff_step = spec.pop("d_ff_step", SOLVER_KEYS["d_ff_step"])
    counted = spec.pop("budget_count", SOLVER_KEYS["budget_count"])
    tolerance = spec.pop("budget_tolerance", SOLVER_KEYS["budget_tolerance"])
    unknown = sorted(set(spec) - set(ModelConfig.field_names()))
    if unknown:
        hint = closest("model", unknown[0], [*ModelConfig.field_names(), *SOLVER_KEYS])
        raise ConfigError(f"model.{unknown[0]} is not a model field{hint}; see conf/model_base/base.yaml for the fields")
    if budget is None:
        return ModelConfig(**spec)
    try:
        budget = float(budget)  # a YAML 1.1 file reads 70e6 as a string
    except (TypeError, ValueError):
        raise ConfigError(f"model.param_budget={budget!r} is invalid: a finite number of parameters > 0") from None
    return solve_width(spec, budget, step, counted, tolerance, d_ff_step)
