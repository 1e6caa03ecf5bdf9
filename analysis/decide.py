"""Decision accuracy (slm-decide): how often the order of two configurations at a small scale is their order at the
target scale, per proxy metric and rung, as AI2's DataDecide measures it (Magnusson et al. 2025, arXiv 2504.11393).

    result = decide(table, config="family", rung="param_budget", proxies=["val_nll", "val_nll_25"])
    print(markdown(result))

A ladder's results table has one row per run: the configuration (`config`, e.g. family), the rung (`rung`, e.g.
param_budget), the seed, the lr and the proxies. The decision to predict is the order of the configurations at the
target rung T (the largest by default) on the `truth` metric (val_nll, final, by default). Per proxy and rung r:

- a configuration's value is its mean over seeds (completed runs with a finite value). Where the rung searched the lr
  (several `lr` values for one configuration and rung: hydra.sweeper.lr_search) the runs at the lr with the best seed
  mean on that metric stand for it (its direction: analysis.metrics), chosen once on all the seeds (the bootstrap
  redraws seeds at that lr); an lr with a failed or diverged seed ranks after every lr whose seeds all completed, as
  analysis.tuning ranks them; a best lr at the edge of its grid (failed lrs included) is named in the notes;
- decision accuracy: over every pair of configurations present at r (on the proxy) and at T (on the truth), the
  share whose order agrees (a tie at either counts one half; a higher-is-better proxy is compared negated). Without
  ties it is (1 + Kendall's tau) / 2 of the two sets of means. A proxy read part-way through training (val_nll_25,
  val_nll_50) is judged at the target rung too: stopping the target early is a cheaper rung;
- its 95% interval: `draws` bootstrap redraws of the seeds of every configuration at both (with replacement), each
  (proxy, rung) from its own generator (`redraws`: the interval does not depend on the other proxies judged); none
  where every configuration has one seed;
- the signal-to-noise ratio: the spread across configurations (the standard deviation of their means) over the
  seed-to-seed spread (the pooled standard deviation within configurations), the ratio "Signal and Noise"
  (Heineman et al. 2025, arXiv 2508.13144) ranks proxies by; None with one seed per configuration; beside it theirs in
  their own normalisation (analysis.decide_snr: the relative range of the means over a run's relative late spread);
- the share of the target's compute it costs: the mean `train_flops` of the rung's runs over the target's, times the
  fraction of training the proxy is read at (its slm.metrics entry's curve_at: part_read).

The noise ceiling: how often one seed's order at the target agrees with another seed's on the truth (seeds matched
by train.seed): the agreement a perfect proxy could reach. The cheapest rung whose decision accuracy reaches `level`
is the number to plan with (`cheapest`). Two runs of one configuration at one rung, lr and seed are refused: the
configurations differ in more than `config` (a ladder's table has ladder_point for that). A decay branch's run (the
table's `branch` column) and a run at another token regime of its configuration and rung are not such a second run:
they are set aside, judged before and after the decay (analysis.decide_decay) and as the tokens-per-parameter axis
(analysis.decide_axes), which lists the axes the verdict was checked across.
"""

from __future__ import annotations

import itertools
import math
import zlib
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.decide_axes import axes, branches_at, split_regime
from analysis.decide_decay import branch_runs, decay_markdown, decay_phase
from analysis.decide_effects import effects, effects_markdown
from analysis.decide_values import (BAD, DecideError, _completed, _has_values, _means, _num, _sign, _values,
                                    agreement, part_read, snr)

MIN_DRAWS = 100
"""Fewer redraws than this give rough intervals (said in the notes and the answer)."""


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
    low: float | None
    high: float | None
    """The 95% interval; None where every configuration has one seed (nothing to redraw)."""
    snr: float | None
    snr_heineman: float | None = None
    """Heineman et al.'s SNR (analysis.decide_snr): the relative range of the means over the runs' relative late
    spread; None where the proxy has no late validations."""


@dataclass
class DecideResult:
    config: str
    rung: str
    target: float
    rows: list[RungDecision] = field(default_factory=list)
    truth: str = "val_nll"
    """The metric whose order at the target is the decision to predict."""
    ceiling: float | None = None
    """The target's seed-to-seed agreement on the truth (None with fewer than two common seeds)."""
    proxies: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the reader should know: configurations missing at a rung, unequal seeds, best lrs at a grid's edge."""
    chosen: dict = field(default_factory=dict)
    """{(proxy, rung, configuration): lr} where the rung searched the lr."""
    means: dict = field(default_factory=dict)
    """{(proxy, rung): {configuration: mean over seeds}}, lower is better (a higher-is-better proxy negated)."""
    top: dict = field(default_factory=dict)
    """{configuration: {seed: value}} of the truth at the target, lower is better: what the decision is."""
    values: dict = field(default_factory=dict)
    """{rung: {configuration: {seed: value}}} of the truth at every rung (each at its best lr there), lower is
    better."""
    draws: int = 0
    """Bootstrap redraws asked for."""
    sign: float = 1.0
    """-1 where the truth is higher-is-better (the means and `top` are negated), else 1."""
    rungs: list[float] = field(default_factory=list)
    """Every rung of the table."""
    decay: list = field(default_factory=list)
    """Before and after the decay (analysis.decide_decay.DecayRow), where the runs have decay branches."""
    axes: list = field(default_factory=list)
    """The axes the verdict was checked across (analysis.decide_axes.Axis)."""
    effects: list = field(default_factory=list)
    """Each intervention against its baseline at each rung (analysis.decide_effects.Effect)."""
    regime: float | None = None
    """The target's token regime (tokens per parameter, analysis.decide_axes.regimes): the runs judged; runs of another
    regime are set aside as the tokens-per-parameter check."""

    def cheapest(self, proxy: str, level: float) -> RungDecision | None:
        """The lowest-compute rung below the target whose decision accuracy on `proxy` is at least `level`."""
        rows = [r for r in self.rows if r.proxy == proxy and r.accuracy >= level and (r.share is None or r.share < 1)]
        return min(rows, key=lambda r: (r.share if r.share is not None else math.inf, r.rung), default=None)


def _coverage(values: dict, rungs: list[float], rung: str) -> list[str]:
    """Notes on configurations missing at a rung and seeds that differ between rungs."""
    notes = []
    names = sorted(set().union(*(set(values.get(r, {})) for r in rungs)))
    for r in rungs:
        missing = [c for c in names if c not in values.get(r, {})]
        if missing:
            notes.append(f"{', '.join(missing)} {'has' if len(missing) == 1 else 'have'} no completed run at {rung} = "
                         f"{_num(r)}: judged without {'it' if len(missing) == 1 else 'them'} there")
    counts = {r: sorted({len(s) for s in values.get(r, {}).values()}) for r in rungs if values.get(r)}
    if len({tuple(c) for c in counts.values()}) > 1 or any(len(c) > 1 for c in counts.values()):
        said = "; ".join(f"{_num(r)}: {'/'.join(map(str, c))}" for r, c in counts.items())
        notes.append(f"seeds per configuration differ across rungs ({rung} {said}): each mean and interval uses the "
                     "seeds it has")
    return notes


def noise_ceiling(by_config: dict) -> float | None:
    """How often one seed's order of two configurations agrees with another seed's (seeds matched by number)."""
    seeds = sorted(set.intersection(*(set(s) for s in by_config.values())), key=str) if by_config else []
    if len(seeds) < 2 or len(by_config) < 2:
        return None
    scores = [agreement({c: v[s] for c, v in by_config.items()}, {c: v[t] for c, v in by_config.items()})[0]
              for s, t in itertools.permutations(seeds, 2)]
    return float(np.mean(scores))


def _truth(table: pd.DataFrame, truth: str | None, proxies) -> str:
    """The truth asked for, else val_nll; DecideError where val_nll has no value (no silent other metric)."""
    if truth is not None:
        return truth
    if _has_values(table, "val_nll"):
        return "val_nll"
    others = [p for p in proxies if _has_values(table, p)]
    raise DecideError("val_nll (the default --truth, the metric whose order at the target is the decision) has no "
                      "value in any run; name the metric with --truth"
                      + (f", e.g. --truth {others[0]}" if others else ""))


def _check_columns(table: pd.DataFrame, config: str, rung: str, truth: str, proxies) -> None:
    """DecideError for a column the table lacks or a proxy without values."""
    flags = {column: flag for flag, columns in (("--proxy", proxies), ("--truth", [truth]), ("--rung", [rung]),
                                                ("--config", [config])) for column in columns}
    for column in dict.fromkeys((config, rung, truth, *proxies)):
        if column not in table:
            raise DecideError(f"{flags[column]} {column}: the results have no column {column!r}; columns include: "
                              f"{', '.join(sorted(map(str, table.columns))[:20])}")
    for proxy in dict.fromkeys((truth, *proxies)):
        if not _has_values(table, proxy):
            raise DecideError(f"{flags[proxy]} {proxy}: no run has a value in that column")


def _flops(table: pd.DataFrame, rung: str, rungs: list[float]) -> dict[float, float | None]:
    """{rung: the mean train_flops of its runs} ({} without train_flops)."""
    if "train_flops" not in table:
        return {}
    spent, at = pd.to_numeric(table["train_flops"], errors="coerce"), pd.to_numeric(table[rung], errors="coerce")
    return {r: (None if pd.isna(m) else float(m)) for r in rungs for m in [spent[at == r].mean()]}


def _tasks(table: pd.DataFrame, result: DecideResult, truth_values: dict, truth_edges: list) -> list:
    """The (proxy, rung, values there, part read, redraw?) to judge, with the coverage and grid-edge notes."""
    tasks = []
    for proxy in result.proxies:
        edges: list = truth_edges if proxy == result.truth else []
        values = truth_values if proxy == result.truth else _values(table, result.config, result.rung, proxy,
                                                                     result.chosen, edges)
        for note in _coverage(values, result.rungs, result.rung):
            if note not in result.notes:
                result.notes.append(note)
        if edges:
            result.notes.append(f"{proxy}: the best lr is at the edge of the searched grid for "
                                + ", ".join(f"{c} at {_num(r)} (lr {lr:g})" for r, c, lr in sorted(edges))
                                + ": the search may not have found the optimum there")
        part = part_read(proxy)
        for r in result.rungs:
            if r == result.target and part == 1.0:  # a whole run at the target is the truth itself: the ceiling
                continue
            here = values.get(r, {})
            result.means[(proxy, r)] = _means(here)
            if agreement(_means(here), _means(result.top))[1]:
                repeats = any(len(v) > 1 for v in here.values()) or any(len(v) > 1 for v in result.top.values())
                tasks.append((proxy, r, here, part, bool(result.draws and repeats)))
    return tasks


def _row(table: pd.DataFrame, result: DecideResult, task, flops: dict, seed: int, tick) -> RungDecision:
    """One proxy at one rung: its accuracy, interval (redrawn seeds), both SNRs and share of the compute."""
    from analysis import decide_snr

    proxy, r, here, part, redraw = task
    top, draws = result.top, result.draws
    accuracy = agreement(_means(here), _means(top))[0]
    low = high = None
    if redraw:
        boot, rng = [], redraws(seed, proxy, result.rungs.index(r))
        for _ in range(draws):
            boot.append(agreement(_means(here, rng), _means(top, rng))[0])
            tick()
        low, high = float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))
        if not low <= accuracy <= high:
            result.notes.append(f"{proxy} at {_num(r)}: the 95% interval {low:.3f}-{high:.3f} excludes the "
                                f"accuracy {accuracy:.3f} of all the seeds: the redraws' accuracies lie mostly "
                                f"{'above' if low > accuracy else 'below'} it (a skewed bootstrap"
                                + (f"; {draws} redraws are few" if draws < MIN_DRAWS else "") + ")")
    share = part * flops[r] / flops[result.target] if flops.get(r) and flops.get(result.target) else None
    heineman = None
    if decide_snr.applies(proxy):
        noises = decide_snr.run_noises(table, result.config, result.rung, r, result.chosen, proxy)
        heineman = decide_snr.rung_snr(_means(here), noises)
    return RungDecision(proxy, r, share, len(set(here) & set(top)), accuracy, low, high, snr(here), heineman)


def decide(table: pd.DataFrame, config: str = "family", rung: str = "param_budget", proxies=("val_nll",),
           target: float | None = None, draws: int = 1000, seed: int = 0, truth: str | None = None,
           progress=None) -> DecideResult:
    """Decision accuracy of every rung and proxy against the truth's order at the target (the module docstring);
    `progress(done, total)`, if given, is called before the redraws (done 0) and after each. Decay branches
    (analysis.decide_decay) and runs of another token regime (analysis.decide_axes.split_regime) are set aside: they
    are the decay-phase and tokens-per-parameter checks of result.axes."""
    truth = _truth(table, truth, proxies)
    _check_columns(table, config, rung, truth, proxies)
    table, branches = branch_runs(table)
    rungs = sorted(set(pd.to_numeric(table[rung], errors="coerce").dropna().astype(float)))
    if len(rungs) < 2:
        raise DecideError(f"--rung {rung}: a ladder needs at least two rungs; the results have {len(rungs)}")
    target = rungs[-1] if target is None else float(target)
    if target not in rungs:
        raise DecideError(f"--target {target:g} is not a rung of {rung}; rungs: {', '.join(f'{r:g}' for r in rungs)}")
    table, others, regime = split_regime(table, config, rung, target)
    branches = branches_at(branches, regime)
    flops = _flops(table, rung, rungs)
    result = DecideResult(config, rung, target, truth=truth, proxies=list(proxies), rungs=rungs, regime=regime)
    truth_edges: list = []
    truth_values = _values(table, config, rung, truth, result.chosen, truth_edges)
    top = truth_values.get(target, {})
    if not top:
        raise DecideError(f"--target {_num(target)}: no configuration has a completed run with {truth} at "
                          f"{rung} = {_num(target)}; rungs with runs: "
                          f"{', '.join(_num(r) for r in rungs if truth_values.get(r)) or 'none'}")
    result.ceiling, result.top, result.draws, result.sign = noise_ceiling(top), top, draws, _sign(table, truth)
    result.values = truth_values
    tasks = _tasks(table, result, truth_values, truth_edges)
    total, done = draws * sum(t[-1] for t in tasks), [0]
    if progress is not None and total:
        progress(0, total)

    def tick():
        done[0] += 1
        if progress is not None:
            progress(done[0], total)

    result.rows = [_row(table, result, task, flops, seed, tick) for task in tasks]
    if not result.rows:
        raise DecideError(f"no two configurations ({config}) have completed runs both at the target {rung} = "
                          f"{_num(target)} and at another rung: nothing to compare")
    result.decay = decay_phase(branches, config, rung, top, flops.get(target), draws, seed)
    result.axes = axes(result, table, others, regime)
    result.effects = effects(table, branches, result, flops, draws, seed)
    return result


def redraws(seed: int, proxy: str, rung_index: int) -> np.random.Generator:
    """The bootstrap generator of one (proxy, rung) row: its own stream, from the seed, the proxy's name and the rung's
    position, so a row's interval is the same whichever other proxies are judged beside it (a proxy added to the
    registry, or `--proxy` naming one alone, leaves the others' intervals as they were)."""
    return np.random.default_rng([seed, zlib.crc32(proxy.encode()), rung_index])


def _interval(r: RungDecision) -> str:
    return "-" if r.low is None else f"{r.low:.3f}-{r.high:.3f}"


def table_rows(result: DecideResult) -> list[dict[str, str]]:
    """The decision-accuracy table's rows, each cell formatted as slm-decide prints it (the report shows the same)."""
    return [{"proxy": r.proxy, "rung": _num(r.rung), "% of target compute": "" if r.share is None else
             f"{100 * r.share:.3g}%", "configurations": str(r.configurations), "decision accuracy": f"{r.accuracy:.3f}",
             "95% interval": _interval(r), "SNR": "" if r.snr is None else f"{r.snr:.3g}",
             "SNR (Heineman)": "" if r.snr_heineman is None else f"{r.snr_heineman:.3g}"} for r in result.rows]


def markdown(result: DecideResult, level: float = 0.8) -> str:
    """The decision-accuracy table, the noise ceiling and the cheapest rung per proxy at `level`, as Markdown."""
    rows = table_rows(result)
    columns = list(rows[0]) if rows else []
    lines = [f"Decision accuracy: each proxy at each rung against the order of the configurations ({result.config}) "
             f"on {result.truth} at the target rung {result.rung} = {_num(result.target)} (95% intervals from "
             "redrawn seeds)", "", "| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    lines += ["| " + " | ".join(row.values()) + " |" for row in rows]
    lines.append("")
    said = "not measurable (fewer than two seeds in common at the target)" if result.ceiling is None \
        else f"{result.ceiling:.3f}"
    lines.append(f"- noise ceiling (one seed's order on {result.truth} at the target against another's): {said}")
    for proxy in result.proxies:
        best = result.cheapest(proxy, level)
        where = "none" if best is None else (f"{result.rung} = {_num(best.rung)}" + (
            "" if best.share is None else f" ({100 * best.share:.3g}% of the target's compute)"))
        lines.append(f"- {proxy}: cheapest rung with decision accuracy >= {level:g}: {where}")
    lines += [f"- note: {note}" for note in result.notes]
    if result.decay:
        lines += ["", decay_markdown(result.decay, result.rung).rstrip("\n")]
    if result.effects:
        lines += ["", effects_markdown(result.effects, result.rung).rstrip("\n")]
    return "\n".join(lines) + "\n"


def default_proxies(table: pd.DataFrame) -> list[str]:
    """The proxies judged by default: the final losses, the averaged weights' (val_nll_avg, where the runs averaged
    them: train.validation.averaging), the mean of the last validations (slm.metrics.read_averaged: val_nll_last3,
    where the curve has that many), the curve's part-way (read_part_way: at 50% and 25% of training), and the lm-eval
    scores, those with a value in the table."""
    from slm.metrics import read_averaged, read_part_way

    names = ["val_nll", "val_bpb", "val_nll_avg", *(m.name for m in read_averaged()), *(m.name for m in read_part_way())]
    names += sorted(c for c in table.columns if str(c).startswith("score_"))
    return [c for c in names if c in table and pd.to_numeric(table[c], errors="coerce").notna().any()]


def is_ladder(table: pd.DataFrame) -> bool:
    """Whether the table holds a ladder sweep's runs (hydra.sweeper.ladder: their lr_rule is recorded)."""
    return "lr_rule" in table and table["lr_rule"].notna().any() and "param_budget" in table \
        and pd.to_numeric(table["param_budget"], errors="coerce").nunique() >= 2


def ladder_points(table: pd.DataFrame) -> pd.Series | None:
    """A label per run for a ladder's configurations: `family` where it names each ladder_point (sweep.json: the
    point's overrides without the rung, seed and lr; the sweep=<file> choice dropped) one to one, else ladder_point
    without the settings every point shares; None for a table without ladder_point."""
    if "ladder_point" not in table or table["ladder_point"].isna().all():
        return None
    # the sweep file's name (the command line's sweep=...) selects the sweep, not a setting of the configuration: two
    # ladders of one configuration at two token regimes (ladder_close, ladder_close_t1) name the same point
    points = table["ladder_point"].astype("string").map(
        lambda text: text if pd.isna(text) else ",".join(p for p in str(text).split(",") if not p.startswith("sweep="))
        or "(all alike)")
    if "family" in table:
        pairs = pd.DataFrame({"p": points, "f": table["family"].astype("string")}).dropna().drop_duplicates()
        if pairs["p"].is_unique and pairs["f"].is_unique:
            return table["family"].astype("string")
    parts = [set(str(text).split(",")) for text in points.dropna()]
    common = set.intersection(*parts) if parts else set()
    return points.map(lambda text: text if pd.isna(text) else
                      ",".join(p for p in str(text).split(",") if p not in common) or "(all alike)")


def ladder_config(table: pd.DataFrame, config: str | None = None) -> tuple[pd.DataFrame, str]:
    """(table, the column naming a configuration): `config` where given; else for a ladder sweep's table its points
    (ladder_points: `family` where that names them, else a `configuration` column added), else `family`."""
    if config is not None:
        return table, config
    labels = ladder_points(table)
    if labels is None or ("family" in table and labels.equals(table["family"].astype("string"))):
        return table, "family"
    return table.assign(configuration=labels), "configuration"


def ladder_table(table: pd.DataFrame, config: str, rung: str, proxy: str = "val_nll") -> pd.DataFrame:
    """The runs a ladder is judged on: one row per configuration, rung and seed (at the lr chosen as decide() chooses
    it), with columns config, rung, seed, lr, flops (train_flops), params (the rung where it is a parameter budget,
    else params_total) and value (the proxy, a loss: lower is better): the table analysis.forecast reads."""
    if _sign(table, proxy) < 0:
        raise DecideError(f"{proxy} is higher-is-better: the rank flow and the forecast read a loss (e.g. val_nll)")
    table = branch_runs(table)[0]
    top = pd.to_numeric(table[rung], errors="coerce").max()
    table = split_regime(table, config, rung, top)[0]
    chosen: dict = {}
    values = _values(table, config, rung, proxy, chosen)
    rows = _completed(table)
    rung_of = pd.to_numeric(rows[rung], errors="coerce")
    lrs = pd.to_numeric(rows["lr"], errors="coerce") if "lr" in rows else pd.Series(math.nan, index=rows.index)
    flops = pd.to_numeric(rows["train_flops"], errors="coerce") if "train_flops" in rows else \
        pd.Series(math.nan, index=rows.index)
    params_col = rung if rung == "param_budget" else "params_total"
    params = pd.to_numeric(rows[params_col], errors="coerce") if params_col in rows else \
        pd.Series(math.nan, index=rows.index)
    seeds = rows["seed"] if "seed" in rows else pd.Series(range(len(rows)), index=rows.index)
    out = []
    for idx, r, c, s, lr in zip(rows.index, rung_of, rows[config].astype(str), seeds, lrs):
        if pd.isna(r) or s not in values.get(float(r), {}).get(c, {}):
            continue
        want = chosen.get((proxy, float(r), c))
        if want is not None and not (pd.notna(lr) and float(lr) == want):
            continue
        out.append({"config": c, "rung": float(r), "seed": s, "lr": None if pd.isna(lr) else float(lr),
                    "flops": flops[idx], "params": params[idx], "value": values[float(r)][c][s]})
    return pd.DataFrame(out, columns=["config", "rung", "seed", "lr", "flops", "params", "value"])


def ranks(ladder: pd.DataFrame) -> pd.DataFrame:
    """Each configuration's rank (1: the lowest mean value) at each rung of a ladder_table: rows configurations,
    columns rungs; ties share the lower rank."""
    means = ladder.groupby(["config", "rung"])["value"].mean().unstack("rung")
    return means.rank(axis=0, method="min")


__all__ = ["DecideError", "DecideResult", "RungDecision", "agreement", "decide", "ladder_table", "markdown",
           "noise_ceiling", "ranks", "snr"]
