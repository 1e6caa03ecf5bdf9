"""The study report: Markdown and HTML that open with a verdict on the study's headline metric (the first metric
on which the configurations differ beyond noise and from chance: analysis.headline, analysis.verdict), the tasks
at chance under their own heading, then the run table, tiers, threshold, best per family, Pareto frontier and
the plots that have data (their statistics in captions), and an appendix of methods and tests. What the noise allows:
every score's uncertainty (95% intervals; a suite average's standard error propagated from its tasks', assuming
independent tasks), multiple-choice scores against their chance level, no "best configuration" where the
differences are within noise, and how far runs solved for a parameter budget landed from it.

    build_report("runs/cpu_default/results.parquet", "runs/cpu_default/report")   # -> .../report.html

Layout of out_dir:
  report.md, report.html     the same content, rendered from one list of blocks (document(): headings, notes,
                             paragraphs with their bullets, tables, figures; analysis.document renders each block
                             to Markdown and to HTML); report.md links the figures, report.html embeds them (PNG
                             as data URIs, so the file is whole on its own; each links its SVG)
  figures/<plot>.png, .svg   the plots that have data (analysis.plots.draw_all; the Summary names any not drawn)

Every number in the report comes from the results table (a halving sweep's rungs from its sweep.json: the decisions
it pinned, analysis.halving); statistics are computed once per report by
analysis.study (analysis.headline, analysis.verdict, analysis.tiers, analysis.thresholds, analysis.claims), so a
section, a figure's caption and the claims table quote the same result; the appendix says how each was decided.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

import analysis.document as doc
import analysis.plot_style as style
from analysis.claims import judge, seeds_summary, tokens_caution
from analysis.collect import ALL_STATUSES, load_results
from analysis.document import fmt as _fmt
from analysis.halving import lrs_tried, one_lr_reason, report_blocks as halving_blocks
from analysis.search import report_blocks as search_blocks
from analysis.labels import run_labels
from analysis.metrics import (LOSS, average_members, bound_rows, higher_is_better, metric, name_of, nll_column,
                              single_task_average)
from analysis.paired import PairedError, paired_groups
from analysis.plot_style import score_label
from analysis.plots import FILE_NAMES, TITLES, draw_all, drawn_line
from analysis.plots import skipped as not_drawn
from analysis.schema import budget_flags, config_keys, role_of
from analysis.study import SHARED, Study, analyse
from analysis.thresholds import BEST_Z, best_per_family, nll_frontier
from analysis.tiers import describe_gap, format_p, units_of
from analysis.too_short import warning as too_short_warning
from analysis.tuning import at_best_lr, lr_labels, lr_varies
from slm.words import counted
from slm.metrics import METRICS
from slm.runs.health import OK as HEALTHY, RULE as HEALTH_RULE

FIGURES = "figures"
TIER_METHOD = ("Tiers: configurations (seeds pooled) sorted by score and cut at the largest gaps; a split is kept only "
               "if T = smallest gap / pooled within-tier sd beats samples from one population (Gaussian, uniform, "
               "exponential either way; the largest p is used) at p < 0.05 (Bonferroni over the k tried), each gap "
               "also beats the spread of the two tiers beside it, and, where stderr or repeated seeds are known, "
               "every run of the upper tier beats every run of the lower one in >= 95% of bootstrap redraws.")
THRESHOLD_METHOD = ("Threshold: the cut on the axis with the largest standardised mean difference D; permutation "
                    "p-value over all cuts (scores shuffled across configurations), found when p < 0.05.")


def _percent(value) -> str:
    return "" if value is None or pd.isna(value) else f"{float(value):+.1%}"


def _short(column: str) -> str:
    """A metric's header in the report's tables (slm.metrics: its `short`), else the column's name."""
    entry = metric(column)
    return entry.short if entry is not None and entry.short else column


def run_table(table: pd.DataFrame, score: str | None) -> pd.DataFrame:
    """One line per run: label, status and the key numbers (the validation loss, its bits per byte where recorded
    and its kind where some are bounds, and the score; the health flag where a run was flagged)."""
    out = pd.DataFrame({"run": run_labels(table) if len(table) else []})
    sparse = "params_active" in table and (table["params_active"] != table["params_total"]).any()
    loss = metric(LOSS)
    per_byte = loss.across_tokenizers if loss.across_tokenizers in table and \
        table[loss.across_tokenizers].notna().any() else None
    kind = loss.bound_when.column if loss.bound_when is not None and bound_rows(table, LOSS).any() else None
    for column, name in (("status", "status"), ("family", "family"), ("n_layers", "layers"), ("d_model", "d_model"),
                         ("params_active" if sparse else "params_total", "active params" if sparse else "params"),
                         ("params_total" if sparse else None, "total params"),
                         ("train_flops", "train FLOPs"), (LOSS, _short(LOSS)),
                         (per_byte, _short(loss.across_tokenizers)), (kind, _short(kind) if kind else None),
                         (None if score in (LOSS, loss.across_tokenizers) else score, score),
                         ("decode_tokens_per_s", "decode tok/s"),
                         ("health" if _unhealthy(table).any() else None, "health")):
        if column and column in table and name not in out:
            out[name] = table[column].to_numpy()
        if column and column == score and style.score_errors(table, score).notna().any():
            out["± 95%"] = (style.Z95 * style.score_errors(table, score)).to_numpy()
        if column == "train_flops" and "budget_error" in table and table["budget_error"].notna().any():
            flags = budget_flags(table)
            out["budget error"] = [_percent(e) + (" (outside ±" + f"{float(t):.0%})" if f else "")
                                   for e, t, f in zip(table["budget_error"], table.get("budget_tolerance", pd.Series(index=table.index, dtype=float)), flags)]
    return out


def _unhealthy(table: pd.DataFrame) -> pd.Series:
    """True for the runs whose record's health flag is not ok (slm.runs.health)."""
    if "health" not in table:
        return pd.Series(False, index=table.index)
    return table["health"].notna() & ~table["health"].isin(["", HEALTHY])


def health_blocks(table: pd.DataFrame) -> list:
    """The Training health section: one line per run whose training slm.runs.health flagged (loss spikes, validation
    rises), with the rules; [] when no run was flagged."""
    flagged = table[_unhealthy(table)]
    if not len(flagged):
        return []
    labels = run_labels(table).loc[flagged.index]
    notes = flagged["health_note"] if "health_note" in flagged else pd.Series("", flagged.index)
    lines = [f"- training health of {label}: {note if isinstance(note, str) and note else flag}"
             for label, note, flag in zip(labels, notes, flagged["health"])]
    judged = int(table["health"].notna().sum())
    return [f"{len(flagged)} of {judged} runs judged had a loss spike or a validation rise (rules: {HEALTH_RULE}; "
            "slm.runs.health):\n"
            + "\n".join(lines)]


def uncertainty_lines(table: pd.DataFrame, score: str) -> list[str]:
    """What the report's intervals are, for the chosen score (and a one-task average it stands in for)."""
    lines = []
    errors = style.score_errors(table, score)
    if score.startswith("avg_") and errors.notna().any():
        k = len(average_members(table, score) or [])
        lines.append(f"Uncertainty: intervals are 95% (1.96 standard errors). The {score[len('avg_'):]} average's "
                     f"standard error is propagated from its {k} tasks' as sqrt(sum of se_i^2) / {k}, which assumes "
                     "the tasks' errors are independent; seeds add their spread where a configuration has several.")
    elif errors.notna().any():
        lines.append("Uncertainty: intervals are 95% (1.96 x lm-eval's standard error of the score over the task's "
                     "documents); seeds add their spread where a configuration has several.")
    elif metric(score) is not None and metric(score).stderr:  # recorded where there is one: none here
        lines.append(f"Uncertainty: no standard error is recorded for {score}"
                     + (" (a task of the average has none)" if score.startswith("avg_") else "")
                     + "; only repeated seeds can show its noise, so differences below are not tested against it.")
    for column in [c for c in table.columns if c.startswith("avg_") and single_task_average(table, c)]:
        member = average_members(table, column)[0]
        lines.append(f"The {column[len('avg_'):]} suite averages one task ({member}), so its average is not shown "
                     f"apart from that task: it is the same number.")
    return lines


def chance_lines(table: pd.DataFrame) -> list[str]:
    """One line per score with a chance level: the level, and the runs within noise of it."""
    rows = style.completed_runs(table)
    lines = []
    labels = run_labels(rows) if len(rows) else pd.Series(dtype=object)
    for column in style.score_columns_to_show(rows):
        level = style.chance_value(rows, column)
        if level is None:
            continue
        scored = pd.to_numeric(rows[column], errors="coerce").notna()
        near = style.near_chance(rows, column) & scored
        text = f"**{column}** ({name_of(column)}): chance {level:.3g}; "
        if near.all():
            text += f"every run ({int(scored.sum())}) is within noise of chance: these scores say nothing yet."
        elif near.any():
            text += (f"{int(near.sum())} of {int(scored.sum())} runs within noise of chance (score - chance <= "
                     f"1.96 stderr): {', '.join(labels[near])}.")
        else:
            text += f"all {int(scored.sum())} runs are above chance beyond noise."
        lines.append(text)
    if lines:
        lines.insert(0, "A multiple-choice accuracy is read against its chance level, the mean over its documents of "
                        "1 / number of choices (the dotted line in the plots). A run within noise of it has not "
                        "shown that it learned the task.")
    return lines


def budget_blocks(table: pd.DataFrame) -> list:
    """The parameter-budget section: each budget-solved run's landing, and the runs outside tolerance."""
    if "budget_error" not in table or not table["budget_error"].notna().any():
        return []
    rows = table[table["budget_error"].notna()]
    flags = budget_flags(rows)
    counted = rows["budget_count"].fillna("total") if "budget_count" in rows else pd.Series("total", rows.index)
    counts = {c: rows[f"params_{c}"].to_numpy(object) for c in set(counted) if f"params_{c}" in rows}
    params = [counts[c][j] if c in counts else None for j, c in enumerate(counted)]  # each run's counted one
    frame = pd.DataFrame({"run": run_labels(table).loc[rows.index].to_numpy(),
                          "budget": rows["param_budget"].to_numpy(), "counted": counted.to_numpy(),
                          "params": params, "budget error": [_percent(e) for e in rows["budget_error"]],
                          "tolerance": [("any" if pd.isna(t) else f"±{float(t):.0%}")
                                        for t in rows.get("budget_tolerance", pd.Series(index=rows.index))],
                          "outside": ["yes" if f else "" for f in flags]})
    worst = rows["budget_error"].abs().idxmax()
    if flags.any():
        text = (f"**{int(flags.sum())} of {len(rows)} runs landed outside their budget tolerance** "
                f"(model.budget_tolerance): {', '.join(frame.loc[flags.to_numpy(), 'run'])}. Their size differs "
                "from the others' by more than the sweep meant it to: compare them with care.")
    else:
        text = (f"All {len(rows)} runs solved for a parameter budget landed within their tolerance (largest miss: "
                f"{_percent(rows.at[worst, 'budget_error'])}, {run_labels(table).at[worst]}).")
    legend = ("budget error = params / model.param_budget - 1 (params: the count the budget is for, "
              "model.budget_count); tolerance: the run's model.budget_tolerance.")
    return [legend, text, frame]


def _paired_column(table: pd.DataFrame, score: str, best: pd.DataFrame, keys: pd.Series | None = None) -> list | None:
    """Per family, the best configuration against its runner-up on the documents both scored (analysis.paired:
    seeds averaged per document, paired bootstrap and McNemar / t-test); None when the score is not one lm-eval
    task's or no run kept per-document results."""
    if not score.startswith("score_") or "run_dir" not in table:
        return None
    task = score[len("score_"):]
    units, _, _ = units_of(table, score, keys=keys)
    runs = {label: [str(table.at[i, "run_dir"]) for i in r] for label, r in zip(units["label"], units["runs"])}
    out, any_done = [], False
    for label, runner in zip(best["label"], best["runner_up"]):
        if runner is None or pd.isna(runner) or label not in runs or runner not in runs:
            out.append("")
            continue
        try:
            r = paired_groups(runs[runner], runs[label], task)
        except (PairedError, OSError, ValueError) as err:
            out.append(f"not paired: {' '.join(str(err).split())[:80]}")
            continue
        any_done = True
        p = f"McNemar p = {r.p:.3g}" if r.n01 is not None else f"paired p = {r.p:.3g}"
        out.append(f"{r.diff:+.3g} [{r.low:+.3g}, {r.high:+.3g}] on {r.n} documents, {p}: "
                   + {"B better": "best ahead", "A better": "runner-up ahead"}.get(r.verdict, r.verdict))
    return out if any_done else None


def best_blocks(table: pd.DataFrame, score: str, keys: pd.Series | None = None) -> list:
    """The best-per-family section: a best configuration is named only where the noise allows it. `keys`: the
    table's config_keys where the caller has them (analysis.schema.keys_of)."""
    best = best_per_family(table, score, keys=keys)
    if best.empty:
        return ["_(no completed run has a value of this score)_"]
    extreme = "highest" if higher_is_better(table, score) else "lowest"
    shown = pd.DataFrame({
        "family": best["family"],
        "best configuration": [label if clear is not False else f"no clear best ({extreme}: {label})"
                               for label, clear in zip(best["label"], best["clear"])],
        score: best[score], "± 95%": style.Z95 * pd.to_numeric(best["se"], errors="coerce"),
        "configurations": best["n_configs"], "verdict": best["verdict"]})
    for column in ("n_layers", "d_model", "params_active"):
        if column in best:
            shown[column] = best[column].to_numpy()
    paired = _paired_column(table, score, best, keys)
    if paired is not None:
        shown["paired test vs runner-up"] = paired
    rule = (f"A configuration is named its family's best only when it beats each other configuration of the "
            f"family by more than {BEST_Z:g} standard errors of the difference (z = difference / sqrt(se_a^2 + "
            "se_b^2)); otherwise the family is listed with no clear best.")
    lines = [rule]
    tested = best[best["n_configs"] > 1]
    if len(tested) and tested["clear"].isna().all():
        lines.append(f"No uncertainty is known for {score} (no stderr, one seed): the values below are the {extreme} "
                     f"per family ({extreme} is best for {score}), not tested against noise.")
    elif len(tested) and not (tested["clear"] == True).any():
        lines.append("No family has a configuration that beats its others beyond noise: no best configuration is "
                     "claimed.")
    return [*lines, shown]


LR_METHOD = ("Learning rate is a nuisance axis: runs that differ only in seed and lr are one configuration. Each "
             "configuration is scored at its best lr (the mean over seeds at each lr, the best of those) and at the "
             "shared lr (the point's own lr, lr_multiplier 1 of hydra.sweeper.lr_search). A best lr at the lowest or "
             "highest lr tried is flagged: the optimum may lie outside the grid, so that score is a bound, not the "
             "configuration's best. Tiers, thresholds and best-per-family above use the best lr.")


def _tier_line(result) -> str:
    if not result.split:
        return f"no split — {result.reason}"
    return "; ".join(f"tier {t.rank}: {', '.join(t.members)}" for t in result.tiers)


def lr_blocks(table: pd.DataFrame, score: str, study: Study | None = None) -> list:
    """The learning-rate section: each configuration at the shared lr and at its best lr, both rankings, the
    edge flags, tiers under both (the study's, analysis.study), and the score-against-lr figure."""
    keys = study.keys_for(table) if study is not None else config_keys(table)
    if not lr_varies(table, score, keys):
        if len(lrs_tried(table)) >= 2:  # the sweep searched lr: what became of it
            reason = one_lr_reason(table)
            return [f"{reason[0].upper()}{reason[1:]}. Every comparison here is at the lr each configuration "
                    "completed at.", ("figure", "lr")]
        return ["Every configuration ran at one learning rate, so every comparison here is at that lr, and a shape "
                "far from its own best lr looks worse than it is. `hydra.sweeper.lr_search`, e.g. [0.25,0.5,1,2,4], "
                "runs each point at those multiples of its lr; the report then compares configurations at their best "
                "lr.", ("figure", "lr")]
    best = at_best_lr(table, score, keys=keys)
    labels = lr_labels(table, best)
    edge = best["edge"].notna()
    frame = pd.DataFrame({
        "configuration": labels.to_numpy(), "lrs tried": best["n_lrs"].to_numpy(),
        "shared lr": best["shared_lr"].to_numpy(), f"{score} at shared lr": best["shared"].to_numpy(),
        "rank (shared)": best["rank_shared"].to_numpy(), "best lr": best["best_lr"].to_numpy(),
        f"{score} at best lr": best["tuned"].to_numpy(), "seeds": best["tuned_seeds"].to_numpy(),
        "rank (best lr)": best["rank_tuned"].to_numpy(),
        "flag": [f"widen the grid ({e})" if isinstance(e, str) else "" for e in best["edge"]]})
    ranked = best.dropna(subset=["shared"])
    moved = int((ranked["rank_shared"].astype(int) != ranked["rank_tuned"]).sum())
    lines = [LR_METHOD]
    if len(ranked) >= 3:
        rho = float(ranked["rank_shared"].astype(float).corr(ranked["rank_tuned"].astype(float), method="spearman"))
        lines.append(f"Rankings: {moved} of {len(ranked)} configurations change rank between the shared lr and their "
                     f"best lr (Spearman correlation of the two rankings {rho:.2f}).")
    if edge.any():
        verb = "is" if int(edge.sum()) == 1 else "are"
        lines.append(f"**{int(edge.sum())} of {len(best)} configurations {verb} best at the edge of the lr grid**: "
                     f"{', '.join(labels[edge])}. The optimum is not known there; widen hydra.sweeper.lr_search.")
    else:
        lines.append(f"Every configuration's best lr is inside its grid ({counted(len(best), 'configuration')}).")
    study = study if study is not None and study.score == score else analyse(table, score)
    if SHARED in study.views and len(study.view(SHARED).rows):
        lines.append(f"Tiers of {score} at the shared lr: {_tier_line(study.view(SHARED).tiers(score))}. "
                     f"At each configuration's best lr: {_tier_line(study.tiers(score))}.")
    return [*lines, frame, ("figure", "lr")]


def claims_blocks(table: pd.DataFrame, score: str, study: Study | None = None) -> list:
    """The study's claims judged on these runs (analysis.claims): supported, not supported or not testable; the
    tiers and the threshold are the sections' own results (analysis.study)."""
    study = study if study is not None and study.score == score else analyse(table, score)
    summary = seeds_summary(table, score, study.keys_for(table))
    return ["Each claim of a depth x width study, tested on these runs (analysis/claims.py says how; the tiers and "
            "the threshold are the results of the sections above): " + summary + ".",
            *filter(None, [tokens_caution(table, score)]), judge(table, score, study=study)]


def chance_blocks(table: pd.DataFrame, headline) -> list:
    """The scores read against their chance level; for a metric at chance for the study (analysis.headline),
    a table of its configurations nearest and farthest from chance."""
    lines = chance_lines(table)
    rows = [{"metric": c.column, "name": name_of(c.column), "chance": c.chance,
             "configurations within noise of chance": f"{c.near_chance} of {c.configurations}"}
            for c in headline.at_chance]
    if rows:
        lines.insert(0, "These metrics do not rank the architectures yet: half or more of the configurations "
                        "score within noise of chance, so the verdict above does not rest on them.")
    return lines + ([pd.DataFrame(rows)] if rows else [])


def _tier_blocks(study: Study, table: pd.DataFrame) -> list:
    """The Tiers section: the study's tiers of the headline metric (and of the validation loss), and where the
    claims' single 2-tier test reads otherwise than the search, both."""
    blocks: list = ["How tiers are decided: appendix."]
    for column in dict.fromkeys([study.score, nll_column(table)]):
        if column not in table or table[column].notna().sum() == 0:
            continue
        result = study.tiers(column)  # a diffusion bound apart from exact NLLs
        lines = [f"**{column}**: " + (f"{result.k} tiers." if result.split else f"no split — {result.reason}.")]
        if not result.split and column == study.score and study.verdict.clear_leader:
            lines.append(f"- both hold: the verdict's leader, {study.verdict.ranked.iloc[0]['label']}, is ahead of "
                         "every other configuration beyond noise, one pair at a time; tiers need groups of at least "
                         "2 configurations apart by a gap that is large against the spread within them, and one "
                         "leader is not such a group")
        for tier in result.tiers if result.split else []:
            lines.append(f"- tier {tier.rank} ({tier.n}): {', '.join(tier.members)} — {_fmt(tier.low)} to "
                         f"{_fmt(tier.high)}")
        lines += [f"- {describe_gap(g)}" for g in result.gaps]
        two = result.two_tiers
        if column == study.score and two is not None and two.split != result.split:
            gap = two.gaps[0] if two.gaps else None
            lines.append("- the 2-tier partition on its own (the Claims table's *two tiers*: one test at "
                         f"{two.alpha:g}, not a search over k): " + (
                             f"{two.tiers[0].n} + {two.tiers[1].n} configurations, gap {format_p(gap.p_value)}: "
                             "supported" if two.split else f"not supported ({two.reason})"))
        lines += [f"- note: {n}" for n in result.notes]
        blocks.append("\n".join(lines))
    blocks.append(("figure", "tiers"))
    return blocks



def _unfinished_blocks(table: pd.DataFrame) -> list:
    """The "Runs that did not complete" section: one row per run that started and did not end as its sweep meant it
    to (a pruned run did: the Successive halving or Optuna search section lists them), with its error or, for a stopped run, the
    signal and step; the jobs that never started in one line (their keys would make tall rows of nothing)."""
    if "status" not in table:
        return []
    problems = table[~table["status"].isin(["completed", "pruned", "pending"])]
    pending = int((table["status"] == "pending").sum())
    blocks: list = []
    if len(problems):
        blocks.append(pd.DataFrame({"run": problems["run"].to_numpy(), "status": problems["status"].to_numpy(),
                                    "error": problems["error"].fillna("").to_numpy() if "error" in problems else ""}))
    if pending:
        groups = sorted(table.loc[table["status"] == "pending", "sweep"].dropna().astype(str).unique()) \
            if "sweep" in table else []
        where = f" (`slm-status {groups[0]}` lists them)" if len(groups) == 1 else ""
        blocks.append(f"{pending} job{'s' if pending != 1 else ''} of the sweep not started yet{where}.")
    return [("Runs that did not complete", blocks)] if blocks else []


def sections(table: pd.DataFrame, results_path: str, score: str | None = None, study: Study | None = None,
             skipped: dict | None = None, ladder: list | None = None,
             ladder_verdict: list | None = None) -> list[tuple[str, list]]:
    """[(heading, [blocks])], a block being a str (paragraph), a DataFrame (table) or ("figure", kind). The
    report opens with the verdict on the headline metric (analysis.headline, analysis.verdict; `score`: the
    user's choice) and ends with the appendix of methods and tests. Every statistic comes from one
    analysis.study.Study (`study`, else made here). `skipped`: {plot kind: why} of the figures not drawn (plots
    draw only what has data); their blocks are left out and the Summary names them. `ladder`: the blocks of a ladder
    sweep's Rankings across scale section (analysis.decide_report), after the Summary; `ladder_verdict`: a ladder's
    verdict, per rung and at the target, in place of the ranking of (configuration x rung) cells."""
    study = study if study is not None else analyse(table, score)
    headline, verdict = study.headline, study.verdict
    score, note = headline.column, headline.note
    short = too_short_warning(table)
    out = [("Verdict", ([short] if short else []) + (ladder_verdict or verdict.blocks()))]
    chance = chance_blocks(table, headline)
    if chance:
        out.append(("Tasks at chance" if headline.at_chance else "Scores against chance", chance))
    counts = table["status"].value_counts() if "status" in table else pd.Series(dtype=int)
    status = ", ".join(f"{int(counts[s])} {s}" for s in ALL_STATUSES if s in counts) or "none"
    intro = [f"Results: `{results_path}` — {len(table)} run{'' if len(table) == 1 else 's'} ({status})."]
    if score:
        why = "chosen with --score" if headline.explicit else "the verdict's headline metric"
        intro.append(f"Score used below: **{score}** ({score_label(table, score)}; {why}).")
        intro += uncertainty_lines(table, score)
    else:
        intro.append(f"No score available: {note}.")
    if skipped is not None:
        intro.append(drawn_line(skipped) + ".")
    out.append(("Summary", intro))
    if ladder:
        out.append(("Rankings across scale", ladder))
    halving = halving_blocks(table)
    if halving:
        out.append(("Successive halving", halving))
    search = search_blocks(table)
    if search:
        out.append(("Optuna search", search))

    # a pruned run ended as its sweep meant it to (the Successive halving or Optuna search section lists it)
    out += _unfinished_blocks(table)

    health = health_blocks(table)
    if health:
        out.append(("Training health", health))

    if score:
        out.append(("Tiers", _tier_blocks(study, table)))
        blocks = ["How the threshold is decided: appendix."]
        threshold = study.threshold()
        if threshold is not None:
            blocks.append(threshold.summary())
        blocks.append(("figure", "threshold"))
        out.append(("Hidden-size threshold", blocks))

        out.append(("Best configuration per family", best_blocks(table, score, study.keys_for(table))))
        out.append(("Learning rate", lr_blocks(table, score, study)))
        out.append(("Claims", claims_blocks(table, score, study)))

    out.append(("Depth against score", [("figure", "depth")]))
    blocks = [("figure", "throughput")]
    measure = table["peak_memory_measure"] if "peak_memory_measure" in table else pd.Series(dtype=object)
    if measure.eq("process_peak_rss").any() and not (skipped or {}).get("throughput"):
        blocks.insert(0, "Peak memory is drawn (as marker size) only where it was measured per run: on a GPU, "
                         "torch.cuda.max_memory_allocated after a reset. A CPU run's peak memory is its process's "
                         "peak resident set size (ru_maxrss), which only grows over every job the process ran (a "
                         "local sweep runs many), so it would show job order, not the model: it is left out.")
    out.append(("Decode speed", blocks))
    loss = nll_column(table)
    front = nll_frontier(table, y=loss)
    blocks = []
    if len(front):
        frame = pd.DataFrame({"run": run_labels(table).loc[front.index].to_numpy(),
                              "train FLOPs": front["train_flops"].to_numpy(), _short(loss): front[loss].to_numpy()})
        bounds = bound_rows(style.completed_runs(table), loss)
        blocks.append("Runs that no other run beats on both training compute and validation NLL"
                      + (" (a diffusion NELBO is a bound, never on the frontier of exact NLLs)"
                         if bounds.any() and (~bounds).any() else "") + ":")
        blocks.append(frame)
    blocks.append(("figure", "pareto"))
    out.append(("NLL against training FLOPs", blocks))
    out.append(("Per-task scores", [("figure", "heatmap")]))
    budget = budget_blocks(table)
    if budget:
        out.append(("Parameter budget", budget))
    runs = [run_table(table, score)]
    if "params_active" in table and (table["params_active"] != table["params_total"]).any():
        runs.insert(0, "Sizes are active parameters per token (a mixture of experts uses only its routed experts, "
                       "so its total is larger); training FLOPs follow the active parameters.")
    out.append(("All runs", runs))
    out.append(("Appendix: how the verdict was decided", [*verdict.appendix(), TIER_METHOD, THRESHOLD_METHOD]))
    if skipped:  # a figure not drawn leaves no block; a section left with nothing goes
        out = [(heading, [b for b in blocks if not (isinstance(b, tuple) and b[1] in skipped)])
               for heading, blocks in out]
        out = [(heading, blocks) for heading, blocks in out if blocks]
    return out


def document(title: str, parts: list, generated: str, captions: dict | None = None) -> list[doc.Block]:
    """The report as one list of blocks (analysis.document), made once and rendered to both files: the title, the
    note of when it was made, then each section's heading and blocks (sections(): a str is a paragraph, its "- "
    lines bullets; a DataFrame a table; ("figure", kind) the plot's figure with its caption)."""
    captions = captions or {}
    blocks: list[doc.Block] = [doc.Heading(title, 1), doc.Note(f"Generated {generated} by slm-report.")]
    for heading, section in parts:
        blocks.append(doc.Heading(heading))
        for block in section:
            if isinstance(block, pd.DataFrame):
                blocks.append(doc.Table(block))
            elif isinstance(block, doc.Figure):
                blocks.append(block)
            elif isinstance(block, tuple):
                kind = block[1]
                blocks.append(doc.Figure(TITLES[kind], f"{FIGURES}/{FILE_NAMES[kind]}", captions.get(kind, "")))
            else:
                blocks.append(doc.Paragraph.of(block))
    return blocks


REQUIRED_COLUMNS = ("run", "status")
"""Columns every results table from slm-collect has; a report also needs one metric column (val_nll, score_*, ...)."""


def check_table(table: pd.DataFrame) -> None:
    """ValueError naming what a results table lacks for a report: the columns slm-collect always writes, and at
    least one metric column (its values may all be missing: runs that failed are still reported)."""
    missing = [c for c in REQUIRED_COLUMNS if c not in table]
    if not any(role_of(str(c)) == "metric" for c in table.columns):
        scores = [m.name for m in METRICS.values() if m.is_score]  # slm.metrics
        missing.append(f"a metric ({', '.join(scores[:-1])} or {scores[-1]})")
    if missing:
        raise ValueError(f"not a results table: it lacks the column(s) {', '.join(missing)} (it has "
                         f"{', '.join(map(str, table.columns[:8]))}{', ...' if len(table.columns) > 8 else ''}); "
                         "make one with slm-collect <runs>, or pass the runs directory itself")


def build_report(results_path: str | os.PathLike, out_dir: str | os.PathLike, score: str | None = None,
                 title: str = "slm results", table: pd.DataFrame | None = None) -> Path:
    """Draw the plots that have data into out_dir/figures and write out_dir/report.md and report.html; returns the
    HTML report's path. results_path: a results table (.parquet/.csv) or a runs directory; `table`: the
    results already loaded from it (else they are loaded here). Every statistic, in the sections and the
    figures, is computed once (analysis.study)."""
    return write_report(results_path, out_dir, score, title, table)[0]


def write_report(results_path: str | os.PathLike, out_dir: str | os.PathLike, score: str | None = None,
                 title: str = "slm results", table: pd.DataFrame | None = None) -> tuple[Path, dict]:
    """build_report, returning (the HTML report's path, {plot kind: why it was not drawn})."""
    table = load_results(results_path) if table is None else table
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    study = analyse(table, score)  # the figures plot the verdict's metric
    drawn = draw_all(table, out_dir / FIGURES, score=study.score, study=study)
    skipped = not_drawn(drawn)
    captions = {kind: style.caption(fig) for kind, (fig, _) in drawn.items() if kind not in skipped}
    from analysis.decide_report import ladder_parts

    ladder_verdict, ladder = ladder_parts(table, out_dir / FIGURES)
    parts = sections(table, str(results_path), score, study=study, skipped=skipped, ladder=ladder,
                     ladder_verdict=ladder_verdict)
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")  # the same stamp in both files
    blocks = document(title, parts, generated, captions)
    (out_dir / "report.md").write_text(doc.markdown(blocks))
    path = out_dir / "report.html"
    path.write_text(doc.html(blocks, out_dir / FIGURES))
    return path, skipped
