"""`slm-eval <run dir or checkpoint> [--tasks ...]`: score a model with lm-eval, write lm-eval's results
JSON and merge the scores (and batch-1 decode speed) into the run's result.json.

    slm-eval runs/train/default                                  # the offline suite (conf/eval/offline.yaml)
    slm-eval runs/train/default --tasks study7 --batch_size 32   # the study's seven benchmarks (hub)
    slm-eval ckpt/tiny-llama --tasks hellaswag,piqa --limit 100 --num_fewshot 0 --no_throughput

--tasks takes suite names (a file in conf/eval: offline, study7, toolcall) and lm-eval task or group names, space or
comma separated; a task's headline score is the metric the suites name for it (else its first metric).
The other flags mirror `lm_eval run`: num_fewshot, batch_size, limit, output_path (a directory, or a
.json file), include_path, device, gen_kwargs, seed, log_samples; plus dtype, the throughput switches
(--no_throughput, --compile), --no_record, and --model_args for the `slm` lm-eval model (e.g.
tokenizer=<dir>, tokenizer=gpt2 (the shipped GPT-2 BPE), max_length=512, prefix_sharing=False; a path
there may hold commas, see slm.eval.lm_args).

Bad input is one line on stderr, `slm-eval: error: <what, naming the file>`, and exit code 2 (a traceback
only with HYDRA_FULL_ERROR=1), before anything is scored or written: a negative --num_fewshot, a --limit that is
not a finite number > 0, --device cuda where no GPU is visible; no such run, unknown task, a hub task while
offline; a config.json that is not
valid JSON or ModelConfig fields, or does not match model.safetensors; weights that are not safetensors (a
pickle); a model too large for the memory available (checked from its parameter count before anything is
allocated); a disk that is full when a results file is written (each is written atomically, so what was
there is kept). A result.json that cannot be read or written is reported after the scoring ran: lm-eval's
results file holds the scores, result.json is left untouched, and the exit code is still 2.
lm-eval's own CLI can run the `slm` model too: `slm-lm-eval --model slm --model_args pretrained=<run>
--tasks slm_offline` (or `python -m slm.eval run ...`; see slm/cli/lm_eval.py).
"""

from __future__ import annotations

import argparse
import ast
import math
import os
import sys
from pathlib import Path

import yaml

from slm.bad_input import OneLineParser, describe, fail
from slm.cli.config import CONF_DIR, full_errors
from slm.runs.record import RESULT_FILE, load_record, update_record
from slm.pipes import quiet_on_closed_pipe

PROG = "slm-eval"
SUITES_DIR = CONF_DIR / "eval"


def _key_values(items: list[str] | None, what: str) -> dict:
    """key=value pairs (comma or space separated), values parsed as Python literals when they are ones."""
    out = {}
    for item in (piece for arg in items or [] for piece in arg.split(",") if piece):
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(PROG, f"{what}: expected key=value, got {item!r}")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def _model_args(items: list[str] | None) -> dict:
    """--model_args: key=value pairs (comma or space separated) whose path values may hold commas
    (slm.eval.lm_args)."""
    from slm.eval.lm_args import parse_model_args

    def names() -> frozenset[str]:  # loads lm-eval and torch: only for a path value that names nothing on disk
        from slm.eval.lm import model_arg_names

        return model_arg_names()

    out = {}
    for item in items or []:
        try:
            out.update(parse_model_args(item, names))
        except ValueError as err:
            fail(PROG, f"--model_args: {err}")
    return out


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog=PROG, description="Score an slm run or checkpoint with lm-evaluation-harness and "
                      "merge the scores into the run's result.json.")
    p.add_argument("path", type=Path, help="run directory (with result.json and model/) or checkpoint directory: "
                   "a path, or a run under $SLM_RUNS (default runs/), or a run group of one run")
    p.add_argument("--tasks", "-t", nargs="+", default=["offline"],
                   help="suites (conf/eval/<name>.yaml: offline, study7, toolcall) and lm-eval tasks (default: offline)")
    p.add_argument("--num_fewshot", "-f", type=int, default=None, help="few-shot examples (default: each task's)")
    p.add_argument("--batch_size", "-b", type=int, default=None,
                   help="requests per forward (default: the suite's, else 16)")
    p.add_argument("--limit", "-L", type=float, default=None, help="documents per task (a fraction if < 1)")
    p.add_argument("--output_path", "-o", type=Path, default=None,
                   help="directory or .json file for lm-eval's results (default: <run>/eval/)")
    p.add_argument("--include_path", action="append", default=[], help="another directory of task YAMLs")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    p.add_argument("--dtype", default=None, choices=["auto", "float32", "bfloat16", "float16"],
                   help="model dtype (default: auto = bfloat16 on CUDA, float32 on CPU)")
    p.add_argument("--gen_kwargs", nargs="+", default=None, help="generation overrides, e.g. temperature=0")
    p.add_argument("--model_args", "-a", nargs="+", default=None,
                   help="more `slm` model options, e.g. tokenizer=<dir> max_length=512 prefix_sharing=False")
    p.add_argument("--seed", type=int, default=1234, help="python/numpy/torch/fewshot seed")
    p.add_argument("--compile", action="store_true", help="torch.compile the decode step of the throughput "
                   "measurement (CPU: several times faster for small models; compiling takes a minute)")
    p.add_argument("--log_samples", "-s", action="store_true", help="also write every sample (…_samples.jsonl)")
    p.add_argument("--throughput", dest="throughput", action="store_true", default=None,
                   help="measure batch-1 decode speed (default: the suite's setting, else on)")
    p.add_argument("--no_throughput", dest="throughput", action="store_false", help="skip the decode measurement")
    p.add_argument("--no_record", action="store_true", help="do not touch result.json")
    return p.parse_args(argv)


def load_suite(name: str) -> dict | None:
    """The `eval` config node conf/eval/<name>.yaml, or None if there is no such suite."""
    path = SUITES_DIR / f"{name}.yaml"
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def suite_metrics() -> dict[str, str]:
    """The headline metric of every task that a suite (conf/eval/*.yaml) names: the same in every suite."""
    metrics: dict[str, str] = {}
    for path in sorted(SUITES_DIR.glob("*.yaml")):
        metrics.update((yaml.safe_load(path.read_text()) or {}).get("metrics") or {})
    return metrics


def build_spec(args: argparse.Namespace):
    """EvalSpec from the flags: suites expand into their tasks, metrics and average; settled, and what it names
    checked here (slm.eval.checks.check_available), or one line and exit 2."""
    from slm.eval import RENAMED_TASKS
    from slm.eval.checks import check_available

    names = [piece for arg in args.tasks for piece in arg.split(",") if piece]
    for old in [n for n in names if n in RENAMED_TASKS]:
        print(f"{PROG}: task {old} is now called {RENAMED_TASKS[old]}; scoring that", file=sys.stderr)
    names = [RENAMED_TASKS.get(n, n) for n in names]
    try:  # a suite's settings, the flags' (num_fewshot, device, ...): refused before anything loads or is written
        spec = _spec(args, names)
        check_available(spec)
    except ValueError as err:
        fail(PROG, str(err))
    return spec


def _spec(args: argparse.Namespace, names: list[str]):
    """The settled EvalSpec of the suites and tasks `names` and the flags."""
    from slm.eval.spec import EvalSpec, spec_from_config, whole_limit

    spec = EvalSpec()
    spec.metrics.update(suite_metrics())
    for name in names:
        node = load_suite(name)
        if node is None:
            if name not in spec.tasks:
                spec.tasks.append(name)
            continue
        suite = spec_from_config(node, name)
        spec.tasks += [t for t in suite.tasks if t not in spec.tasks]
        spec.metrics.update(suite.metrics)
        spec.average.update(suite.average)
        for attr in ("num_fewshot", "limit", "device"):
            if getattr(suite, attr) is not None and getattr(spec, attr) is None:
                setattr(spec, attr, getattr(suite, attr))
        spec.batch_size, spec.dtype, spec.throughput = suite.batch_size, suite.dtype, suite.throughput
    if args.num_fewshot is not None:
        spec.num_fewshot = args.num_fewshot
    if args.batch_size is not None:
        if args.batch_size < 1:
            fail(PROG, f"--batch_size {args.batch_size}: must be >= 1")
        spec.batch_size = args.batch_size
    if args.limit is not None:
        if not math.isfinite(args.limit) or args.limit <= 0:
            fail(PROG, f"--limit {args.limit}: limit must be a finite number > 0 (documents per task, a fraction "
                 "if < 1)")
        spec.limit = whole_limit(args.limit)
    for attr in ("device", "dtype"):
        if getattr(args, attr) is not None:
            setattr(spec, attr, getattr(args, attr))
    if args.throughput is not None:
        spec.throughput.enabled = args.throughput
    for path in args.include_path:
        if not Path(path).is_dir():
            fail(PROG, f"--include_path {path}: no such directory")
    spec.include_path = list(args.include_path)
    spec.gen_kwargs = _key_values(args.gen_kwargs, "--gen_kwargs") or None
    spec.model_args = _model_args(args.model_args)
    spec.seed, spec.log_samples = args.seed, args.log_samples
    spec.throughput.compile = spec.throughput.compile or args.compile
    spec.settle("eval")  # the flags' values checked as the suite's were
    return spec


def _print(summary: dict) -> None:
    from lm_eval.utils import make_table

    if "results" in summary:
        print(make_table(summary["results"]))
        if summary["results"].get("groups"):
            print(make_table(summary["results"], "groups"))
        from slm.eval.score_lines import score_lines

        for line in score_lines(summary):  # each headline named by its metric, bounds and chance said
            print(line)
        print(f"results: {summary['results_file']}")
    if "throughput" in summary:
        t = summary["throughput"]
        print(f"decode (batch 1, {t['device']}, {t['dtype']}): {t['decode_tokens_per_s']:.1f} tokens/s, "
              f"time to first token {1000 * t['time_to_first_token_s']:.1f} ms")


def run_directory(path: Path) -> Path | None:
    """The run directory of `path` (a run, or its model/ directory), or None for a bare checkpoint (or a file)."""
    if not path.is_dir():
        return None
    for candidate in (path, path.parent):
        if (candidate / RESULT_FILE).is_file() and (candidate / "model").is_dir():
            return candidate
    return None


def _record(run_dir: Path, summary: dict, prog: str = PROG) -> None:
    """Merge the summary into <run>/result.json; a record that cannot be read or written is left as it is
    and named in one line (exit 2), after the scores went to lm-eval's results file."""
    from slm.eval.summary import eval_section

    record_file = run_dir / RESULT_FILE
    saved = summary.get("results_file")
    kept = (f"the scores were written to lm-eval's results file {run_dir / saved} only" if saved
            else "nothing was recorded")
    try:
        record = load_record(run_dir) or {}  # RecordError (`<path>: <reason>`) for a file that is not a record
    except ValueError as err:
        if full_errors():
            raise
        reason = str(err).removeprefix(f"{record_file}: ")
        fail(prog, f"{record_file} is unreadable: {reason}; it was left as it is and {kept}; repair or restore it, "
              f"then run {prog} again")
    try:
        update_record(run_dir, eval=eval_section(summary, record.get("eval")))
    except OSError as err:
        if full_errors():
            raise
        reason = os.strerror(err.errno) if err.errno else describe(err)  # e.g. "No space left on device"
        fail(prog, f"cannot write {record_file}: {reason}; it was left as it was and {kept}")
    print(f"{record_file}: eval updated")


@quiet_on_closed_pipe
def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    from slm.cli.paths import resolve_run
    from slm.eval.run import evaluate

    args.path = resolve_run(args.path, PROG)  # a path, or a run (group) under $SLM_RUNS; else one line, exit 2

    run_dir = run_directory(args.path)
    try:
        summary = evaluate(run_dir or args.path, build_spec(args), output_path=args.output_path)
    except (ValueError, OSError) as err:  # EvalError, CheckpointError, FileNotFoundError, a full disk, ...
        if full_errors():
            raise
        fail(PROG, describe(err))
    _print(summary)
    if run_dir is not None and not args.no_record:
        _record(run_dir, summary)


if __name__ == "__main__":
    main()
