"""An Optuna sweep's search space (hydra.sweeper.params of hydra/sweeper=optuna), as Optuna distributions: plain
dimensions, named bundles of overrides, and conditional dimensions that exist only where an earlier one took given
values (issue 52 §3). The Hydra plugin parses each dimension's Hydra sweep syntax into its distribution; this module
knows nothing of Hydra.

    params:
      train.lr: tag(log, interval(1e-3, 3e-2))             a dimension: the key is the override's
      mixer:                                               a bundle: one label chosen, its overrides applied
        choose: {attention: [model.layer_types=[attn]], lfm2: ["model.layer_types=[conv,conv,attn]"]}
      model.conv.kernel:                                   conditional: sampled only where mixer is lfm2
        values: choice(2, 3, 4)
        when: {mixer: lfm2}

The dimensions are sampled in their order (define-by-run: trial.suggest_*), so a condition names dimensions above
it; a trial's parameters are exactly its active dimensions, which is how TPE (multivariate, group=True) and the report
see a conditional space."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Dimension:
    """One dimension: `name` is Optuna's parameter name (a config key, or a bundle's label)."""

    name: str
    distribution: Any
    """optuna.distributions: Float-, Int- or CategoricalDistribution (a bundle's: over its labels)."""
    when: dict[str, list] = field(default_factory=dict)
    """{earlier dimension: the values where this one exists}; empty: always."""
    bundles: dict[str, list[str]] | None = None
    """A bundle's label -> its overrides; None for a plain dimension (its override is name=value)."""


@dataclass
class SearchSpace:
    dims: list[Dimension]
    fixed: list[str] = field(default_factory=list)
    """Overrides every trial gets (the plain values of params and of the command line)."""

    def active(self, dim: Dimension, params: dict) -> bool:
        return all(params.get(key) in allowed for key, allowed in dim.when.items())

    def sample(self, trial: Any) -> None:
        """Suggest each active dimension to the trial, in order (its sampler draws them)."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        for dim in self.dims:
            if not self.active(dim, trial.params):
                continue
            d = dim.distribution
            if isinstance(d, CategoricalDistribution):
                trial.suggest_categorical(dim.name, list(d.choices))
            elif isinstance(d, IntDistribution):
                trial.suggest_int(dim.name, d.low, d.high, step=d.step, log=d.log)
            elif isinstance(d, FloatDistribution):
                trial.suggest_float(dim.name, d.low, d.high, step=d.step, log=d.log)

    def matches(self, params: dict) -> bool:
        """Whether a trial's parameters (one asked before, taken up again) are those of this space."""
        active = [dim for dim in self.dims if self.active(dim, params)]
        return set(params) == {dim.name for dim in active} and all(_holds(dim.distribution, params[dim.name])
                                                                     for dim in active)

    def overrides(self, params: dict, value_str) -> list[str]:
        """A trial's overrides: the fixed ones, then its point."""
        return list(self.fixed) + self.point(params, value_str)

    def point(self, params: dict, value_str) -> list[str]:
        """A trial's own overrides, each active dimension's (a bundle's own list; name=value): what tells it from the
        study's other trials, and what a rerun at another rung takes (slm.sweeps.study_files.top_points)."""
        out: list[str] = []
        for dim in self.dims:
            if dim.name not in params:
                continue
            if dim.bundles is not None:
                out += dim.bundles[params[dim.name]]
            else:
                out.append(f"{dim.name}={value_str(params[dim.name])}")
        return out

    def grid(self) -> dict[str, list]:
        """{name: choices} for Optuna's GridSampler; a ValueError (one line) where a dimension is not a finite set of
        values or is conditional (the grid sampler crosses every dimension)."""
        from optuna.distributions import CategoricalDistribution, IntDistribution

        grid = {}
        for dim in self.dims:
            d = dim.distribution
            if dim.when:
                raise ValueError(f"{dim.name} is conditional (when: {dim.when}); the grid sampler crosses every "
                                 "dimension: drop `when`, or use another sampler")
            if isinstance(d, CategoricalDistribution):
                grid[dim.name] = list(d.choices)
            elif isinstance(d, IntDistribution) and not d.log:
                grid[dim.name] = list(range(d.low, d.high + 1, d.step))
            else:
                raise ValueError(f"{dim.name} is continuous ({d}); the grid sampler needs choice(...) or range(...)")
        return grid


def grid_sampler(space: SearchSpace, seed: int | None = None):
    """Optuna's GridSampler over `space` (SearchSpace.grid), less its stop at the last point: ask/tell outside
    study.optimize cannot be stopped (study.stop raises there), and the sweeper stops at n_trials itself."""
    import optuna

    class Grid(optuna.samplers.GridSampler):
        def after_trial(self, study, trial, state, values) -> None:
            return None

    return Grid(space.grid(), seed=seed)


def _holds(distribution: Any, value: Any) -> bool:
    try:
        return bool(distribution._contains(distribution.to_internal_repr(value)))
    except (ValueError, TypeError):
        return False


def conditional_error(name: str, when: Any, earlier: dict[str, Dimension]) -> str | None:
    """What is wrong with a dimension's `when` (one line), None if every key is an earlier dimension and every value one
    of its choices."""
    from optuna.distributions import CategoricalDistribution

    if not isinstance(when, dict) or not when:
        return f"{name}.when={when!r}: give {{<an earlier dimension>: <a value or a list of values>}}"
    for key, values in when.items():
        if key not in earlier:
            return (f"{name}.when names {key!r}, which is not a dimension above it; the dimensions above: "
                    f"{', '.join(earlier) or 'none'}")
        d = earlier[key].distribution
        for value in values:
            if isinstance(d, CategoricalDistribution) and value not in d.choices:
                return f"{name}.when: {key}={value!r} is not one of {key}'s choices {list(d.choices)}"
    return None


__all__ = ["Dimension", "SearchSpace", "conditional_error", "grid_sampler"]
