"""The verdict the report opens with: the configurations ranked on the headline metric (analysis.headline)
with 95% intervals, which differences are beyond noise, how the families compare along the axis the sweep
varies, and what the data do not settle. Plain words here; the tests behind them go to the appendix.

    v = build_verdict(table, choose_headline(table))
    v.blocks()          # report blocks: paragraphs and the ranking table
    v.appendix()        # the candidate metrics and every pair test

Pair tests. Pairs tested: the leader against each other configuration, each configuration against the next
in the ranking, and, for the family comparison, neighbouring families at each value of the swept axis.
Two questions, answered by different tests (QUESTIONS): whether the architectures differ needs repeated seeds;
whether these two trained models differ on these documents is a test over documents. The pair's test is
z = difference / sqrt(se_a^2 + se_b^2), its p and 95% interval from Student's t with Welch-Satterthwaite degrees of
freedom (an se from n seeds has n - 1, a pooled one the pooled count; lm-eval's stderr counts as known, so the
normal values). Where both kept per-document results for the headline task (for a validation loss: its
bits-per-byte task, document_task), the paired test on the documents both scored (analysis.paired: McNemar's exact
test for 0/1 scores, else a paired t-test; a paired bootstrap 95% interval) is shown beside it; with one seed and a
task score it is the pair's test instead (the documents are the only noise known), and its question says so. A
configuration's own 95% interval is value ± t(df) se, df its se's degrees of freedom. A difference is beyond noise
when p < 0.05 / m, m the number of pairs tested
(Bonferroni); untested when neither is possible (no per-document results, no standard error, one seed).

A table with runs of a successive-halving sweep (analysis.halving.VerdictPart): its configurations are named as the
sweep names them, the ranking is of those trained to the end, and every configuration the sweep compared is listed
beside it (the chosen one; the pruned ones at their rung, with their score and rank there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from analysis.halving import verdict_part
from analysis.headline import ALPHA, Headline, t_crit, units, welch_df
from analysis.labels import LABEL_AXES, run_labels
from analysis.metrics import bounds_left_out, higher_is_better, metric, metric_of, name_of, task_names
from analysis.plot_style import AXIS_NAMES, sweep_axis
from analysis.schema import budget_flags, keys_of
from analysis.tiers import units_of
from analysis.tuning import at_best_lr, lr_labels, lr_varies
from slm.words import counted

QUESTIONS = {"seeds": "the architectures (seed-to-seed spread)",
             "documents": "these two trained models, on these documents",
             "stderr": "these two trained models (lm-eval's standard error over documents)"}
"""The question each kind of pair test answers: only repeated seeds say whether two architectures differ; a test
over the documents says whether these trained weights do."""

RANKED_ROWS = 15
"""Configurations listed in the verdict's ranking table (the rest are in the Tiers section and All runs)."""


@dataclass
class PairTest:
    """The better-ranked configuration against the worse-ranked one (raw difference better - worse)."""

    better: str
    worse: str
    diff: float
    low: float | None = None
    high: float | None = None
    test: str = "none"
    p: float | None = None
    alpha: float | None = None
    reversed: bool = False
    """A paired test on the common documents found the order the other way round."""
    question: str = ""
    """What the test asks (QUESTIONS): whether the architectures differ (seeds), or whether these two trained
    models differ on these documents (per-document results, or lm-eval's standard error over documents)."""
    documents: PairTest | None = None
    """The per-document test of the same pair where it exists and is not the test itself (a second question)."""

    @property
    def beyond(self) -> bool | None:
        if self.p is None or self.alpha is None or not math.isfinite(self.p):
            return None
        return self.p < self.alpha and not self.reversed

    def word(self) -> str:
        return {True: "beyond noise", False: "within noise", None: "untested"}[self.beyond]


def _num(x) -> str:
    if x is None or not np.isfinite(x):
        return ""
    return f"{x:.4g}"


def _fmt_axis(value) -> str:
    try:
        f = float(value)
        return str(int(f)) if f.is_integer() else f"{f:g}"
    except (TypeError, ValueError):
        return str(value)


@dataclass
class Verdict:
    headline: Headline
    table: pd.DataFrame
    ranked: pd.DataFrame
    """Configurations, best first: label, value, se, n_seeds, runs, family, axis value."""
    tests: dict = field(default_factory=dict)
    """{(better label, worse label): PairTest}."""
    axis: str | None = None
    family_lines: list[str] = field(default_factory=list)
    unsettled: list[str] = field(default_factory=list)
    bound_lines: list[str] = field(default_factory=list)
    document_task: str | None = None
    """The lm-eval task of the per-document tests (the headline task, or for a validation loss its bits-per-byte
    task); None where no run kept per-document results of it."""
    halving: object = None
    """analysis.halving.VerdictPart where the table has runs of halving sweeps: the configurations they pruned."""

    @property
    def column(self) -> str | None:
        return self.headline.column

    def test(self, a: str, b: str) -> PairTest | None:
        return self.tests.get((a, b)) or self.tests.get((b, a))

    def interval(self, row) -> str:
        se = row["se"]
        if se is None or not np.isfinite(se) or se <= 0:
            return "unknown"
        half = float(t_crit(_df(row))) * se
        return f"[{_num(row['value'] - half)}, {_num(row['value'] + half)}]"

    # ---- blocks

    def blocks(self) -> list:
        """The verdict section: plain words, then the ranking table."""
        out = [self.headline.why]
        if self.column is None or self.ranked.empty:
            return out + ["Nothing to rank: no completed run has a value of this metric."] + (
                self.halving.blocks() if self.halving is not None else [])
        hib = higher_is_better(self.table, self.column)
        k = len(self.ranked)
        seeds = self.ranked["n_seeds"]
        seed_text = (("one seed each" if int(seeds.iloc[0]) == 1 else f"{int(seeds.iloc[0])} seeds each")
                     if seeds.nunique() == 1 else f"{int(seeds.min())} to {int(seeds.max())} seeds")
        lead = self.ranked.iloc[0]
        top = ", ".join(f"{r['label']} {_num(r['value'])}" + ("" if self.interval(r) == "unknown"
                                                               else f" {self.interval(r)}")
                        for _, r in self.ranked.head(5).iterrows())
        borrowed = "fill_sd" in self.ranked and (self.ranked["fill_sd"] > 0).any()
        out.append(f"**Ranking** on {name_of(self.column)} ({'higher' if hib else 'lower'} is better; "
                   f"{counted(k, 'configuration', 'configurations')}" + (" trained to the end" if self.halving else "")
                   + f", {seed_text}; 95% intervals where the noise is known"
                   + ("; a single-seed configuration borrows the seed-to-seed spread pooled over those with several"
                      if borrowed else "") + f"): {top}" + (f", … ({k - 5} more in the table)." if k > 5 else "."))
        if self.halving is not None:  # the configurations successive halving compared and pruned
            out += self.halving.blocks()
        if k >= 2 or self.halving is None:
            out.append(self._noise_line(lead))
        documents = self._documents_line()
        if documents:
            out.append(documents)
        out += self.bound_lines
        if self.family_lines:
            out.append("**By family:** " + " ".join(self.family_lines))
        if self.unsettled:
            out.append("**Not settled by these data:**\n" + "\n".join(f"- {u}" for u in self.unsettled))
        out.append(self.ranking_table())
        if k > RANKED_ROWS:
            out.append(f"_{k - RANKED_ROWS} more configurations: see Tiers and All runs._")
        return out

    def _noise_line(self, lead) -> str:
        k = len(self.ranked)
        if k < 2:
            return "One configuration: nothing to compare."
        vs_lead = [self.test(lead["label"], r["label"]) for _, r in self.ranked.iloc[1:].iterrows()]
        if all(t is None or t.beyond is None for t in vs_lead):
            return ("**Beyond noise:** not tested. " + self._why_untested()
                    + " The ranking is of single measurements.")
        behind = [t.worse for t in vs_lead if t and t.beyond]
        tied = [t.worse for t in vs_lead if t and t.beyond is False]
        text = f"**Beyond noise:** {lead['label']} leads; "
        if not tied:
            text += f"it is ahead of every other configuration beyond noise ({len(behind)} of {k - 1})."
        else:
            text += (f"{counted(len(tied), 'configuration is', 'configurations are')} within noise of it "
                     f"({_names(tied)}), so the best is not settled among them; "
                     + (f"it is ahead of the other {len(behind)} beyond noise." if behind else
                        "none is behind it beyond noise."))
            apart = [name for name in tied if self._intervals_apart(lead, name)]
            if apart:
                text += (f" ({_names(apart)}: the 95% intervals above do not overlap the leader's, yet the difference "
                         "is within noise: each interval is one configuration's own, at 95%; the test is of the "
                         "difference, at the Bonferroni level 0.05 / the number of pairs tested (the Tests table's "
                         "Bonferroni z), a stricter bar.)")
        adjacent = [self.test(a, b) for a, b in zip(self.ranked["label"], self.ranked["label"].iloc[1:])]
        if k > 2:
            steps = sum(bool(t and t.beyond) for t in adjacent)
            text += (f" Of the {len(adjacent)} neighbouring pairs in the ranking, "
                     f"{counted(steps, 'is', 'are')} apart beyond noise.")
        return text

    def _intervals_apart(self, lead, name: str) -> bool:
        """Whether the leader's and `name`'s 95% intervals (the Ranking's) do not overlap."""
        other = self.ranked[self.ranked["label"] == name]
        if other.empty:
            return False
        row = other.iloc[0]
        halves = []
        for r in (lead, row):
            se = r["se"]
            if se is None or not np.isfinite(se) or se <= 0:
                return False
            halves.append(float(t_crit(_df(r))) * se)
        return abs(float(lead["value"]) - float(row["value"])) > halves[0] + halves[1]

    @property
    def clear_leader(self) -> bool:
        """Whether the leader is ahead of every other configuration beyond noise (tested against each)."""
        if self.column is None or len(self.ranked) < 2:
            return False
        lead = self.ranked.iloc[0]
        tests = [self.test(lead["label"], r["label"]) for _, r in self.ranked.iloc[1:].iterrows()]
        return all(t is not None and t.beyond for t in tests)

    def _documents_line(self) -> str:
        """Where per-document tests exist beside (or instead of) tests over seeds: which question each answers."""
        own = [t for t in self.tests.values() if t.question == QUESTIONS["documents"]]
        second = [t.documents for t in self.tests.values() if t.documents is not None]
        if not own and not second:
            return ""
        tests = own or second
        differ = sum(bool(t.beyond) for t in tests)
        task = self.document_task or "the task"
        text = (f"**Two questions.** Per-document tests on {task} (paired over the documents both runs scored) say "
                f"whether these two trained models differ on these documents: {differ} of {len(tests)} pairs do "
                "(appendix). Only repeated seeds say whether the architectures differ: ")
        seeds = [t for t in self.tests.values() if t.question == QUESTIONS["seeds"]]
        if seeds:
            text += f"{sum(bool(t.beyond) for t in seeds)} of {len(seeds)} pairs do beyond their seed-to-seed spread."
        else:
            text += ("each configuration ran one seed, so that is untested; a per-document difference may not "
                     "survive a retrained seed.")
        return text

    def _why_untested(self) -> str:
        entry = metric(self.column) if self.column else None
        if entry is not None and entry.stderr:  # its standard error is recorded where there is one
            return ("No standard error is recorded for it and each configuration ran one seed, so its noise is "
                    "unknown.")
        name = name_of(self.column)
        return (f"{name[0].upper() + name[1:]} has no standard error and each configuration ran one seed, so its "
                "noise is unknown (repeat seeds, e.g. train.seed=0,1,2, to measure it).")

    def ranking_table(self) -> pd.DataFrame:
        shown = self.ranked.head(RANKED_ROWS)
        lead = shown["label"].iloc[0]
        labels = list(self.ranked["label"])
        rows = []
        for rank, (_, r) in enumerate(shown.iterrows(), 1):
            to_lead = "" if rank == 1 else self.test(lead, r["label"])
            nxt = self.test(r["label"], labels[rank]) if rank < len(labels) else None
            row = {"rank": rank, "configuration": r["label"], name_of(self.column): r["value"],
                   "95% interval": self.interval(r), "seeds": int(r["n_seeds"]),
                   "vs the best": to_lead.word() if to_lead else "",
                   "vs the next": nxt.word() if nxt else ""}
            if any(t.documents is not None for t in self.tests.values()):
                doc = nxt.documents if nxt else None
                row["vs the next, per document (these trained models)"] = (
                    _differ(doc) + ("" if doc.p is None else f" (p {_p(doc.p)})") if doc else "")
            rows.append(row)
        return pd.DataFrame(rows)

    def appendix(self) -> list:
        """How the headline was chosen and every pair test, for the report's appendix."""
        from analysis.headline import __doc__ as method

        order = method.split("Order tried:", 1)[1].split("\n\n", 1)[0].strip()
        out = ["**How the headline metric was chosen.** Order tried: " + " ".join(order.split()) + " A metric "
               "with a chance level is at chance when half or more of its configurations are within noise of it "
               "(value - chance <= 1.96 se). It separates the configurations when the largest z = |a - b| / "
               "sqrt(se_a^2 + se_b^2) over all pairs beats the Bonferroni critical value for those pairs "
               "(two-sided, alpha 0.05). The first metric not at chance that separates is the headline; else the "
               "first not at chance."]
        rows = [{"metric": c.column, "configurations": c.configurations,
                 "chance": "" if c.chance is None else f"{c.chance:.3g}",
                 "within noise of chance": "" if c.chance is None else f"{c.near_chance} of {c.configurations}",
                 "noise from": c.noise, "largest z": "" if c.max_z is None else f"{c.max_z:.2f}",
                 "Bonferroni z": "" if c.z_crit is None else f"{c.z_crit:.2f} ({counted(c.pairs, 'pair')})",
                 "separates": {True: "yes", False: "no", None: "untested"}[c.separates],
                 "chosen": "yes" if c.column == self.column else ""} for c in self.headline.candidates]
        if rows:
            out.append(pd.DataFrame(rows))
        if self.tests:
            m = len(self.tests)
            out.append(f"**Tests behind the verdict** ({counted(m, 'pair')}; beyond noise: p < 0.05 / {m} = {ALPHA / m:.2g}, "
                       "Bonferroni). Paired on the documents both configurations scored where they kept "
                       "per-document results (McNemar's exact test for 0/1 scores, else a paired t-test; paired "
                       "bootstrap interval); else z = difference / sqrt(se_a^2 + se_b^2), with p and interval "
                       "from Student's t on the Welch-Satterthwaite degrees of freedom (a standard error from n "
                       "seeds has n - 1: with few seeds the intervals are wide, as they should be). "
                       "difference = better-ranked - worse-ranked.")
            documents = any(t.documents is not None for t in self.tests.values())
            out.append(pd.DataFrame([{
                "better-ranked": t.better, "worse-ranked": t.worse, "difference": _num(t.diff),
                "95% interval": "" if t.low is None else f"[{_num(t.low)}, {_num(t.high)}]", "test": t.test,
                "p": _p(t.p),
                "result": t.word() + (" (order reversed on the common documents)" if t.reversed else ""),
                "question": t.question,
                **({"per-document test (these trained models)": _doc_cell(t.documents)} if documents else {})}
                for t in self.tests.values()]))
        return out


def _doc_cell(t: PairTest | None) -> str:
    """A per-document test in one cell: difference, test, p and result."""
    if t is None:
        return ""
    return (f"{_num(t.diff)} [{_num(t.low)}, {_num(t.high)}], {t.test}, p {_p(t.p)}: {_differ(t)}"
            + (" (order reversed)" if t.reversed else ""))


def _differ(t: PairTest) -> str:
    """A per-document test's result in its own words: these weights differ on these documents, or not."""
    if t.p is None or t.alpha is None or not math.isfinite(t.p):
        return "untested"
    return "differ" if t.p < t.alpha else "no difference detected"


def _p(p: float | None) -> str:
    return "" if p is None or not np.isfinite(p) else "< 1e-4" if p < 1e-4 else f"{p:.2g}"


def _names(labels: list[str], limit: int = 5) -> str:
    return ", ".join(labels[:limit]) + (f" and {len(labels) - limit} more" if len(labels) > limit else "")


# ---------------------------------------------------------------------------------------------- building


def document_task(table: pd.DataFrame, column: str) -> str | None:
    """The lm-eval task whose per-document results test `column` pair by pair (its entry's `documents`,
    slm.metrics): the task of a score_<task>; for a validation loss, the first task scored in bits per byte (the
    same quantity, the model's log-likelihood of held-out text, on the task's documents); None otherwise."""
    entry = metric(column)
    documents = entry.documents if entry is not None else None
    if documents is None:
        return None
    if documents.startswith("<"):  # the task's own
        return column[len(entry.prefix):]
    return next((t for t in task_names(table)
                 if (metric_of(table, f"score_{t}") or "").split(",")[0] == documents), None)


def _paired(table: pd.DataFrame, column: str, better, worse) -> PairTest | None:
    """The paired test on per-document results (document_task), or None where the runs did not keep them."""
    from analysis.paired import PairedError, paired_groups

    task = document_task(table, column)
    if task is None or "run_dir" not in table:
        return None
    dirs = [[str(table.at[i, "run_dir"]) for i in u["runs"]] for u in (worse, better)]
    try:
        r = paired_groups(dirs[0], dirs[1], task)
    except (PairedError, OSError, ValueError):
        return None
    hib = higher_is_better(table, f"score_{task}") if f"score_{task}" in table else r.higher_is_better
    reversed_ = r.diff != 0 and (r.diff > 0) != bool(hib)
    test = f"paired {'McNemar' if r.n01 is not None else 't'} on {r.n} documents"
    return PairTest(better["label"], worse["label"], r.diff, r.low, r.high, test, r.p, reversed=reversed_,
                    question=QUESTIONS["documents"])


def _unpaired(better, worse) -> PairTest:
    diff = float(better["value"] - worse["value"])
    spread = math.sqrt(float(better["se"]) ** 2 + float(worse["se"]) ** 2) \
        if np.isfinite(better["se"]) and np.isfinite(worse["se"]) else math.nan
    if not np.isfinite(spread) or spread <= 0:
        return PairTest(better["label"], worse["label"], diff, test="none: no noise estimate",
                        question=QUESTIONS["seeds"] + ": untested, one seed and no standard error")
    z = abs(diff) / spread
    df = float(welch_df(float(better["se"]), _df(better), float(worse["se"]), _df(worse)))
    half = float(t_crit(df)) * spread
    dof = "" if math.isinf(df) else f", t with {df:.3g} df"
    return PairTest(better["label"], worse["label"], diff, diff - half, diff + half,
                    f"z = {z:.2f} (unpaired{dof})", float(2 * student_t.sf(z, df)),
                    question=QUESTIONS["seeds" if _from_seeds(better) and _from_seeds(worse) else "stderr"])


def _from_seeds(row) -> bool:
    """Whether a configuration's se comes from seeds (its own several, or the pooled spread it borrows)."""
    try:
        return int(row["n_seeds"]) >= 2 or float(row.get("fill_sd") or 0.0) > 0
    except (TypeError, ValueError):
        return False


def _df(row) -> float:
    """Degrees of freedom of a configuration's se (inf: known, e.g. lm-eval's stderr)."""
    try:
        df = float(row["se_df"])
    except (KeyError, TypeError, ValueError):
        return math.inf
    return df if df > 0 else math.inf  # nan: not recorded


def _pairs_across(ranked: pd.DataFrame, axis: str | None) -> tuple[dict, list[str], list[str]]:
    """{axis value: families best first} over the values shared by two or more families, restricted to the
    families present at every such value (core); and the families left out."""
    if axis is None or "family" not in ranked or ranked["family"].nunique() < 2:
        return {}, [], []
    best = ranked.drop_duplicates(["family", axis], keep="first")  # ranked best first: each family's best there
    counts = best.groupby(axis)["family"].nunique()
    shared = [v for v in counts.index if counts[v] >= 2]
    if len(shared) < 2:
        return {}, [], []
    at = {v: best[best[axis] == v] for v in shared}
    core = [f for f in best["family"].unique() if all((at[v]["family"] == f).any() for v in shared)]
    if len(core) < 2:
        return {}, [], []
    orders = {v: [f for f in at[v]["family"] if f in core] for v in sorted(shared, key=_sort_key)}
    others = [f for f in best["family"].unique() if f not in core]
    return orders, core, others


def _sort_key(v):
    try:
        return (0, float(v))
    except (TypeError, ValueError):
        return (1, str(v))


def build_verdict(table: pd.DataFrame, headline: Headline, paired: bool = True,
                  keys: pd.Series | None = None) -> Verdict:
    """The verdict on `headline.column` (module docstring for the tests); `keys`: the table's config_keys where the
    caller has them (analysis.schema.keys_of)."""
    column = headline.column
    if column is None:
        return Verdict(headline, table, pd.DataFrame())
    hib = higher_is_better(table, column)
    keys = keys_of(table, keys)
    u = units(table, column, keys)
    halving = verdict_part(table)
    if u.empty:
        return Verdict(headline, table, u, halving=halving)
    if halving is not None:  # a halving sweep's configurations as it names them (never by a seed)
        named = [halving.label_of(r[0]) or label for r, label in zip(u["runs"], u["label"])]
        if len(set(named)) == len(named):
            u["label"] = named
    first = [r[0] for r in u["runs"]]
    axis = sweep_axis(table.loc[first], exclude=("family",))
    for extra in ("family", axis):
        if extra and extra in table:
            u[extra] = table.loc[first, extra].to_numpy()
    u["se"] = pd.to_numeric(u["se"], errors="coerce").astype(float)
    ranked = u.sort_values("value", ascending=not hib, kind="stable").reset_index(drop=True)
    v = Verdict(headline, table, ranked, axis=axis, halving=halving)

    index = {label: i for i, label in enumerate(ranked["label"])}
    pairs = [(0, i) for i in range(1, len(ranked))] + [(i, i + 1) for i in range(1, len(ranked) - 1)]
    orders, core, others = _pairs_across(ranked, axis)
    best_at = {}
    for value, fams in orders.items():
        rows = ranked[(ranked[axis] == value) & ranked["family"].isin(fams)].drop_duplicates("family")
        best_at[value] = list(rows["label"])
        pairs += [(index[a], index[b]) for a, b in zip(best_at[value], best_at[value][1:])]
    pairs = list(dict.fromkeys(tuple(sorted(p)) for p in pairs))
    alpha = ALPHA / max(len(pairs), 1)
    v.document_task = document_task(table, column) if paired else None
    for i, j in pairs:
        better, worse = ranked.iloc[i], ranked.iloc[j]
        documents = _paired(table, column, better, worse) if paired else None
        if documents is not None and column.startswith("score_") and not (_from_seeds(better) and
                                                                         _from_seeds(worse)):
            test = documents  # one seed: the documents are the only noise there is; the question says so
        else:  # seeds answer whether the architectures differ; the documents, beside them, these weights
            test = _unpaired(better, worse)
            test.documents = documents
        for t in (test, test.documents):
            if t is not None:
                t.alpha = alpha
        v.tests[(better["label"], worse["label"])] = test
    v.family_lines = _family_lines(v, orders, best_at, others)
    v.bound_lines = _bound_lines(table, column, ranked, keys)
    v.unsettled = _unsettled(v, keys)
    return v


def _family_lines(v: Verdict, orders: dict, best_at: dict, others: list[str]) -> list[str]:
    if not orders:
        return []
    name = AXIS_NAMES.get(v.axis, v.axis)
    values = ", ".join(_fmt_axis(x) for x in orders)
    lists = list(orders.values())
    lines = []
    if all(order == lists[0] for order in lists):
        order = lists[0]
        lines.append(f"at every {name} ({values}) the order is {', '.join(order)} (best first): {order[-1]} is "
                     f"behind and {order[0]} ahead at every {name}.")
    else:
        firsts = {o[0] for o in lists}
        lasts = {o[-1] for o in lists}
        if len(lasts) == 1:
            lines.append(f"{lasts.pop()} is behind the other families at every {name} ({values}).")
        if len(firsts) == 1:
            lines.append(f"{firsts.pop()} is ahead of the other families at every {name} ({values}).")
        if not lines:
            lines.append(f"the order of the families changes with {name} ({values}).")
    steps = [v.test(a, b) for labels in best_at.values() for a, b in zip(labels, labels[1:])]
    steps = [t for t in steps if t is not None]
    beyond = sum(t.beyond is True for t in steps)
    if steps and all(t.beyond is None for t in steps):
        lines.append("(Not tested against noise.)")
    elif steps:
        lines.append(f"({beyond} of the {len(steps)} differences between neighbouring families at one {name} are "
                     "beyond noise.)")
    if others:
        lines.append(f"({', '.join(others)}: not run at every {name}, so not in this comparison.)")
    return lines


def _bound_lines(table: pd.DataFrame, column: str, ranked: pd.DataFrame, keys: pd.Series | None = None) -> list[str]:
    """What each diffusion bound left out of the ranking does and does not settle."""
    bounds = bounds_left_out(table, column)
    if bounds.empty or ranked.empty:
        return []
    exact = ranked["value"].to_numpy(float)
    labels = run_labels(table, [c for c in LABEL_AXES if c not in ("seed", "lr")], dedupe=False)  # as the ranking's
    lines = []
    for _, unit in units_of(bounds, column, keys=keys)[0].iterrows():
        unit["label"] = labels[unit["runs"][0]]
        value = float(unit["value"])
        below = int(np.sum(exact > value))
        seeds = "" if unit["n_seeds"] == 1 else f" (mean of {unit['n_seeds']} seeds)"
        text = f"{unit['label']}: its {_num(value)}{seeds} is a NELBO, an upper bound on its NLL, so it is not " \
               "ranked with exact NLLs. "
        if below == len(exact):
            text += "It is below every exact NLL here, so this model is ahead of all of them whatever its true NLL."
        elif below:
            text += (f"It is below {below} of the {len(exact)} exact NLLs (ahead of those whatever its true NLL); "
                     "against the others it is not settled.")
        else:
            text += "It is above every exact NLL here: how it compares is not settled (its true NLL is lower)."
        lines.append(text)
    return lines


def _unsettled(v: Verdict, keys: pd.Series | None = None) -> list[str]:
    out = []
    ranked, column, table = v.ranked, v.column, v.table
    tests = list(v.tests.values())
    if tests and all(t.beyond is None for t in tests):
        out.append("Whether any difference here exceeds run-to-run noise: no noise estimate (one seed per "
                   "configuration, no standard error).")
    elif len(ranked) >= 2:
        lead = ranked["label"].iloc[0]
        tied = [t.worse for t in tests if t.better == lead and t.beyond is False]
        if tied:
            out.append(f"Which is best among {lead} and {_names(tied)}: within noise of each other.")
        adjacent = [v.test(a, b) for a, b in zip(ranked["label"], ranked["label"].iloc[1:])]
        within = [t for t in adjacent if t and t.beyond is False]
        if within:
            out.append(f"The order of {len(within)} of the {len(adjacent)} neighbouring pairs in the ranking "
                       "(within noise of each other).")
    for c in v.headline.at_chance:
        out.append(f"Anything from {name_of(c.column)}: {c.near_chance} of {c.configurations} configurations are "
                   "within noise of chance (section Tasks at chance).")
    first = table.loc[[r[0] for r in ranked["runs"]]]
    if {"n_layers", "d_model"} <= set(first.columns):
        depth = pd.to_numeric(first["n_layers"], errors="coerce")
        width = pd.to_numeric(first["d_model"], errors="coerce")
        if depth.nunique() > 1 and width.nunique() > 1:
            rho = float(depth.corr(width, method="spearman"))
            if np.isfinite(rho) and abs(rho) >= 0.7:
                out.append(f"Depth against width: they moved together (Spearman rho {rho:+.2f}, e.g. a fixed "
                           "parameter budget), so an effect of depth here is also one of width.")
    if column and lr_varies(table, column, keys):
        best = at_best_lr(table, column, keys=keys)
        edge = best["edge"].notna()
        if edge.any():
            out.append(f"The best learning rate of {_names(list(lr_labels(table, best)[edge]))}: at the edge of its "
                       "grid, so its score is a bound on its best (section Learning rate).")
    flags = budget_flags(table[table["status"] == "completed"] if "status" in table else table)
    if flags.any():
        out.append(f"{int(flags.sum())} run(s) landed outside their parameter-budget tolerance: their size differs "
                   "from the others' more than the sweep meant (section Parameter budget).")
    return out
