"""Decision accuracy (slm-decide): how often the order of two configurations at a small scale is their order at the
target scale, per proxy metric and rung, as AI2's DataDecide measures it (Magnusson et al. 2025, arXiv 2504.11393).

    result = decide(table, config="family", rung="param_budget", proxies=["val_nll"])
    print(markdown(result))

A ladder's results table has one row per run: the configuration (`config`, e.g. family), the rung (`rung`, e.g.
param_budget), the seed and the proxies. Per proxy:

- a configuration's value at a rung is its mean over seeds (completed runs with a finite value);
- decision accuracy at rung r against the target rung T (the largest by default): over every pair of configurations
  present at both, the share whose order at r is their order at T (a tie at either counts one half). Without ties
  it is (1 + Kendall's tau) / 2 of the two rungs' means;
- its 95% interval: `draws` bootstrap redraws of the seeds of every configuration at both rungs (with replacement);
- the noise ceiling: how often one seed's order at the target agrees with another seed's (seeds matched by
  train.seed), over every pair of configurations and seeds: the agreement a perfect proxy could reach;
- the signal-to-noise ratio at a rung: the spread across configurations (the standard deviation of their means)
  over the seed-to-seed spread (the pooled standard deviation within configurations), the ratio "Signal and Noise"
  (Heineman et al. 2025, arXiv 2508.13144) ranks proxies by; None with one seed per configuration;
- the share of the target's compute a rung costs: the mean `train_flops` of its runs over the target's.

The cheapest rung whose decision accuracy reaches `level` is the number to plan with (`cheapest`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd



class DecideError(ValueError):
    """A table slm-decide cannot read as a ladder: one line naming the column or value and what is needed."""


@dataclass
class RungDecision:
    """One proxy at one rung against the target."""

    proxy: str
    rung: float
    share: float | None
    """The rung's share of the target's training compute (mean train_flops), None without train_flops."""
    configurations: int
    """Configurations present at this rung and the target."""
    accuracy: float
    low: float
    high: float
    snr: float | None


@dataclass
class DecideResult:
    config: str
    rung: str
    target: float
    rows: list[RungDecision] = field(default_factory=list)
    ceilings: dict[str, float | None] = field(default_factory=dict)
    """Per proxy, the target's seed-to-seed agreement (None with fewer than two common seeds)."""

    def cheapest(self, proxy: str, level: float) -> RungDecision | None:
        """The lowest-compute rung below the target whose decision accuracy on `proxy` is at least `level`."""
        rows = [r for r in self.rows if r.proxy == proxy and r.rung != self.target and r.accuracy >= level]
        return min(rows, key=lambda r: (r.share if r.share is not None else math.inf, r.rung), default=None)


def _values(table: pd.DataFrame, config: str, rung: str, proxy: str) -> dict:
    """{rung: {configuration: {seed: value}}} of the completed runs with a finite value."""
    rows = table
    if "status" in rows:
        rows = rows[rows["status"].fillna("completed") == "completed"]
    values = pd.to_numeric(rows[proxy], errors="coerce")
    seeds = rows["seed"] if "seed" in rows else pd.Series(range(len(rows)), index=rows.index)
    out: dict = {}
    for r, c, s, v in zip(pd.to_numeric(rows[rung], errors="coerce"), rows[config].astype(str), seeds, values):
        if pd.notna(r) and pd.notna(v) and math.isfinite(v):
            out.setdefault(float(r), {}).setdefault(c, {})[s] = float(v)
    return out


def agreement(a: dict[str, float], b: dict[str, float]) -> tuple[float, int]:
    """(share of the pairs of configurations in both whose order in `a` is their order in `b`, a tie counting one
    half; number of pairs)."""
    names = sorted(set(a) & set(b))
    total = 0.0
    pairs = 0
    for i, j in itertools.combinations(names, 2):
        da, db = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
        total += 0.5 if da == 0 or db == 0 else float(da == db)
        pairs += 1
    return (total / pairs if pairs else math.nan), pairs


def _means(by_config: dict, rng: np.random.Generator | None = None) -> dict[str, float]:
    out = {}
    for name, seeds in by_config.items():
        values = np.array(list(seeds.values()))
        if rng is not None:
            values = rng.choice(values, size=len(values), replace=True)
        out[name] = float(values.mean())
    return out


def noise_ceiling(by_config: dict) -> float | None:
    """How often one seed's order of two configurations agrees with another seed's (seeds matched by number)."""
    seeds = sorted(set.intersection(*(set(s) for s in by_config.values())), key=str) if by_config else []
    if len(seeds) < 2 or len(by_config) < 2:
        return None
    scores = [agreement({c: v[s] for c, v in by_config.items()}, {c: v[t] for c, v in by_config.items()})[0]
              for s, t in itertools.permutations(seeds, 2)]
    return float(np.mean(scores))


def snr(by_config: dict) -> float | None:
    """Spread across configurations (std of their means) over the pooled seed-to-seed std; None without repeats."""
    groups = [np.array(list(s.values())) for s in by_config.values()]
    if len(groups) < 2 or not any(len(g) > 1 for g in groups):
        return None
    within = sum(((g - g.mean()) ** 2).sum() for g in groups) / sum(len(g) - 1 for g in groups)
    spread = float(np.std([g.mean() for g in groups], ddof=1))
    return math.inf if within == 0 else spread / math.sqrt(within)


def decide(table: pd.DataFrame, config: str = "family", rung: str = "param_budget", proxies=("val_nll",),
           target: float | None = None, draws: int = 1000, seed: int = 0) -> DecideResult:
    """Decision accuracy of every rung against the target, per proxy (see the module docstring)."""
    for column in (config, rung, *proxies):
        if column not in table:
            raise DecideError(f"the results have no column {column!r}; columns include: "
                              f"{', '.join(sorted(map(str, table.columns))[:20])}")
    rungs = sorted(set(pd.to_numeric(table[rung], errors="coerce").dropna().astype(float)))
    if len(rungs) < 2:
        raise DecideError(f"--rung {rung}: a ladder needs at least two rungs; the results have {len(rungs)}")
    target = rungs[-1] if target is None else float(target)
    if target not in rungs:
        raise DecideError(f"--target {target:g} is not a rung of {rung}; rungs: {', '.join(f'{r:g}' for r in rungs)}")
    flops = {}
    if "train_flops" in table:
        spent = pd.to_numeric(table["train_flops"], errors="coerce")
        for r in rungs:
            mean = spent[pd.to_numeric(table[rung], errors="coerce") == r].mean()
            flops[r] = None if pd.isna(mean) else float(mean)
    result = DecideResult(config, rung, target)
    rng = np.random.default_rng(seed)
    for proxy in proxies:
        values = _values(table, config, rung, proxy)
        top = values.get(target, {})
        result.ceilings[proxy] = noise_ceiling(top)
        for r in rungs:
            here = values.get(r, {})
            accuracy, pairs = agreement(_means(here), _means(top))
            if not pairs:
                continue
            boot = [agreement(_means(here, rng), _means(top, rng))[0] for _ in range(draws)]
            low, high = (float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))) if draws else (accuracy,) * 2
            share = flops[r] / flops[target] if flops.get(r) and flops.get(target) else None
            common = len(set(here) & set(top))
            result.rows.append(RungDecision(proxy, r, share, common, accuracy, low, high, snr(here)))
    return result


def _num(value: float) -> str:
    """A rung as written: 100000, 3198976, 0.5."""
    return f"{value:.0f}" if float(value).is_integer() else f"{value:g}"


def markdown(result: DecideResult, level: float = 0.8) -> str:
    """The decision-accuracy table, the noise ceilings and the cheapest rung at `level`, as Markdown."""
    lines = [f"Decision accuracy against the target rung {result.rung} = {_num(result.target)} (configurations: "
             f"{result.config}; 95% intervals from redrawn seeds)", "",
             "| proxy | rung | % of target compute | configurations | decision accuracy | 95% interval | SNR |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in result.rows:
        share = "" if r.share is None else f"{100 * r.share:.3g}%"
        ratio = "" if r.snr is None else f"{r.snr:.3g}"
        lines.append(f"| {r.proxy} | {_num(r.rung)} | {share} | {r.configurations} | {r.accuracy:.3f} | "
                     f"{r.low:.3f}-{r.high:.3f} | {ratio} |")
    lines.append("")
    for proxy, ceiling in result.ceilings.items():
        said = "not measurable (fewer than two seeds in common at the target)" if ceiling is None else f"{ceiling:.3f}"
        best = result.cheapest(proxy, level)
        where = "none" if best is None else (f"{result.rung} = {_num(best.rung)}" + (
            "" if best.share is None else f" ({100 * best.share:.3g}% of the target's compute)"))
        lines.append(f"- {proxy}: noise ceiling (one seed against another at the target) {said}; cheapest rung with "
                     f"decision accuracy >= {level:g}: {where}")
    return "\n".join(lines) + "\n"


def plot(result: DecideResult, level: float | None = 0.8):
    """Decision accuracy against the rung's share of the target's compute (the rung itself where train_flops is
    missing), one line per proxy with its 95% interval, the noise ceiling dotted and `level` dashed: the figure
    DataDecide draws. Returns a matplotlib Figure (its own Agg canvas)."""
    from analysis.plot_style import new_figure

    fig = new_figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    by_share = all(r.share is not None for r in result.rows)
    for i, proxy in enumerate(result.ceilings):
        rows = sorted((r for r in result.rows if r.proxy == proxy), key=lambda r: r.rung)
        x = [100 * r.share if by_share else r.rung for r in rows]
        y = [r.accuracy for r in rows]
        err = [[r.accuracy - r.low for r in rows], [r.high - r.accuracy for r in rows]]
        line = ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=proxy)
        if result.ceilings[proxy] is not None:
            ax.axhline(result.ceilings[proxy], color=line[0].get_color(), linestyle=":", linewidth=1,
                       label=f"{proxy}: noise ceiling")
    if level is not None:
        ax.axhline(level, color="grey", linestyle="--", linewidth=1, label=f"level {level:g}")
    ax.set_xscale("log")
    ax.set_xlabel("% of the target's training compute" if by_share else f"rung ({result.rung})")
    ax.set_ylabel("decision accuracy")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"Decision accuracy against {result.rung} = {_num(result.target)} ({result.config})")
    ax.legend(fontsize=8)
    return fig


__all__ = ["DecideError", "DecideResult", "RungDecision", "agreement", "decide", "markdown",
           "noise_ceiling", "plot", "snr"]
