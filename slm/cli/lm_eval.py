"""`slm-lm-eval`: lm-eval's own command line (`lm-eval` of lm_eval 0.4) with the `slm` model registered and
slm's offline tasks findable; `python -m slm.eval` is the same program.

    slm-lm-eval --model slm --model_args pretrained=runs/train/model.d_model=384,model.n_layers=32 \\
        --tasks slm_offline --output_path out/
    slm-lm-eval run --model slm --model_args pretrained=<run> tokenizer=gpt2 --tasks hellaswag --limit 100
    slm-lm-eval ls tasks

Every flag of `lm-eval run` (and the `ls` and `validate` subcommands) works as there. What slm adds:

  * `--model` defaults to `slm` (lm-eval 0.4 has no entry point for models: `lm-eval --model slm` alone
    cannot find it);
  * slm/eval/tasks (slm_offline, slm_shakespeare_bpb, slm_shakespeare_mc) is searched, before any
    --include_path; when every task asked for is there, lm-eval's own ~15k task files are not indexed;
  * a path in --model_args may hold commas, as run directories named after their job key do:
    `pretrained=<path>` takes the longest run of comma-separated pieces that exists on disk (quote it to
    take it literally; the rule: slm.eval.lm_args);
  * the run (or checkpoint) is checked before lm-eval starts, and a hub task while the hub is unreachable
    is refused in seconds (slm.eval.hub_tasks): each is one line on stderr, `<prog>: error: ...`, exit 2
    (a traceback with HYDRA_FULL_ERROR=1);
  * lm-eval's results go where lm-eval puts them (`--output_path out/` -> out/<model name sanitized>/
    results_<time>.json; none without --output_path) and, when `pretrained` is a run directory, its scores
    are merged into the run's result.json as slm-eval merges them (eval.lm_eval: scores, metrics,
    details, results_file), unless SLM_LM_EVAL_NO_RECORD=1;
  * quiet logs: lm-eval's lookup of a git commit for its results file prints no "fatal: not a git
    repository", and when stderr is not a terminal each progress bar is one plain line (slm.plain_progress).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

import yaml

from slm.bad_input import describe, fail
from slm.cli.config import full_errors
from slm.pipes import quiet_on_closed_pipe

PROG = "slm-lm-eval"
DEFAULT_MODEL = "slm"


def _subparsers(cli) -> dict[str, argparse.ArgumentParser]:
    """lm-eval's subcommand parsers (run, ls, validate)."""
    action = next((a for a in cli._parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if action is None or "run" not in action.choices:
        raise RuntimeError("lm-eval's command line has no `run` subcommand: this lm_eval version is not supported")
    return action.choices


def _keep_paths_whole(run_parser: argparse.ArgumentParser) -> None:
    """Make --model_args parse key=value strings by slm.eval.lm_args (paths with commas kept whole); a JSON
    object is still lm-eval's."""
    from lm_eval._cli.utils import handle_cli_value_string, try_parse_json

    from slm.eval.lm import model_arg_names
    from slm.eval.lm_args import parse_model_args

    action = next((a for a in run_parser._actions if a.dest == "model_args"), None)
    if action is None:
        raise RuntimeError("lm-eval's `run` has no --model_args: this lm_eval version is not supported")

    class ModelArgs(type(action)):
        def __call__(self, parser, namespace, values, option_string=None):
            if not values or isinstance(try_parse_json(values[0]), dict):
                return super().__call__(parser, namespace, values, option_string)
            current = dict(getattr(namespace, self.dest, None) or {})
            for value in values:
                try:
                    current.update(parse_model_args(value, model_arg_names, handle_cli_value_string))
                except ValueError as err:
                    parser.error(f"argument {option_string or self.dest}: {err}")
            setattr(namespace, self.dest, current)

    action.__class__ = ModelArgs


def _config_file(args: argparse.Namespace) -> dict:
    """The --config YAML (lm-eval merges it under the flags), or {}."""
    path = getattr(args, "config", None)
    if not path:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return {}  # lm-eval reports it
    return data if isinstance(data, dict) else {}


def _as_list(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [piece for piece in value.split(",") if piece]
    return [str(v) for v in value]


def _check_model(model_args: dict, device: str | None) -> None:
    """What SLMLM will load, checked now (before lm-eval indexes tasks): the run or checkpoint directory,
    its config and weights header against free memory, that the model scores every position, the tokenizer.
    Raises ValueError / FileNotFoundError (one line)."""
    from slm.eval.lm import load_eval_tokenizer, resolve_device, resolve_model_dir
    from slm.model.networks import NETWORKS
    from slm.model.weights import check_checkpoint

    pretrained = model_args.get("pretrained")
    if not pretrained:
        raise ValueError("--model_args needs pretrained=<run directory or checkpoint directory>")
    model_dir = resolve_model_dir(str(pretrained))
    kind = check_checkpoint(model_dir, *resolve_device(model_args.get("device") or device,
                                                       str(model_args.get("dtype", "auto")))).kind
    if not NETWORKS.get(kind).every_position:
        raise ValueError(f"{model_dir}: model.kind={kind!r} predicts only the token after one whole window; "
                         "lm-eval needs a model that scores every position")
    load_eval_tokenizer(model_args.get("tokenizer") or model_dir)


@contextlib.contextmanager
def _swapped(module, name: str, value):
    """module.name = value for the duration (lm-eval looks these up when `run` executes)."""
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def _capturing_tracker(sink: dict):
    """An EvaluationTracker that also hands the results it saves, and the file it wrote, to `sink`."""
    from lm_eval.loggers import EvaluationTracker

    class Tracker(EvaluationTracker):
        def save_results_aggregated(self, results: dict, samples: dict | None = None) -> None:
            super().save_results_aggregated(results=results, samples=samples)
            sink["results"] = results
            date_id = getattr(self, "date_id", None)
            if self.output_path and date_id:
                path = Path(self.output_path)
                written = (path.with_name(f"{path.stem}_{date_id}.json") if path.suffix == ".json" else
                           path / str(self.general_config_tracker.model_name_sanitized) / f"results_{date_id}.json")
                sink["file"] = written if written.is_file() else None

    return Tracker


def _offline_index():
    """A TaskManager class that indexes the include paths only (the offline tasks), not lm-eval's own."""
    from lm_eval.tasks import TaskManager

    class OfflineIndex(TaskManager):
        def __init__(self, *args, include_defaults: bool = True, **kwargs):
            super().__init__(*args, include_defaults=False, **kwargs)

    return OfflineIndex


def _record(prog: str, pretrained: str, tasks: list[str], captured: dict) -> None:
    """Merge the scores of the tasks asked for into <run>/result.json, as slm-eval does."""
    from slm.cli.eval import _record as record_scores
    from slm.cli.eval import run_directory, suite_metrics
    from slm.eval.spec import EvalSpec
    from slm.eval.summary import summarize

    run_dir = run_directory(Path(pretrained).expanduser())
    results = captured.get("results")
    if run_dir is None or not results or os.environ.get("SLM_LM_EVAL_NO_RECORD") == "1":
        return
    groups = results.get("group_subtasks") or {}

    def leaves(name: str) -> list[str]:  # a group's own entry (if it has scores) and its tasks'
        return [name, *(t for sub in groups.get(name, []) for t in leaves(sub))]

    scored = results.get("results", {})
    requested = list(dict.fromkeys(t for name in tasks for t in leaves(name) if t in scored)) or list(scored)
    requested = [t for t in requested if t not in groups or any("," in k for k in scored[t])]
    limit = (results.get("config") or {}).get("limit")
    if isinstance(limit, float) and limit.is_integer():  # --limit is parsed as a float: 4.0 documents
        limit = int(limit)
    summary = summarize(results, EvalSpec(tasks=requested, metrics=suite_metrics(), limit=limit))
    written = captured.get("file")
    if written is not None:
        inside = written.resolve().is_relative_to(run_dir.resolve())
        summary["results_file"] = os.path.relpath(written, run_dir) if inside else str(written.resolve())
    else:
        summary["results_file"] = None
    record_scores(run_dir, summary, prog=prog)


@quiet_on_closed_pipe
def main(argv: list[str] | None = None, prog: str = PROG) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    from lm_eval._cli import HarnessCLI
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import setup_logging

    import slm.eval.lm  # registers the `slm` model with lm-eval
    from slm.data.errors import DataError
    from slm.eval import TASKS_DIR, hub_tasks
    from slm.eval.run import quiet_git_lookup  # importing slm.eval.run also quiets lm-eval's custom_dataset notice
    from slm.model.weights import CheckpointError
    from slm.plain_progress import plain_stderr

    def error(err: BaseException) -> None:
        if full_errors():
            raise err
        fail(prog, describe(err))

    setup_logging()
    cli = HarnessCLI()
    cli._parser.prog = prog
    for name, sub in _subparsers(cli).items():
        sub.prog = f"{prog} {name}"
    _keep_paths_whole(_subparsers(cli)["run"])
    saved = sys.argv
    sys.argv = [prog, *argv]
    try:
        args = cli.parse_args()
    finally:
        sys.argv = saved

    config = _config_file(args)
    extra = getattr(args, "include_path", None) or config.get("include_path") or []
    include = [str(TASKS_DIR), *([extra] if isinstance(extra, str) else map(str, extra))]
    if hasattr(args, "include_path"):
        args.include_path = include
    if getattr(args, "command", None) != "run":
        cli.execute(args)
        return

    if not args.model and not config.get("model"):
        args.model = DEFAULT_MODEL
    model = args.model or config.get("model")
    model_args = dict(config.get("model_args") or {}) if isinstance(config.get("model_args"), dict) else {}
    model_args.update(args.model_args or {})
    tasks = _as_list(args.tasks) or _as_list(config.get("tasks"))
    try:
        if model == DEFAULT_MODEL:
            _check_model(model_args, args.device or config.get("device"))
        local = TaskManager(include_path=include, include_defaults=False)
        hub_tasks.check(tasks, local)
    except (ValueError, FileNotFoundError, DataError) as err:  # CheckpointError is a ValueError
        error(err)

    captured: dict = {}
    only_offline = bool(tasks) and all(t in local.all_tasks for t in tasks)
    import lm_eval.loggers
    import lm_eval.tasks

    with contextlib.ExitStack() as stack:
        stack.enter_context(quiet_git_lookup())
        stack.enter_context(plain_stderr())
        stack.enter_context(_swapped(lm_eval.loggers, "EvaluationTracker", _capturing_tracker(captured)))
        if only_offline:
            stack.enter_context(_swapped(lm_eval.tasks, "TaskManager", _offline_index()))
        try:
            cli.execute(args)
        except (CheckpointError, FileNotFoundError, DataError, ConnectionError, ValueError) as err:
            error(err)
    if model == DEFAULT_MODEL and model_args.get("pretrained"):
        _record(prog, str(model_args["pretrained"]), tasks, captured)


if __name__ == "__main__":
    main()
