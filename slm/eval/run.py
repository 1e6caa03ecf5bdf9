"""Evaluate a run (or a bare checkpoint) with lm-eval: scores, lm-eval's results JSON, decode speed.

    summary = evaluate("runs/train/default", EvalSpec(tasks=["slm_shakespeare_bpb", "slm_shakespeare_mc"]))
    preflight(cfg["eval"])                            # before training: bad fields, hub tasks offline
    summary = evaluate_config(run_dir, cfg["eval"])   # the `eval` config node (conf/eval/*.yaml); None if off
    update_record(run_dir, eval=eval_section(summary, record["eval"]))   # the caller owns result.json

This layer never writes the run record (slm.runs sits above it): `eval_section` turns a summary into
the record's `eval` fields, merged with what an earlier evaluation left there:
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
lm-eval's results JSON goes to <path>/eval/results_<time>.json unless output_path says otherwise; beside it
<stem>_documents.jsonl (spec.per_document, on by default) keeps every document's scores for paired
comparisons (analysis/paired.py, slm-compare), and <stem>_samples.jsonl (spec.log_samples) lm-eval's whole
samples (contexts, responses).

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

Tasks are resolved before the model is loaded: the offline tasks shipped in slm/eval/tasks need no index
of lm-eval's own tasks (seconds saved); a task whose data must come from the Hugging Face hub fails
here, at once, with one line when the hub is unreachable or HF_HUB_OFFLINE=1 (EvalError; the rule is
slm.eval.hub_tasks: decided before lm-eval's index is built or `datasets` retries anything).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from slm.eval import TASKS_DIR
from slm.eval.checks import EvalError, check_for_model, check_spec  # noqa: F401 (EvalError: part of this API)


class _DropCustomDatasetNotice(logging.Filter):
    """lm-eval warns on every load of a `custom_dataset` task about passing kwargs via --metadata;
    the offline tasks take none, so the notice is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Custom kwargs can be passed" not in record.getMessage()


logging.getLogger("lm_eval.api.task").addFilter(_DropCustomDatasetNotice())


@dataclass
class EvalSpec:
    """What to evaluate: the fields of an `eval` config node (conf/eval/*.yaml)."""

    tasks: list[str] = field(default_factory=list)
    """lm-eval task or group names (the offline tasks ship in slm/eval/tasks)."""
    metrics: dict[str, str] = field(default_factory=dict)
    """Headline metric per task, as lm-eval names it ("acc_norm,none"); others: the task's first metric."""
    average: dict[str, list[str]] = field(default_factory=dict)
    """Suite name -> tasks whose headline scores are averaged into eval.lm_eval.averages[suite]."""
    num_fewshot: int | None = None
    """None: each task's default (lm-eval's own YAMLs)."""
    batch_size: int = 16
    limit: float | None = None
    """Documents per task (a fraction if < 1); None: all. For smoke tests only."""
    device: str | None = None
    dtype: str = "auto"
    include_path: list[str] = field(default_factory=list)
    """More task directories, searched after slm/eval/tasks."""
    throughput: bool = True
    """Also measure batch-1 decode speed (eval.throughput)."""
    throughput_prompt_tokens: int = 128
    throughput_new_tokens: int = 128
    throughput_compile: bool = False
    """torch.compile the decode step (CPU: ~4x faster for small models, after 20-60 s of compiling)."""
    throughput_diffusion: dict = field(default_factory=dict)
    """Sampler settings for a diffusion model's decode measurement: block_length (32), steps (None:
    new_tokens / 4), threshold (None: low-confidence remasking); see slm.eval.throughput."""
    throughput_cpu_threads: int | None = 1
    """CPU threads for the decode measurement: a small model's batch-1 step is a chain of tiny ops that more
    threads make noisier, not faster; None: the process's setting."""
    gen_kwargs: dict | None = None
    seed: int = 1234
    per_document: bool = True
    """Also write each document's scores to <results stem>_documents.jsonl (compact: scores and document
    hashes, no texts) for paired comparisons between runs (slm-compare)."""
    log_samples: bool = False
    """Also write lm-eval's whole samples (contexts, responses) to <results stem>_samples.jsonl (large)."""
    model_args: dict = field(default_factory=dict)
    """Extra arguments of the `slm` lm-eval model (e.g. tokenizer, max_length, prefix_sharing)."""


def spec_from_config(node: dict, name: str | None = None) -> EvalSpec:
    """EvalSpec from an `eval` config node: tasks, metrics, average (a list: averaged under the node's
    name), num_fewshot, batch_size, limit, device, dtype, throughput ({enabled, prompt_tokens,
    new_tokens} or a bool), include_path."""
    node = dict(node or {})
    name = node.pop("name", None) or name or "eval"
    node.pop("enabled", None)
    known = set(EvalSpec.__dataclass_fields__)
    throughput = node.pop("throughput", True)
    if isinstance(throughput, dict):
        throughput = dict(throughput)
        for key in ("prompt_tokens", "new_tokens", "compile", "cpu_threads", "diffusion"):
            if key in throughput:
                node[f"throughput_{key}"] = throughput.pop(key)
        if node.get("throughput_diffusion") is None:
            node.pop("throughput_diffusion", None)
        enabled = throughput.pop("enabled", True)
        if throughput:
            raise EvalError(f"eval.throughput has unknown key {sorted(throughput)[0]!r}: choose from enabled, "
                            "prompt_tokens, new_tokens, compile, cpu_threads, diffusion")
        throughput = enabled
    average = node.pop("average", None)
    if isinstance(average, list):
        average = {name: average} if average else {}
    unknown = sorted(set(node) - known)
    if unknown:
        raise EvalError(f"eval config: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    for key in ("include_path", "tasks"):  # a string: comma-separated (eval.tasks=a,b on a command line is a sweep)
        value = node.get(key) or []
        node[key] = [p.strip() for p in value.split(",") if p.strip()] if isinstance(value, str) else value
    node["metrics"] = node.get("metrics") or {}
    limit = node.get("limit")
    if isinstance(limit, (int, float)) and not isinstance(limit, bool) and math.isfinite(limit) and limit >= 1:
        node["limit"] = int(limit)
    return EvalSpec(**node, throughput=throughput, average=average or {})


def task_manager(tasks: list[str], include_path: list[str]):
    """A TaskManager that knows every task in `tasks`: the shipped offline tasks alone when that suffices
    (no scan of lm-eval's ~15k task files), else lm-eval's tasks plus ours plus `include_path`."""
    from lm_eval.tasks import TaskManager

    from slm.eval import hub_tasks

    paths = [str(TASKS_DIR), *map(str, include_path)]
    local = TaskManager(include_path=paths, include_defaults=False)
    try:  # a hub task while the hub is unreachable: one line now, not after lm-eval's index and datasets' retries
        hub_tasks.check(tasks, local)
    except ValueError as err:
        raise EvalError(str(err)) from None
    if all(t in local.all_tasks for t in tasks):
        return local
    manager = TaskManager(include_path=paths)
    missing = [t for t in tasks if t not in manager.all_tasks]
    if missing:
        raise EvalError(hub_tasks.unknown_tasks(missing))
    return manager


def load_tasks(manager, tasks: list[str]) -> list:
    """Task/Group objects for the names, loading their data now: a hub dataset that cannot be reached
    fails here, before any model is loaded, as one EvalError line."""
    objects = []
    for name in tasks:
        try:
            loaded = manager.load([name])
        except Exception as err:  # noqa: BLE001 - datasets raises many kinds; all mean "cannot load"
            raise EvalError(_load_failure(name, err)) from None
        group = loaded["groups"].get(name)
        objects += [group] if group is not None else list(loaded["tasks"].values())
    return objects


def _load_failure(task: str, err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes") or \
        os.environ.get("HF_DATASETS_OFFLINE", "0").lower() in ("1", "true", "yes")
    if offline or isinstance(err, ConnectionError) or "Hub" in text or "offline" in text.lower():
        return (f"task {task} needs its dataset from the Hugging Face hub, which is not reachable "
                f"(HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', 'unset')}): {text[:300]}; "
                f"run where the hub is reachable, or choose offline tasks (eval=offline / --tasks offline)")
    return f"task {task} cannot be loaded: {type(err).__name__}: {text[:300]}"


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


def _results_path(output_path: str | os.PathLike) -> Path:
    out = Path(output_path).expanduser()
    if out.suffix == ".json":
        return out
    return out / f"results_{time.strftime('%Y-%m-%dT%H-%M-%S')}.json"


def evaluate(path: str | os.PathLike, spec: EvalSpec, output_path: str | os.PathLike | None = None, *,
             suite_model_args: bool = False) -> dict:
    """Score the run or checkpoint at `path` on spec.tasks (and its decode speed if spec.throughput) and
    write lm-eval's results JSON (and the per-document file). Returns the summary: scores, metrics, details,
    averages, version, results_file and documents_file (relative to `path` when inside it), throughput, and
    `results` (lm-eval's whole output, not for the record).

    suite_model_args: spec.model_args come from an `eval` config node that a whole sweep shares, so its
    diffusion settings (slm.eval.lm_diffusion.MODEL_ARGS, e.g. the cpu_default sweep's mc_num) are meant for
    the diffusion runs among its jobs: an autoregressive model leaves them out without a word. Otherwise (the
    command line) they were asked for this model, and an autoregressive one says once that they do not apply."""
    import lm_eval
    from lm_eval.utils import handle_non_serializable

    from slm.eval.env_info import reused_env_info
    from slm.eval.lm import SLMLM, resolve_device, resolve_model_dir
    from slm.plain_progress import plain_stderr

    check_spec(spec)
    try:
        model_dir = resolve_model_dir(path)
    except FileNotFoundError as err:
        raise EvalError(str(err)) from None
    from slm.model.weights import check_checkpoint

    # config, weights header and memory checked before tasks load or anything is allocated (CheckpointError)
    model_cfg = check_checkpoint(model_dir, *resolve_device(spec.device, spec.dtype))
    model_args = dict(spec.model_args)
    if suite_model_args and model_cfg.causal:
        from slm.eval.lm_diffusion import MODEL_ARGS

        model_args = {k: v for k, v in model_args.items() if k not in MODEL_ARGS}
    check_for_model(spec, model_cfg)
    path = Path(path)
    summary: dict = {}
    lm = None
    if spec.tasks:
        manager = task_manager(spec.tasks, spec.include_path)
        objects = load_tasks(manager, spec.tasks)
        lm = SLMLM(pretrained=str(model_dir), batch_size=spec.batch_size, device=spec.device, dtype=spec.dtype,
                   **model_args)
        # stderr not a terminal: each progress bar as one plain line; lm-eval's environment report made once
        # per process (a sweep's later jobs reuse it)
        with quiet_git_lookup(), reused_env_info(), plain_stderr():
            results = lm_eval.simple_evaluate(
                model=lm, tasks=objects, task_manager=manager, num_fewshot=spec.num_fewshot, limit=spec.limit,
                gen_kwargs=spec.gen_kwargs, log_samples=spec.log_samples or spec.per_document,
                random_seed=spec.seed, numpy_random_seed=spec.seed, torch_random_seed=spec.seed,
                fewshot_random_seed=spec.seed)
        results["config"]["model"] = "slm"
        results["config"]["model_args"] = {"pretrained": str(model_dir), **model_args}
        results["config"]["estimator"] = lm.estimator
        out_file = _results_path(output_path or path / "eval")
        samples = results.pop("samples", None)
        _write_atomic(out_file, [json.dumps(results, indent=2, default=handle_non_serializable, ensure_ascii=False)])
        if samples is not None and spec.log_samples:
            _write_atomic(out_file.with_name(out_file.stem + "_samples.jsonl"),
                          (json.dumps({"task": task, **doc}, default=handle_non_serializable, ensure_ascii=False)
                           + "\n" for task, docs in samples.items() for doc in docs))
        documents_file = None
        if samples is not None and spec.per_document:
            documents_file = out_file.with_name(out_file.stem + DOCUMENTS_SUFFIX)
            _write_atomic(documents_file, document_lines(samples, results))
        n_samples = results.get("n-samples", {})
        chance = {name: level for obj in objects
                  if (name := getattr(getattr(obj, "config", None), "task", None)) in spec.tasks
                  and (level := chance_level(obj, (n_samples.get(name) or {}).get("effective"))) is not None}
        summary = summarize(results, spec, chance)
        inside = out_file.resolve().is_relative_to(path.resolve())
        summary["results_file"] = os.path.relpath(out_file, path) if inside else str(out_file)
        if documents_file is not None:
            summary["documents_file"] = os.path.relpath(documents_file, path) if inside else str(documents_file)
            for task in summary["details"]:
                summary["details"][task]["documents_file"] = summary["documents_file"]
        summary["results"] = results  # everything lm-eval reported (printed by slm-eval, not recorded)

    if spec.throughput:
        from slm.eval.throughput import measure_decode

        model = lm.model if lm is not None else _load_for_throughput(model_dir, spec)
        summary["throughput"] = measure_decode(model, spec.throughput_prompt_tokens, spec.throughput_new_tokens,
                                               compile=spec.throughput_compile, cpu_threads=spec.throughput_cpu_threads,
                                               diffusion=spec.throughput_diffusion)
    return summary


def git_commit_hash() -> str | None:
    """What lm-eval records as `git_hash` (`git describe --always` in the working directory), asked without
    letting git print "fatal: not a git repository" to stderr when there is none: then None."""
    import subprocess

    try:
        done = subprocess.run(["git", "describe", "--always"], stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):  # no git, or it hangs
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


@contextlib.contextmanager
def quiet_git_lookup():
    """lm-eval's own git lookup (lm_eval.evaluator.get_git_commit_hash, which lets git write to stderr)
    replaced by git_commit_hash while the block runs."""
    import lm_eval.evaluator

    saved = lm_eval.evaluator.get_git_commit_hash
    lm_eval.evaluator.get_git_commit_hash = git_commit_hash
    try:
        yield
    finally:
        lm_eval.evaluator.get_git_commit_hash = saved


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


def _write_atomic(path: Path, chunks) -> None:
    """Write text `chunks` atomically (slm.atomic): a full disk or a kill never leaves half a file at `path`.
    An OSError becomes one EvalError line naming `path`."""
    from slm.atomic import atomic_write

    def write(f) -> None:
        for chunk in chunks:
            f.write(chunk.encode())

    try:
        atomic_write(path, write)
    except OSError as err:
        reason = os.strerror(err.errno) if err.errno else str(err)
        raise EvalError(f"cannot write {path}: {reason} ({path.name} is left as it was; free "
                        "space, or pass --output_path elsewhere)") from None


def _load_for_throughput(model_dir: Path, spec: EvalSpec):
    from slm.eval.lm import resolve_device
    from slm.model.weights import load_model

    device, dtype = resolve_device(spec.device, spec.dtype)
    return load_model(model_dir, device, dtype).eval()


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


def preflight(eval_cfg: dict | None) -> None:
    """Check an `eval` config node before training: its fields, and that every task loads (so hub tasks
    while offline fail now, not after training). Raises EvalError; no model is needed.

    Tasks shipped in slm/eval/tasks alone (eval=offline, the default) need no network and their data is in
    the package: they are only named here, and lm-eval (1.5-2 s to import, plus pandas and datasets) loads
    when the evaluation runs, after training, instead of before the first step (unless eval.model_args is
    set: its names are the `slm` lm-eval model's, read from lm-eval's registered class)."""
    if not eval_cfg or _enabled(eval_cfg) is False:
        return
    spec = spec_from_config(eval_cfg)
    check_spec(spec, "eval.")
    if not spec.tasks or (not spec.include_path and set(spec.tasks) <= shipped_tasks() and _lm_eval_installed()):
        return
    load_tasks(task_manager(spec.tasks, spec.include_path), spec.tasks)


def check_model(eval_cfg: dict | None, model_cfg) -> None:
    """Check what of an `eval` config node depends on the model (slm.eval.checks.check_for_model), once the model's
    config is known and before training. Raises EvalError."""
    if not eval_cfg or _enabled(eval_cfg) is False:
        return
    check_for_model(spec_from_config(eval_cfg), model_cfg, "eval.")


def _enabled(eval_cfg: dict) -> bool:
    enabled = eval_cfg.get("enabled", True)
    if not isinstance(enabled, bool):
        raise EvalError(f"eval.enabled={enabled!r} is invalid: expected true or false")
    return enabled


@functools.lru_cache(maxsize=1)
def shipped_tasks() -> frozenset[str]:
    """The task and group names of the task YAMLs in slm/eval/tasks (their top-level `task:` / `group:`
    lines; a raw read: lm-eval's YAML loader is what the `!function` tags need)."""
    names = set()
    for path in TASKS_DIR.glob("*.yaml"):
        for line in path.read_text().splitlines():
            key, sep, value = line.partition(":")
            if sep and key in ("task", "group") and value.strip():
                names.add(value.split("#")[0].strip().strip("'\""))
    return frozenset(names)


def _lm_eval_installed() -> bool:
    """Whether lm-eval can be imported (found, not imported: that is the evaluation's cost)."""
    import importlib.util

    return importlib.util.find_spec("lm_eval") is not None


def evaluate_config(path: str | os.PathLike, eval_cfg: dict | None,
                    log_file: str | os.PathLike | None = None) -> dict | None:
    """Evaluation as the run's `eval` config node asks (e.g. at the end of training); None when it asks
    for nothing (eval=none: `enabled: false`). Raises EvalError for bad input (e.g. hub tasks offline).
    The node's diffusion model_args apply to diffusion models only (evaluate's suite_model_args).
    With `log_file`, lm-eval's progress bars (each as one plain line, slm.plain_progress) and INFO lines go
    there instead of the console."""
    if not eval_cfg or _enabled(eval_cfg) is False:
        return None
    spec = spec_from_config(eval_cfg)
    if not spec.tasks and not spec.throughput:
        return None
    if log_file is None:
        return evaluate(path, spec, suite_model_args=True)
    from slm.plain_progress import PlainLines

    Path(log_file).parent.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger("lm_eval")
    level, propagate = logger.level, logger.propagate
    with open(log_file, "a") as log:
        stream = PlainLines(log)  # one stream for the bars and the log lines: they stay in order
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        try:
            with contextlib.redirect_stderr(stream):
                return evaluate(path, spec, suite_model_args=True)
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
