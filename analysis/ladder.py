"""arXiv 2512.20877 side by side: the ladder runs (sweeps/ladder_table1.yaml, ladder_rope.yaml) next to the
paper's published test NLLs, and its central figure, test NLL against training FLOPs.

    frame = side_by_side(table)            # one row per paper model: ours (mean, spread, seeds) and theirs
    fig = plot_nll_per_flop(frame)         # test NLL against training FLOPs, both
    write(table, "report/")                # report/ladder.md and figures/ladder_nll_flops.png/.svg

FLOPs follow the paper's formula, 2 x parameters x windows per epoch x window length x epochs (its
reference code; not slm's 6N + attention convention), so the two columns compare like with like.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from analysis.report import markdown_table

PAPER = pd.DataFrame([
    # model, family, position, parameters, epochs, published test NLL (Table 1; the RoPE ablation)
    ("Linear", "ladder_linear", None, 1_073_345, 3, 3.0549),
    ("MLP", "ladder_mlp", None, 4_285_377, 3, 2.3222),
    ("Self-Attention", "ladder_attention", None, 231_617, 4, 2.1335),
    ("Transformer", "ladder_transformer", None, 430_785, 4, 2.0058),
    ("Pre-LN, learned positions", "ladder_rope", "learned", 430_785, 8, 1.9738),
    ("Pre-LN, RoPE", "ladder_rope", "rope", 414_401, 8, 2.0096),
], columns=["model", "family", "position", "paper_params", "paper_epochs", "paper_test_nll"])
PAPER_WINDOWS, PAPER_CONTEXT = 50_000, 128
"""The paper's windows per epoch and window length (Table 1 and the ablation)."""


def paper_flops(params, windows_per_epoch, context_length, epochs):
    """The paper's training FLOPs: 2 x parameters x windows x window length x epochs."""
    return 2 * params * windows_per_epoch * context_length * epochs


def side_by_side(table: pd.DataFrame) -> pd.DataFrame:
    """Per paper model: its published test NLL and FLOPs, and ours (completed runs with a test NLL of the
    same family and position): mean, min, max over seeds, the difference, our parameters and FLOPs."""
    runs = table[(table["status"] == "completed") & table.get("test_nll", pd.Series(index=table.index)).notna()]
    rows = []
    for paper in PAPER.itertuples():
        mine = runs[runs["family"] == paper.family]
        if isinstance(paper.position, str):  # the ablation: one arm per position
            mine = mine[mine["position"] == paper.position]
        row = {"model": paper.model, "paper params": paper.paper_params, "paper test NLL": paper.paper_test_nll,
               "paper FLOPs": paper_flops(paper.paper_params, PAPER_WINDOWS, PAPER_CONTEXT, paper.paper_epochs),
               "seeds": len(mine)}
        if len(mine):
            nll = mine["test_nll"].astype(float)
            params = int(mine["params_total"].iloc[0])
            flops = paper_flops(params, mine["windows_per_epoch"].astype(float),
                                mine["context_length"].astype(float), mine["epochs"].astype(float)).mean()
            row.update({"params": params, "test NLL": nll.mean(), "min": nll.min(), "max": nll.max(),
                        "difference": nll.mean() - paper.paper_test_nll, "FLOPs": flops})
        rows.append(row)
    return pd.DataFrame(rows)


def plot_nll_per_flop(frame: pd.DataFrame) -> Figure:
    """Test NLL against training FLOPs (log), the paper's models hollow and ours filled with their
    seed range as error bars."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for i, (_, row) in enumerate(frame.iterrows()):
        color = f"C{i}"
        ax.scatter(row["paper FLOPs"], row["paper test NLL"], facecolors="none", edgecolors=color, s=60,
                   label=f"{row['model']} (paper)")
        if pd.notna(row.get("test NLL")):
            mean = row["test NLL"]
            ax.errorbar(row["FLOPs"], mean, yerr=[[mean - row["min"]], [row["max"] - mean]], fmt="o", color=color,
                        label=f"{row['model']} (slm, {row['seeds']} seed{'s' if row['seeds'] != 1 else ''})")
    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs (2 x params x windows x T x epochs)")
    ax.set_ylabel("test NLL (nats per character)")
    ax.set_title("arXiv 2512.20877 ladder: paper (hollow) and slm (filled)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def write(table: pd.DataFrame, out_dir: str | os.PathLike) -> Path:
    """out_dir/ladder.md (the side-by-side table) and out_dir/figures/ladder_nll_flops.{png,svg}."""
    out = Path(out_dir)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    frame = side_by_side(table)
    fig = plot_nll_per_flop(frame)
    for ext in ("png", "svg"):
        fig.savefig(out / "figures" / f"ladder_nll_flops.{ext}", dpi=150)
    shown = frame.copy()
    formats = {"paper FLOPs": "{:.3g}", "FLOPs": "{:.3g}", "paper params": "{:,.0f}", "params": "{:,.0f}",
               "paper test NLL": "{:.4f}", "test NLL": "{:.4f}", "min": "{:.4f}", "max": "{:.4f}",
               "difference": "{:+.4f}"}
    for column, fmt in formats.items():
        if column in shown:
            shown[column] = shown[column].map(lambda v, fmt=fmt: fmt.format(v) if pd.notna(v) else "")
    text = ["# arXiv 2512.20877 reproduced in slm", "",
            "Test NLL (nats per character, Tiny Shakespeare, the first 10,000 test windows) of the paper's models "
            "(its Table 1 and position ablation) next to slm's runs of the same models under the same protocol "
            "(sweeps/ladder_table1.yaml, ladder_rope.yaml). min/max: over our seeds; difference: our mean minus "
            "the paper's single run. FLOPs: the paper's formula.", "",
            markdown_table(shown), "", "![test NLL against training FLOPs](figures/ladder_nll_flops.png)", ""]
    path = out / "ladder.md"
    path.write_text("\n".join(text))
    return path
