"""A ladder's answer in words: the lines slm-decide prints before its tables (and the report's ladder section opens
with). They say which configuration is best at the target, and the cheapest proxy and rung that decide the order at
--level. They also say the cheapest that names the best, how far to trust both, and across which axes the verdict was
checked (seeds, lr, scale, tokens per parameter, decay phase: analysis.decide_axes) and held or changed. Where the
evidence is too thin for that (the minimums below), they say "cannot decide" or give a warning, one line each.

    print(answer(result, level=0.8, check=held_out_result, forecast=forecast_result))
"""

from __future__ import annotations

import math

from analysis.decide import MIN_DRAWS, DecideResult, RungDecision, _num
from slm.words import counted

MIN_SEEDS = 3
"""Seeds per configuration at the target below which the intervals and the noise ceiling are rough: a bootstrap of
two seeds has only three distinct means. One seed has neither."""
MIN_RUNGS = 3
"""Rungs below which the ladder cannot check its own extrapolation: the held-out check fits two and predicts a third."""
MIN_CEILING = 0.5
"""A noise ceiling at or below this: the target's own seeds order the configurations no better than a coin, so
there is no decision to predict: cannot decide."""
MAX_REACH = 1.0
"""A forecast further past the top rung than this many times the ladder's own span (in log compute) is an
extrapolation, not a decision: cannot decide there."""

HELP = ("The first lines say the decision in words. They say 'cannot decide' where the target's noise ceiling is "
        f"at most {MIN_CEILING:g} or every 95% interval spans 0-1, and where a --forecast reaches more than "
        f"{MAX_REACH:g}x the ladder's span (in log compute) past its top rung. They warn, one line each, with fewer "
        f"than {MIN_SEEDS} seeds per configuration, fewer than {MIN_RUNGS} rungs, a ceiling below --level, fewer than "
        f"{MIN_DRAWS} --draws, or a held-out check that misses the best.")


def _where(result: DecideResult, row: RungDecision, proxy: bool = True) -> str:
    share = "" if row.share is None else f" ({100 * row.share:.3g}% of the target's compute)"
    return f"{row.proxy + ' at ' if proxy else ''}{result.rung} = {_num(row.rung)}{share}"


def _times(ratio: float) -> str:
    """A ratio to two significant figures: 60,000x, 17x, 2.8x."""
    return f"{float(f'{ratio:.2g}'):,g}x"


def _first(means: dict) -> str | None:
    """The configuration with the lowest mean, None where two share it."""
    if not means:
        return None
    low = min(means.values())
    leaders = [c for c, v in means.items() if v == low]
    return leaders[0] if len(leaders) == 1 else None


def _key(row: RungDecision):
    return (row.share if row.share is not None else math.inf, row.rung)


def _cheapest(result: DecideResult, level: float) -> RungDecision | None:
    found = [r for r in (result.cheapest(p, level) for p in result.proxies) if r is not None]
    return min(found, key=_key, default=None)


def _leads_from(result: DecideResult, best: str) -> RungDecision | None:
    """The cheapest row from which `best` is first at every rung of that proxy's rows up (a partial proxy's include
    the target read early)."""
    found = []
    for proxy in result.proxies:
        rows = sorted((r for r in result.rows if r.proxy == proxy), key=lambda r: r.rung)
        start = None
        for row in rows:
            if _first(result.means.get((proxy, row.rung), {})) == best:
                start = row if start is None else start
            else:
                start = None
        if start is not None:
            found.append(start)
    return min(found, key=_key, default=None)


def _decision(result: DecideResult) -> tuple[str | None, list[str]]:
    """(the best configuration at the target or None, its line(s))."""
    means = {c: sum(v.values()) / len(v) for c, v in result.top.items()}
    value = {c: result.sign * m for c, m in means.items()}
    at = f"the target {result.rung} = {_num(result.target)} on {result.truth}"
    if len(means) < 2:
        return None, [f"Cannot decide: only {', '.join(means) or 'no configuration'} has a completed run at {at}; "
                      "nothing to compare there."]
    order = sorted(means, key=lambda c: (means[c], c))
    best, runner = order[0], order[1]
    seeds = sorted(set(result.top[best]) & set(result.top[runner]), key=str)
    ahead = sum(result.top[best][s] < result.top[runner][s] for s in seeds)
    by_seed = f", ahead in {ahead} of {counted(len(seeds), 'seed')}" if len(seeds) > 1 else ""
    said = f"({value[best]:.4g}; {runner} next at {value[runner]:.4g}{by_seed})"
    if result.ceiling is not None and result.ceiling <= MIN_CEILING:
        return None, [f"Cannot decide which is best at {at}: the target's own seeds order the configurations no "
                      f"better than chance (noise ceiling {result.ceiling:.3f}, at most {MIN_CEILING:g}). The means "
                      f"put {best} first {said}; more seeds, or configurations further apart, are needed."]
    return best, [f"The decision: {best} is best at {at} {said}."]


def _trust(result: DecideResult, level: float, seeds: int, rungs: int) -> list[str]:
    """The trust line and the warnings, one line each."""
    ceiling = ("no noise ceiling (fewer than two seeds in common at the target)" if result.ceiling is None else
               f"noise ceiling {result.ceiling:.3f} (how often one seed's order at the target agrees with another's: "
               "the most a proxy can reach)")
    lines = [f"- Trust: {ceiling}; {counted(seeds, 'seed')} per configuration at the target; {counted(rungs, 'rung')}."]
    if seeds == 1:
        lines.append("- warning: one seed per configuration at the target: no interval and no noise ceiling, so "
                     f"nothing here says whether these orders are more than seed noise (train.seed: at least "
                     f"{MIN_SEEDS}).")
    elif seeds < MIN_SEEDS:
        lines.append(f"- warning: {seeds} seeds per configuration at the target, fewer than {MIN_SEEDS}: the intervals "
                     f"and the noise ceiling redraw {seeds} seeds and understate the noise.")
    if rungs < MIN_RUNGS:
        lines.append(f"- warning: {counted(rungs, 'rung')}, fewer than {MIN_RUNGS}: no held-out check of the "
                     "ladder's extrapolation, and one rung below the target to judge.")
    if result.ceiling is not None and MIN_CEILING < result.ceiling < level:
        lines.append(f"- warning: the noise ceiling {result.ceiling:.3f} is below --level {level:g}: the target's own "
                     "seeds agree on fewer pairs than the level asks of a proxy.")
    if seeds > 1 and result.draws == 0:
        lines.append("- warning: --draws 0: no 95% intervals.")
    elif 0 < result.draws < MIN_DRAWS and seeds > 1:
        lines.append(f"- warning: --draws {result.draws}, fewer than {MIN_DRAWS}: each 95% interval is read from "
                     f"{counted(result.draws, 'redraw')} and is rough.")
    return lines


def _rungs(result: DecideResult, best: str | None, level: float) -> list[str]:
    """What the lower rungs decide: the cheapest at the level, and the cheapest from which the best stays first."""
    spans = [r for r in result.rows if r.low is not None]
    if spans and all(r.low <= 0 and r.high >= 1 for r in spans):
        return ["- Cannot decide from the lower rungs: every 95% interval spans 0-1, so the seeds alone can reverse "
                "every decision below the target."]
    lines = []
    row = _cheapest(result, level)
    if row is None:
        top = max(result.rows, key=lambda r: (r.accuracy, -_key(r)[0]))
        lines.append(f"- No rung below the target decides at {level:g}: the most accurate is {_where(result, top)} "
                     f"({top.accuracy:.3f}).")
    else:
        pairs = row.configurations * (row.configurations - 1) // 2
        interval = "" if row.low is None else (f" (95% interval {row.low:.3f}-{row.high:.3f}"
                                                + (f", reaching below {level:g})" if row.low < level else ")"))
        first = _first(result.means.get((row.proxy, row.rung), {}))
        names = "" if best is None or first == best else \
            f" It puts {first or 'two configurations'} first, not {best}."
        lines.append(f"- Decided at {level:g} by {_where(result, row)}: {row.accuracy:.3f} of "
                     f"{counted(pairs, 'pair')} ordered as at the target{interval}.{names}")
    if best is not None:
        lead = _leads_from(result, best)
        lines.append(f"- {best} is first on {lead.proxy} from {_where(result, lead, proxy=False)} up."
                     if lead is not None
                     else f"- No proxy puts {best} first at a rung below the target and at every rung above it.")
    return lines


def _axes(result: DecideResult) -> list[str]:
    """The axes the verdict was checked across (analysis.decide_axes), one line each."""
    if not result.axes:
        return []
    best = _first({c: sum(v.values()) / len(v) for c, v in result.top.items()})
    return [f"- Checked across, for {best} first (held / changed / not checked):"] + \
        [f"  - {axis.line()}" for axis in result.axes]


def _held_out(check) -> list[str]:
    if check is None or check.best_matches:
        return []
    return [f"- warning: the held-out check (the rungs below the top predicting it) picks {check.best_predicted} "
            f"best at the top rung, where the runs put {check.best_observed}: the ladder's curves are not reliable "
            "for a forecast."]


def _forecast(result, forecast) -> list[str]:
    """The forecast's line: "cannot decide" past MAX_REACH x the ladder's span, else its best and P(best)."""
    if forecast is None or not forecast.predictions:
        return []
    best = forecast.predictions[0]
    target = forecast.target.removeprefix("target_")
    reach, far, span = 0.0, 1.0, 1.0
    for each in forecast.predictions:
        low, high = forecast.span.get(each.config, (math.nan, math.nan))
        if high > low > 0 and each.flops > high and math.log(each.flops / high) / math.log(high / low) > reach:
            reach, far, span = math.log(each.flops / high) / math.log(high / low), each.flops / high, high / low
    together = ", whose draws move together through the shared offset E," if forecast.fit.form == "shared" else ","
    curves = (f"The fitted curves put {best.config} first; without redraws (--draws 0) nothing says how stable that "
              "order is." if best.p_best is None else
              f"The fitted curves put {best.config} first (P(best) {best.p_best:.3f}, the share of the seed redraws in "
              f"which it is lowest): that is the stability of the curves' order under the seeds{together} not a "
              "measurement at the target.")
    if reach > MAX_REACH:
        return [f"- Cannot decide at {target} from this ladder: the target is about {_times(far)} the top rung's "
                f"compute, past the ladder's own span of {_times(span)} (a forecast is read at most {MAX_REACH:g}x "
                f"that span beyond the top rung, in log compute). {curves}"]
    interval = "" if best.low is None else f", 95% interval {best.low:.4g}-{best.high:.4g}"
    return [f"- Forecast at {target}: {best.config} lowest ({best.loss:.4g}{interval}). {curves}"]


def by_rung(result: DecideResult) -> list[dict[str, str]]:
    """The verdict per rung: the configurations in order on the truth at each rung (each at its best lr there), best
    first, and in how many seeds the best is ahead of the next. Configurations are compared within a rung only."""
    shares = {r.rung: r.share for r in result.rows if r.proxy == result.truth} | {result.target: 1.0}
    rows = []
    for rung in result.rungs:
        cells = result.values.get(rung, {})
        if not cells:
            continue
        means = {c: sum(v.values()) / len(v) for c, v in cells.items()}
        order = sorted(means, key=lambda c: (means[c], c))
        ahead = ""
        if len(order) > 1:
            seeds = sorted(set(cells[order[0]]) & set(cells[order[1]]), key=str)
            if len(seeds) > 1:
                ahead = f"{sum(cells[order[0]][s] < cells[order[1]][s] for s in seeds)} of {len(seeds)}"
        share = shares.get(rung)
        rows.append({result.rung: _num(rung) + (" (target)" if rung == result.target else ""),
                     "% of target compute": "" if share is None else f"{100 * share:.3g}%", "best": order[0],
                     f"order on {result.truth}, best first": (" < " if result.sign > 0 else " > ").join(
                         f"{c} {result.sign * means[c]:.4g}" for c in order),
                     "seeds in which the best leads the next": ahead})
    return rows


def answer(result: DecideResult, level: float = 0.8, check=None, forecast=None) -> str:
    """The decision in words, as Markdown: the decision, what decides it below the target, how far to trust it, and a
    forecast's line where one was made (`check`: analysis.forecast.HeldOutResult; `forecast`: its ForecastResult)."""
    seeds = min((len(v) for v in result.top.values()), default=0)
    rungs = len(result.rungs)
    best, lines = _decision(result)
    lines += (_rungs(result, best, level) if best is not None else []) + _trust(result, level, seeds, rungs)
    lines += _held_out(check)
    lines += _forecast(result, forecast)
    lines += _axes(result) if best is not None else []
    return "\n".join(lines) + "\n"


__all__ = ["HELP", "MAX_REACH", "MIN_CEILING", "MIN_RUNGS", "MIN_SEEDS", "answer", "by_rung"]
