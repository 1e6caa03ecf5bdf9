"""Does the winner change with tokens per parameter? One wsd run per job and its decay branches give the final loss
at several token regimes (sweeps/regimes_cpu.yaml, docs/decisions.md).

    python -m analysis.regimes runs/regimes_cpu [-o regimes.md]

A decay branch at fraction f of a wsd run is the wsd run of f times its length (slm.runs.branches), so a job with
branches at 6%, 12.5%, 25% and 50% of a 10-tokens-per-parameter run has complete runs at 0.6, 1.25, 2.5, 5 and 10
tokens per parameter. Per regime (tokens over the model's total parameters; values within 20% of each other are one
regime, named by their median to 3 digits) and configuration (a job's overrides less train.seed and train.lr): the lr
with the lowest mean final val_nll over its seeds (a failed or diverged seed ranks an lr last), its mean, the
seed-to-seed standard deviation, and the seeds. Per regime: the order, the leader, its margin over the runner-up, and
in how many seeds (matched by train.seed, each configuration at its own best lr) the leader is ahead. The answer names
the regimes where the leader changes.

Reads result.json and sweep.json files only.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from analysis.halving import runs


@dataclass
class Regime:
    """One token regime: every configuration at its best lr."""

    tokens_per_param: float
    best: dict[str, dict[int, float]] = field(default_factory=dict)
    """{configuration: {seed: final val_nll}} at the configuration's best lr (inf: failed or diverged)."""
    lr: dict[str, float] = field(default_factory=dict)

    def mean(self, name: str) -> float:
        return statistics.fmean(self.best[name].values())

    def order(self) -> list[str]:
        return sorted(self.best, key=lambda n: (self.mean(n), n))

    def seeds_ahead(self, a: str, b: str) -> tuple[int, int]:
        """(seeds where `a` is below `b`, seeds both have)."""
        common = sorted(self.best[a].keys() & self.best[b].keys())
        return sum(self.best[a][s] < self.best[b][s] for s in common), len(common)


def _final(record: dict) -> float | None:
    if record.get("status") in ("failed", "diverged"):
        return math.inf
    value = (record.get("eval") or {}).get("val_nll")
    return float(value) if record.get("status") == "completed" and isinstance(value, (int, float)) else None


def _point(record: dict) -> tuple[float, int, float] | None:
    """(tokens per parameter, seed, lr) of a record, None without them."""
    try:
        tokens = float(record["training"]["tokens"])
        params = float(record["model"]["params_total"])
        train = record["config"]["train"]
        return tokens / params, int(train["seed"]), float(train["lr"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


SAME = 1.2
"""Tokens per parameter within this ratio of the previous value are one regime (as analysis.decide_axes.SAME_REGIME):
configurations sized to one budget differ a little in parameters, so one run length is 0.593 tokens per parameter for
one and 0.607 for another."""


def _clusters(values: list[float]) -> dict[float, list[float]]:
    """{the median of a cluster, to 3 significant digits: its values} of sorted values, a value within SAME of the
    previous one joining its cluster."""
    from analysis.decide_values import clusters

    return {float(f"{statistics.median(g):.3g}"): g for g in clusters(values, SAME)}


def regimes(sweep_dir: str | Path) -> list[Regime]:
    """Every token regime of the sweep (the jobs and their decay branches), lowest first."""
    cells: dict[float, dict[str, dict[float, dict[int, float]]]] = {}
    for job in runs(Path(sweep_dir)):
        name = re.sub(r"(^|,)\+?train\.lr=[^,]*", "", job["config"]).lstrip(",") or job["config"]
        for record in [job["record"], *job["branches"].values()]:
            value, point = _final(record), _point(record)
            if value is None or point is None:
                continue
            tpp, seed, lr = point
            cells.setdefault(tpp, {}).setdefault(name, {}).setdefault(lr, {})[seed] = value
    merged: dict[float, dict[str, dict[float, dict[int, float]]]] = {}
    for label, members in _clusters(sorted(cells)).items():
        for tpp in members:
            for name, by_lr in cells[tpp].items():
                for lr, seeds in by_lr.items():
                    merged.setdefault(label, {}).setdefault(name, {}).setdefault(lr, {}).update(seeds)
    out = []
    for tpp in sorted(merged):
        regime = Regime(tpp)
        for name, by_lr in sorted(merged[tpp].items()):
            lr = min(by_lr, key=lambda x: (statistics.fmean(by_lr[x].values()), x))
            regime.best[name], regime.lr[name] = by_lr[lr], lr
        out.append(regime)
    return out


def _cell(values: dict[int, float]) -> str:
    xs = list(values.values())
    if not all(math.isfinite(x) for x in xs):
        return f"failed ({len(xs)} seeds)"
    sd = statistics.stdev(xs) if len(xs) > 1 else math.nan
    return f"{statistics.fmean(xs):.4f} ± {sd:.4f} (n={len(xs)})" if len(xs) > 1 else f"{xs[0]:.4f} (n=1)"


def leaders(found: list[Regime]) -> list[str]:
    """The leader at each regime, lowest first."""
    return [r.order()[0] for r in found if r.best]


def markdown(found: list[Regime]) -> str:
    if not found:
        return "No completed runs with a final val_nll.\n"
    names = sorted({n for r in found for n in r.best})
    lines = ["| tokens/param | " + " | ".join(names) + " | leader | margin | seeds ahead |",
             "| --- | " + " | ".join("---" for _ in names) + " | --- | --- | --- |"]
    for r in found:
        order = r.order()
        lead = order[0]
        margin, ahead = "", ""
        if len(order) > 1:
            margin = f"{r.mean(order[1]) - r.mean(lead):.4f}"
            won, of = r.seeds_ahead(lead, order[1])
            ahead = f"{won} of {of} (vs {order[1]})"
        cells = [(_cell(r.best[n]) + f" @ lr {r.lr[n]:g}") if n in r.best else "" for n in names]
        lines.append(f"| {r.tokens_per_param:g} | " + " | ".join(cells) + f" | {lead} | {margin} | {ahead} |")
    seq = leaders(found)
    changes = [f"{found[i - 1].tokens_per_param:g} → {found[i].tokens_per_param:g} ({seq[i - 1]} → {seq[i]})"
               for i in range(1, len(seq)) if seq[i] != seq[i - 1]]
    answer = ("The leader is the same at every regime: " + seq[0] + "." if not changes else
              "The leader changes with tokens per parameter: " + "; ".join(changes) + ".")
    return "\n".join([answer, "", *lines, "",
                      "Each cell: the mean final validation NLL over seeds ± the seed-to-seed sd at the "
                      "configuration's best lr for that regime. Margin: runner-up minus leader (nats). Seeds ahead: "
                      "seeds (matched by train.seed) where the leader's loss is below the runner-up's."]) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.regimes", description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("-o", "--output", type=Path, help="write the markdown here (default: stdout)")
    args = parser.parse_args(argv)
    if not (args.sweep_dir / "sweep.json").is_file():
        print(f"analysis.regimes: {args.sweep_dir} has no sweep.json: give a sweep's run directory "
              "(e.g. runs/regimes_cpu)", file=sys.stderr)
        return 2
    if args.output is not None and args.output.is_dir():
        print(f"analysis.regimes: -o {args.output} is a directory: give a file", file=sys.stderr)
        return 2
    text = markdown(regimes(args.sweep_dir))
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
