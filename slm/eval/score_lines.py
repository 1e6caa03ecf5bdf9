"""The scores of an evaluation as the command line prints them: each task's headline under its metric's name,
with its standard error, marked when it is a bound, and read against chance.

    for line in score_lines(lm):        # slm-eval, after lm-eval's table
        print(line)
    print("evaluated <run>: " + brief(lm))   # slm-train, one line after training

`lm` is the record's eval.lm_eval section or an evaluation summary (slm.eval.summary.summarize): scores, metrics,
details, averages, average_tasks, estimator. The rules are the report's (analysis.report, analysis.plot_style):
an accuracy is within noise of chance when score - chance <= 1.96 stderr (at or below chance when there is no
stderr); a suite average's stderr is sqrt(sum of its tasks' stderr^2) / k, assuming independent tasks. A
masked diffusion model's log-likelihoods are Monte Carlo ELBO estimates (slm.eval.lm_diffusion), so its
perplexity-type scores (bits per byte, byte and word perplexity) are upper bounds and are printed as such.
"""

from __future__ import annotations

import math

Z95 = 1.96
"""Half-width of a 95% normal interval in standard errors."""

BOUND_METRICS = ("bits_per_byte", "byte_perplexity", "word_perplexity", "perplexity")
"""Metrics that are upper bounds when the log-likelihoods are ELBO estimates (lower is better for each)."""


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def task_stderr(details: dict, metric: str | None) -> float | None:
    """lm-eval's standard error of a task's headline metric ("acc_norm,none" -> details["acc_norm_stderr,none"])."""
    if not metric:
        return None
    name, _, filt = metric.partition(",")
    return _number(details.get(f"{name}_stderr,{filt}" if filt else f"{name}_stderr"))


def near_chance(score, chance, stderr):
    """Whether an accuracy is within noise of its chance level: score - chance <= 1.96 stderr (no stderr: at or
    below chance). Numbers, or numpy arrays / pandas Series elementwise (the analysis's tables)."""
    return score - chance <= Z95 * (0.0 if stderr is None else stderr)


def _estimator(lm: dict, details: dict) -> dict:
    estimator = details.get("estimator") or lm.get("estimator") or {}
    return estimator if isinstance(estimator, dict) else {}


def is_bound(metric: str | None, estimator: dict) -> bool:
    """Whether a task's headline is an upper bound: a perplexity-type metric of a model scored by an ELBO."""
    return (estimator.get("kind") not in (None, "exact")
            and (metric or "").split(",")[0] in BOUND_METRICS)


def task_score(lm: dict, task: str) -> dict | None:
    """{task, metric (lm-eval's name, no filter), score, stderr, chance, near_chance, bound, estimator} of one
    task, or None when it has no headline value."""
    score = _number((lm.get("scores") or {}).get(task))
    if score is None:
        return None
    details = (lm.get("details") or {}).get(task) or {}
    metric = (lm.get("metrics") or {}).get(task)
    stderr = task_stderr(details, metric)
    chance = _number(details.get("chance"))
    estimator = _estimator(lm, details)
    return {"task": task, "metric": (metric or "score").split(",")[0], "score": score, "stderr": stderr,
            "chance": chance, "near_chance": chance is not None and near_chance(score, chance, stderr),
            "bound": is_bound(metric, estimator), "estimator": estimator}


def average_score(lm: dict, suite: str) -> dict | None:
    """{suite, tasks, score, stderr (propagated; None when a task has none), chance (the tasks' mean, when each
    has one), near_chance} of a suite average, or None."""
    score = _number((lm.get("averages") or {}).get(suite))
    tasks = list((lm.get("average_tasks") or {}).get(suite) or [])
    if score is None:
        return None
    members = [task_score(lm, t) for t in tasks]
    errors = [m["stderr"] if m else None for m in members]
    stderr = (math.sqrt(sum(e * e for e in errors)) / len(errors)
              if errors and all(e is not None for e in errors) else None)
    chances = [m["chance"] if m else None for m in members]
    chance = sum(chances) / len(chances) if chances and all(c is not None for c in chances) else None
    return {"suite": suite, "tasks": tasks, "score": score, "stderr": stderr, "chance": chance,
            "near_chance": chance is not None and near_chance(score, chance, stderr)}


def _value(score: float) -> str:
    return f"{score:.4f}" if abs(score) < 1000 else f"{score:.4g}"


def _bound_note(estimator: dict) -> str:
    settings = f", mc_num {estimator['mc_num']}" if "mc_num" in estimator else ""
    return f"an upper bound (the diffusion model's Monte Carlo ELBO{settings})"


def score_lines(lm: dict) -> list[str]:
    """One line per scored task, then one per suite average (suites of two tasks or more only)."""
    lines = []
    for task in lm.get("scores") or {}:
        s = task_score(lm, task)
        if s is None:
            continue
        text = f"{task}: {s['metric']} {_value(s['score'])}"
        if s["stderr"] is not None:
            text += f" ± {_value(s['stderr'])} (stderr)"
        if s["bound"]:
            text += f", {_bound_note(s['estimator'])}"
        if s["chance"] is not None:
            text += f"; chance {_value(s['chance'])}"
            text += (": within noise of chance (score - chance <= 1.96 stderr)" if s["near_chance"]
                     else ", above it beyond noise")
        lines.append(text)
    for suite in lm.get("averages") or {}:
        a = average_score(lm, suite)
        if a is None or len(a["tasks"]) < 2:
            continue
        text = f"{suite}: average of {len(a['tasks'])} tasks {_value(a['score'])}"
        if a["stderr"] is not None:
            text += f" ± {_value(a['stderr'])} (stderr, propagated)"
        if a["chance"] is not None:
            text += f"; chance {_value(a['chance'])}"
            text += ": within noise of chance" if a["near_chance"] else ", above it beyond noise"
        lines.append(text)
    return lines


def brief(lm: dict) -> str:
    """The scores in one line: `slm_shakespeare_bpb bits_per_byte 2.41, slm_shakespeare_mc acc_norm 0.262
    (within noise of chance 0.25)`; a bound says so."""
    parts = []
    for task in lm.get("scores") or {}:
        s = task_score(lm, task)
        if s is None:
            continue
        text = f"{task} {s['metric']} {s['score']:.4g}"
        if s["bound"]:
            text += " (upper bound)"
        if s["near_chance"]:
            text += f" (within noise of chance {s['chance']:.3g})"
        parts.append(text)
    for suite in lm.get("averages") or {}:
        a = average_score(lm, suite)
        if a is not None and len(a["tasks"]) >= 2:
            parts.append(f"{suite} average of {len(a['tasks'])} tasks {a['score']:.4g}"
                         + (f" (within noise of chance {a['chance']:.3g})" if a["near_chance"] else ""))
    return ", ".join(parts) if parts else "no scores"
