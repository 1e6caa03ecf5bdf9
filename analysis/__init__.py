"""Results analysis for slm: collect result.json files into a table, find tiers and thresholds, plot, report.

    from analysis import load_results
    table = load_results("results.parquet")          # or a runs directory

Layering: of slm, this package imports only modules that load neither torch nor lightning (`slm.runs`, `slm.renames`,
`slm.eval.score_lines`, `slm.bad_input`, `slm.metrics`: the metric registry); slm never imports it.
Console scripts (analysis/cli.py): slm-collect, slm-plot, slm-report.
"""

from analysis.collect import collect, load_results, save_results

__all__ = ["collect", "load_results", "save_results"]
