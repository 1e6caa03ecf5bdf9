"""The study report: Markdown and HTML with the run table, tiers, threshold, best per family, Pareto frontier
and the six plots.

    build_report("runs/cpu_default/results.parquet", "runs/cpu_default/report")   # -> .../report.html

Layout of out_dir:
  report.md, report.html     the same content; figures referenced relatively
  figures/<plot>.png, .svg   the six plots (analysis.plots.draw_all)

Every number in the report comes from the results table; statistics are computed by analysis.tiers and
analysis.thresholds and the method line of each says how it was decided.
"""

from __future__ import annotations

import html
import math
import os
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from analysis.collect import ALL_STATUSES, load_results
from analysis.plots import FILE_NAMES, TITLES, choose_score, draw_all, score_label
from analysis.thresholds import best_per_family, find_threshold, pareto_frontier
from analysis.tiers import describe_gap, find_tiers, run_labels

FIGURES = "figures"
TIER_METHOD = ("Tiers: configurations (seeds pooled) sorted by score and cut at the largest gaps; a split is kept only "
               "if T = smallest gap / pooled within-tier sd beats samples from one population (Gaussian, uniform, "
               "exponential either way; the largest p is used) at p < 0.05 (Bonferroni over the k tried), each gap "
               "also beats the spread of the two tiers beside it, and, where stderr or repeated seeds are known, "
               "every run of the upper tier beats every run of the lower one in >= 95% of bootstrap redraws.")
THRESHOLD_METHOD = ("Threshold: the cut on the axis with the largest standardised mean difference D; permutation "
                    "p-value over all cuts (scores shuffled across configurations), found when p < 0.05.")


def _fmt(value, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e10):
        return f"{int(value):,}"
    if isinstance(value, float):
        if abs(value) >= 1e6:
            return f"{value:.3g}"
        return f"{value:.{digits}g}"
    return str(value)


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (no extra dependency)."""
    if frame.empty:
        return "_(none)_\n"
    cols = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    for _, row in frame.iterrows():
        cells = [_fmt(v).replace("|", "\\|").replace("\n", " ") for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def html_table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p><em>(none)</em></p>"
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
                   for _, row in frame.iterrows())
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def run_table(table: pd.DataFrame, score: str | None) -> pd.DataFrame:
    """One line per run: label, status and the key numbers."""
    out = pd.DataFrame({"run": run_labels(table) if len(table) else []})
    sparse = "params_active" in table and (table["params_active"] != table["params_total"]).any()
    for column, name in (("status", "status"), ("family", "family"), ("n_layers", "layers"), ("d_model", "d_model"),
                         ("params_active" if sparse else "params_total", "active params" if sparse else "params"),
                         ("params_total" if sparse else None, "total params"),
                         ("train_flops", "train FLOPs"), ("val_nll", "val NLL"),
                         ("val_nll_kind" if {"nelbo"} <= set(table.get("val_nll_kind", pd.Series(dtype=str)).dropna())
                          else None, "val NLL kind"),
                         (score, score), ("decode_tokens_per_s", "decode tok/s")):
        if column and column in table and name not in out:
            out[name] = table[column].to_numpy()
    return out


def sections(table: pd.DataFrame, results_path: str, score: str | None = None) -> list[tuple[str, list]]:
    """[(heading, [blocks])], a block being a str (paragraph), a DataFrame (table) or ("figure", kind)."""
    score, note = choose_score(table, score)
    out = []
    counts = table["status"].value_counts() if "status" in table else pd.Series(dtype=int)
    status = ", ".join(f"{int(counts[s])} {s}" for s in ALL_STATUSES if s in counts) or "none"
    intro = [f"Results: `{results_path}` — {len(table)} runs ({status})."]
    if score:
        intro.append(f"Score used below: **{score}** ({score_label(table, score)})" + (f"; {note}." if note else "."))
    else:
        intro.append(f"No score available: {note}.")
    out.append(("Summary", intro))

    problems = table[table["status"] != "completed"] if "status" in table else table.iloc[0:0]
    if len(problems):
        frame = pd.DataFrame({"run": problems["run"].to_numpy(), "status": problems["status"].to_numpy(),
                              "error": problems["error"].to_numpy() if "error" in problems else ""})
        out.append(("Runs that did not complete", [frame]))

    if score:
        blocks: list = [TIER_METHOD]
        for column in dict.fromkeys([score, "val_nll"]):
            if column not in table or table[column].notna().sum() == 0:
                continue
            result = find_tiers(table, column)
            lines = [f"**{column}**: " + (f"{result.k} tiers." if result.split else f"no split — {result.reason}.")]
            for tier in result.tiers if result.split else []:
                lines.append(f"- tier {tier.rank} ({tier.n}): {', '.join(tier.members)} — {_fmt(tier.low)} to "
                             f"{_fmt(tier.high)}")
            lines += [f"- {describe_gap(g)}" for g in result.gaps]
            lines += [f"- note: {n}" for n in result.notes]
            blocks.append("\n".join(lines))
        blocks.append(("figure", "tiers"))
        out.append(("Tiers", blocks))

        blocks = [THRESHOLD_METHOD]
        if "d_model" in table:
            blocks.append(find_threshold(table, "d_model", score).summary())
        blocks.append(("figure", "threshold"))
        out.append(("Hidden-size threshold", blocks))

        best = best_per_family(table, score)
        if len(best):
            best = best.drop(columns=[c for c in ("run",) if c in best])
        out.append(("Best configuration per family", [best]))

    out.append(("Depth against score", [("figure", "depth")]))
    out.append(("Throughput against accuracy", [("figure", "throughput")]))
    front = pareto_frontier(table)
    blocks = []
    if len(front):
        frame = pd.DataFrame({"run": run_labels(table).loc[front.index].to_numpy(),
                              "train FLOPs": front["train_flops"].to_numpy(), "val NLL": front["val_nll"].to_numpy()})
        blocks.append("Runs that no other run beats on both training compute and validation NLL:")
        blocks.append(frame)
    blocks.append(("figure", "pareto"))
    out.append(("NLL against training FLOPs", blocks))
    out.append(("Per-task scores", [("figure", "heatmap")]))
    runs = [run_table(table, score)]
    if "params_active" in table and (table["params_active"] != table["params_total"]).any():
        runs.insert(0, "Sizes are active parameters per token (a mixture of experts uses only its routed experts, "
                       "so its total is larger); training FLOPs follow the active parameters.")
    out.append(("All runs", runs))
    return out


def _markdown(title: str, parts: list, notes: dict, generated: str) -> str:
    text = [f"# {title}\n", f"_Generated {generated} by slm-report._\n"]
    for heading, blocks in parts:
        text.append(f"\n## {heading}\n")
        for block in blocks:
            if isinstance(block, pd.DataFrame):
                text.append(markdown_table(block))
            elif isinstance(block, tuple):
                kind = block[1]
                text.append(f"![{TITLES[kind]}]({FIGURES}/{FILE_NAMES[kind]}.png)\n")
                if notes.get(kind):
                    text.append(f"_{TITLES[kind]} not drawn: {notes[kind]}_\n")
            else:
                text.append(block + "\n")
    return "\n".join(text)


_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}table{border-collapse:collapse;margin:0.8em 0;font-size:0.88em}
th,td{border:1px solid #ccc;padding:0.25em 0.55em;text-align:left}th{background:#f2f2f2}
img{max-width:100%;border:1px solid #eee;margin:0.5em 0}code{background:#f4f4f4;padding:0 0.2em}
.note{color:#666;font-size:0.9em}"""


def _html(title: str, parts: list, notes: dict, generated: str) -> str:
    import re

    def inline(text: str) -> str:
        text = html.escape(text)
        text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
        return re.sub(r"`(.+?)`", r"<code>\1</code>", text)

    body = [f"<h1>{html.escape(title)}</h1>",
            f"<p class='note'>Generated {generated} by slm-report.</p>"]
    for heading, blocks in parts:
        body.append(f"<h2>{html.escape(heading)}</h2>")
        for block in blocks:
            if isinstance(block, pd.DataFrame):
                body.append(html_table(block))
            elif isinstance(block, tuple):
                kind = block[1]
                body.append(f"<img src='{FIGURES}/{FILE_NAMES[kind]}.svg' alt='{html.escape(TITLES[kind])}'>")
                if notes.get(kind):
                    body.append(f"<p class='note'>{html.escape(TITLES[kind])} not drawn: "
                                f"{html.escape(notes[kind])}</p>")
            else:
                lines = block.split("\n")
                items = [line[2:] for line in lines if line.startswith("- ")]
                head = [line for line in lines if not line.startswith("- ")]
                body += [f"<p>{inline(line)}</p>" for line in head]
                if items:
                    body.append("<ul>" + "".join(f"<li>{inline(i)}</li>" for i in items) + "</ul>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n")


def build_report(results_path: str | os.PathLike, out_dir: str | os.PathLike, score: str | None = None,
                 title: str = "slm results", table: pd.DataFrame | None = None) -> Path:
    """Draw the six plots into out_dir/figures and write out_dir/report.md and report.html; returns the
    HTML report's path. results_path: a results table (.parquet/.csv) or a runs directory; `table`: the
    results already loaded from it (else they are loaded here)."""
    table = load_results(results_path) if table is None else table
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    drawn = draw_all(table, out_dir / FIGURES, score=score)
    notes = {kind: getattr(fig, "slm_placeholder", None) for kind, (fig, _) in drawn.items()}
    parts = sections(table, str(results_path), score)
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")  # the same stamp in both files
    (out_dir / "report.md").write_text(_markdown(title, parts, notes, generated))
    path = out_dir / "report.html"
    path.write_text(_html(title, parts, notes, generated))
    return path
