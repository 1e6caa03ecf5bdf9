"""An evaluation's summary and the run record's `eval` fields made from it, with each task's chance level.

summarize turns lm-eval's results into the summary's scores, metrics, details and averages (slm.eval.run.evaluate
adds the results and documents files, the throughput). This layer never writes the run record (slm.runs sits above
it): `eval_section` turns a summary into the record's `eval` fields, merged with what an earlier evaluation left
there:
  eval.lm_eval      scores {task: headline score}, metrics {task: "metric,filter"},
                    details {task: every metric lm-eval reported, num_fewshot, samples, limit, and for a
                    multiple-choice task scored by argmax accuracy its `chance` level (chance_level)},
                    averages {suite: mean headline score of its `average` tasks, when there are two or
                    more: one task's "average" would only repeat its score}, average_tasks {suite: those
                    tasks}, version,
                    results_file, estimator (how log-likelihoods were computed: {"kind": "exact"}, or
                    for a diffusion model {"kind": "llada_mc_conditional_elbo", "mc_num", "seed"}; also
                    in each task's details), documents_file (the per-document results of this
                    evaluation; also in each task's details); merged task by task, so offline and
                    study7 scores coexist
  eval.throughput   batch-1 decode speed (slm.eval.throughput.measure_decode), replaced
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slm.eval.spec import EvalSpec


def headline(task: str, values: dict, metrics: dict[str, str]) -> tuple[str | None, float | None]:
    """(metric key, value) reported for a task: metrics[task], else its first metric."""
    key = metrics.get(task)
    if key is None:
        key = next((k for k in values if "," in k and "_stderr" not in k), None)
    value = values.get(key) if key else None
    return key, (float(value) if isinstance(value, (int, float)) else None)


def _clean(values: dict) -> dict:
    """JSON-safe copy of one task's lm-eval results (numbers as float, 'N/A' kept)."""
    out = {}
    for k, v in values.items():
        if isinstance(v, bool) or v is None or isinstance(v, str):
            out[k] = v
        elif isinstance(v, int):
            out[k] = v
        elif isinstance(v, float) or hasattr(v, "item"):
            v = float(v)
            out[k] = v if math.isfinite(v) else str(v)
    return out


def chance_level(task, n_docs: int | None = None) -> float | None:
    """Random-guess accuracy of a multiple-choice task that lm-eval scores by argmax (acc, acc_norm): the mean
    over its first `n_docs` documents (all: None) of 1 / the number of choices. None for any other task
    (perplexity, generation, or one with its own process_results such as truthfulqa_mc2, whose score is not
    an argmax accuracy) and for a group (its subtasks are not at hand here)."""
    import itertools

    if getattr(task, "OUTPUT_TYPE", None) != "multiple_choice" or getattr(task.config, "process_results", None):
        return None
    try:
        counts = [len(task.doc_to_choice(doc)) for doc in itertools.islice(task.eval_docs, n_docs)]
    except Exception:  # noqa: BLE001 - a task whose choices cannot be listed simply has no chance line
        return None
    counts = [c for c in counts if c > 0]
    return sum(1 / c for c in counts) / len(counts) if counts else None


def summarize(results: dict, spec: EvalSpec, chance: dict[str, float] | None = None) -> dict:
    """eval.lm_eval fields from lm-eval's results: headline scores, details and suite averages for the
    requested tasks and groups (not every subtask of a group: those stay in the results JSON). A suite
    averages two tasks or more; one task is no average (its score is already there). `chance`:
    {task: chance_level}, recorded in the task's details."""
    import lm_eval

    scores, metrics, details = {}, {}, {}
    n_samples = results.get("n-samples", {})
    estimator = results.get("config", {}).get("estimator")
    for task in spec.tasks:
        values = results["results"].get(task)
        if values is None:
            continue
        key, value = headline(task, values, spec.metrics)
        scores[task], metrics[task] = value, key
        details[task] = {**_clean({k: v for k, v in values.items() if k not in ("alias", "name")}),
                         "num_fewshot": results.get("n-shot", {}).get(task),
                         "samples": n_samples.get(task, {}).get("effective"), "limit": spec.limit,
                         **({"estimator": estimator} if estimator is not None else {}),
                         **({"chance": chance[task]} if task in (chance or {}) else {})}
    averages, average_tasks = {}, {}
    for suite, tasks in spec.average.items():
        values = [scores.get(t) for t in tasks]
        if len(values) >= 2 and all(v is not None for v in values):
            averages[suite] = sum(values) / len(values)
            average_tasks[suite] = list(tasks)
    return {"scores": scores, "metrics": metrics, "details": details, "averages": averages,
            "average_tasks": average_tasks,
            "version": lm_eval.__version__, "limit": spec.limit,
            **({"estimator": estimator} if estimator is not None else {})}


def eval_section(summary: dict, previous: dict | None) -> dict:
    """The record's `eval` fields for a summary, merged with the previous `eval` section: lm_eval task by
    task (earlier tasks and suites kept; a task scored now drops its entries under a former name,
    slm.eval.RENAMED_TASKS, and a one-task "average" left by an earlier evaluation is dropped), throughput
    replaced. Pass it to update_record(run_dir, eval=...)."""
    from slm.eval import RENAMED_TASKS

    old = (previous or {}).get("lm_eval") or {}
    section = {}
    if "scores" in summary:
        lm = {key: {**old.get(key, {}), **summary.get(key, {})}
              for key in ("scores", "metrics", "details", "averages", "average_tasks")}
        for former, current in RENAMED_TASKS.items():
            if current in summary.get("scores", {}):
                for key in ("scores", "metrics", "details"):
                    lm[key].pop(former, None)
        for suite, members in list(lm["average_tasks"].items()):
            if len(members) < 2:
                lm["averages"].pop(suite, None)
                lm["average_tasks"].pop(suite)
        lm.update(version=summary["version"], results_file=summary["results_file"],
                  evaluated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        if "documents_file" in summary:
            lm["documents_file"] = summary["documents_file"]
        if "estimator" in summary:
            lm["estimator"] = summary["estimator"]
        section["lm_eval"] = lm
        section["lm_eval_error"] = None  # a failure of an earlier attempt (slm.runs.job) is cleared
    if "throughput" in summary:
        section["throughput"] = summary["throughput"]
    return section
