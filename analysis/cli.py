"""Console entry points of the analysis (they live here, not in slm/cli: slm never imports analysis).

    slm-collect runs/cpu_default [more dirs] -o results.parquet     # result.json files -> one table
    slm-plot --kind pareto results.parquet -o plots/                 # one plot (PNG + SVG)
    slm-plot --kind all results.parquet -o plots/                    # every kind that has data
    slm-report results.parquet -o report/                            # report.md + report.html + figures/
    slm-ladder runs/ladder_table1 -o report/2512.20877              # arXiv 2512.20877 side by side
    slm-lr-transfer runs/lr_transfer_width runs/lr_transfer_depth -o out   # best lr per shape, loss-vs-lr
    slm-compare runs/a runs/b --task slm_shakespeare_mc                # paired: B - A per task, McNemar
    slm-fit runs/cpu_scaling -o fit                                   # L(N, D) fit, compute-optimal N, D
    slm-plan gpu_hours=184 gpu=v100 n_gpus=8 params=40e6              # tokens, loss, N*, D* for a budget

RESULTS may also be a runs directory (collected on the fly). Bad input (no such path, no runs found, an
unknown column or plot kind, a damaged file: analysis.readers.BadFile names it and what is wrong) is one line
on stderr, `<prog>: error: ...`, and exit code 2; warnings (an unreadable result.json, skipped; a plot that
failed) are `<prog>: warning: ...` lines. A plot without data for it is not drawn: slm-plot and slm-report say
how many were drawn and name each one not drawn, with why, in one line.
"""

from __future__ import annotations

import functools
import logging
import sys
from pathlib import Path

from slm.bad_input import OneLineParser, fail, whole_number  # standard library only: no Hydra, no torch
from slm.pipes import quiet_on_closed_pipe


def _logging(prog: str, verbose: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{prog}: %(levelname_lower)s: %(message)s"))
    handler.addFilter(_LowerLevel())
    root = logging.getLogger("analysis")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    root.propagate = False


class _LowerLevel(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.levelname_lower = record.levelname.lower()
        return True


RESULTS = ("results table (.parquet/.csv from slm-collect) or a runs directory (or a run group under $SLM_RUNS: "
           "cpu_default)")
"""The help of a command's one results argument (results="one")."""
MANY_RESULTS = "results tables (.parquet/.csv from slm-collect) or runs directories"
"""The help of a command's results arguments (results="many": read as one table)."""


def _where(prog: str, arg: str, what: str = "results table or runs directory") -> str:
    """The path `arg` names (slm.runs.paths: itself, else a run group or run under $SLM_RUNS), or one line and
    exit 2 with the closest names."""
    from slm.runs.paths import RunPathError, find_path, find_run

    try:
        return str(find_run(arg) if what == "run" else find_path(arg, what))
    except RunPathError as err:
        fail(prog, str(err))


def _output_file(prog: str, flag: str, out: str | None) -> None:
    """One line and exit 2 where `out` cannot be written as a file (an existing directory, a parent that is a file):
    checked before the work, so nothing is written."""
    if out is None:
        return
    path = Path(out)
    if path.is_dir():
        fail(prog, f"{flag} {out}: is a directory; name a file to write (e.g. {path / 'out.md'})")
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        fail(prog, f"{flag} {out}: {parent} is a file, not a directory")


def _output_dir(prog: str, flag: str, out: str | None, holds: str = "the figures", parents: bool = True) -> None:
    """One line and exit 2 where `out` cannot be a directory (for `holds`): an existing file, or with `parents` one
    above it; checked before the work."""
    if out is None:
        return
    path = Path(out)
    blocking = next((p for p in (path, *(path.parents if parents else ())) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        fail(prog, f"{flag} {out}: {'exists' if blocking == path else f'{blocking} exists'} and is not a directory; "
             f"name a directory for {holds} (it is created if missing)")


class _Command:
    """What every analysis command shares: the parser preamble (its name, its description, the results it reads,
    -v last), the outputs it writes (checked as it parses, before any work, so bad input writes nothing), its
    logging, its loader (results -> one table) and its one-line failure. A command adds only its own arguments."""

    def __init__(self, prog: str, description: str | None = None, results: str | None = None,
                 verbose: bool = False):
        self.prog, self.verbose, self.outputs = prog, verbose, []
        self.parser = OneLineParser(prog=prog, description=description)
        if results is not None:  # "one" or "many"
            self.parser.add_argument("results", nargs="+" if results == "many" else None,
                                     help=MANY_RESULTS if results == "many" else RESULTS)

    def add(self, *flags, **kwargs) -> None:
        """An argument of the command's own (argparse's add_argument)."""
        self.parser.add_argument(*flags, **kwargs)

    def output(self, *flags, holds: str | None = None, parents: bool = True, **kwargs) -> None:
        """An output argument: a file to write, or with `holds` a directory (for what it holds; created if missing);
        parse() checks it (_output_file, _output_dir)."""
        dest = self.parser.add_argument(*flags, **kwargs).dest
        self.outputs.append((flags[0], dest, holds, parents))

    def parse(self, argv: list[str] | None):
        """The arguments (-v added last where the command has it), logging set up, the outputs checked."""
        if self.verbose:
            self.parser.add_argument("-v", "--verbose", action="store_true", help="also print info lines")
        args = self.parser.parse_args(argv)
        _logging(self.prog, getattr(args, "verbose", False))
        for flag, dest, holds, parents in self.outputs:
            if holds is None:
                _output_file(self.prog, flag, getattr(args, dest))
            else:
                _output_dir(self.prog, flag, getattr(args, dest), holds, parents)
        return args

    def fail(self, message: str):
        """One line on stderr, `<prog>: error: <message>`, and exit 2."""
        fail(self.prog, message)

    def where(self, arg: str, what: str = "results table or runs directory") -> str:
        """The path `arg` names (_where), or one line and exit 2."""
        return _where(self.prog, arg, what)

    def load(self, results: str | list[str], check: bool = False):
        """The results table at `results` (a table file or a runs directory; several: one table), or one line and
        exit 2: a file that is not a results table (analysis.readers.BadFile names it and what is wrong), no runs in
        it, or with `check` not the columns a report needs (analysis.report.check_table)."""
        if isinstance(results, list):
            import pandas as pd

            return pd.concat([self.load(path) for path in results], ignore_index=True)
        from analysis.collect import load_results

        path = self.where(results)
        try:
            table = load_results(path)
        except (FileNotFoundError, ValueError, OSError) as err:
            self.fail(f"{path}: {err}" if str(path) not in str(err) else str(err))
        if table.empty:
            self.fail(f"{path}: no runs in it" + (" (no result.json files and no Hydra job folders under it)"
                                                  if Path(path).is_dir() else ""))
        if check:
            from analysis.report import check_table

            try:
                check_table(table)
            except ValueError as err:
                self.fail(f"{results}: {err}")
        return table

    def print_and_write(self, text: str, out: str | None) -> None:
        """Print `text`; with `out` (checked by parse), also write it there (atomically) and say so."""
        print(text, end="")
        if out:
            from slm.runs.record import write_text_atomic

            Path(out).parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(Path(out), text)
            print(f"{self.prog}: wrote {out}")


def _command(prog: str, description=None, results: str | None = None, verbose: bool = False):
    """Decorator of a command `body(cmd, argv)` (cmd: its _Command; `description` a string or a function that makes
    it when the command runs): its entry point `main(argv)`, which ends quietly when its reader goes
    (slm.pipes.quiet_on_closed_pipe) and ends on a file it reads that cannot be used (analysis.readers.BadFile, one
    line naming the file and what is wrong) as bad input, `<prog>: error: <path>: ...`, exit 2."""

    def wrap(body):
        @quiet_on_closed_pipe
        def quiet(argv):
            text = description() if callable(description) else description
            return body(_Command(prog, text, results, verbose), argv)

        @functools.wraps(body)
        def main(argv: list[str] | None = None) -> None:
            from analysis.readers import BadFile

            try:
                return quiet(argv)
            except BadFile as err:
                fail(prog, str(err))
        main.quiet_on_closed_pipe = True
        return main
    return wrap


@_command("slm-collect", "Collect every run's result.json under the given directories into one table (one row per "
          "run; unfinished, failed and not-started jobs included with their status).", verbose=True)
def collect_main(cmd: _Command, argv: list[str] | None = None) -> None:
    cmd.add("paths", nargs="+", help="run directories, sweep directories (walked), or result.json files; a name under "
            "$SLM_RUNS (default runs/) will do: cpu_default")
    cmd.add("-o", "--output", default="results.parquet",
            help="output table: .parquet (default: results.parquet) or .csv")
    args = cmd.parse(argv)
    from analysis.collect import collect, save_results

    if Path(args.output).suffix.lower() not in (".parquet", ".pq", ".csv", ".json"):
        cmd.fail(f"--output {args.output}: expected a .parquet or .csv file name")
    _output_file(cmd.prog, "--output", args.output)
    paths = [cmd.where(path, "run, run group or result.json") for path in args.paths]
    try:
        table = collect(paths, progress=_Progress(cmd.prog, label="read", unit="records", after=10.0,
                                                  first=f"{cmd.prog}: reading the runs' records"))
    except FileNotFoundError as err:
        cmd.fail(str(err))
    if table.empty:
        cmd.fail(f"no runs found under {', '.join(paths)}: no result.json files and no Hydra job folders")
    path = save_results(table, args.output)
    summary = ", ".join(f"{n} {s}" for s, n in table["status"].value_counts().items())
    print(f"{cmd.prog}: {len(table)} run{'' if len(table) == 1 else 's'} ({summary}) -> {path}")


@_command("slm-plot", "Draw the study's plots (PNG and SVG) from a results table.", results="one", verbose=True)
def plot_main(cmd: _Command, argv: list[str] | None = None) -> None:
    from analysis.plots import KINDS

    cmd.add("--kind", "-k", default="all", choices=[*KINDS, "all"], help="which plot (default: all)")
    cmd.output("-o", "--out-dir", default="plots", help="output directory (default: plots)", holds="the figures")
    cmd.add("--score", default=None, help="score column (e.g. score_hellaswag, avg_study7, val_nll); default: the "
            "suite average, else the first task score, else val_nll")
    cmd.add("--format", default="png,svg", help="comma-separated formats (default: png,svg)")
    args = cmd.parse(argv)
    from analysis.plots import draw, drawn_line
    from analysis.study import analyse

    table = cmd.load(args.results, check=True)
    formats = [f.strip().lower() for f in args.format.split(",") if f.strip()]
    if not formats or any(f not in ("png", "svg", "pdf") for f in formats):
        cmd.fail(f"--format {args.format}: choose among png, svg, pdf")
    if args.score and args.score not in table:
        from analysis.metrics import score_columns

        cmd.fail(f"--score {args.score}: no such column; the results have: "
                 f"{', '.join(score_columns(table)) or 'none'}")
    kinds = KINDS if args.kind == "all" else [args.kind]
    study = analyse(table, args.score)  # each statistic once, as the report computes it
    not_drawn = {}
    for kind in kinds:
        kwargs = {"score": study.score} if study.score and kind in ("tiers", "threshold", "throughput", "heatmap",
                                                                      "lr") else {}
        if kind == "tiers" and study.score:
            kwargs["result"] = study.tiers()
        if kind == "threshold" and study.score and study.threshold() is not None:
            kwargs["result"] = study.threshold()
        fig, paths = draw(kind, table, args.out_dir, formats, **kwargs)
        if paths:
            print(f"{cmd.prog}: {kind}: {', '.join(str(p) for p in paths)}")
        else:
            not_drawn[kind] = fig.slm_placeholder
    print(f"{cmd.prog}: {drawn_line(not_drawn, len(kinds))}")


@_command("slm-report", "Write the Markdown and HTML report (tables, tiers, threshold, best per family, Pareto "
          "frontier, the plots that have data) from a results table.", results="one", verbose=True)
def report_main(cmd: _Command, argv: list[str] | None = None) -> None:
    cmd.output("-o", "--out-dir", default="report", help="output directory (default: report)", holds="the report",
               parents=False)  # a file above it: write_report's OSError says so
    cmd.add("--score", default=None, help="score column (default: as slm-plot)")
    cmd.add("--title", default="slm results", help="report title")
    args = cmd.parse(argv)
    from analysis.plots import drawn_line
    from analysis.report import write_report

    results = cmd.where(args.results)
    table = cmd.load(results, check=True)
    if args.score and args.score not in table:
        cmd.fail(f"--score {args.score}: no such column in {results}")
    try:
        path, not_drawn = write_report(results, args.out_dir, score=args.score, title=args.title, table=table)
    except OSError as err:  # a parent that is a file, a read-only directory, a full disk
        reason = err.strerror or str(err)
        cmd.fail(f"-o {args.out_dir}: cannot write the report there ({err.filename or args.out_dir}: {reason})")
    print(f"{cmd.prog}: wrote {path.with_name('report.md')} and {path}")
    print(f"{cmd.prog}: {drawn_line(not_drawn)}")
    from analysis.too_short import warning as too_short

    short = too_short(table)
    if short:  # the verdict's first line, on the console too (the README's 20-step first look)
        print(f"{cmd.prog}: warning: {short.replace('**', '')}")


@_command("slm-ladder", "arXiv 2512.20877 side by side: the ladder runs' test NLL next to the paper's published "
          "numbers, and test NLL against training FLOPs (ladder.md + figures/).", results="one")
def ladder_main(cmd: _Command, argv: list[str] | None = None) -> None:
    cmd.output("-o", "--out-dir", default="report/2512.20877", help="output directory",
               holds="ladder.md and its figures")
    args = cmd.parse(argv)
    from analysis.ladder import write

    table = cmd.load(args.results)
    if "test_nll" not in table or table["test_nll"].isna().all():
        cmd.fail(f"{args.results}: no run with a test NLL (train the arxiv2512_* sweeps: make reproduce-2512)")
    path = write(table, args.out_dir)
    print(path.read_text())
    print(f"{cmd.prog}: wrote {path} and {Path(args.out_dir) / 'figures' / 'ladder_nll_flops.png'}")


@_command("slm-lr-transfer", "Learning-rate transfer: for each run group that sweeps train.lr against d_model or "
          "n_layers, the best learning rate per shape and parametrization, how far it moves, and loss-against-lr "
          "figures (lr_transfer.md + figures/).", results="many")
def lr_transfer_main(cmd: _Command, argv: list[str] | None = None) -> None:
    cmd.output("-o", "--out-dir", default="lr_transfer", help="output directory (default: lr_transfer)",
               holds="lr_transfer.md and its figures")
    args = cmd.parse(argv)
    from analysis.lr_transfer import write

    table = cmd.load(args.results)
    try:
        path = write(table, args.out_dir)
    except ValueError as err:
        cmd.fail(f"{', '.join(args.results)}: {err}")
    print(path.read_text())
    print(f"{cmd.prog}: wrote {path} and its figures in {Path(args.out_dir) / 'figures'}")


@_command("slm-compare", "Paired comparison of two runs on the same lm-eval documents, per task: each run's score, "
          "B - A with a paired bootstrap 95% interval, McNemar's exact test (0/1 metrics) or a paired t-test, and a "
          "verdict at 5% (analysis/paired.py). It answers whether these two trained models differ on these "
          "documents; whether their architectures differ needs seeds (slm-report).")
def compare_main(cmd: _Command, argv: list[str] | None = None) -> None:
    cmd.add("run_a", help="run directory A (its result.json names its per-document results), or a run under "
            "$SLM_RUNS (default runs/): group/key")
    cmd.add("run_b", help="run directory B")
    cmd.add("--task", action="append", default=None,
            help="task to compare (repeat or comma-separate; default: the tasks the evaluations asked for)")
    cmd.add("--metric", default=None, help="metric, e.g. acc or acc_norm,none (default: each task's headline metric)")
    cmd.add("--draws", type=int, default=2000, help="bootstrap draws (default: 2000, at least 100)")
    cmd.add("--seed", type=int, default=0, help="bootstrap seed (default: 0)")
    cmd.add("--json", action="store_true", help="print the results as JSON")
    args = cmd.parse(argv)
    import json

    from analysis.paired import PairedError, compare_runs, format_table

    if args.draws < 100:
        cmd.fail(f"--draws {args.draws}: must be >= 100")
    tasks = [t for arg in args.task or [] for t in arg.split(",") if t]
    run_a, run_b = cmd.where(args.run_a, "run"), cmd.where(args.run_b, "run")
    try:
        results, refused = compare_runs(run_a, run_b, tasks or None, args.metric, args.draws, args.seed)
    except PairedError as err:
        cmd.fail(str(err))
    if not results:
        reasons = list(refused.values())
        cmd.fail(reasons[0] if len(reasons) == 1 else f"no task could be compared: {'; '.join(reasons)}")
    if args.json:
        print(json.dumps({"a": run_a, "b": run_b, "results": [r.as_dict() for r in results], "refused": refused},
                         indent=2))
    else:
        print(f"A: {run_a}\nB: {run_b}")
        print(format_table(results))
    for reason in refused.values():
        print(f"{cmd.prog}: warning: {reason}", file=sys.stderr)


class _Progress:
    """A long analysis's progress on stderr (slm-fit's bootstrap, slm-decide's redraws): one line redrawn on a
    terminal; elsewhere (a log, a pipe) a plain line at the start and at every 10% of the work, with counts and the
    time so far. `after`: seconds of quiet first, so a short analysis prints nothing (its last line only if one was)."""

    def __init__(self, prog: str, runs: int = 0, stream=None, label: str = "bootstrap", unit: str = "refits",
                 first: str | None = None, after: float = 0.0):
        import time

        self.prog, self.runs, self.stream, self.clock = prog, runs, stream or sys.stderr, time.monotonic
        self.label, self.unit, self.first, self.after, self.shown = label, unit, first, after, False
        self.started = self.clock()
        try:
            self.tty = bool(self.stream.isatty())
        except (AttributeError, ValueError):
            self.tty = False

    def __call__(self, done: int, total: int) -> None:
        step = max(1, total // 10)
        seconds = self.clock() - self.started
        if not self.shown and (seconds < self.after or (done == total and self.after)):
            return
        if not self.tty and done % step and done != total and self.shown:
            return
        if done == 0:
            line = self.first or f"{self.prog}: fitted {self.runs} runs; bootstrap: {total} refits on resampled runs"
        else:
            left = seconds / done * (total - done)
            line = (f"{self.prog}: {self.label} {done} of {total} {self.unit} ({done / total:.0%}), {seconds:.0f}s"
                    + (f", about {left:.0f}s left" if done < total else ""))
        self.shown = True
        if self.tty:
            end = "\n" if done in (0, total) else ""
            print(f"\r\033[K{line}", end=end, file=self.stream, flush=True)
        else:
            print(line, file=self.stream, flush=True)


@_command("slm-fit", "Scaling-law fit of the completed runs' validation NLL, L(N, D) = E + A/N^alpha + B/D^beta "
          "(Hoffmann et al. 2022's approach 3, as replicated by Besiroglu et al. 2024, and approach 2's IsoFLOP "
          "parabolas), bootstrap intervals over runs, the compute-optimal N and D; writes fit.json (slm-plan fit=...) "
          "and fit.png (analysis/fit.py, fit_output.py).", results="many")
def fit_main(cmd: _Command, argv: list[str] | None = None) -> None:
    cmd.output("-o", "--out-dir", default="fit", help="output directory for fit.json and fit.png (default: fit)",
               holds="fit.json and fit.png")
    cmd.add("--params", default="non_embedding", choices=["non_embedding", "total", "active"],
            help="N: params_non_embedding (default), params_total (Hoffmann et al.'s count) or params_active")
    cmd.add("--bootstrap", type=int, default=200, help="bootstrap draws (default: 200; 0: no intervals)")
    cmd.add("--keep", type=int, default=200, help="bootstrap draws kept in fit.json (default: 200)")
    cmd.add("--seed", type=int, default=0, help="bootstrap seed (default: 0)")
    cmd.add("--compute-tol", type=float, default=1.5,
            help="approach 2: a compute group holds runs within this factor of its smallest (default: 1.5)")
    args = cmd.parse(argv)
    from analysis.fit import FitError, fit, fit_data
    from analysis.fit_output import summary, write

    if args.bootstrap < 0 or args.keep < 0:
        cmd.fail(f"--bootstrap {args.bootstrap} --keep {args.keep}: must be >= 0")
    if not args.compute_tol > 1:
        cmd.fail(f"--compute-tol {args.compute_tol}: must be > 1")
    table = cmd.load(args.results)
    try:
        data = fit_data(table, args.params)
        result = fit(data, draws=args.bootstrap, seed=args.seed, tol=args.compute_tol, source=", ".join(args.results),
                     progress=_Progress(cmd.prog, len(data.L)) if args.bootstrap else None)
    except FitError as err:
        cmd.fail(f"{', '.join(args.results)}: {err}")
    path, png, content = write(result, args.out_dir, keep=args.keep)
    print(summary(result, content))
    print(f"{cmd.prog}: wrote {path} and {png}")


@_command("slm-plan")
def plan_main(cmd: _Command, argv: list[str] | None = None) -> None:
    from analysis.planning import USAGE, PlanError, format_plan, parse, plan

    argv = sys.argv[1:] if argv is None else list(argv)
    if any(arg in ("-h", "--help") for arg in argv):
        print(USAGE)
        return
    try:
        result = plan(parse(argv))
    except PlanError as err:
        cmd.fail(str(err))
    print(format_plan(result))


@_command("slm-claims", "slm's verdict on a depth x width study's claims (two tiers, a width threshold, an optimal "
          "depth, families within noise): each supported, not supported or not testable, with its statistic, at the "
          "shared lr and at each configuration's best lr (analysis/claims.py).", results="many")
def claims_main(cmd: _Command, argv: list[str] | None = None) -> None:
    cmd.add("--score", default="val_nll", help="score column (default: val_nll)")
    cmd.output("-o", "--out", default=None, help="also write the table to this Markdown file")
    args = cmd.parse(argv)
    import pandas as pd

    from analysis.claims import judge, markdown, seeds_summary, tokens_caution

    table = cmd.load(args.results)
    if args.score not in table or pd.to_numeric(table[args.score], errors="coerce").notna().sum() == 0:
        cmd.fail(f"--score {args.score}: no run in {', '.join(args.results)} has a value of it")
    caution = tokens_caution(table, args.score)
    text = f"{seeds_summary(table, args.score)}\n\n" + (f"{caution}\n\n" if caution else "") \
        + f"{markdown(judge(table, args.score))}\n"
    cmd.print_and_write(text, args.out)


def _forecast_target(prog: str, text: str | None) -> dict:
    """--forecast params=70e6 | flops=1e18 as forecast()'s keyword, or one line and exit 2."""
    if text is None:
        return {}
    name, _, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if name not in ("params", "flops") or not number > 0 or number == float("inf"):
        fail(prog, f"--forecast {text} is invalid: params=<parameters> or flops=<training FLOPs>, a positive number "
             "(e.g. params=70e6)")
    return {f"target_{name}": number}


def _decide_description() -> str:
    from analysis.decide_words import HELP

    return ("Decision accuracy of a ladder: per proxy and rung, how often two configurations are ordered as at the "
            "target rung, with bootstrap intervals over seeds, the noise ceiling and the cheapest rung that reaches "
            "--level (analysis/decide.py); the held-out forecast of the top rung and, with --forecast, each "
            "configuration's loss at a larger scale (analysis/forecast.py). " + HELP + " Progress goes to stderr "
            "when the redraws take a while.")


def _add_probes(cmd: _Command, judged, table, path: str, draws: int) -> None:
    """The probes sweep's proxies added to the ladder's decision (analysis.probes.add_to); bad input is one line."""
    from analysis.probes import add_to

    probes = cmd.load(path)
    try:
        add_to(judged.result, table, probes, draws)
    except ValueError as err:
        cmd.fail(f"--probes {path}: {err}")


@_command("slm-decide", _decide_description, results="many")
def decide_main(cmd: _Command, argv: list[str] | None = None) -> None:
    from slm.metrics import read_averaged, read_part_way

    proxies = ", ".join(["val_nll", "val_bpb", *(m.name for m in (*read_averaged(), *read_part_way()))])
    cmd.add("--config", default=None, help="the column naming a configuration (default: a ladder sweep's points, by "
            "family where that names them, else family)")
    cmd.add("--rung", default="param_budget", help="the column naming a rung (default: param_budget)")
    cmd.add("--target", type=float, default=None, help="the target rung (default: the largest)")
    cmd.add("--truth", default=None, help="the metric whose order at the target is to be predicted (default: "
            "val_nll; refused where it has no value); the forecast extrapolates it")
    cmd.add("--proxy", default=None, help=f"comma-separated proxy columns (default: {proxies} and the lm-eval scores, "
            "those present)")
    cmd.add("--level", type=float, default=0.8, help="decision accuracy to plan with (default: 0.8)")
    cmd.add("--draws", type=int, default=1000, help="bootstrap redraws of the seeds (default: 1000; 0: no intervals)")
    cmd.add("--probes", action="append", default=None, metavar="RESULTS", help="a probes sweep's results table or "
            "run directory (docs/probes.md): probe_nll and probe_acc, the mean over its tasks per configuration, "
            "judged as proxies too, at the battery's share of a target run's compute; a sweep of one task gives "
            "probe_nll_<task> and probe_acc_<task>. May be given more than once")
    cmd.add("--forecast", default=None, metavar="params=N|flops=C",
            help="also extrapolate each configuration's --truth loss to this scale")
    cmd.output("-o", "--out", default=None, help="also write the answer and the tables to this Markdown file")
    cmd.output("--plot", default=None, metavar="DIR", help="also draw DIR/decision_accuracy and DIR/rank_flow "
               "(.png and .svg)", holds="the figures")
    args = cmd.parse(argv)
    from analysis.decide import DecideError, markdown
    from analysis.decide_report import draw, held_out_text, judge
    from analysis.decide_words import answer
    from analysis.forecast import ForecastError, forecast
    from analysis.forecast import markdown as forecast_markdown

    if not 0 < args.level <= 1:
        cmd.fail(f"--level {args.level:g} is invalid: a decision accuracy in (0, 1], e.g. 0.8")
    if args.draws < 0:
        cmd.fail(f"--draws {args.draws} is invalid: a number of bootstrap redraws >= 0")
    target = _forecast_target(cmd.prog, args.forecast)
    table = cmd.load(args.results)

    def progress(label: str, unit: str = "refits"):
        return _Progress(cmd.prog, label=label, unit=unit, first=f"{cmd.prog}: {label} {unit}...", after=10.0)

    try:
        judged = judge(table, args.config, args.rung, args.proxy.split(",") if args.proxy else None, args.target,
                       args.draws, args.truth, progress=progress)
        for path in args.probes or ():
            _add_probes(cmd, judged, table, path, args.draws)
        predicted = forecast(judged.ladder, draws=args.draws, progress=progress("forecast:"), **target) \
            if target else None
    except (DecideError, ForecastError) as err:
        cmd.fail(str(err))
    parts = [answer(judged.result, args.level, judged.check, predicted), markdown(judged.result, args.level),
             held_out_text(judged)] + ([forecast_markdown(predicted)] if predicted is not None else [])
    cmd.print_and_write("\n".join(parts), args.out)
    if args.plot:
        paths = draw(judged, args.plot, args.level)
        print(f"{cmd.prog}: drew {', '.join(map(str, paths))}")


def _positive_list(cmd: _Command, flag: str, text: str) -> list[int]:
    try:
        values = [int(t) for t in text.split(",")]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        cmd.fail(f"{flag}={text} is invalid: comma-separated whole numbers >= 1, e.g. 8,64,512")
    return values


@_command("slm-search-sim", "A finished grid's measured job durations and validation curves replayed through "
          "synchronous successive halving, ASHA and Hyperband (Optuna's own pruners) on 8, 64, 512 workers: time "
          "to the answer, the pick's rank in the grid, busy and idle worker-time (analysis/search_sim.py, "
          "docs/search.md).")
def search_sim_main(cmd: _Command, argv: list[str] | None = None) -> None:
    cmd.add("sweep", help="the run group directory of a finished grid sweep (sweep.json, <job key>/result.json)")
    cmd.add("--eta", type=whole_number(2), default=3, help="keep 1/eta of the configurations at each rung: a whole "
            "number >= 2, Optuna's reduction_factor (default 3)")
    cmd.add("--rungs", default="1/9,1/3,1", help="the rungs as fractions of each job's steps, increasing, the last 1 "
            "(default 1/9,1/3,1)")
    cmd.add("--workers", default="8,64,512", help="worker counts (default 8,64,512)")
    cmd.add("--seed", type=int, default=0, help="the first repetition's seed of the jobs' order (default 0)")
    cmd.add("--reps", type=whole_number(1), default=3, help="repetitions, seeds seed..seed+reps-1 (default 3)")
    cmd.add("--launch-s", type=float, default=0.0, help="seconds each launch of a job costs (default 0)")
    cmd.add("--snap", type=whole_number(0), default=0, help="read a rung the grid did not validate at its validation "
            "at most this many steps away (default 0: refuse)")
    cmd.output("-o", "--out", help="also write the markdown here")
    args = cmd.parse(argv)
    from analysis.search_sim import SimError, markdown, parse_rungs, read_grid, simulate

    if not 0 <= args.launch_s < float("inf"):
        cmd.fail(f"--launch-s={args.launch_s:g} is invalid: seconds >= 0")
    workers = _positive_list(cmd, "--workers", args.workers)
    sweep = Path(cmd.where(args.sweep, "sweep directory"))
    try:
        result = simulate(read_grid(sweep), parse_rungs(args.rungs), args.eta, workers, args.seed, args.reps,
                          args.launch_s, snap=args.snap)
    except SimError as err:
        cmd.fail(str(err))
    cmd.print_and_write(markdown(result), args.out)


if __name__ == "__main__":  # python -m analysis.cli collect|plot|report|ladder|lr_transfer|compare|fit|plan|claims|decide|search_sim ...
    commands = {"collect": collect_main, "plot": plot_main, "report": report_main, "ladder": ladder_main,
                "lr_transfer": lr_transfer_main, "compare": compare_main,
                "fit": fit_main, "plan": plan_main, "claims": claims_main, "decide": decide_main,
                "search_sim": search_sim_main}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        fail("analysis.cli", f"usage: python -m analysis.cli {{{'|'.join(commands)}}} ...")
    commands[sys.argv[1]](sys.argv[2:])


@_command("slm-search", "The report on an Optuna sweep (analysis/search.py): the search's best first, every trial (the "
          "pruned ones with the step they stopped at), the settings' importances (Optuna's fANOVA), and with --rerun "
          "whether its best configurations keep their order when rerun at a larger rung.")
def search_main(cmd: _Command, argv: list[str] | None = None) -> None:
    cmd.add("sweep", help="the Optuna sweep's directory (runs/<run_group>, holding its study)")
    cmd.add("--rerun", default=None, help="a grid sweep's directory that reran the search's best points at a larger "
            "rung (e.g. sweeps/search_cpu_top.yaml: runs/search_cpu_top)")
    cmd.add("--top", type=int, default=None, help="compare only the search's best K configurations (default: all "
            "the rerun holds)")
    cmd.output("-o", "--out", default=None, help="also write the report to this Markdown file")
    args = cmd.parse(argv)
    from analysis.search import report
    from slm.sweeps.study_files import NoStudy

    sweep = Path(cmd.where(args.sweep, "Optuna sweep directory"))
    rerun = Path(cmd.where(args.rerun, "rerun sweep directory")) if args.rerun else None
    if args.top is not None and args.top < 2:
        cmd.fail(f"--top {args.top}: compare at least 2 configurations")
    try:
        text = report(sweep, rerun, args.top)
    except NoStudy as err:
        cmd.fail(str(err))
    cmd.print_and_write(text, args.out)
