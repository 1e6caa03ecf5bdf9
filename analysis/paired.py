"""Paired comparisons of two runs (or two groups of runs) on the same lm-eval documents.

    results, refused = compare_runs("runs/a", "runs/b")                # every common task, headline metric
    r = paired_difference("runs/a", "runs/b", "slm_shakespeare_mc")    # one task -> PairedResult
    r = paired_groups(["runs/a1", "runs/a2"], ["runs/b1", "runs/b2"], "hellaswag")   # seeds pooled
    print(format_table(results, refused))                              # what slm-compare prints

A run's per-document scores are the file its evaluation wrote beside lm-eval's results JSON
(`<results stem>_documents.jsonl`, format in slm.eval.run), named in result.json by
eval.lm_eval.details[task].documents_file (else eval.lm_eval.documents_file). Two runs are aligned on
(task, doc_id); a task whose documents or prompts differ between them (doc_hash / prompt_hash) is refused.
A group task (mmlu) pools its tasks' documents. Per task, for one metric (default: the run's headline metric,
eval.lm_eval.metrics):
  a, b        the metric over the common documents, aggregated as lm-eval aggregates it: the mean; exp(-Σll/Σn)
              for word/byte perplexity; -Σll/Σn/ln 2 for bits_per_byte; exp(-mean ll) for perplexity
  diff        b - a, with a 95% paired bootstrap interval (low, high): documents resampled with replacement, the
              same draw for both runs, `draws` times, fixed `seed`; the percentile interval
  p           0/1 values (acc, acc_norm, exact_match): McNemar's exact test, the two-sided binomial test of n01
              among the n01 + n10 discordant documents (n01: B right and A wrong; n10: the reverse). Other values
              (a fraction such as truthfulqa_mc2's acc, log-likelihoods): a paired t-test of the per-document
              differences of what the aggregate sums (the value; the log-likelihood for the perplexities, so the
              test is of the aggregate's difference), with Wilcoxon's signed-rank p beside it (p_wilcoxon)
  verdict     "B better" / "A better" when p < 0.05 (direction from the metric's higher_is_better), else
              "no detectable difference at 5%"
What it answers: whether these trained models differ on these documents. Whether their architectures do is a
question about seeds (paired_groups over several runs a side pools the seeds per document, and the report's
verdict tests configurations over their seeds); slm-compare's output says so under its table.
Reads result files only.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from analysis.records import RENAMED_TASKS
from analysis.readers import BadFile, is_number, json_type, read_json_lines, shown

ALPHA = 0.05
DRAWS = 2000
SEED = 0
AGGREGATE = {  # (sum of per-document values, sum of weights) -> the score, as lm-eval aggregates it
    "mean": lambda total, n: total / n,
    "perplexity": lambda total, n: np.exp(-total / n),
    "weighted_perplexity": lambda total, n: np.exp(-total / n),
    "bits_per_byte": lambda total, n: -total / n / math.log(2),
}
NO_DIFFERENCE = "no detectable difference at 5%"


class PairedError(ValueError):
    """Runs that cannot be compared (no record, no per-document results, different documents); one line."""


@dataclass
class TaskDocuments:
    """One task's per-document results in one run: metrics {"metric,filter": {aggregation, higher_is_better}}
    and documents {(task, doc_id): the file's line}; a group's documents are its tasks'."""

    task: str
    metrics: dict[str, dict]
    documents: dict[tuple, dict]
    file: Path


@dataclass
class RunDocuments:
    """A run's per-document results: tasks by name, the headline metric per task (eval.lm_eval.metrics) and the
    tasks its evaluations asked for (eval.lm_eval.details), in order."""

    run_dir: Path
    tasks: dict[str, TaskDocuments]
    headline: dict[str, str] = field(default_factory=dict)
    requested: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PairedResult:
    """B against A on one task and metric (module docstring); runs_a / runs_b: runs pooled per side; only_a /
    only_b: documents scored on one side only (not compared); dropped: common documents without a finite value."""

    task: str
    metric: str
    aggregation: str
    higher_is_better: bool | None
    n: int
    a: float
    b: float
    diff: float
    low: float
    high: float
    test: str
    p: float
    n01: int | None = None
    n10: int | None = None
    p_wilcoxon: float | None = None
    draws: int = DRAWS
    seed: int = SEED
    runs_a: int = 1
    runs_b: int = 1
    only_a: int = 0
    only_b: int = 0
    dropped: int = 0

    @property
    def verdict(self) -> str:
        return verdict(self.diff, self.p, self.higher_is_better)

    def as_dict(self) -> dict:
        """JSON-safe fields plus the verdict (non-finite numbers as None)."""
        out = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}
        return {**out, "verdict": self.verdict}


def verdict(diff: float, p: float, higher_is_better: bool | None) -> str:
    """"B better" / "A better" when p < ALPHA, else NO_DIFFERENCE ("B higher" / "A higher" for a metric of
    unknown direction); "too few documents to test" when p is not a number."""
    if not math.isfinite(p):
        return "too few documents to test"
    if p >= ALPHA or diff == 0:
        return NO_DIFFERENCE
    if higher_is_better is None:
        return "B higher" if diff > 0 else "A higher"
    return "B better" if (diff > 0) == higher_is_better else "A better"


# --- reading -----------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=128)
def _read_file(path: Path, mtime_ns: int = 0, size: int = 0) -> dict[str, TaskDocuments]:
    """The tasks of one per-document file (groups pooled from their tasks); mtime_ns and size key the cache."""
    tasks: dict[str, TaskDocuments] = {}
    groups: dict[str, list[str]] = {}
    try:
        lines = read_json_lines(path, "a per-document line")
    except BadFile as err:
        raise PairedError(str(err)) from None
    for number, line in lines:
        if not isinstance(line, dict) or not isinstance(line.get("task"), str):
            raise PairedError(f"{path}: line {number} is not a per-document line (a JSON object with a task name)")
        task = RENAMED_TASKS.get(line["task"], line["task"])  # a file written under a task's former name
        if "doc_id" in line:
            key = (task, line["doc_id"])
            if not isinstance(line["doc_id"], (int, float, str)) or isinstance(line["doc_id"], bool):
                raise PairedError(f"{path}: line {number}: doc_id is {json_type(line['doc_id'])}, not a number "
                                  "or a string")
            entry = tasks.setdefault(task, TaskDocuments(task, {}, {}, path))
            entry.documents[key] = line
        elif "group" in line:
            members = line["group"]
            if not isinstance(members, list) or not all(isinstance(t, str) for t in members):
                raise PairedError(f"{path}: line {number}: \"group\" is {shown(members)}, not a list of task names")
            groups[task] = [RENAMED_TASKS.get(t, t) for t in members]
        else:
            metrics = line.get("metrics") or {}
            if not isinstance(metrics, dict) or not all(isinstance(info, dict) for info in metrics.values()):
                raise PairedError(f"{path}: line {number}: \"metrics\" is {shown(metrics)}, not an object of "
                                  "metric -> {aggregation, higher_is_better}")
            entry = tasks.setdefault(task, TaskDocuments(task, {}, {}, path))
            entry.metrics = dict(metrics)
    for group, members in groups.items():
        members = [tasks[t] for t in members if t in tasks]
        if not members:
            continue
        metrics = {k: v for k, v in members[0].metrics.items() if all(m.metrics.get(k) == v for m in members)}
        tasks[group] = TaskDocuments(group, metrics, {k: v for m in members for k, v in m.documents.items()}, path)
    return tasks


def load_documents(run_dir: str | Path) -> RunDocuments:
    """A run's per-document results (each file parsed once while it is unchanged: comparisons of many pairs
    reuse it; do not modify what is returned). PairedError (one line) for a directory without result.json, a
    record without per-document results, or a file it names that is missing or unreadable."""
    from slm.runs.record import RESULT_FILE, RecordError, load_record

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise PairedError(f"{run_dir}: no such run directory")
    try:
        record = load_record(run_dir)
    except RecordError as err:
        raise PairedError(str(err)) from None
    if record is None:
        raise PairedError(f"{run_dir}: no {RESULT_FILE} (not a run directory)")
    lm = (record.get("eval") or {}).get("lm_eval") or {}
    if not isinstance(lm, dict) or not isinstance(lm.get("metrics") or {}, dict):
        name, value = ("eval.lm_eval", lm) if not isinstance(lm, dict) else ("eval.lm_eval.metrics", lm["metrics"])
        raise PairedError(f"{run_dir / RESULT_FILE}: {name} is {json_type(value)}, not an object")
    details = lm.get("details") if isinstance(lm.get("details"), dict) else {}
    details = {RENAMED_TASKS.get(t, t): d for t, d in details.items()}
    pinned = {task: d["documents_file"] for task, d in details.items()
              if isinstance(d, dict) and isinstance(d.get("documents_file"), str)}
    latest = lm.get("documents_file") if isinstance(lm.get("documents_file"), str) else None
    names = list(dict.fromkeys([*(f for f in pinned.values() if f != latest), *([latest] if latest else [])]))
    if not names:
        raise PairedError(f"{run_dir}: no per-document results (result.json has no eval.lm_eval.documents_file): "
                          f"the run predates per-document results or was evaluated without them; re-run "
                          f"`slm-eval {run_dir} --tasks ...`")
    parsed = {}
    for name in names:
        path = Path(name) if Path(name).is_absolute() else run_dir / name
        if not path.exists():
            raise PairedError(f"{path}: the per-document file named in {run_dir / RESULT_FILE} is missing; "
                              f"re-run `slm-eval {run_dir} --tasks ...`")
        stat = path.stat()
        parsed[name] = _read_file(path, stat.st_mtime_ns, stat.st_size)
    tasks: dict[str, TaskDocuments] = {}
    for name in names:  # the latest evaluation's file last: it wins for tasks the details do not pin
        tasks.update(parsed[name])
    for task, name in pinned.items():  # a requested task (and a group's tasks) from the file of its scores
        if task in parsed[name]:
            tasks[task] = parsed[name][task]
            tasks.update({t: parsed[name][t] for t, _ in parsed[name][task].documents if t != task})
    headline = {RENAMED_TASKS.get(t, t): m for t, m in (lm.get("metrics") or {}).items() if isinstance(m, str)}
    return RunDocuments(run_dir, tasks, headline, [t for t in details if t in tasks])


# --- statistics --------------------------------------------------------------------------------------------

def _bootstrap(num_a: np.ndarray, num_b: np.ndarray, weight: np.ndarray, aggregate, draws: int,
               seed: int) -> tuple[float, float]:
    """95% percentile interval of aggregate(B) - aggregate(A) over documents resampled with replacement."""
    rng = np.random.default_rng(seed)
    n = len(num_a)
    chunk = max(1, 2_000_000 // n)
    linear = aggregate is AGGREGATE["mean"] and np.all(weight == 1)  # B - A is the mean of the differences
    d = num_b - num_a
    diffs = []
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, draws, chunk):
            idx = rng.integers(0, n, size=(min(chunk, draws - start), n), dtype=np.int32)
            if linear:
                diffs.append(d[idx].sum(axis=1) / n)
                continue
            total = weight[idx].sum(axis=1)
            diffs.append(aggregate(num_b[idx].sum(axis=1), total) - aggregate(num_a[idx].sum(axis=1), total))
    low, high = np.percentile(np.concatenate(diffs), [2.5, 97.5])
    return float(low), float(high)


def mcnemar(a: np.ndarray, b: np.ndarray) -> tuple[int, int, float]:
    """(n01, n10, p): McNemar's exact test of paired 0/1 outcomes, n01 = #(a=0, b=1), n10 = #(a=1, b=0), p the
    two-sided binomial test of n01 among n01 + n10 at 1/2 (1 when no document is discordant)."""
    from scipy.stats import binomtest

    n01 = int(np.sum((a == 0) & (b == 1)))
    n10 = int(np.sum((a == 1) & (b == 0)))
    p = binomtest(n01, n01 + n10, 0.5).pvalue if n01 + n10 else 1.0
    return n01, n10, float(min(1.0, p))


def paired_t(d: np.ndarray) -> tuple[float, float]:
    """(paired t-test p, Wilcoxon signed-rank p) of per-document differences `d` (1 where all are 0; NaN with
    fewer than two documents)."""
    from scipy.stats import ttest_1samp, wilcoxon

    if len(d) < 2:
        return math.nan, math.nan
    if not np.any(d):
        return 1.0, 1.0
    with warnings.catch_warnings():  # ties and zeros: scipy notes its normal approximation
        warnings.simplefilter("ignore")
        p_w = float(wilcoxon(d).pvalue)
        if np.all(d == d[0]):  # no spread: every document moved by the same amount
            return 0.0, p_w
        return float(ttest_1samp(d, 0.0).pvalue), p_w


def paired_stats(num_a, num_b, weight=None, aggregation: str = "mean", higher_is_better: bool | None = True,
                 draws: int = DRAWS, seed: int = SEED, task: str = "", metric: str = "") -> PairedResult:
    """B against A on aligned per-document values: num_a / num_b what the aggregate sums per document (the
    value; the log-likelihood for a perplexity), weight the document's weight (1; its words or bytes for
    weighted_perplexity and bits_per_byte)."""
    if aggregation not in AGGREGATE:
        raise PairedError(f"task {task}: metric {metric} aggregates by {aggregation!r}; paired comparisons "
                          f"support {', '.join(AGGREGATE)}")
    num_a, num_b = np.asarray(num_a, dtype=float), np.asarray(num_b, dtype=float)
    weight = np.ones_like(num_a) if weight is None else np.asarray(weight, dtype=float)
    if len(num_a) == 0:
        raise PairedError(f"task {task}: no document with a value in both runs")
    aggregate = AGGREGATE[aggregation]
    with np.errstate(over="ignore"):
        a = float(aggregate(num_a.sum(), weight.sum()))
        b = float(aggregate(num_b.sum(), weight.sum()))
    low, high = _bootstrap(num_a, num_b, weight, aggregate, draws, seed)
    binary = aggregation == "mean" and np.isin(num_a, (0.0, 1.0)).all() and np.isin(num_b, (0.0, 1.0)).all()
    if binary:
        n01, n10, p = mcnemar(num_a, num_b)
        return PairedResult(task, metric, aggregation, higher_is_better, len(num_a), a, b, b - a, low, high,
                            "McNemar exact", p, n01=n01, n10=n10, draws=draws, seed=seed)
    p, p_w = paired_t(num_b - num_a)
    return PairedResult(task, metric, aggregation, higher_is_better, len(num_a), a, b, b - a, low, high,
                        "paired t", p, p_wilcoxon=p_w, draws=draws, seed=seed)


# --- comparisons -------------------------------------------------------------------------------------------

def _choose_metric(task: str, runs: list[TaskDocuments], metric: str | None, headline: list[str | None]) -> str:
    """The metric key ("acc_norm,none") to compare: `metric` (with or without its filter), else the first
    headline metric all runs have, else the task's first metric."""
    shared = [k for k, info in runs[0].metrics.items() if all(r.metrics.get(k) == info for r in runs[1:])]
    if not shared:
        raise PairedError(f"task {task}: no metric that every run scored the same way")
    if metric is not None:
        matches = [k for k in shared if k == metric or k.split(",")[0] == metric]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise PairedError(f"task {task}: no per-document metric {metric!r}; it has {', '.join(shared)}")
        raise PairedError(f"task {task}: metric {metric!r} is ambiguous: {', '.join(matches)}; name the filter too")
    return next((m for m in headline if m in shared), shared[0])


def _fingerprint_check(task: str, runs: list[TaskDocuments], keys: list[tuple]) -> None:
    for name, what in (("doc_hash", "documents"), ("prompt_hash", "prompts (few-shot examples, template)")):
        differ = [k for k in keys
                  if len({r.documents[k].get(name) for r in runs if r.documents[k].get(name) is not None}) > 1]
        if differ:
            raise PairedError(f"task {task}: refused: the runs scored different {what}: {name} differs for "
                              f"{len(differ)} of {len(keys)} documents (first: doc_id {differ[0][1]}"
                              f"{'' if differ[0][0] == task else ' of ' + differ[0][0]})")


def _paired(task: str, side_a: list[RunDocuments], side_b: list[RunDocuments], metric: str | None,
            draws: int, seed: int) -> PairedResult:
    runs = side_a + side_b
    missing = [str(r.run_dir) for r in runs if task not in r.tasks]
    if missing:
        raise PairedError(f"task {task}: no per-document results in {', '.join(missing)}")
    docs = [r.tasks[task] for r in runs]
    key = _choose_metric(task, docs, metric, [r.headline.get(task) for r in runs])
    info = docs[0].metrics[key]
    common = set(docs[0].documents).intersection(*(d.documents for d in docs[1:]))
    try:
        keys = sorted(common)
    except TypeError:  # doc_ids of mixed types
        keys = sorted(common, key=str)
    if not keys:
        raise PairedError(f"task {task}: refused: the runs have no document in common")
    _fingerprint_check(task, docs, keys)

    def numbers(d: TaskDocuments, k: tuple):
        value = d.documents[k].get(key)
        pair = isinstance(value, list) and len(value) == 2
        if not (value is None or is_number(value) or pair and all(v is None or is_number(v) for v in value)):
            raise PairedError(f"{d.file}: task {k[0]} doc_id {shown(k[1])}: {key} is {shown(value)}, not a number "
                              "or [log-likelihood, count]")
        return (value, 1.0) if not pair else (value[0], value[1])

    rows = [[numbers(d, k) for d in docs] for k in keys]
    ok = [all(v is not None and w is not None for v, w in row) for row in rows]
    rows = [row for row, good in zip(rows, ok) if good]
    values = np.array([[v for v, _ in row] for row in rows], dtype=float).reshape(len(rows), len(docs))
    weight = np.array([row[0][1] for row in rows], dtype=float)
    n_a = len(side_a)
    result = paired_stats(values[:, :n_a].mean(axis=1), values[:, n_a:].mean(axis=1), weight, info.get("aggregation"),
                          info.get("higher_is_better"), draws, seed, task, key)
    union_a = set().union(*(d.documents for d in docs[:n_a]))
    union_b = set().union(*(d.documents for d in docs[n_a:]))
    return replace(result, runs_a=n_a, runs_b=len(side_b), only_a=len(union_a - common),
                   only_b=len(union_b - common), dropped=len(keys) - len(rows))


def _check_draws(draws: int) -> None:
    if not isinstance(draws, int) or draws < 100:
        raise PairedError(f"draws {draws!r}: must be an integer >= 100")


def paired_difference(run_dir_a: str | Path, run_dir_b: str | Path, task: str, metric: str | None = None,
                      draws: int = DRAWS, seed: int = SEED) -> PairedResult:
    """Run B against run A on `task` (module docstring). PairedError when either run lacks per-document results
    or the task, or the runs scored different documents or prompts."""
    _check_draws(draws)
    return _paired(RENAMED_TASKS.get(task, task), [load_documents(run_dir_a)], [load_documents(run_dir_b)], metric, draws, seed)


def paired_groups(runs_a: list[str | Path], runs_b: list[str | Path], task: str, metric: str | None = None,
                  draws: int = DRAWS, seed: int = SEED) -> PairedResult:
    """Group B against group A (e.g. several seeds of each configuration) on `task`, pooled per document: each
    group's per-document value is the mean over its runs (acc: the fraction of its runs that got the document
    right; perplexities: the mean log-likelihood), then B and A are compared paired over the documents that
    every run scored (the same documents and prompts in all, else PairedError). A and B are then each group's
    mean score (the geometric mean of its runs' perplexities; the mean of its bits_per_byte). Averaged 0/1
    values are fractions, so with more than one run a side the test is the paired t-test, not McNemar's. The
    interval resamples documents only: seed-to-seed variation enters through the averaged scores, not as a
    separate source of error, so with few seeds also look at the spread between seeds."""
    _check_draws(draws)
    if not runs_a or not runs_b:
        raise PairedError("paired_groups needs at least one run on each side")
    return _paired(RENAMED_TASKS.get(task, task), [load_documents(r) for r in runs_a], [load_documents(r) for r in runs_b], metric,
                   draws, seed)


def compare_runs(run_dir_a: str | Path, run_dir_b: str | Path, tasks: list[str] | None = None,
                 metric: str | None = None, draws: int = DRAWS,
                 seed: int = SEED) -> tuple[list[PairedResult], dict[str, str]]:
    """B against A on every task both have (`tasks`: those; default: the tasks their evaluations asked for, else
    every task in their files). Returns (results, refused {task: one-line reason}). PairedError for a run
    without per-document results, no task in common, or a task of `tasks` not in both."""
    _check_draws(draws)
    a, b = load_documents(run_dir_a), load_documents(run_dir_b)
    common = [t for t in a.tasks if t in b.tasks]
    if not common:
        raise PairedError(f"no task in common: {run_dir_a} has {', '.join(a.tasks) or 'none'}; "
                          f"{run_dir_b} has {', '.join(b.tasks) or 'none'}")
    if tasks:
        tasks = [RENAMED_TASKS.get(t, t) for t in tasks]  # a former name asks for today's
        absent = [t for t in tasks if t not in common]
        if absent:
            raise PairedError(f"task {', '.join(absent)}: not in both runs' per-document results; common tasks: "
                              f"{', '.join(common)}")
        chosen = list(dict.fromkeys(tasks))
    else:
        chosen = [t for t in a.requested if t in b.tasks] or common
    results, refused = [], {}
    for task in chosen:
        try:
            results.append(_paired(task, [a], [b], metric, draws, seed))
        except PairedError as err:
            refused[task] = str(err)
    return results, refused


def format_table(results: list[PairedResult], refused: dict[str, str] | None = None) -> str:
    """A plain-text table, one line per result, then the refused tasks (slm-compare's output)."""
    def num(x: float) -> str:
        return (f"{x:.4f}" if 1e-3 <= abs(x) < 1e3 else f"{x:.4g}") if math.isfinite(x) else str(x)

    def signed(x: float) -> str:
        return f"{x:+.3g}" if math.isfinite(x) else str(x)

    header = ["task", "metric", "docs", "A", "B", "B-A", "95% interval", "test", "p", "verdict"]
    rows = [header]
    for r in results:
        test = f"McNemar {r.n01}:{r.n10}" if r.n01 is not None else r.test
        docs = str(r.n) + ("" if r.runs_a == r.runs_b == 1 else f" ({r.runs_a}v{r.runs_b} runs)")
        rows.append([r.task, metric_name(r.metric), docs, num(r.a), num(r.b), signed(r.diff),
                     f"[{signed(r.low)}, {signed(r.high)}]", test, f"{r.p:.3g}", r.verdict])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    if any(r.n01 is not None for r in results):
        lines.append("McNemar n01:n10 = documents only B got right : documents only A got right")
    notes = [f"{r.task}: {r.only_a} document{'' if r.only_a == 1 else 's'} only in A, {r.only_b} only in B "
             "(not compared)"
             for r in results if r.only_a or r.only_b]
    notes += [f"{r.task}: {r.dropped} common documents without a finite value (not compared)"
              for r in results if r.dropped]
    lines += notes + [f"refused: {reason}" for reason in (refused or {}).values()]
    if results:
        lines.append(QUESTION)
    return "\n".join(lines)


QUESTION = ("What this answers: whether these two trained models differ on these documents (a test over the "
            "documents). Whether their architectures differ needs seeds: several runs a side (slm-report's verdict "
            "tests configurations over their seeds; paired_groups pools seeds per document).")
"""The line under slm-compare's table: which question a per-document test answers, and which it does not."""


def metric_name(metric: str) -> str:
    """An lm-eval metric key as people write it: "bits_per_byte,none" -> "bits_per_byte" (a filter other than
    lm-eval's default "none" is kept: "exact_match,strict-match")."""
    name, _, filt = metric.partition(",")
    return name if filt in ("", "none") else metric
