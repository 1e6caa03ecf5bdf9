"""arXiv 2512.20877 side by side: the ladder runs (sweeps/arxiv2512_table1.yaml, arxiv2512_rope.yaml, and
arxiv2512_sweeps.yaml, arxiv2512_word.yaml when they ran) next to the paper's published test NLLs, and its central
figure, test NLL against training FLOPs.

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

from analysis.document import markdown_table

def _paper(section, model, sweep, family, match, params, windows, context, epochs, nll):
    return (section, model, sweep, family, match, params, windows, context, epochs, nll)


PAPER = pd.DataFrame([
    # section, model, run group, family, other columns that pick our runs, parameters, windows per epoch,
    # window length, epochs, published test NLL
    _paper("main", "Linear", "ladder_table1", "ladder_linear", {}, 1_073_345, 50_000, 128, 3, 3.0549),
    _paper("main", "MLP", "ladder_table1", "ladder_mlp", {}, 4_285_377, 50_000, 128, 3, 2.3222),
    _paper("main", "Self-Attention", "ladder_table1", "ladder_attention", {}, 231_617, 50_000, 128, 4, 2.1335),
    _paper("main", "Transformer", "ladder_table1", "ladder_transformer", {}, 430_785, 50_000, 128, 4, 2.0058),
    _paper("main", "Pre-LN, learned positions", "ladder_rope", "ladder_rope", {"position": "learned"},
           430_785, 50_000, 128, 8, 1.9738),
    _paper("main", "Pre-LN, RoPE", "ladder_rope", "ladder_rope", {"position": "rope"}, 414_401, 50_000, 128, 8, 2.0096),
    *[_paper("sweeps", f"Linear, T = {t}", "ladder_sweeps", "ladder_linear", {"context_length": t}, n, 30_000, t, 2, nll)
      for t, n, nll in ((32, 274_625, 2.5135), (64, 540_865, 2.7006), (128, 1_073_345, 3.0496))],
    *[_paper("sweeps", f"MLP, hidden {h}", "ladder_sweeps", "ladder_mlp", {"params_total": n}, n, 30_000, 128, 2, nll)
      for h, n, nll in ((128, 2_130_497, 2.5482), (256, 4_285_377, 2.5115), (512, 8_693_441, 2.5002))],
    *[_paper("sweeps", f"Self-Attention, {h} head{'s' if h > 1 else ''}", "ladder_sweeps", "ladder_attention",
             {"n_heads": h}, 231_617, 30_000, 128, 2, nll) for h, nll in ((1, 2.3482), (2, 2.4033), (4, 2.3055))],
    *[_paper("sweeps", f"Transformer, {n_layers} layers", "ladder_sweeps", "ladder_transformer", {"n_layers": n_layers},
             n, 30_000, 128, 2, nll) for n_layers, n, nll in ((2, 298_305, 2.3034), (3, 430_785, 2.2795),
                                                              (4, 563_265, 2.3078))],
    _paper("word", "Transformer, PTB", "ladder_word", "ladder_transformer", {"data": "ptb"}, 2_975_631, 79_935, 64, 8,
           6.1896),
    _paper("word", "Transformer, WikiText-2", "ladder_word", "ladder_transformer", {"data": "wikitext2"}, 8_958_077,
           79_935, 64, 8, 6.8875),
], columns=["section", "model", "sweep", "family", "match", "paper_params", "paper_windows", "paper_context",
            "paper_epochs", "paper_test_nll"])
SECTIONS = {
    "main": "Test NLL (nats per character, Tiny Shakespeare, the first 10,000 test windows) of the paper's models "
            "(its Table 1 and position ablation) next to slm's runs of the same models under the same protocol "
            "(sweeps/arxiv2512_table1.yaml, arxiv2512_rope.yaml).",
    "sweeps": "The paper's one-factor sweeps (2 epochs of 30,000 windows, the first 5,000 test windows; "
              "sweeps/arxiv2512_sweeps.yaml).",
    "word": "Word level (nats per word; PTB and WikiText-2 as whitespace-separated words, windows of 64, 8 epochs "
            "of 79,935 windows from the first 80,000 training tokens, the first 19,935 test windows; "
            "sweeps/arxiv2512_word.yaml).",
}


def paper_flops(params, windows_per_epoch, context_length, epochs):
    """The paper's training FLOPs: 2 x parameters x windows x window length x epochs."""
    return 2 * params * windows_per_epoch * context_length * epochs


def side_by_side(table: pd.DataFrame) -> pd.DataFrame:
    """Per paper model: its published test NLL and FLOPs, and ours (completed runs with a test NLL of the
    same run group, family and setting): mean, min, max over seeds, the difference, our parameters and FLOPs.
    A table without a run-group column (`sweep`) is matched on family and setting only."""
    runs = table[(table["status"] == "completed") & table.get("test_nll", pd.Series(index=table.index)).notna()]
    rows = []
    for paper in PAPER.itertuples():
        mine = runs[runs["family"] == paper.family]
        if "sweep" in mine:
            mine = mine[mine["sweep"] == paper.sweep]
        for column, value in paper.match.items():
            mine = mine[mine[column] == value] if column in mine else mine.iloc[:0]
        row = {"section": paper.section, "model": paper.model, "paper params": paper.paper_params,
               "paper test NLL": paper.paper_test_nll,
               "paper FLOPs": paper_flops(paper.paper_params, paper.paper_windows, paper.paper_context,
                                          paper.paper_epochs),
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
    """Test NLL against training FLOPs (log) of the main section (Table 1 and the ablation), the paper's
    models hollow and ours filled with their seed range as error bars."""
    if "section" in frame:
        frame = frame[frame["section"] == "main"]
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
    formats = {"paper FLOPs": "{:.3g}", "FLOPs": "{:.3g}", "paper params": "{:,.0f}", "params": "{:,.0f}",
               "paper test NLL": "{:.4f}", "test NLL": "{:.4f}", "min": "{:.4f}", "max": "{:.4f}",
               "difference": "{:+.4f}"}
    text = ["# arXiv 2512.20877 reproduced in slm", "",
            "min/max: over our seeds; difference: our mean minus the paper's single run; FLOPs: the paper's formula "
            "(2 x parameters x windows x window length x epochs).", ""]
    for section, caption in SECTIONS.items():
        shown = frame[frame["section"] == section].drop(columns="section")
        if section != "main" and not shown["seeds"].any():
            continue  # a section none of whose runs are in the table
        for column, fmt in formats.items():
            if column in shown:
                shown[column] = shown[column].map(lambda v, fmt=fmt: fmt.format(v) if pd.notna(v) else "")
        text += [caption, "", markdown_table(shown), ""]
        if section == "main":
            text += ["![test NLL against training FLOPs](figures/ladder_nll_flops.png)", ""]
    path = out / "ladder.md"
    path.write_text("\n".join(text))
    return path
