"""The report on an Optuna sweep (`slm-search <sweep dir> [--rerun <grid dir>]`; issue 52 §3): its answer first, every
trial best first (the pruned ones as such, with where they stopped), the parameters' importances as Optuna computes
them, and the decision-accuracy question asked of the search itself: do its best configurations keep their order when
rerun at a larger rung (a grid of their points, `${slm_top_trials:...}`, with seeds)?

It reads the study (slm.sweeps.study_files, read only) and the run directories' result.json and .hydra/overrides.yaml;
it trains nothing."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.readers import BadFile, read_json, read_yaml

AGREEMENT_DRAWS = 1000
"""Seed redraws for the interval of the rerun's agreement with the search's order."""


@dataclass
class Row:
    """One trial, as the report shows it."""

    number: int
    state: str
    value: float | None
    point: list[str]
    stopped: str


def _stopped(trial, sweep_dir: Path) -> str:
    """Where a trial ended: its pruner's step and val_nll, its error, or its last step for a complete one."""
    from slm.sweeps.study_files import trial_run_dir

    run_dir = trial_run_dir(sweep_dir, trial)
    record: dict = {}
    if run_dir and (run_dir / "result.json").exists():
        try:
            record = read_json(Path(run_dir) / "result.json")
        except BadFile:
            record = {}
    if trial.state.name == "PRUNED":
        pruner = record.get("pruner") or {}
        step = pruner.get("step", max(trial.intermediate_values, default=None))
        return f"pruned at step {step}" + (f" (val_nll {pruner['val_nll']:.4f})" if "val_nll" in pruner else "")
    if trial.state.name == "FAIL":
        return " ".join(str(trial.user_attrs.get("error") or record.get("error") or "failed").split())[:120]
    if trial.state.name == "COMPLETE":
        steps = (record.get("training") or {}).get("steps")
        return f"step {steps}" if steps else ""
    return trial.state.name.lower()


def rows(study, sweep_dir: Path) -> list[Row]:
    """Every trial: the complete ones best first, then the pruned ones by their last reported value, then the rest."""
    sign = -1 if study.direction.name == "MAXIMIZE" else 1
    out = []
    for t in study.get_trials(deepcopy=False):
        point = [str(o) for o in t.user_attrs.get("point") or [f"{k}={v}" for k, v in t.params.items()]]
        last = t.intermediate_values[max(t.intermediate_values)] if t.intermediate_values else None
        value = t.value if t.state.name == "COMPLETE" else (last if t.state.name == "PRUNED" else None)
        out.append(Row(t.number, t.state.name.lower(), value, point, _stopped(t, sweep_dir)))
    order = {"complete": 0, "pruned": 1}
    return sorted(out, key=lambda r: (order.get(r.state, 2), math.inf if r.value is None else sign * r.value,
                                      r.number))


def importances(study, seed: int = 0) -> tuple[dict[str, float], int, list[str]]:
    """({dimension: importance} by Optuna's fANOVA evaluator over the complete trials, on the dimensions every complete
    trial has; the number of trials it used; the conditional dimensions it left out). ({}, n, ...) with fewer than 2
    complete trials or no dimension that varies."""
    import optuna
    from optuna.trial import TrialState

    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(done) < 2:
        return {}, len(done), []
    every = set.intersection(*(set(t.params) for t in done))
    names = [n for n in done[0].params if n in every and len({repr(t.params[n]) for t in done}) > 1]
    left = sorted(set().union(*(set(t.params) for t in done)) - every)
    if not names:
        return {}, len(done), left
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed)
    found = optuna.importance.get_param_importances(study, evaluator=evaluator, params=names)
    return dict(found), len(done), left


def _run_overrides(run_dir: Path) -> list[str]:
    path = run_dir / ".hydra" / "overrides.yaml"
    return [str(o) for o in (read_yaml(path) or [])] if path.exists() else []


def rerun_scores(points: list[list[str]], rerun_dir: Path, objective: str = "eval.val_nll") -> list[list[float]]:
    """For each point (best first), the completed runs of the rerun grid whose overrides hold all of its overrides:
    their objective, one per seed."""
    runs = []
    for result in sorted(Path(rerun_dir).glob("*/result.json")):
        record = read_json(result)
        value = record
        for part in objective.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if record.get("status") == "completed" and isinstance(value, (int, float)) and math.isfinite(value):
            runs.append((set(_run_overrides(result.parent)), float(value)))
    return [[v for overrides, v in runs if set(point) <= overrides] for point in points]


def agreement(search: list[float], rerun: list[list[float]], draws: int = AGREEMENT_DRAWS,
              seed: int = 0) -> tuple[float, float, float]:
    """The share of pairs of configurations that the rerun (mean over seeds) orders as the search did, a tie counting
    one half (analysis.decide_values.agreement, the ladder's decision accuracy), with a 95% interval from redrawing
    each configuration's seeds with replacement (decide_values._means): (share, low, high)."""
    import numpy as np

    from analysis.decide_values import _means
    from analysis.decide_values import agreement as pairs_alike

    searched = dict(enumerate(search))
    by_config = {i: dict(enumerate(values)) for i, values in enumerate(rerun)}
    point, _ = pairs_alike(searched, _means(by_config))
    rng = np.random.default_rng(seed)
    drawn = [pairs_alike(searched, _means(by_config, rng))[0] for _ in range(draws)]
    low, high = np.percentile(drawn, [2.5, 97.5])
    return point, float(low), float(high)


def _named(cfg: Any) -> str:
    """{name: x, k: v} as "x (k=v)"; "not recorded" for a study whose summary predates it."""
    if not isinstance(cfg, dict):
        return "not recorded"
    rest = {k: v for k, v in cfg.items() if k != "name"}
    return str(cfg.get("name", "?")) + (f" ({', '.join(f'{k}={v}' for k, v in rest.items())})" if rest else "")


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def _sd(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def report(sweep_dir: Path, rerun_dir: Path | None = None, top: int | None = None) -> str:
    """The Markdown report (see the module's docstring)."""
    from slm.sweeps.study_files import load_search

    study = load_search(sweep_dir)
    table = rows(study, sweep_dir)
    counts = {s: sum(r.state == s for r in table) for s in ("complete", "pruned", "fail", "running")}
    summary = read_yaml(sweep_dir / "optuna_best.yaml") if (sweep_dir / "optuna_best.yaml").exists() else {}
    objective = str((summary or {}).get("objective") or "eval.val_nll")
    lines = [f"# Optuna search: {study.study_name} ({sweep_dir})", ""]
    best = table[0] if table and table[0].state == "complete" else None
    if best is None:
        lines.append(f"**No answer yet:** none of its {len(table)} trials is complete.")
    else:
        lines.append(f"**The search's best:** trial {best.number + 1}, {objective} = {best.value:.4f}: "
                     f"`{' '.join(best.point)}`.")
    lines += ["", f"{len(table)} trials: {counts['complete']} complete, {counts['pruned']} pruned by the study's "
              f"pruner, {counts['fail']} failed" + (f", {counts['running']} running" if counts["running"] else "")
              + f". Sampler {_named((summary or {}).get('sampler'))}, pruner {_named((summary or {}).get('pruner'))}. "
              "Trials are numbered from 1; a pruned trial's value is its last reported val_nll, at the step it "
              "stopped.", ""]
    lines += ["## Trials, best first", "", f"| rank | trial | state | {objective} | where it ended | values |",
              "|---:|---:|---|---:|---|---|"]
    for i, r in enumerate(table, 1):
        lines.append(f"| {i if r.state == 'complete' else ''} | {r.number + 1} | {r.state} | {_fmt(r.value)} | "
                     f"{r.stopped} | `{' '.join(r.point)}` |")
    found, used, left = importances(study)
    lines += ["", "## Which settings mattered", ""]
    if found:
        lines.append(f"Optuna's fANOVA importances (seed 0) over the {used} complete trials, on the dimensions every "
                     "one of them has" + (f" (left out, conditional: {', '.join(left)})" if left else "") + ". With "
                     f"{used} trials, and those chosen by the sampler and kept by the pruner, read them as a rough "
                     "order, not a measurement:")
        lines += ["", "| dimension | importance |", "|---|---:|"]
        lines += [f"| {name} | {value:.3f} |" for name, value in found.items()]
    else:
        lines.append(f"Not computed: {used} complete trial(s), and fANOVA needs at least 2 with a dimension that varies.")
    if rerun_dir is not None:
        lines += ["", *rerun_section(table, rerun_dir, top, objective)]
    return "\n".join(lines) + "\n"


def rerun_section(table: list[Row], rerun_dir: Path, top: int | None, objective: str) -> list[str]:
    """"Do the best hold at a larger rung?": the search's order of its top configurations against the rerun's."""
    done = [r for r in table if r.state == "complete"]
    scores = rerun_scores([r.point for r in done], rerun_dir, objective)
    kept = [(r, s) for r, s in zip(done, scores) if s][: top or None]
    out = [f"## Do the best hold at a larger rung? ({rerun_dir})", ""]
    if len(kept) < 2:
        return out + [f"Not answered: {len(kept)} of the search's configurations have completed runs in {rerun_dir}."]
    out += ["| search rank | trial | search value | rerun: mean ± sd (seeds) | rerun rank | values |",
            "|---:|---:|---:|---:|---:|---|"]
    means = [sum(s) / len(s) for _, s in kept]
    rank = {i: k + 1 for k, i in enumerate(sorted(range(len(kept)), key=lambda i: means[i]))}
    for i, (r, s) in enumerate(kept):
        out.append(f"| {i + 1} | {r.number + 1} | {r.value:.4f} | {means[i]:.4f} ± {_sd(s):.4f} ({len(s)}) | "
                   f"{rank[i]} | `{' '.join(r.point)}` |")
    share, low, high = agreement([r.value for r, _ in kept], [s for _, s in kept])
    first = rank[0]
    span, noise = max(means) - min(means), statistics.median(_sd(s) for _, s in kept)
    out += ["", f"**The search's order holds on {share:.0%} of the {len(kept) * (len(kept) - 1) // 2} pairs** "
            f"[95%: {low:.0%}, {high:.0%}, from {AGREEMENT_DRAWS} redraws of each configuration's seeds]. The search's "
            + ("best is the rerun's best too." if first == 1 else f"best is {first} of {len(kept)} in the rerun.")
            + f" The rerun's means span {span:.4f} nats, and a configuration's seeds spread {noise:.4f} (the median "
            "sd)" + (": these configurations are within the seeds' noise of each other at the larger rung, so no "
                     "order among them is to be read from it, the search's or the rerun's." if span < noise else "."),
            "", "The rerun trains each configuration at the larger rung with the search's own values, lr included "
            "(no transfer rule): a configuration whose best lr moves with scale is judged at the wrong lr there."]
    return out





def report_blocks(table) -> list:
    """slm-report's "Optuna search" section for a table with runs of Optuna sweeps: per study, its counts and every run
    its pruner stopped (the step and the val_nll there), which the "Runs that did not complete" section leaves out;
    slm-search gives the whole report. [] when no run of the table is of an Optuna sweep."""
    import pandas as pd

    from slm.sweeps.study_files import NoStudy, load_search

    if "run_dir" not in table:
        return []
    blocks: list = []
    for sweep_dir in sorted({Path(str(x)).parent for x in table["run_dir"].dropna()}):
        if not any((sweep_dir / f).is_file() for f in ("optuna_best.yaml", "optuna.journal", "optuna.db")):
            continue
        try:
            study = load_search(sweep_dir)
        except NoStudy:
            continue
        table_rows = rows(study, sweep_dir)
        counts = {s: sum(r.state == s for r in table_rows) for s in ("complete", "pruned", "fail")}
        blocks.append(f"{sweep_dir.name}: an Optuna study of {len(table_rows)} trials: {counts['complete']} complete, "
                      f"{counts['pruned']} pruned by its pruner (below: final, not failed), {counts['fail']} failed. "
                      f"`slm-search {sweep_dir}` reports it whole: every trial best first, the settings' importances, "
                      "and with --rerun whether its best hold at a larger rung.")
        pruned = [r for r in table_rows if r.state == "pruned"]
        if pruned:
            blocks.append(pd.DataFrame({"trial": [r.number + 1 for r in pruned], "where it ended": [r.stopped for r in
                                                                                                 pruned],
                                        "values": [" ".join(r.point) for r in pruned]}))
    return blocks
__all__ = ["agreement", "importances", "report", "report_blocks", "rerun_scores", "rows"]
