"""The axes a ladder's verdict was checked across (issue 51 §3): for the configuration best at the target, one line
per axis, each "checked, held", "checked, changed: <what>" or "not checked", said by slm-decide's answer and the
report's Rankings section.

- seeds: whether the best is first in every seed at the target (with the noise ceiling);
- lr: whether it is first at every lr the target ran for every configuration (the lr_rule column says the rule:
  search, transfer, fixed); not checked with one lr per configuration at the target;
- scale: whether it is first at every rung (each configuration at its best lr there);
- tokens per parameter: where the table holds runs of the same configurations at one rung at two or more token
  regimes (training tokens over the parameter budget, within 20% one regime), whether each regime puts it first;
  the ladder is judged in the target's regime (split_regime) and the others are this check;
- decay phase: where the runs have decay branches (analysis.decide_decay), whether the same configuration is first
  before the decay (the stable-phase loss) and after it (the decayed branch) at every rung and branch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.decide_values import _means as seed_means, _num, _values, clusters, first_of as _first

HELD, CHANGED, NOT = "checked, held", "checked, changed", "not checked"
SAME_REGIME = 1.2
"""Tokens per parameter within this ratio of each other are one regime (whole batches move a rung's tokens a little)."""
RULES = {"search": "lr searched per rung", "transfer": "lr searched at the lowest rungs and carried up (transfer)",
         "fixed": "lr fixed (no search)"}


@dataclass
class Axis:
    name: str
    state: str
    detail: str

    def line(self) -> str:
        return f"{self.name}: {self.state}: {self.detail}"


def _means(by_config: dict) -> dict[str, float]:
    """The seed mean of every configuration that has a seed."""
    return seed_means({c: v for c, v in by_config.items() if v})


def tokens_per_param(table: pd.DataFrame) -> pd.Series:
    """Each run's planned training tokens (tokens seen x max_steps / steps: a run that diverged or stopped early keeps
    its regime) over its parameter budget (params_total without one); NaN where unknown."""
    if "tokens" not in table:
        return pd.Series(math.nan, index=table.index)
    tokens = pd.to_numeric(table["tokens"], errors="coerce")
    if "steps" in table and "max_steps" in table:
        steps, planned = pd.to_numeric(table["steps"], errors="coerce"), pd.to_numeric(table["max_steps"],
                                                                                         errors="coerce")
        tokens = (tokens * planned / steps.where(steps > 0)).fillna(tokens)
    size = pd.to_numeric(table["param_budget"], errors="coerce") if "param_budget" in table else \
        pd.Series(math.nan, index=table.index)
    if "params_total" in table:
        size = size.fillna(pd.to_numeric(table["params_total"], errors="coerce"))
    return tokens / size


def regimes(table: pd.DataFrame) -> pd.Series:
    """Each run's token regime: the median tokens per parameter of its cluster (values within SAME_REGIME of the
    previous one, sorted, are one), to two significant figures; NaN where unknown."""
    ratio = tokens_per_param(table)
    groups = clusters((v for v in ratio.dropna().unique() if v > 0), SAME_REGIME)
    label = {v: float(f"{np.median(g):.2g}") for g in groups for v in g}
    return ratio.map(lambda v: label.get(v, math.nan))


def branches_at(branches: pd.DataFrame, regime: float | None) -> pd.DataFrame:
    """The decay branches of runs at token regime `regime` (all of them where it is None): a branch at fraction f of a
    run trained f of its tokens, so its run's regime is its own over f. The branches of runs set aside (another
    regime) are set aside with them."""
    if regime is None or not len(branches) or "branch" not in branches:
        return branches
    parent = tokens_per_param(branches) / pd.to_numeric(branches["branch"], errors="coerce")
    near = (parent / regime).map(lambda r: pd.notna(r) and 1 / SAME_REGIME <= r <= SAME_REGIME)
    return branches[near.astype(bool)]


def split_regime(table: pd.DataFrame, config: str, rung: str, target: float) -> tuple[pd.DataFrame, pd.DataFrame,
                                                                                     float | None]:
    """(the runs judged, the runs set aside, the target's token regime): where a configuration at a rung has runs at
    two or more token regimes, the runs of the regime nearest the target's (the regime most of the target's runs
    have, ties: the most tokens) are judged and the others set aside for the tokens-per-parameter check; a table
    with one regime per configuration and rung is judged whole."""
    labels = regimes(table)
    at_target = labels[pd.to_numeric(table[rung], errors="coerce") == target].dropna()
    counts = at_target.value_counts() if len(at_target) else labels.value_counts()
    main = float(max(counts.index, key=lambda v: (counts[v], v))) if len(counts) else None
    cells = pd.DataFrame({"c": table[config].astype(str), "r": pd.to_numeric(table[rung], errors="coerce"),
                          "t": labels})
    if main is None or cells.dropna().groupby(["c", "r"])["t"].nunique().max() < 2:
        return table, table.iloc[:0], main
    nearest = cells.dropna().groupby(["c", "r"])["t"].agg(lambda t: min(t, key=lambda v: abs(math.log(v / main))))
    keep = [pd.isna(t) or nearest[(c, r)] == t for c, r, t in zip(cells["c"], cells["r"], cells["t"])]
    keep = pd.Series(keep, index=table.index)
    return table[keep], table[~keep], main


def _seeds(result, best: str) -> Axis:
    seeds = sorted(set.intersection(*(set(v) for v in result.top.values())), key=str)
    if len(seeds) < 2:
        return Axis("seeds", NOT, "one seed per configuration at the target")
    ceiling = "" if result.ceiling is None else f"; noise ceiling {result.ceiling:.3f}"
    firsts = {s: _first({c: v[s] for c, v in result.top.items()}) for s in seeds}
    others = [f"{c or 'a tie'} first in seed {s}" for s, c in firsts.items() if c != best]
    if not others:
        return Axis("seeds", HELD, f"{best} first in each of the {len(seeds)} seeds at the target{ceiling}")
    return Axis("seeds", CHANGED, f"{'; '.join(others)} ({best} first in {len(seeds) - len(others)} of "
                f"{len(seeds)}){ceiling}")


def _lr(table: pd.DataFrame, config: str, rung: str, result, best: str) -> Axis:
    at = table[pd.to_numeric(table[rung], errors="coerce") == result.target]
    rule = sorted({str(r) for r in at["lr_rule"].dropna()}) if "lr_rule" in at else []
    said = ", ".join(RULES.get(r, r) for r in rule) or "no lr rule recorded"
    if "status" in at:
        at = at[at["status"].fillna("completed") == "completed"]
    value = result.sign * pd.to_numeric(at[result.truth], errors="coerce")
    lr = pd.to_numeric(at["lr"], errors="coerce") if "lr" in at else pd.Series(math.nan, index=at.index)
    frame = pd.DataFrame({"c": at[config].astype(str), "lr": lr, "v": value}).dropna()
    means = frame.groupby(["lr", "c"])["v"].mean().unstack("c")
    names = [c for c in result.top if c in means]
    common = means[names].dropna() if len(names) == len(result.top) else means.iloc[:0]
    if len(common) < 2:
        return Axis("lr", NOT, f"one lr per configuration at the target; {said}")
    firsts = {lr: _first(row.to_dict()) for lr, row in common.iterrows()}
    others = [f"{c or 'a tie'} first at lr {lr:g}" for lr, c in firsts.items() if c != best]
    if not others:
        return Axis("lr", HELD, f"{best} first at each of the {len(common)} lrs every configuration ran at the "
                    f"target; {said}")
    return Axis("lr", CHANGED, f"{'; '.join(others)} (each configuration at its best lr puts {best} first); {said}")


def _scale(result, best: str) -> Axis:
    below = [r for r in result.rungs if r != result.target and result.values.get(r)]
    if not below:
        return Axis("scale", NOT, "no rung below the target with runs")
    firsts = {r: _first(_means(result.values[r])) for r in below}
    others = [f"{c or 'a tie'} first at {result.rung} = {_num(r)}" for r, c in firsts.items() if c != best]
    if not others:
        return Axis("scale", HELD, f"{best} first at each of the {len(below) + 1} rungs")
    return Axis("scale", CHANGED, f"{'; '.join(others)} ({best} at the target)")


def _tokens(others: pd.DataFrame, config: str, rung: str, result, regime: float | None) -> Axis:
    main = "" if regime is None else f"{regime:g} "
    if others.empty:
        return Axis("tokens per parameter", NOT, "tokens per parameter not recorded" if regime is None else
                    f"one token regime per configuration and rung, {main}tokens per parameter at the target")
    checked, changed = [], []
    labels = regimes(others)
    for label in sorted(labels.dropna().unique()):
        values = _values(others[labels == label], config, rung, result.truth)
        for r in sorted(set(values) & set(result.values)):
            common = set(values[r]) & set(result.values[r])
            if len(common) < 2:
                continue
            here = _first({c: m for c, m in _means(values[r]).items() if c in common})
            there = _first({c: m for c, m in _means(result.values[r]).items() if c in common})
            checked.append(r)
            if here != there:
                changed.append((r, f"at {result.rung} = {_num(r)}, {label:g} tokens per parameter puts "
                                   f"{here or 'a tie'} first, {main}puts {there or 'a tie'} first"))
    if not checked:
        return Axis("tokens per parameter", NOT, f"no rung has the same configurations at {main}and another regime")
    if changed:
        held = sorted(set(checked) - {r for r, _ in changed})
        return Axis("tokens per parameter", CHANGED, "; ".join(text for _, text in changed) + (
            f"; the same first at {result.rung} = {', '.join(_num(r) for r in held)}" if held else ""))
    return Axis("tokens per parameter", HELD, f"the same first at every rung run at {main}and another regime "
                                              f"({len(checked)} rung(s) compared)")


def _decay(rows, rung: str) -> Axis:
    if not rows:
        return Axis("decay phase", NOT, "no decay branches (train.schedule.decay_branches)")
    changed = [f"at {rung} = {_num(r.rung)}, branch {r.fraction:g}: {r.first_before or 'a tie'} first before the "
               f"decay, {r.first_after or 'a tie'} after" for r in rows if r.first_before != r.first_after]
    agree = f"agreement before vs after {min(r.agreement for r in rows):.3f}-{max(r.agreement for r in rows):.3f}"
    if changed:
        return Axis("decay phase", CHANGED, "; ".join(changed) + f" ({agree})")
    return Axis("decay phase", HELD, f"the same first before and after the decay at each of {len(rows)} branch "
                                     f"point(s); {agree}")


def axes(result, table: pd.DataFrame, others: pd.DataFrame, regime: float | None) -> list[Axis]:
    """The five axes of `result` (analysis.decide.DecideResult; `table`: the runs it judged, `others`: the runs of
    other token regimes); [] where no one configuration is best at the target."""
    means = _means(result.top)
    best = _first(means)
    if best is None or len(means) < 2:
        return []
    return [_seeds(result, best), _lr(table, result.config, result.rung, result, best), _scale(result, best),
            _tokens(others, result.config, result.rung, result, regime), _decay(result.decay, result.rung)]


__all__ = ["CHANGED", "HELD", "NOT", "Axis", "axes", "regimes", "split_regime", "tokens_per_param"]
