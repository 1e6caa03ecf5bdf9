"""What each of issue 51's interventions does to decision accuracy and SNR, with intervals (slm-decide's "Each
intervention against its baseline" table): a proxy with the intervention against the same proxy without it, at the
same rung and from the same runs.

    averaged weights   val_nll_avg against val_nll, val_nll_avg_50 against val_nll_50, val_nll_avg_25 against val_nll_25
    averaged scores    val_nll_last3 against val_nll
    decay branch       a decay branch's val_nll (after the decay) against val_nll_stable (its run before, same step)

The intervals are paired: each redraw draws one set of seeds per configuration (with replacement, from the seeds both
proxies have) and one set at the target, and judges both proxies on them, so the difference's interval is not the
sum of two independent ones. The SNR is slm's (analysis.decide.snr: the spread of the configuration means over the
pooled seed spread); its effect is the ratio with / without.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.decide_values import _means, _num, _values, agreement, part_read, snr

PAIRS = (("averaged weights", "val_nll_avg", "val_nll"), ("averaged weights", "val_nll_avg_50", "val_nll_50"),
         ("averaged weights", "val_nll_avg_25", "val_nll_25"), ("averaged scores", "val_nll_last3", "val_nll"))
"""(intervention, proxy with it, the proxy without it) judged on the main runs, where both were judged."""
DECAY = ("decay branch", "val_nll", "val_nll_stable")
"""The same on the decay branches' runs: the loss after the decay against the loss before it at the same step."""


@dataclass
class Effect:
    """One intervention at one rung: the proxy with it against the proxy without it."""

    intervention: str
    proxy: str
    base: str
    rung: float
    share: float | None
    """The rung's share of the target's compute as the proxy is read (analysis.decide's)."""
    accuracy: float
    base_accuracy: float
    low: float | None
    high: float | None
    """The 95% interval of accuracy - base_accuracy (paired redraws); None without repeats."""
    snr: float | None
    base_snr: float | None
    snr_low: float | None = None
    snr_high: float | None = None
    """The 95% interval of snr / base_snr (paired redraws)."""

    @property
    def difference(self) -> float:
        return self.accuracy - self.base_accuracy

    @property
    def snr_ratio(self) -> float | None:
        if self.snr is None or self.base_snr is None or self.base_snr == 0 or not math.isfinite(self.base_snr):
            return None
        return self.snr / self.base_snr


def _paired(proxy: dict, base: dict, top: dict, seeds_at: list, rng: np.random.Generator) -> tuple:
    """One redraw: (the proxy's drawn seeds, the base's, both the same draw, per configuration; the target's means)."""
    drawn_p, drawn_b = {}, {}
    for c, keys in seeds_at:
        pick = rng.choice(len(keys), size=len(keys), replace=True)
        drawn_p[c] = {i: proxy[c][keys[k]] for i, k in enumerate(pick)}
        drawn_b[c] = {i: base[c][keys[k]] for i, k in enumerate(pick)}
    return drawn_p, drawn_b, _means(top, rng)


def judge(intervention: str, proxy: dict, base: dict, top: dict, rung: float, share: float | None, draws: int,
          seed: int, names: tuple[str, str]) -> Effect | None:
    """The effect at one rung from {configuration: {seed: value}} of the proxy and the base there and the truth at the
    target; None where fewer than two configurations have seeds in both and at the target."""
    configs = sorted(c for c in set(proxy) & set(base) & set(top) if set(proxy[c]) & set(base[c]))
    if len(configs) < 2:
        return None
    seeds_at = [(c, sorted(set(proxy[c]) & set(base[c]))) for c in configs]
    p = {c: {s: proxy[c][s] for s in keys} for c, keys in seeds_at}
    b = {c: {s: base[c][s] for s in keys} for c, keys in seeds_at}
    target = {c: top[c] for c in configs}
    top_means = _means(target)
    effect = Effect(intervention, names[0], names[1], rung, share, agreement(_means(p), top_means)[0],
                    agreement(_means(b), top_means)[0], None, None, snr(p), snr(b))
    repeats = any(len(k) > 1 for _, k in seeds_at) or any(len(v) > 1 for v in target.values())
    if not draws or not repeats:
        return effect
    rng = np.random.default_rng([seed, zlib.crc32(f"{intervention}/{names[0]}/{names[1]}".encode()), int(rung)])
    differences, ratios = [], []
    for _ in range(draws):
        dp, db, tm = _paired(p, b, target, seeds_at, rng)
        differences.append(agreement(_means(dp), tm)[0] - agreement(_means(db), tm)[0])
        sp, sb = snr(dp), snr(db)
        if sp is not None and sb and math.isfinite(sp) and math.isfinite(sb):
            ratios.append(sp / sb)
    effect.low, effect.high = float(np.percentile(differences, 2.5)), float(np.percentile(differences, 97.5))
    if len(ratios) >= draws // 2:
        effect.snr_low, effect.snr_high = float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))
    return effect


def effects(table: pd.DataFrame, branches: pd.DataFrame, result, flops: dict, draws: int, seed: int) -> list[Effect]:
    """Every PAIRS entry whose two proxies slm-decide judged, at each rung below the target (and at the target for a
    proxy read part-way), and DECAY on the decay branches' runs; `result` is analysis.decide's DecideResult (its
    config, rung, target, the truth at the target `top`), `flops` each rung's mean train_flops."""
    out: list[Effect] = []
    judged = set(result.proxies)
    for intervention, proxy, base in PAIRS:
        if proxy not in judged or base not in judged:
            continue
        with_it = _values(table, result.config, result.rung, proxy)
        without = _values(table, result.config, result.rung, base)
        part = part_read(proxy)
        for r in result.rungs:
            if r == result.target and part == 1.0:
                continue
            share = part * flops[r] / flops[result.target] if flops.get(r) and flops.get(result.target) else None
            found = judge(intervention, with_it.get(r, {}), without.get(r, {}), result.top, r, share, draws, seed,
                          (proxy, base))
            if found is not None:
                out.append(found)
    if len(branches) and DECAY[2] in branches and DECAY[1] in branches:
        intervention, proxy, base = DECAY
        for at, group in branches.groupby("branch", sort=True):
            with_it = _values(group, result.config, result.rung, proxy)
            without = _values(group, result.config, result.rung, base)
            for r in result.rungs:
                spent = pd.to_numeric(group.loc[pd.to_numeric(group[result.rung], errors="coerce") == r, "train_flops"],
                                      errors="coerce").mean() if "train_flops" in group else math.nan
                share = float(spent) / flops[result.target] if pd.notna(spent) and flops.get(result.target) else None
                found = judge(f"{intervention} {float(at):g}", with_it.get(r, {}), without.get(r, {}), result.top, r,
                              share, draws, seed, (f"{proxy} (after)", f"{base} (before)"))
                if found is not None:
                    out.append(found)
    return out


def _signed(value: float | None) -> str:
    return "" if value is None else f"{value:+.3f}"


def effect_rows(found: list[Effect], rung: str) -> list[dict[str, str]]:
    """The table's rows, formatted as slm-decide prints them."""
    rows = []
    for e in found:
        ratio = e.snr_ratio
        rows.append({
            "intervention": e.intervention, "proxy": e.proxy, "against": e.base, rung: _num(e.rung),
            "% of target compute": "" if e.share is None else f"{100 * e.share:.3g}%",
            "decision accuracy": f"{e.accuracy:.3f} vs {e.base_accuracy:.3f}",
            "difference (95% interval)": f"{e.difference:+.3f}" + (
                "" if e.low is None else f" ({_signed(e.low)} to {_signed(e.high)})"),
            "SNR": "" if e.snr is None or e.base_snr is None else f"{e.snr:.3g} vs {e.base_snr:.3g}",
            "SNR ratio (95% interval)": "" if ratio is None else f"{ratio:.2f}" + (
                "" if e.snr_low is None else f" ({e.snr_low:.2f}-{e.snr_high:.2f})")})
    return rows


TITLE = ("Each intervention against its baseline: the proxy with it against the same proxy without it, at the same "
         "rung and from the same runs (95% intervals from paired seed redraws; slm's SNR)")


def effects_markdown(found: list[Effect], rung: str) -> str:
    rows = effect_rows(found, rung)
    if not rows:
        return ""
    columns = list(rows[0])
    lines = [TITLE, "", "| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    lines += ["| " + " | ".join(row.values()) + " |" for row in rows]
    return "\n".join(lines) + "\n"


__all__ = ["DECAY", "PAIRS", "Effect", "TITLE", "effect_rows", "effects", "effects_markdown", "judge"]
