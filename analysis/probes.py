"""The synthetic probes as a proxy (docs/probes.md): from a probes sweep's results table (analysis.collect of
runs/probes_cpu: one row per configuration, task and seed), one value per configuration and seed, the mean over the
tasks, for analysis.decide to judge against a ladder's order at its target rung.

    found = proxies(collect("runs/probes_cpu"))              # {"probe_nll": ProbeProxy, "probe_acc": ProbeProxy}
    found["probe_nll"].values                                # {configuration: {seed: mean over tasks}}
    judge(found["probe_nll"], target_values, target_flops)   # decision accuracy, SNR and compute share

- A configuration is the `config` column's value (family by default), or with config="point" the run's job key less
  its task (data.name=...) and seed (train.seed=...): a sweep whose points share a family (a close-call ladder's).
- The task is the `data` column (the run's data.name). A (configuration, seed) counts only where every task of the
  table has a completed run with a finite value; one without is left out and named in the notes.
- `probe_nll`: the mean over tasks of the validation completion NLL (val_nll, nats per completion token; lower is
  better). `probe_acc`: the mean over tasks of the per-token completion accuracy (val_token_acc; higher is better).
- Its compute: a configuration's probe battery costs the sum over tasks of its runs' train_flops (one seed; the mean
  over its seeds); the share of a target rung's compute is that over the target's mean train_flops (`share`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

TASK = "data"
"""The results table's column naming a run's task (its data.name)."""
PROXIES = {"probe_nll": ("val_nll", False), "probe_acc": ("val_token_acc", True)}
"""{proxy: (the per-task metric averaged, higher is better)}."""
POINT = "point"
"""config=POINT: the configuration is the job key less the task and the seed."""


@dataclass
class ProbeProxy:
    """One proxy of a probes sweep."""

    name: str
    metric: str
    """The per-task metric averaged over the tasks."""
    higher_is_better: bool
    values: dict[str, dict] = field(default_factory=dict)
    """{configuration: {seed: the mean over tasks}}."""
    train_flops: dict[str, float] = field(default_factory=dict)
    """{configuration: training FLOPs of its battery (the sum over tasks) for one seed, the mean over seeds}."""
    tasks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def oriented(self) -> dict[str, dict]:
        """values with lower better (negated where higher is better): analysis.decide's orientation."""
        sign = -1.0 if self.higher_is_better else 1.0
        return {c: {s: sign * v for s, v in seeds.items()} for c, seeds in self.values.items()}

    def share(self, target_flops: float) -> float | None:
        """The battery's mean compute over the configurations as a share of `target_flops` (a target run's)."""
        spent = [f for f in self.train_flops.values() if math.isfinite(f)]
        return float(np.mean(spent)) / float(target_flops) if spent and target_flops else None


def point_of(run: str) -> str:
    """A job key less its task and seed overrides: the configuration a probes sweep's point names."""
    parts = [p for p in str(run).split(",") if not re.match(r"(data\.name|train\.seed)=", p)]
    return ",".join(parts)


def _configurations(table: pd.DataFrame, config: str) -> pd.Series:
    if config == POINT:
        return table["run"].map(point_of)
    if config not in table:
        raise ValueError(f"config={config!r}: the results have no column {config!r}; name one that tells the "
                         f"configurations apart, or {POINT!r} (the job key less task and seed)")
    return table[config].astype(str)


def proxies(table: pd.DataFrame, config: str = "family", tasks: list[str] | None = None) -> dict[str, ProbeProxy]:
    """{proxy name: ProbeProxy} of a probes sweep's results table (the module docstring); `tasks`: the tasks averaged
    (None: every task of the table), e.g. without one that every configuration saturates."""
    for column in (TASK, "seed", "train_flops"):
        if column not in table:
            raise ValueError(f"the results have no column {column!r}: not a probes sweep's table")
    done = table[table["status"].fillna("completed") == "completed"] if "status" in table else table
    rows = done.assign(_config=_configurations(done, config))
    tasks = sorted(set(rows[TASK].dropna().astype(str))) if tasks is None else list(tasks)
    rows = rows[rows[TASK].astype(str).isin(tasks)]
    out = {}
    for name, (metric, higher) in PROXIES.items():
        proxy = ProbeProxy(name, metric, higher, tasks=tasks)
        if metric in rows:
            _fill(proxy, rows, tasks)
        else:
            proxy.notes.append(f"no column {metric}: no value")
        out[name] = proxy
    return out


def _fill(proxy: ProbeProxy, rows: pd.DataFrame, tasks: list[str]) -> None:
    """proxy.values and train_flops from the completed rows (a (configuration, seed) with every task only)."""
    values = pd.to_numeric(rows[proxy.metric], errors="coerce")
    flops: dict[str, list[float]] = {}
    for (name, seed), group in rows.groupby(["_config", "seed"], sort=True):
        got = {str(t): float(v) for t, v in zip(group[TASK], values[group.index]) if math.isfinite(v)}
        if len(group) != len(set(group[TASK])):
            raise ValueError(f"{name}, seed {seed}: two runs of one task: the configurations differ in more than "
                             "the config column; name one that tells them apart (or 'point')")
        missing = [t for t in tasks if t not in got]
        if missing:
            proxy.notes.append(f"{name}, seed {seed}: no {proxy.metric} for {', '.join(missing)}: left out")
            continue
        proxy.values.setdefault(name, {})[seed] = float(np.mean([got[t] for t in tasks]))
        flops.setdefault(name, []).append(float(pd.to_numeric(group["train_flops"], errors="coerce").sum()))
    proxy.train_flops = {name: float(np.mean(f)) for name, f in flops.items()}


def judge(proxy: ProbeProxy, target: dict[str, dict], target_flops: float | None = None, draws: int = 1000,
          seed: int = 0) -> dict:
    """The proxy against a target's values ({configuration: {seed: value}}, lower better, as analysis.decide holds
    them), over the configurations both have: decision accuracy (analysis.decide.agreement of the seed means) and
    the pairs it counts, its 95% interval from `draws` redraws of every configuration's seeds at both (None where
    each has one seed), the proxy's SNR (analysis.decide.snr) and its share of `target_flops`."""
    from analysis.decide import _means, agreement, snr

    mine = proxy.oriented()
    common = sorted(set(mine) & set(target))
    here, top = {c: mine[c] for c in common}, {c: target[c] for c in common}
    accuracy, pairs = agreement(_means(here), _means(top))
    low = high = None
    if draws and any(len(v) > 1 for v in (*here.values(), *top.values())):
        rng = np.random.default_rng(seed)
        boot = [agreement(_means(here, rng), _means(top, rng))[0] for _ in range(draws)]
        low, high = float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))
    return {"accuracy": accuracy, "pairs": pairs, "low": low, "high": high, "snr": snr(here),
            "share": proxy.share(target_flops) if target_flops else None}


def same_name(configuration: str) -> str:
    """A configuration's overrides with the YAML literals true, false and null in one spelling (lower case), so a
    job key's `qk_norm=True` names the same configuration as a sweep file's `qk_norm=true`."""
    return ",".join(re.sub(r"=(true|false|null|none)$", lambda m: "=" + m.group(1).lower(), part, flags=re.I)
                    for part in str(configuration).split(","))


def add_to(result, ladder: pd.DataFrame, probes: pd.DataFrame, draws: int = 1000) -> list[str]:
    """Judge each probe proxy against a ladder's decision (analysis.decide.DecideResult `result`, from the ladder's
    table `ladder`) and append it to result.rows (its rung: the probes' mean param_budget; its share: the battery's
    compute over a target run's mean train_flops) and its name to result.proxies (probe_nll; probe_nll_<task> for a
    table of one task). The configurations are matched by
    the ladder's configuration column where the probes' table has it and shares at least two of its names, else by
    the probes' points (the job key less task and seed). Returns the notes (also added to result.notes)."""
    from analysis.decide import RungDecision
    from analysis.decide_values import _means

    config = result.config if result.config in probes else POINT
    if config != POINT and len({same_name(c) for c in _configurations(probes, config)}
                               & {same_name(c) for c in result.top}) < 2:
        config = POINT
    found = proxies(probes, config)
    tasks = next(iter(found.values())).tasks
    if len(tasks) == 1:  # one task is a proxy of its own: probe_nll_memorization
        found = {f"{name}_{tasks[0]}": proxy for name, proxy in found.items()}
    for name in found:
        if name in result.proxies:
            raise ValueError(f"{name} is judged already (two probes tables of the same tasks); give one")
    named = {same_name(c): c for c in result.top}
    for proxy in found.values():  # a job key spells a value as Hydra does (=True), a ladder's point as written (=true)
        proxy.values = {named.get(same_name(c), c): v for c, v in proxy.values.items()}
        proxy.train_flops = {named.get(same_name(c), c): v for c, v in proxy.train_flops.items()}
    if "branch" in ladder:  # a decay branch is a shorter run: not a target run's compute
        ladder = ladder[ladder["branch"].isna()]
    if getattr(result, "regime", None) is not None:  # a ladder at another token regime beside it: not the target's
        from analysis.decide_axes import regimes

        ladder = ladder[regimes(ladder) == result.regime]
    at = pd.to_numeric(ladder[result.rung], errors="coerce") == result.target
    flops = pd.to_numeric(ladder.loc[at, "train_flops"], errors="coerce").mean() if "train_flops" in ladder else None
    budget = pd.to_numeric(probes.get("param_budget"), errors="coerce").mean() if "param_budget" in probes else None
    notes = []
    for name, proxy in found.items():
        common = set(proxy.values) & set(result.top)
        if len(common) < 2:
            notes.append(f"{name}: fewer than two of the ladder's configurations among the probes' ({config}): "
                         "not judged")
            continue
        got = judge(proxy, result.top, None if flops is None or pd.isna(flops) else float(flops), draws)
        rung = float(budget) if budget is not None and not pd.isna(budget) else math.nan
        result.rows.append(RungDecision(name, rung, got["share"], len(common), got["accuracy"], got["low"],
                                        got["high"], got["snr"]))
        result.means[(name, rung)] = _means({c: v for c, v in proxy.oriented().items() if c in common})
        result.proxies.append(name)
        notes += [f"{name}: {n}" for n in proxy.notes]
        missing = sorted(set(result.top) - set(proxy.values))
        if missing:
            notes.append(f"{name}: no probes of {', '.join(missing)}")
    result.notes += notes
    return notes
