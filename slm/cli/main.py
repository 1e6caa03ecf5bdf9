"""`slm <verb> [args]`: one entry point for every slm command, `slm train ...` being `slm-train ...`.

    slm train model=llama3 model.n_layers=4         # = slm-train model=llama3 model.n_layers=4
    slm eval cpu_default/<job key> --tasks offline  # = slm-eval ...
    slm params model=gpt2                           # = slm-params model=gpt2
    slm help train                                  # = slm train --help

The verb picks the command (VERBS); the rest of the line is that command's own, unchanged, and so are its output,
errors and exit status. The slm-<verb> scripts stay, as aliases. A verb's module is imported only when it runs,
so `slm --help` is quick.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from slm.pipes import quiet_on_closed_pipe

PROG = "slm"

VERBS: dict[str, tuple[str, str]] = {
    # verb: (entry point, what it does in one line); the console script slm-<verb> has the same entry point
    "train": ("slm.cli.train:main", "train one model (Hydra overrides); -m sweep=<name> runs a sweep"),
    "eval": ("slm.cli.eval:main", "score a run with lm-eval and merge the scores into its result.json"),
    "generate": ("slm.cli.generate:main", "text from a trained run, with its own tokenizer"),
    "status": ("slm.cli.status:main", "the jobs of a run group by status, with progress and errors"),
    "dashboard": ("slm.cli.dashboard:main", "an Optuna sweep's study live in the browser (optuna-dashboard)"),
    "collect": ("analysis.cli:collect_main", "every run's result.json under the given directories -> one table"),
    "report": ("analysis.cli:report_main", "the Markdown and HTML report of a results table"),
    "plot": ("analysis.cli:plot_main", "the study's plots (PNG and SVG) from a results table"),
    "params": ("slm.cli.params:main", "parameter and FLOP counts of a model config (--json: every field)"),
    "compare": ("analysis.cli:compare_main", "two runs (or seed groups) compared on the documents both scored"),
    "fit": ("analysis.cli:fit_main", "scaling-law fit L(N, D) of completed runs, with bootstrap intervals"),
    "plan": ("analysis.cli:plan_main", "what a compute budget buys under a scaling law (published, or slm fit's)"),
    "claims": ("analysis.cli:claims_main", "the verdict on a depth x width study's claims"),
    "decide": ("analysis.cli:decide_main", "decision accuracy of a ladder: how far a small scale's ranking holds"),
    "search": ("analysis.cli:search_main", "the report on an Optuna sweep: best first, pruned, importances, a rerun"),
    "search-sim": ("analysis.cli:search_sim_main", "a grid's durations replayed through halving, ASHA, Hyperband"),
    "ladder": ("analysis.cli:ladder_main", "arXiv 2512.20877's tables: the ladder runs beside the paper's numbers"),
    "lr-transfer": ("analysis.cli:lr_transfer_main", "the best learning rate per width and depth, how far it moves"),
    "coordcheck": ("slm.cli.coordcheck:main", "muP's coordinate check: activation size against width"),
    "workers": ("slm.cli.workers:main", "one command (a sweep) in N copies at once, sharing its jobs"),
    "export-hf": ("slm.cli.export_hf:main", "a trained run as a transformers model directory"),
    "import-hf": ("slm.cli.import_hf:main", "a transformers checkpoint as an slm model directory"),
    "lm-eval": ("slm.cli.lm_eval:main", "lm-evaluation-harness's own CLI with the slm model registered"),
    "toolcall": ("slm.cli.toolcall:main", "the function-calling task's files: corpus, SFT records, pairs, items"),
    "pairs": ("slm.cli.pairs:main", "preference pairs from a teacher run's verified samples on the function-calling task"),
    "probes": ("slm.cli.probes:main", "the synthetic probes' files: MAD's six tasks as prompt/completion records"),
}


def usage() -> str:
    width = max(map(len, VERBS))
    lines = [f"usage: {PROG} <verb> [args]   (the same as slm-<verb> [args]; {PROG} <verb> --help for its options)",
             "", "verbs:"]
    lines += [f"  {verb:{width}s}  {what}" for verb, (_, what) in VERBS.items()]
    return "\n".join(lines)


def _bad(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


@quiet_on_closed_pipe
def main(argv: list[str] | None = None):
    """Run the verb's command; returns what its entry point returns (the console script exits with it)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        sys.exit(0 if args else 2)
    if args[0] == "--version":
        from importlib.metadata import version

        print(f"{PROG} {version('slm')}")
        return
    verb, rest = args[0], args[1:]
    if verb == "help":
        if not rest:
            print(usage())
            return
        verb, rest = rest[0], ["--help"]
    if verb not in VERBS:
        import difflib

        close = difflib.get_close_matches(verb, VERBS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        _bad(f"unknown verb {verb!r}{hint}; choose one of: {', '.join(VERBS)}")
    module, _, function = VERBS[verb][0].partition(":")
    # each command reads its arguments, and names itself, from sys.argv; argv[0] is the alias script where it is
    # installed beside this one, so that what re-runs the command line (Lightning's local DDP) runs the same command
    alias = Path(sys.argv[0]).with_name(f"slm-{verb}") if sys.argv and sys.argv[0] else None
    sys.argv = [str(alias) if alias is not None and alias.is_file() else f"slm-{verb}", *rest]
    try:
        return getattr(importlib.import_module(module), function)()
    except BrokenPipeError:  # e.g. `slm status | head`: the reader left
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
