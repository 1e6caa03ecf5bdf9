"""The per-document results of an evaluation: <results stem>_documents.jsonl, beside lm-eval's results JSON.

It keeps every document's scores (compact: scores and document hashes, no texts) for paired comparisons between
runs (analysis/paired.py, slm-compare); slm.eval.run writes it when spec.per_document is on (the default).

The per-document file (document_lines) is JSON lines of two kinds, in this order per task:
  {"task", "metrics": {"metric,filter": {"aggregation", "higher_is_better"}}, "documents", "num_fewshot",
   "version"}                                   one task line (no doc_id)
  {"task", "doc_id", "doc_hash", "prompt_hash", "metric,filter": value, ...}   one line per document
and after them {"task": group, "group": [its tasks]} for each lm-eval group. A value is what lm-eval's
process_results gave the document: a number for an aggregation `mean` (acc, acc_norm, exact_match; 0/1 or a
fraction such as truthfulqa_mc2's acc) or `perplexity` (a log-likelihood), [log-likelihood, words or bytes]
for `weighted_perplexity` / `bits_per_byte` (word_perplexity, byte_perplexity, bits_per_byte); null if not
finite. Metrics of other aggregations (bleu, f1, mcc: corpus-level pairs) are left out. doc_hash and
prompt_hash are the first 16 hex digits of lm-eval's sha256 of the document and of its (first) prompt: two
runs with equal hashes scored the same documents with the same prompts (few-shot examples included).
"""

from __future__ import annotations

import json
import math


DOCUMENTS_SUFFIX = "_documents.jsonl"
PER_DOCUMENT_AGGREGATIONS = {"mean": "number", "perplexity": "number", "weighted_perplexity": "pair",
                             "bits_per_byte": "pair"}
"""lm-eval aggregations whose per-document values the per-document file keeps, and the form of a value."""


def _number(value) -> float | None:
    """A finite float, None for a non-finite one; TypeError for a non-number."""
    if isinstance(value, str) or not isinstance(value, (bool, int, float)) and not hasattr(value, "item"):
        raise TypeError(type(value).__name__)
    value = float(value)
    return value if math.isfinite(value) else None


def _document_value(value, form: str):
    """A sample's metric value in the per-document file's form ("number" or "pair"), or TypeError."""
    if form == "number":
        return _number(value)
    if isinstance(value, (list, tuple)) and len(value) == 2:  # (log-likelihood, words or bytes)
        count = value[1]
        return [_number(value[0]), count if isinstance(count, int) and not isinstance(count, bool) else _number(count)]
    raise TypeError(type(value).__name__)


def _task_metrics(task: str, results: dict, reported=()) -> dict[str, dict]:
    """{metric: {"aggregation", "higher_is_better"}} of a task's metrics (and of those its samples `reported`):
    its config's metric_list, else lm-eval's registry defaults (a loglikelihood_rolling task without one)."""
    from lm_eval.api import registry

    declared = {m.get("metric"): m for m in (results.get("configs", {}).get(task, {}).get("metric_list") or [])
                if isinstance(m, dict)}
    higher = results.get("higher_is_better", {}).get(task, {})
    out = {}
    for metric in {**higher, **declared, **dict.fromkeys(reported)}:
        aggregation = declared.get(metric, {}).get("aggregation")
        if not isinstance(aggregation, str):
            try:
                aggregation = registry.get_metric_aggregation(metric).__name__
            except Exception:  # noqa: BLE001 - a task-defined metric without a registered aggregation
                aggregation = None
        better = higher.get(metric, declared.get(metric, {}).get("higher_is_better"))
        out[metric] = {"aggregation": aggregation, "higher_is_better": None if better is None else bool(better)}
    return out


def document_lines(samples: dict, results: dict):
    """The lines of the per-document file (module docstring) from lm-eval's `samples` ({task: [sample]}, one
    sample per document and filter) and its results (configs, higher_is_better, n-shot, versions,
    group_subtasks)."""
    for task, task_samples in samples.items():
        declared = _task_metrics(task, results, {m for sample in task_samples for m in sample.get("metrics") or []})
        kept: dict[str, dict] = {}
        documents: dict[int, dict] = {}
        for sample in task_samples:
            doc_id = sample.get("doc_id")
            line = documents.setdefault(doc_id, {"task": task, "doc_id": doc_id})
            for name in ("doc_hash", "prompt_hash"):
                if isinstance(sample.get(name), str):
                    line.setdefault(name, sample[name][:16])
            for metric in sample.get("metrics") or []:
                info = declared.get(metric) or {"aggregation": None, "higher_is_better": None}
                form = PER_DOCUMENT_AGGREGATIONS.get(info["aggregation"])
                if form is None or metric not in sample:
                    continue
                try:
                    value = _document_value(sample[metric], form)
                except TypeError:
                    continue
                key = f"{metric},{sample.get('filter', 'none')}"
                kept[key] = info
                line[key] = value
        yield json.dumps({"task": task, "metrics": kept, "documents": len(documents),
                          "num_fewshot": results.get("n-shot", {}).get(task),
                          "version": results.get("versions", {}).get(task)}) + "\n"
        order = sorted(documents) if all(isinstance(d, int) for d in documents) else list(documents)
        for doc_id in order:
            yield json.dumps(documents[doc_id]) + "\n"
    groups = results.get("group_subtasks") or {}

    def leaves(name: str) -> list[str]:
        return [t for sub in groups.get(name, []) for t in (leaves(sub) if sub in groups else [sub])]

    for group in groups:
        members = [t for t in leaves(group) if t in samples]
        if members:
            yield json.dumps({"task": group, "group": members}) + "\n"
