"""Console entry points of the analysis (they live here, not in slm/cli: slm never imports analysis).

    slm-collect runs/cpu_default [more dirs] -o results.parquet     # result.json files -> one table
    slm-plot --kind pareto results.parquet -o plots/                 # one plot (PNG + SVG)
    slm-plot --kind all results.parquet -o plots/                    # all six
    slm-report results.parquet -o report/                            # report.md + report.html + figures/
    slm-ladder runs/ladder_table1 -o report/2512.20877              # arXiv 2512.20877 side by side
    slm-lr-transfer runs/lr_transfer_width runs/lr_transfer_depth -o out   # best lr per shape, loss-vs-lr

RESULTS may also be a runs directory (collected on the fly). Bad input (no such path, no runs found, an
unknown column or plot kind) is one line on stderr, `<prog>: error: ...`, and exit code 2; warnings
(an unreadable result.json, a plot drawn as a placeholder) are `<prog>: warning: ...` lines.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def _fail(prog: str, message: str) -> None:
    line = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    print(f"{prog}: error: {line}", file=sys.stderr)
    sys.exit(2)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        _fail(self.prog, f"{message} (see {self.prog} --help)")


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


def _load(prog: str, path: str):
    from analysis.collect import load_results

    try:
        table = load_results(path)
    except (FileNotFoundError, ValueError, OSError) as err:
        _fail(prog, f"{path}: {err}" if str(path) not in str(err) else str(err))
    except Exception as err:  # noqa: BLE001 - a corrupt parquet/csv file is bad input, not a bug
        _fail(prog, f"cannot read {path}: {type(err).__name__}: {err}")
    if table.empty:
        _fail(prog, f"{path}: no runs in it")
    return table


def collect_main(argv: list[str] | None = None) -> None:
    prog = "slm-collect"
    p = _Parser(prog=prog, description="Collect every run's result.json under the given directories into one "
                "table (one row per run; unfinished, failed and not-started jobs included with their status).")
    p.add_argument("paths", nargs="+", help="run directories, sweep directories (walked), or result.json files")
    p.add_argument("-o", "--output", default="results.parquet",
                   help="output table: .parquet (default: results.parquet) or .csv")
    p.add_argument("-v", "--verbose", action="store_true", help="also print info lines")
    args = p.parse_args(argv)
    _logging(prog, args.verbose)
    from analysis.collect import collect, save_results

    if Path(args.output).suffix.lower() not in (".parquet", ".pq", ".csv", ".json"):
        _fail(prog, f"--output {args.output}: expected a .parquet or .csv file name")
    try:
        table = collect(args.paths)
    except FileNotFoundError as err:
        _fail(prog, str(err))
    if table.empty:
        _fail(prog, f"no runs found under {', '.join(args.paths)}: no result.json files and no Hydra job folders")
    path = save_results(table, args.output)
    counts = table["status"].value_counts()
    summary = ", ".join(f"{n} {s}" for s, n in counts.items())
    print(f"{prog}: {len(table)} runs ({summary}) -> {path}")


def plot_main(argv: list[str] | None = None) -> None:
    from analysis.plots import KINDS

    prog = "slm-plot"
    p = _Parser(prog=prog, description="Draw the study's plots (PNG and SVG) from a results table.")
    p.add_argument("results", help="results table (.parquet/.csv from slm-collect) or a runs directory")
    p.add_argument("--kind", "-k", default="all", choices=[*KINDS, "all"], help="which plot (default: all)")
    p.add_argument("-o", "--out-dir", default="plots", help="output directory (default: plots)")
    p.add_argument("--score", default=None,
                   help="score column (e.g. score_hellaswag, avg_study7, val_nll); default: the suite average, "
                        "else the first task score, else val_nll")
    p.add_argument("--format", default="png,svg", help="comma-separated formats (default: png,svg)")
    p.add_argument("-v", "--verbose", action="store_true", help="also print info lines")
    args = p.parse_args(argv)
    _logging(prog, args.verbose)
    from analysis.plots import draw

    table = _load(prog, args.results)
    formats = [f.strip().lower() for f in args.format.split(",") if f.strip()]
    bad = [f for f in formats if f not in ("png", "svg", "pdf")]
    if bad or not formats:
        _fail(prog, f"--format {args.format}: choose among png, svg, pdf")
    if args.score and args.score not in table:
        columns = [c for c in table.columns if c.startswith(("score_", "avg_")) or c in ("val_nll", "val_ppl")]
        _fail(prog, f"--score {args.score}: no such column; the results have: {', '.join(columns) or 'none'}")
    kinds = KINDS if args.kind == "all" else [args.kind]
    for kind in kinds:
        kwargs = {"score": args.score} if args.score and kind in ("tiers", "threshold", "throughput", "heatmap") else {}
        _, paths = draw(kind, table, args.out_dir, formats, **kwargs)
        print(f"{prog}: {kind}: {', '.join(str(p) for p in paths)}")


def report_main(argv: list[str] | None = None) -> None:
    prog = "slm-report"
    p = _Parser(prog=prog, description="Write the Markdown and HTML report (tables, tiers, threshold, best "
                "per family, Pareto frontier, the six plots) from a results table.")
    p.add_argument("results", help="results table (.parquet/.csv from slm-collect) or a runs directory")
    p.add_argument("-o", "--out-dir", default="report", help="output directory (default: report)")
    p.add_argument("--score", default=None, help="score column (default: as slm-plot)")
    p.add_argument("--title", default="slm results", help="report title")
    p.add_argument("-v", "--verbose", action="store_true", help="also print info lines")
    args = p.parse_args(argv)
    _logging(prog, args.verbose)
    from analysis.report import build_report

    table = _load(prog, args.results)
    if args.score and args.score not in table:
        _fail(prog, f"--score {args.score}: no such column in {args.results}")
    path = build_report(args.results, args.out_dir, score=args.score, title=args.title, table=table)
    print(f"{prog}: wrote {path.with_name('report.md')} and {path}")


def ladder_main(argv: list[str] | None = None) -> None:
    prog = "slm-ladder"
    p = _Parser(prog=prog, description="arXiv 2512.20877 side by side: the ladder runs' test NLL next to the "
                "paper's published numbers, and test NLL against training FLOPs (ladder.md + figures/).")
    p.add_argument("results", help="results table (.parquet/.csv from slm-collect) or a runs directory")
    p.add_argument("-o", "--out-dir", default="report/2512.20877", help="output directory")
    args = p.parse_args(argv)
    _logging(prog)
    from analysis.ladder import write

    table = _load(prog, args.results)
    if "test_nll" not in table or table["test_nll"].isna().all():
        _fail(prog, f"{args.results}: no run with a test NLL (train the ladder sweeps: make reproduce-2512)")
    path = write(table, args.out_dir)
    print(path.read_text())
    print(f"{prog}: wrote {path} and {Path(args.out_dir) / 'figures' / 'ladder_nll_flops.png'}")


def lr_transfer_main(argv: list[str] | None = None) -> None:
    prog = "slm-lr-transfer"
    p = _Parser(prog=prog, description="Learning-rate transfer: for each run group that sweeps train.lr against "
                "d_model or n_layers, the best learning rate per shape and parametrization, how far it moves, and "
                "loss-against-lr figures (lr_transfer.md + figures/).")
    p.add_argument("results", nargs="+", help="results tables (.parquet/.csv from slm-collect) or runs directories")
    p.add_argument("-o", "--out-dir", default="lr_transfer", help="output directory (default: lr_transfer)")
    args = p.parse_args(argv)
    _logging(prog)
    import pandas as pd

    from analysis.lr_transfer import write

    table = pd.concat([_load(prog, path) for path in args.results], ignore_index=True)
    try:
        path = write(table, args.out_dir)
    except ValueError as err:
        _fail(prog, f"{', '.join(args.results)}: {err}")
    print(path.read_text())
    print(f"{prog}: wrote {path} and its figures in {Path(args.out_dir) / 'figures'}")


if __name__ == "__main__":  # python -m analysis.cli collect|plot|report|ladder|lr_transfer ...
    commands = {"collect": collect_main, "plot": plot_main, "report": report_main, "ladder": ladder_main,
                "lr_transfer": lr_transfer_main}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        _fail("analysis.cli", f"usage: python -m analysis.cli {{{'|'.join(commands)}}} ...")
    commands[sys.argv[1]](sys.argv[2:])
