"""Successive halving judged against the full grid it stands in for (`make halving`, docs/halving.md).

    python -m analysis.halving runs/halving_cpu_grid runs/halving_cpu [-o halving.md]

The grid (sweeps/halving_cpu_grid.yaml) trains every job to its end, validates at each rung's step and branches a
decay off the stable phase at each rung (train.schedule.decay_branches: the wsd run of that length), so one grid gives
the two scores a rung could rank by:

  stable  the validation loss of the stable phase at the rung's step: what a paused run has (what halving.py uses);
  branch  the final loss of the decay branch at the rung's fraction: a complete run of that shorter length.

A configuration is a job's overrides less train.seed (sweep.json); its value is the mean over its seeds (a failed or
diverged seed: +inf). The truth is the grid's final validation loss. Per rung and score: the agreement of the rung's
order with the truth's (the share of pairs of configurations in the same order: (1 + Kendall's tau) / 2 without
ties), and whether halving by it (eta, the grid's rung steps) keeps the truth's best. Then the halving sweep itself
(sweeps/halving_cpu.yaml, its records): its best configuration and top 3 (by final loss among those it trained to the
end) against the grid's, and the compute each spent: training FLOPs (the records' tokens x flops_per_token; a
sweep's wall time is the command's, docs/halving.md).

For the report (a table with runs of halving sweeps): report_blocks (the Successive halving section: every rung's
scores), VerdictPart (the verdict's list of every configuration compared: chosen, pruned at its rung with its score)
and one_lr_reason (which lrs a sweep searched, where only one finished per configuration).

Reads result.json and sweep.json files only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from pathlib import Path

from slm.metrics import VAL_CURVE
from slm.runs.keys import configuration
from slm.runs.record import RecordError, load_record
from slm.sweeps.store import halving_decisions, sweep_sections, upgraded_decisions


def runs(sweep_dir: Path) -> list[dict]:
    """Every job of the sweep (sweep.json) with its record, and the records of its decay branches (`<key>,branch=f`):
    [{key, config, record, branches: {fraction: record}}]."""
    jobs = sweep_sections(sweep_dir)["jobs"]
    out = []
    for key, overrides in sorted(jobs.items()):
        try:
            record = load_record(sweep_dir / key) or {}
        except RecordError:
            record = {}
        branches = {}
        for path in sweep_dir.glob(f"{key},branch=*"):
            try:
                branch = load_record(path) or {}
            except RecordError:
                continue
            if (branch.get("branch") or {}).get("of") == key:
                branches[float(branch["branch"]["fraction"])] = branch
        out.append({"key": key, "config": configuration(overrides), "record": record, "branches": branches})
    return out


def _value(record: dict, step: int | None = None) -> float:
    """A run's final validation loss, or its validation at `step`; +inf when it failed or diverged, nan when absent."""
    if record.get("status") in ("failed", "diverged"):
        return math.inf
    ev = record.get("eval") or {}
    if step is None:
        value = ev.get("val_nll") if record.get("status") == "completed" else None
    else:
        value = next((v for s, v in ev.get(VAL_CURVE) or [] if s == step), None)
    return float(value) if isinstance(value, (int, float)) else math.nan


def means(values: dict[str, list[float]]) -> dict[str, float]:
    """Per configuration the mean over its seeds (inf if any is; configurations with a missing value left out)."""
    out = {}
    for name, vals in values.items():
        if any(math.isnan(v) for v in vals) or not vals:
            continue
        out[name] = statistics.fmean(vals) if all(math.isfinite(v) for v in vals) else math.inf
    return out


def agreement(a: dict[str, float], b: dict[str, float]) -> float:
    """The share of pairs of configurations (in both) that a and b order alike; a tie in either counts one half."""
    names = sorted(set(a) & set(b))
    pairs = list(itertools.combinations(names, 2))
    if not pairs:
        return math.nan
    score = 0.0
    for x, y in pairs:
        da, db = (a[x] > a[y]) - (a[x] < a[y]), (b[x] > b[y]) - (b[x] < b[y])  # +inf (failed) above any value
        score += 0.5 if da == 0 or db == 0 else float(da == db)
    return score / len(pairs)


def order(values: dict[str, float]) -> list[str]:
    return sorted(values, key=lambda n: (values[n], n))


def simulate(rung_values: list[dict[str, float]], eta: float) -> list[list[str]]:
    """The configurations halving by these rung values keeps at each rung: [all, after rung 1, ...]."""
    alive = sorted(rung_values[0])
    kept = [alive]
    for values in rung_values:
        ranked = [n for n in order(values) if n in alive]
        alive = ranked[:max(1, math.ceil(len(alive) / eta))]
        kept.append(alive)
    return kept


def flops(record: dict) -> float:
    """The training FLOPs a record spent (tokens trained x training FLOPs per token), 0 without them."""
    tokens = (record.get("training") or {}).get("tokens")
    per_token = (record.get("model") or {}).get("flops_per_token")
    return float(tokens) * float(per_token) if isinstance(tokens, (int, float)) and isinstance(per_token, (int, float)) \
        else 0.0


def judge(grid_dir: Path, halving_dir: Path, eta: float | None = None) -> dict:
    """The comparison in the module docstring, as a dict (markdown() writes it)."""
    grid, halved = runs(grid_dir), runs(halving_dir)
    decisions = decisions_of(halving_dir)
    if eta is None:
        eta = _eta(halving_dir)
    fractions = [d["fraction"] for d in decisions]
    by_config: dict[str, list[dict]] = {}
    for run in grid:
        by_config.setdefault(run["config"], []).append(run)
    steps = [max(1, round(f * _max_steps(grid))) for f in fractions]
    truth = means({c: [_value(r["record"]) for r in rs] for c, rs in by_config.items()})
    scores = {"stable": [means({c: [_value(r["record"], s) for r in rs] for c, rs in by_config.items()}) for s in steps],
              "branch": [means({c: [_value(r["branches"].get(_near(r["branches"], f), {})) for r in rs]
                                for c, rs in by_config.items()}) for f in fractions]}
    best = order(truth)[0]
    rungs = {name: [{"agreement": agreement(v, truth), "top": order(v)[:3]} for v in values]
             for name, values in scores.items() if all(values)}
    kept = {name: simulate(values, eta) for name, values in scores.items() if all(values)}
    finished = means({c: [_value(r["record"]) for r in rs]
                      for c, rs in _group(halved).items() if all(r["record"].get("status") == "completed" for r in rs)})
    return {
        "eta": eta, "fractions": fractions, "steps": steps, "configurations": len(truth),
        "seeds": max(len(rs) for rs in by_config.values()),
        "truth_top": order(truth)[:3], "truth": truth, "rungs": rungs,
        "keeps_best": {name: best in k[-1] for name, k in kept.items()},
        "simulated_final": {name: k[-1] for name, k in kept.items()},
        "halving_top": order(finished)[:3], "halving_final": finished,
        "halving_best_rank_in_truth": order(truth).index(order(finished)[0]) + 1 if finished else None,
        "flops": {"grid": sum(flops(r["record"]) for r in grid),
                  "grid_branches": sum(flops(b) for r in grid for b in r["branches"].values()),
                  "halving": sum(flops(r["record"]) for r in halved)},
        "pruned": {d["rung"]: sorted(set(d["scores"]) - set(d["kept"])) for d in decisions},
        "noise": _noise(by_config, best),
    }


def _noise(by_config: dict[str, list[dict]], best: str) -> list[str]:
    """The configurations whose final seed values overlap the best's (their range reaches the best's): within the
    seeds' noise of it."""
    hi = max(_value(r["record"]) for r in by_config[best])
    return sorted(c for c, rs in by_config.items() if c != best and min(_value(r["record"]) for r in rs) <= hi)


def _group(runs_: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for run in runs_:
        out.setdefault(run["config"], []).append(run)
    return out


def _near(branches: dict[float, dict], fraction: float) -> float | None:
    return next((f for f in branches if math.isclose(f, fraction, rel_tol=1e-6)), None)


def _max_steps(grid: list[dict]) -> int:
    return max(int((r["record"].get("training") or {}).get("max_steps") or 0) for r in grid)


def _eta(halving_dir: Path) -> float:
    """hydra.sweeper.halving.eta of the halving sweep's multirun.yaml."""
    import yaml

    cfg = yaml.safe_load((halving_dir / "multirun.yaml").read_text())
    return float(cfg["hydra"]["sweeper"]["halving"]["eta"])


def markdown(result: dict) -> str:
    """The comparison as markdown: the rungs' agreement with the truth per score, then the halving sweep against the
    grid (best, top 3, compute)."""
    f = result["fractions"]
    lines = [f"{result['configurations']} configurations x {result['seeds']} seeds; eta {result['eta']:g}; rungs at "
             f"{', '.join(f'{x:.3g}' for x in f)} of the steps (steps {', '.join(map(str, result['steps']))}), then the end.",
             "", "| score | " + " | ".join(f"rung {i + 1}: agreement with the final order" for i in range(len(f)))
             + " | halving by it keeps the grid's best |", "|---|" + "---:|" * len(f) + ":---:|"]
    for name, rungs in result["rungs"].items():
        lines.append(f"| {name} | " + " | ".join(f"{r['agreement']:.3f}" for r in rungs)
                     + f" | {'yes' if result['keeps_best'][name] else 'no'} |")
    g = result["flops"]
    truth, final = result["truth"], result["halving_final"]
    lines += ["", "| | best | top 3 (final validation loss, mean of seeds) |", "|---|---|---|",
              "| full grid | " + result["truth_top"][0] + " | "
              + "; ".join(f"{c} ({truth[c]:.4f})" for c in result["truth_top"]) + " |",
              "| halving | " + (result["halving_top"][0] if result["halving_top"] else "-") + " | "
              + "; ".join(f"{c} ({final[c]:.4f})" for c in result["halving_top"]) + " |",
              "", f"Halving's best is the grid's #{result['halving_best_rank_in_truth']}; configurations within the "
              f"seeds' noise of the grid's best (a seed's final loss reaching the best's range): "
              f"{', '.join(result['noise']) or 'none'}.",
              "", "| | training FLOPs | share of the grid's |", "|---|---:|---:|",
              f"| full grid | {g['grid']:.3g} | 100% |",
              f"| halving | {g['halving']:.3g} | {g['halving'] / g['grid']:.1%} |",
              "", f"(The grid's decay branches, for the branch score only, cost {g['grid_branches']:.3g} FLOPs more.)"]
    for rung, names in sorted(result["pruned"].items()):
        lines.append(f"- rung {rung} pruned {len(names)}: {', '.join(names)}")
    return "\n".join(lines) + "\n"


def decisions_of(sweep_dir: Path) -> list[dict]:
    """A halving sweep's pinned decisions in today's form (slm.sweeps.store.upgraded_decisions: each with its rung's
    number, `jobs` and `labels`), every configuration it scored with a label."""
    out = []
    for d in upgraded_decisions(sweep_dir):
        labels = {n: d["labels"].get(n) or n or "(no overrides)" for n in d["scores"]}
        out.append({**d, "labels": labels})
    return out


def outcomes(decisions: list[dict], finals: dict[str, float]) -> list[dict]:
    """Every configuration of a halving sweep, those trained to the end first (by final value, `finals`: job key ->
    final validation loss of a completed job), then the pruned by the rung they reached (latest first) and their rank
    there: [{configuration, label, outcome (chosen, trained to the end, went on, pruned), rung, rungs, score, rank, of,
    final, seeds}]."""
    rungs = decisions[-1].get("rungs") or len(decisions) + 1
    rows = []
    for name in decisions[0]["scores"]:
        seen = [d for d in decisions if name in d["scores"]]
        d = seen[-1]
        order = sorted(d["scores"], key=lambda n: (math.inf if d["scores"][n] is None else d["scores"][n], n))
        keys = d["jobs"].get(name, [])
        values = [finals[k] for k in keys if k in finals]
        survived = name in d["kept"] and d is decisions[-1]
        done = survived and keys and len(values) == len(keys)
        rows.append({"configuration": name, "label": d["labels"].get(name, name), "rung": d["rung"], "rungs": rungs,
                     "score": d["scores"][name], "rank": order.index(name) + 1, "of": len(order),
                     "outcome": "trained to the end" if done else "went on" if name in d["kept"] else "pruned",
                     "final": statistics.fmean(values) if done else None, "seeds": len(keys)})
    ends = [r for r in rows if r["final"] is not None]
    if ends:
        min(ends, key=lambda r: (r["final"], r["configuration"]))["outcome"] = "chosen"
    return sorted(rows, key=lambda r: (r["final"] is None, r["final"] or 0.0, -r["rung"], r["rank"]))


def sweeps_of(table) -> list[Path]:
    """The sweep directories of the table's runs that are halving sweeps (sweep.json with pinned decisions)."""
    if "run_dir" not in table:
        return []
    return [d for d in sorted({Path(str(x)).parent for x in table["run_dir"].dropna()}) if halving_decisions(d)]


def report_blocks(table) -> list:
    """The report's "Successive halving" section for a table with runs of halving sweeps: per sweep and rung, every
    configuration's score (the mean over its seeds of the validation loss at the rung), its rank and whether it went on
    (sweep.json's pinned decisions); [] when no run of the table is of a halving sweep."""
    import pandas as pd

    blocks: list = []
    for sweep_dir in sweeps_of(table):
        decisions = decisions_of(sweep_dir)
        first = decisions[0]
        blocks.append(f"{sweep_dir.name}: successive halving (hydra.sweeper.halving) over {len(first['scores'])} "
                      "configurations (a job less its seed; each named by what tells it from the others), ranked at each "
                      "rung by the mean over seeds of the validation loss at the rung's step (the stable phase's); the "
                      "others recorded pruned.")
        for d in decisions:
            names = sorted(d["scores"], key=lambda n: (math.inf if d["scores"][n] is None else d["scores"][n], n))
            blocks.append(f"Rung {d['rung']}" + (f" of {d['rungs']}" if d.get("rungs") else "")
                          + f", {float(d['fraction']):.3g} of the steps: {len(d['kept'])} of {len(names)} went on.")
            blocks.append(pd.DataFrame({
                "configuration": [d["labels"][n] for n in names],
                "score": [d["scores"][n] for n in names], "rank": range(1, len(names) + 1),
                "went on": ["yes" if n in d["kept"] else "pruned" for n in names]}))
    return blocks


class VerdictPart:
    """What the verdict says of a table's halving sweeps: each configuration named as the sweep names it, and every
    configuration the sweep compared (chosen, trained to the end, pruned at its rung with its score)."""

    def __init__(self, table, sweeps: list[Path]):
        self.table = table
        self.sweeps = {d: decisions_of(d) for d in sweeps}
        self.label = {}  # job key (its sweep's path / key) -> its configuration's label
        for sweep_dir, decisions in self.sweeps.items():
            for name, keys in decisions[0]["jobs"].items():
                for key in keys:
                    self.label[str(sweep_dir / key)] = decisions[0]["labels"].get(name, name)

    def label_of(self, row) -> str | None:
        """The label of a table row's configuration, None for a run of no halving sweep."""
        return self.label.get(str(Path(str(self.table.at[row, "run_dir"]))))

    def outcomes(self, sweep_dir: Path) -> list[dict]:
        import pandas as pd

        finals = {}
        done = self.table[self.table["status"] == "completed"] if "status" in self.table else self.table
        if "val_nll" not in done:
            return outcomes(self.sweeps[sweep_dir], finals)
        for run_dir, value in zip(done["run_dir"], pd.to_numeric(done["val_nll"], errors="coerce")):
            if Path(str(run_dir)).parent == sweep_dir and math.isfinite(value):
                finals[Path(str(run_dir)).name] = float(value)
        return outcomes(self.sweeps[sweep_dir], finals)

    def blocks(self, limit: int = 15) -> list:
        """Per halving sweep: a paragraph naming the chosen configuration and what was pruned where, and a table of
        every configuration it compared (the first `limit`)."""
        import pandas as pd

        out: list = []
        for sweep_dir in self.sweeps:
            rows = self.outcomes(sweep_dir)
            chosen = next((r for r in rows if r["outcome"] == "chosen"), None)
            pruned = [r for r in rows if r["outcome"] == "pruned"]
            ended = [r for r in rows if r["final"] is not None]
            text = (f"**Successive halving** ({sweep_dir.name}): {len(rows)} configuration"
                    f"{'s' if len(rows) != 1 else ''} compared; "
                    f"{len(pruned)} pruned at their rungs, {len(ended)} trained to the end")
            if chosen is not None:
                text += (f"; chosen: {chosen['label']} (final validation NLL {chosen['final']:.4g}, the mean of "
                         f"{chosen['seeds']} seed{'s' if chosen['seeds'] != 1 else ''}).")
            else:
                text += "; none chosen yet (the sweep has not ended)."
            out.append(text + " A pruned configuration's score is the mean over its seeds of the validation loss at "
                       "its rung's step, in the stable phase: it ranks configurations at that step, not at the end, so "
                       "only the configurations trained to the end are in the ranking above.")
            out.append(pd.DataFrame([{
                "configuration": r["label"], "outcome": r["outcome"],
                "ranked at rung": f"{r['rung']} of {r['rungs']}", "score there": r["score"],
                "rank there": f"{r['rank']} of {r['of']}",
                "final validation NLL": r["final"]} for r in rows[:limit]]))
            if len(rows) > limit:
                out.append(f"_{len(rows) - limit} more configurations: see Successive halving._")
        return out


def verdict_part(table) -> VerdictPart | None:
    """The verdict's view of the table's halving sweeps, None when it has none."""
    sweeps = sweeps_of(table)
    return VerdictPart(table, sweeps) if sweeps else None


def lrs_tried(table) -> list[float]:
    """The lr multipliers (hydra.sweeper.lr_search, sweep.json: the table's lr_multiplier column) its runs were at."""
    import pandas as pd

    if "lr_multiplier" not in table:
        return []
    return sorted(float(m) for m in pd.to_numeric(table["lr_multiplier"], errors="coerce").dropna().unique())


def one_lr_reason(table) -> str:
    """Why no configuration has runs at several lrs, as the lr figure and section say it: the lrs the table's sweeps
    searched and what became of the others, or that nothing searched lr."""
    import pandas as pd

    tried = lrs_tried(table)
    if len(tried) < 2:
        return ("every configuration ran at one lr: hydra.sweeper.lr_search (e.g. [0.25,0.5,1,2,4]) adds an lr axis "
                "per point")
    mult = pd.to_numeric(table["lr_multiplier"], errors="coerce")
    status = table["status"] if "status" in table else pd.Series("completed", index=table.index)
    off = status[(status != "completed") & mult.notna()]
    why = ("successive halving pruned the others at its rungs (section Successive halving lists every lr's score)"
           if (off == "pruned").any() else
           "the runs at the other lrs did not complete (" + ", ".join(f"{n} {s}" for s, n in off.value_counts().items())
           + ")" if len(off) else "no configuration completed at two of them")
    return (f"each configuration completed at one lr only: the sweep searched lr x {', '.join(f'{m:g}' for m in tried)} "
            f"(hydra.sweeper.lr_search), and {why}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.halving", description=__doc__.splitlines()[0])
    parser.add_argument("grid", type=Path, help="the full grid's run group directory (halving_cpu_grid)")
    parser.add_argument("halving", type=Path, help="the halving sweep's run group directory (halving_cpu)")
    parser.add_argument("-o", "--out", type=Path, help="write the markdown here (and <out>.json) too")
    args = parser.parse_args(argv)
    for path in (args.grid, args.halving):
        if not (path / "sweep.json").is_file():
            print(f"analysis.halving: {path}: no sweep.json here (a run group directory of a sweep)", file=sys.stderr)
            return 2
    result = judge(args.grid, args.halving)
    text = markdown(result)
    print(text, end="")
    if args.out:
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
