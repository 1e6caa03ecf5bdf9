"""`make search`'s comparison (docs/search.md): on halving_cpu's 45 configurations, the full grid against synchronous
halving, ASHA and Hyperband (Optuna's pruners over the same configurations, grid sampler in a seeded order), and TPE +
ASHA over the component space; for each, the configuration it picks, that configuration's rank in the full grid, the
training compute it spent and its wall time.

    python -m analysis.search_compare runs [-o runs/search.md]

It reads the run directories of the sweeps `make search` runs (each named below) and their studies; nothing else.
A configuration is (family, depth, mixer pattern, Canon set, lr) read from each record's config; the grid's value of
one is the mean of its seeds' final val_nll. Wall time is from the first record's creation to the last one's last
write: the sweep's driver start-up and its summary (seconds) are not in it."""

from __future__ import annotations

import argparse
import math
import statistics
from datetime import datetime
from pathlib import Path

from analysis.halving import flops
from analysis.readers import BadFile, read_json

GRID, HALVING, TOP = "halving_cpu_grid", "halving_cpu", "search_cpu_top"
SEARCHES = {"ASHA": "search_cpu_asha_s{}", "Hyperband": "search_cpu_hb_s{}", "TPE + ASHA (component space)":
            "search_cpu_s{}"}
"""The Optuna sweeps of `make search`, by method; {} is the repetition's sampler seed (search_cpu_s0 is search_cpu)."""
REPS = (0, 1, 2)


def records(sweep_dir: Path) -> list[dict]:
    out = []
    for path in sorted(sweep_dir.glob("*/result.json")):
        try:
            out.append(read_json(path) | {"_dir": str(path.parent)})
        except BadFile:
            continue
    return out


def config_key(record: dict) -> tuple:
    """What makes a configuration, read from the run's config (the job's overrides differ between the sweeps)."""
    model, train = record["config"]["model"], record["config"]["train"]
    return (model.get("family"), int(model.get("n_layers")), tuple(model.get("layer_types") or ()),
            str((model.get("canon") or {}).get("set") or ""), float(f"{float(train['lr']):.4g}"))


def label(key: tuple) -> str:
    family, depth, layers, canon, lr = key
    name = family + ("_canon" if canon and "canon" not in family else "") + (f"[{','.join(layers)}]" if layers not in ((), ("attn",)) else "")
    return f"{name} x{depth}, lr {lr:g}"


def _value(record: dict) -> float | None:
    value = (record.get("eval") or {}).get("val_nll")
    return float(value) if record.get("status") == "completed" and isinstance(value, (int, float)) \
        and math.isfinite(value) and not record.get("branch") else None


def grid_truth(grid: list[dict]) -> dict[tuple, float]:
    """{configuration: mean final val_nll over its seeds} of the full grid's main runs (its decay branches left out)."""
    seeds: dict[tuple, list[float]] = {}
    for r in grid:
        if _value(r) is not None:
            seeds.setdefault(config_key(r), []).append(_value(r))
    return {k: statistics.fmean(v) for k, v in seeds.items()}


def wall_seconds(runs: list[dict]) -> float:
    start = min(datetime.fromisoformat(r["created_at"]) for r in runs)
    end = max(datetime.fromisoformat(r["updated_at"]) for r in runs)
    return (end - start).total_seconds()


def _row(method: str, pick: tuple | None, value: float | None, runs: list[dict], truth: dict, grid_flops: float) -> dict:
    ranking = sorted(truth, key=truth.get)
    spent = sum(flops(r) for r in runs)
    seeds = len({r["config"]["train"].get("seed") for r in runs}) or 1
    return {"method": method, "pick": label(pick) if pick else "none", "value": value,
            "rank": (ranking.index(pick) + 1) if pick in truth else None, "in_grid": pick in truth,
            "flops": spent, "share": spent / grid_flops if grid_flops else float("nan"), "seeds": seeds,
            "wall": wall_seconds(runs) if runs else float("nan"), "runs": len(runs)}


def _optuna_pick(sweep_dir: Path, runs: list[dict]) -> tuple[tuple | None, float | None]:
    from slm.sweeps.study_files import load_search, trial_run_dir

    study = load_search(sweep_dir)
    best = min((t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"), key=lambda t: t.value,
               default=None)
    if best is None:
        return None, None
    record = next((r for r in runs if Path(r["_dir"]) == trial_run_dir(sweep_dir, best)), None)
    return (config_key(record) if record else None), best.value


def compare(runs_dir: Path) -> dict:
    grid = records(runs_dir / GRID)
    if not grid:
        raise BadFile(f"{runs_dir / GRID}: no records (run make search, or make halving, first)")
    truth = grid_truth(grid)
    grid_main = [r for r in grid if not r.get("branch")]
    grid_flops = sum(flops(r) for r in grid_main)
    best = min(truth, key=truth.get)
    rows = [_row("full grid", best, truth[best], grid_main, truth, grid_flops)]
    halved = records(runs_dir / HALVING)
    if halved:
        finals: dict[tuple, list[float]] = {}
        for r in halved:
            if _value(r) is not None:
                finals.setdefault(config_key(r), []).append(_value(r))
        pick = min(finals, key=lambda k: statistics.fmean(finals[k])) if finals else None
        rows.append(_row("synchronous halving", pick, statistics.fmean(finals[pick]) if pick else None,
                         halved, truth, grid_flops))
    for method, pattern in SEARCHES.items():
        for rep in REPS:
            name = pattern.format(rep)
            sweep_dir = runs_dir / (name if name != "search_cpu_s0" else "search_cpu")
            runs = records(sweep_dir)
            if runs:
                pick, value = _optuna_pick(sweep_dir, runs)
                rows.append(_row(f"{method}, seed {rep}", pick, value, runs, truth, grid_flops))
    return {"rows": rows, "configurations": len(truth), "best": label(best), "best_value": truth[best]}


def markdown(result: dict) -> str:
    lines = [f"The full grid's best of its {result['configurations']} configurations: {result['best']} "
             f"({result['best_value']:.4f}, the mean of 2 seeds).", "",
             "| search | seeds | its pick | its value | rank in the full grid | training FLOPs | share of the grid's | "
             "share per seed | runs | wall time (2 workers) |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    grid_seeds = result["rows"][0]["seeds"]
    for r in result["rows"]:
        rank = f"{r['rank']} of {result['configurations']}" if r["rank"] else "outside the grid"
        value = "" if r["value"] is None else f"{r['value']:.4f}"
        lines.append(f"| {r['method']} | {r['seeds']} | {r['pick']} | {value} | {rank} | {r['flops']:.3g} | "
                     f"{r['share']:.1%} | {r['share'] * grid_seeds / r['seeds']:.1%} | {r['runs']} | {r['wall']:.0f} s |")
    lines += ["", "An Optuna trial is one run (train.seed 0): a search's value is its best trial's, where the grid's and "
              "halving's are means over their seeds. *Share per seed* is the FLOPs against a grid of as many seeds as "
              "the search ran. Wall time runs from the first record's creation to the last record's last write."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    from slm.bad_input import fail

    parser = argparse.ArgumentParser(prog="analysis.search_compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, help="the runs directory make search trained into")
    parser.add_argument("-o", "--out", type=Path, default=None, help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    try:
        text = markdown(compare(args.runs))
    except BadFile as err:
        fail("analysis.search_compare", str(err))
    print(text, end="")
    if args.out:
        from slm.runs.record import write_text_atomic

        write_text_atomic(args.out, text)


if __name__ == "__main__":
    main()
