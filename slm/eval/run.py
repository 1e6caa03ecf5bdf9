"""Evaluate a run (or a bare checkpoint) with lm-eval: scores, lm-eval's results JSON, decode speed.

    summary = evaluate("runs/train/default", EvalSpec(tasks=["slm_shakespeare_bpb", "slm_shakespeare_mc"]))
    preflight(cfg["eval"])                            # before training: bad fields, hub tasks offline
    summary = evaluate_config(run_dir, cfg["eval"])   # the `eval` config node (conf/eval/*.yaml); None if off
    update_record(run_dir, eval=eval_section(summary, record["eval"]))   # the caller owns result.json

What to evaluate is an EvalSpec (slm.eval.spec); the summary and the record's `eval` fields it becomes are
slm.eval.summary's (summarize, eval_section: this layer never writes the run record, slm.runs sits above it), the
per-document file's format slm.eval.documents'. Here: the `eval` node checked before training (preflight,
check_model), the tasks resolved and loaded, the model scored (evaluate, evaluate_config) and the files written.

lm-eval's results JSON goes to <path>/eval/results_<time>.json unless output_path says otherwise; beside it
<stem>_documents.jsonl (spec.per_document, on by default) keeps every document's scores for paired
comparisons (analysis/paired.py, slm-compare), and <stem>_samples.jsonl (spec.log_samples) lm-eval's whole
samples (contexts, responses).

Tasks are resolved before the model is loaded: the offline tasks shipped in slm/eval/tasks need no index
of lm-eval's own tasks (seconds saved); a task whose data must come from the Hugging Face hub fails
here, at once, with one line when the hub is unreachable or HF_HUB_OFFLINE=1 (EvalError; the rule is
slm.eval.hub_tasks: decided before lm-eval's index is built or `datasets` retries anything).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import time
from pathlib import Path

from slm.eval import TASKS_DIR
from slm.eval.checks import EvalError, check_available, check_for_model
from slm.eval.documents import DOCUMENTS_SUFFIX, document_lines
from slm.eval.provenance import quiet_git_lookup
from slm.eval.spec import EvalSpec, spec_from_config
from slm.eval.summary import chance_level, summarize


class _DropCustomDatasetNotice(logging.Filter):
    """lm-eval warns on every load of a `custom_dataset` task about passing kwargs via --metadata;
    the offline tasks take none, so the notice is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Custom kwargs can be passed" not in record.getMessage()


logging.getLogger("lm_eval.api.task").addFilter(_DropCustomDatasetNotice())

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

def _results_path(output_path: str | os.PathLike) -> Path:
    out = Path(output_path).expanduser()
    if out.suffix == ".json":
        return out
    return out / f"results_{time.strftime('%Y-%m-%dT%H-%M-%S')}.json"


def evaluate(path: str | os.PathLike, spec: EvalSpec, output_path: str | os.PathLike | None = None, *,
             suite_model_args: bool = False) -> dict:
    """Score the run or checkpoint at `path` on spec.tasks (and its decode speed if spec.throughput.enabled) and
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

    check_available(spec)
    try:
        model_dir = resolve_model_dir(path)
    except FileNotFoundError as err:
        raise EvalError(str(err)) from None
    from slm.model.weights import check_checkpoint

    # config, weights header and memory checked before tasks load or anything is allocated (CheckpointError)
    model_cfg = check_checkpoint(model_dir, *resolve_device(spec.device, spec.dtype))
    model_args = dict(spec.model_args)
    if suite_model_args and model_cfg.attention.causal:
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

    if spec.throughput.enabled:
        from slm.eval.throughput import measure_decode

        model = lm.model if lm is not None else _load_for_throughput(model_dir, spec)
        t = spec.throughput
        summary["throughput"] = measure_decode(model, t.prompt_tokens, t.new_tokens, compile=t.compile,
                                               cpu_threads=t.cpu_threads, diffusion=dataclasses.asdict(t.diffusion))
    return summary


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

def preflight(eval_cfg: dict | None) -> None:
    """Check an `eval` config node before training: its fields, and that every task loads (so hub tasks
    while offline fail now, not after training). Raises SettingsError or EvalError; no model is needed.

    Tasks shipped in slm/eval/tasks alone (eval=offline, the default) need no network and their data is in
    the package: they are only named here, and lm-eval (1.5-2 s to import, plus pandas and datasets) loads
    when the evaluation runs, after training, instead of before the first step (unless eval.model_args is
    set: its names are the `slm` lm-eval model's, read from lm-eval's registered class)."""
    if not eval_cfg:
        return
    spec = spec_from_config(eval_cfg)  # SettingsError for a bad field, named as eval.<key>
    if not spec.enabled:
        return
    check_available(spec)
    if not spec.tasks or (not spec.include_path and set(spec.tasks) <= shipped_tasks() and _lm_eval_installed()):
        return
    load_tasks(task_manager(spec.tasks, spec.include_path), spec.tasks)


def check_model(eval_cfg: dict | None, model_cfg) -> None:
    """Check what of an `eval` config node depends on the model (slm.eval.checks.check_for_model), once the model's
    config is known and before training. Raises EvalError."""
    spec = spec_from_config(eval_cfg) if eval_cfg else None
    if spec is not None and spec.enabled:
        check_for_model(spec, model_cfg)


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
    if not eval_cfg:
        return None
    spec = spec_from_config(eval_cfg)
    if not spec.enabled or (not spec.tasks and not spec.throughput.enabled):
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
