"""The metrics a run records and the analysis reports, each declared once: its column name, what it is, where
result.json holds it, its label and unit, which way is better, whether a run's value is exact or a bound (and the
rule that decides it per run), its chance level and its standard-error column.

    from slm.metrics import METRICS, metric, LM_EVAL, TASKS
    metric("val_nll").direction             # "lower"
    metric("score_hellaswag").stderr        # "stderr_<task>": resolved per task by companion()
    LM_EVAL["acc_norm"].chance              # True: an argmax accuracy has a chance level
    TASKS["piqa"].chance                    # 0.5 (records from before the evaluation wrote it)

Standard library only: slm (slm.runs writes these fields into result.json) and analysis (analysis.metrics reads a
results table through them; analysis.schema makes the table's metric columns from them, and docs/results_table.md
lists them) both import it; it imports nothing of either.

Adding a report metric is one entry in METRICS (then `.venv/bin/python -c "import analysis.schema as s;
s.write_docs_page()"` rewrites docs/results_table.md): slm-collect writes its column from `source`, the headline,
tiers, verdict, claims, plots and report take its direction, label, unit, bound rule, chance and standard error from
the entry. A metric read from a run's validation curve part-way through training is the same one entry with
`curve_at` (val_nll_25); one read by another rule names its reader in analysis.records, a second file (DESIGN.md, "A
report metric read from a run's curve"). register() adds one at run time (tests, a notebook's own measurement).

A name with <task> or <suite> stands for one column per lm-eval task or averaged suite (score_<task> is
score_hellaswag, ...); companion() turns a pattern of the same entry (its stderr_<task>) into that column.
"""

from __future__ import annotations

from dataclasses import dataclass

LOWER, HIGHER = "lower", "higher"
BY_METRIC = "by its lm-eval metric"
"""Direction of a task score: its lm-eval metric's (LM_EVAL, the column named by `lm_metric`)."""
EXACT, BOUND, PER_RUN = "exact", "bound", "per run"
"""A metric's kind: every value exact, every value an upper bound, or decided per run (its `bound_when` rule)."""

NLL_KINDS = {"nll": EXACT, "nelbo": BOUND}
"""What an objective's nll is (slm.objectives: nll_kind, recorded as eval.val_nll_kind): an exact negative
log-likelihood, or a masked-diffusion NELBO, an upper bound on it."""
VAL_CURVE = "val_curve"
"""The record field (under eval) with every validation of a run, [[step, val_nll], ...]: val_nll_25 and val_nll_50 are
read from it."""
CURVE = ("eval", VAL_CURVE)
"""The source of a metric read from the validation curve (Metric.curve_at)."""
AVG_CURVE = ("eval", "val_curve_avg")
"""The averaged weights' validation curve (train.validation.averaging), read part-way as CURVE is."""
LATE = 3
"""Validations a run's late window holds: val_nll_last3 averages them (Signal and Noise's averaged checkpoint scores)
and val_nll_late_rsd is their spread (its noise of one run). A ladder validates 4 times (at 25%, 50%, 75%, 100%), so 3
is the most that stays in the second half of training; a run that validates often averages a flatter, later stretch."""
LOSS = "val_nll"
"""The loss every run records: the results table always has its column, and it is the default score of the
commands that rank runs (slm-claims, slm-fit)."""


def ppl_field(nll_kind: str | None) -> str:
    """The eval field of exp(val_nll): val_ppl where val_nll is exact, val_ppl_bound where it is a bound (NELBO)."""
    return "val_ppl_bound" if NLL_KINDS.get(nll_kind or "nll") == BOUND else "val_ppl"


@dataclass(frozen=True)
class BoundWhen:
    """The rule that makes a run's value a bound: the run's `column` (a results-table column and record field,
    `default` where a record predates it) is one of `values`; with `lm_eval`, also the task's lm-eval metric must be
    one an ELBO bounds (LM_EVAL[...].elbo_bound: bits per byte, perplexities)."""

    column: str
    values: tuple[str, ...]
    default: str
    lm_eval: bool = False

    def describe(self) -> str:
        text = f"{self.column} {' or '.join(self.values)}"
        return text + (" and an ELBO-bounded lm-eval metric" if self.lm_eval else "")


NELBO = BoundWhen("val_nll_kind", tuple(k for k, v in NLL_KINDS.items() if v == BOUND), "nll")
"""A masked-diffusion run's (val_nll_kind nelbo): its NLL-type values are NELBO bounds."""
NELBO_TASK = BoundWhen(NELBO.column, NELBO.values, NELBO.default, lm_eval=True)
"""A masked-diffusion run's perplexity-type lm-eval score: its log-likelihoods are Monte Carlo ELBO estimates."""


@dataclass(frozen=True)
class Metric:
    """One metric column of the results table (a name with <task> or <suite>: one column per task or suite)."""

    name: str
    doc: str
    """What it is (docs/results_table.md)."""
    source: tuple[str, ...] | str
    """Where result.json holds it: a path of keys (("eval", "val_bpb")), or the name of the reader in
    analysis.records that applies a rule (a fallback for older records, a per-run condition, a per-task lookup).
    With `curve_at`: the curve it is read from (CURVE, or AVG_CURVE: the averaged weights')."""
    where: str = ""
    """The source in words, for a reader (a path says itself)."""
    value: str = "number"
    """What the cells hold: number, integer, text (analysis.schema.KINDS)."""
    block: str | None = None
    """Where the results table shows it: "metrics" (after the counts), None (after the other blocks)."""
    label: str = ""
    """Its name in plain words ("validation NLL"); empty: not a score, a companion of one (its kind, its stderr)."""
    short: str = ""
    """Its header in the report's tables ("val NLL"; default: the name)."""
    unit: str = ""
    """Shown after the label on an axis ("nats/token"); empty where the label says it."""
    direction: str | None = None
    """LOWER, HIGHER, BY_METRIC (a task score), None (not a score)."""
    kind: str = EXACT
    """EXACT, BOUND, PER_RUN (bound_when decides for each run)."""
    bound_when: BoundWhen | None = None
    exact_only: bool = False
    """Where some runs' values are bounds and others' exact, comparisons (headline, verdict, tiers, thresholds,
    claims, the Pareto frontier) use the exact ones only; False: bounds are compared too (and drawn hollow)."""
    bound_label: str = ""
    """The axis label where every value is a bound."""
    mixed_label: str = ""
    """The axis label where some values are bounds and some exact."""
    stderr: str | None = None
    """Its standard-error column (a pattern of the same placeholder: stderr_<task>), None: none recorded."""
    chance: str | None = None
    """Its chance-level column (chance_<task>), None: no chance level."""
    lm_metric: str | None = None
    """The column naming its lm-eval metric ("metric_<task>": acc_norm,none), for a task score."""
    documents: str | None = None
    """Which per-document results test it pair by pair (analysis.verdict, analysis.paired): "<task>" for a task's
    own, or an lm-eval metric ("bits_per_byte": the first task scored in it measures the same quantity)."""
    across_tokenizers: str | None = None
    """A per-token metric: the metric compared instead where the runs' tokenizers differ (val_nll -> val_bpb)."""
    headline: bool = False
    """A headline candidate (analysis.headline: after the suite averages and accuracies, before the other task
    scores; across_tokenizers applied)."""
    curve_at: float | None = None
    """A value read part-way through training (0 < curve_at < 1): the validation in eval.val_curve nearest this
    fraction of training.max_steps, within 5% of the run's steps (analysis.records.curve_at); slm-decide proposes it
    as a proxy and judges it at the target rung too (stopping the target early is a cheaper rung)."""
    curve_last: int | None = None
    """A mean of the run's last k distinct validations in eval.val_curve (analysis.records.curve_mean; None with fewer):
    Signal and Noise's averaged checkpoint scores. Read at the end of the run, it costs the whole run's compute."""

    @property
    def prefix(self) -> str | None:
        """What every column of a pattern starts with ("score_" for score_<task>), None for one column."""
        return self.name.split("<")[0] if "<" in self.name else None

    @property
    def placeholder(self) -> str | None:
        """"<task>" or "<suite>" for a pattern, None for one column."""
        return self.name[len(self.prefix):] if self.prefix is not None else None

    @property
    def is_score(self) -> bool:
        """A value to rank runs on (it has a direction), not a companion column."""
        return self.direction is not None


METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("val_nll", "validation NLL (nats/token), or for a masked-diffusion run its NELBO: see val_nll_kind",
           ("eval", "val_nll"), block="metrics", label="validation NLL", short="val NLL", unit="nats/token",
           direction=LOWER, kind=PER_RUN, bound_when=NELBO, exact_only=True,
           bound_label="validation NELBO (nats/token; an upper bound on the NLL)",
           mixed_label="validation NLL; hollow: NELBO (an upper bound)", documents="bits_per_byte",
           across_tokenizers="val_bpb", headline=True),
    Metric("val_nll_kind", "nll: an exact NLL; nelbo: a masked-diffusion upper bound on the NLL (not comparable with "
           "nll)", "val_nll_kind", "eval.val_nll_kind (nll for records before it)", "text", "metrics",
           short="val NLL kind"),
    Metric("val_ppl", "validation perplexity (exp of val_nll) of a run whose val_nll is an exact NLL", "val_ppl",
           "eval.val_ppl of a run whose val_nll is exact", block="metrics", label="validation perplexity",
           direction=LOWER),
    Metric("val_ppl_bound", "exp of a masked-diffusion run's val_nll (a NELBO): an upper bound on its perplexity (a "
           "column only where some run has one)", "val_ppl_bound",
           "eval.val_ppl_bound, else (records before it) eval.val_ppl, of a diffusion run", block="metrics",
           label="validation perplexity bound", direction=LOWER, kind=BOUND),
    Metric("val_bpb", "validation NLL in bits per UTF-8 byte of text (val_nll / ln 2 / val_bytes_per_token): "
           "comparable across tokenizers; a bound when val_nll is one", ("eval", "val_bpb"), block="metrics",
           label="validation bits per byte", short="val bits/byte", direction=LOWER, kind=PER_RUN,
           bound_when=NELBO, exact_only=True, documents="bits_per_byte"),
    Metric("val_step", "the step val_nll was measured at", ("eval", "val_step"), block="metrics"),
    Metric("val_nll_25", "the validation NLL at 25% of training: eval.val_curve's validation nearest 25% of "
           "training.max_steps, within 5% of the run's steps (empty otherwise; a ladder validates at 25% and 50%)",
           CURVE, "eval.val_curve at 25% of training.max_steps", block="metrics",
           label="validation NLL at 25% of training", short="val NLL @25%", unit="nats/token", direction=LOWER,
           kind=PER_RUN, bound_when=NELBO, exact_only=True, curve_at=0.25),
    Metric("val_nll_50", "the validation NLL at 50% of training (as val_nll_25)", CURVE,
           "eval.val_curve at 50% of training.max_steps", block="metrics",
           label="validation NLL at 50% of training", short="val NLL @50%", unit="nats/token", direction=LOWER,
           kind=PER_RUN, bound_when=NELBO, exact_only=True, curve_at=0.5),
    Metric("val_nll_avg", "validation NLL of the run's averaged weights (train.validation.averaging: an EMA or LAWA "
           "average of the parameters) at its last validation, on val_nll's windows; empty for a run without",
           ("eval", "val_nll_avg"), block="metrics", label="validation NLL of the averaged weights",
           short="val NLL avg", unit="nats/token", direction=LOWER, kind=PER_RUN, bound_when=NELBO, exact_only=True),
    *(Metric(f"val_nll_avg_{int(at * 100)}", f"the averaged weights' validation NLL at {at:.0%} of training: "
             "eval.val_curve_avg's validation nearest there (as val_nll_25; empty for a run without "
             "train.validation.averaging): the averaged weights read part-way", AVG_CURVE,
             f"eval.val_curve_avg at {at:.0%} of training.max_steps", block="metrics",
             label=f"validation NLL of the averaged weights at {at:.0%} of training",
             short=f"val NLL avg @{at:.0%}", unit="nats/token", direction=LOWER, kind=PER_RUN, bound_when=NELBO,
             exact_only=True, curve_at=at) for at in (0.5, 0.25)),
    Metric(f"val_nll_last{LATE}", f"the mean validation NLL of the run's last {LATE} distinct validations in "
           "eval.val_curve (a validation within 5% of the run's steps of the next is the same point; empty with "
           "fewer): Signal and Noise's averaged checkpoint scores (Heineman et al. 2025)", CURVE,
           f"the mean of eval.val_curve's last {LATE} distinct validations", block="metrics",
           label=f"validation NLL, mean of the last {LATE} validations", short=f"val NLL last {LATE}",
           unit="nats/token", direction=LOWER, kind=PER_RUN, bound_when=NELBO, exact_only=True, curve_last=LATE),
    Metric("val_nll_late_rsd", f"the relative spread of the run's last {LATE} distinct validations (their standard "
           "deviation, ddof 0, over their mean): the noise of one run in Heineman et al.'s SNR (slm-decide's SNR "
           "(Heineman) column)", "late_rsd", f"eval.val_curve's last {LATE} distinct validations: std / mean",
           block="metrics"),
    Metric("val_nll_stable", "a decay branch's run: the validation NLL of the run it branched from at the branch's "
           "last step, in its stable phase (WSD-S: the loss before the decay, at the step and compute of the branch's "
           "val_nll after it); empty for other runs", "stable_loss",
           "eval.val_curve of the run named by branch.of, at branch.steps", block="metrics",
           label="validation NLL before the decay", short="val NLL stable", unit="nats/token", direction=LOWER,
           kind=PER_RUN, bound_when=NELBO, exact_only=True),
    Metric("test_nll", "test NLL (nats/token) of the first train.validation.windows windows of the test split",
           ("eval", "test_nll"), label="test NLL", unit="nats/token", direction=LOWER, kind=PER_RUN,
           bound_when=NELBO, exact_only=True),
    Metric("test_targets", "tokens scored for test_nll", ("eval", "test_targets")),
    Metric("test_bpb", "test NLL in bits per UTF-8 byte (train.validation.windows runs)", ("eval", "test_bpb"),
           label="test bits per byte", direction=LOWER, kind=PER_RUN, bound_when=NELBO, exact_only=True),
    Metric("val_bytes_per_token", "UTF-8 bytes of text per token of the validation split (the mix's sources "
           "weighted)", ("eval", "val_bytes_per_token")),
    Metric("test_bytes_per_token", "UTF-8 bytes of text per token of the test split",
           ("eval", "test_bytes_per_token")),
    # a records run's (train.objective=sft) greedy accuracies under teacher forcing: the synthetic probes' (docs/probes.md)
    Metric("val_token_acc", "share of the validation completions' tokens that are their position's argmax (an sft "
           "run, teacher-forced)", ("eval", "val_token_acc"), block="metrics", label="completion token accuracy",
           short="token acc", unit="fraction", direction=HIGHER),
    Metric("val_exact_acc", "share of the validation completions whose every token is its position's argmax (an "
           "sft run, teacher-forced)", ("eval", "val_exact_acc"), block="metrics", label="exact completion accuracy",
           short="exact acc", unit="fraction", direction=HIGHER),
    # lm-eval, per task and per suite
    Metric("score_<task>", "headline lm-eval value of the task (metric_<task> names it)", "score",
           "eval.lm_eval.scores[task]", label="<task>", direction=BY_METRIC, kind=PER_RUN, bound_when=NELBO_TASK,
           stderr="stderr_<task>", chance="chance_<task>", lm_metric="metric_<task>", documents="<task>"),
    Metric("stderr_<task>", "lm-eval's standard error of score_<task>", "stderr",
           "eval.lm_eval.details[task][\"<metric>_stderr,<filter>\"]"),
    Metric("metric_<task>", "lm-eval's \"metric,filter\" key of the headline value", "metric",
           "eval.lm_eval.metrics[task]", "text"),
    Metric("samples_<task>", "documents scored", "samples", "eval.lm_eval.details[task].samples"),
    Metric("chance_<task>", "random-guess accuracy of a multiple-choice task (mean over its documents of 1 / choices); "
           "empty for other tasks", "chance", "eval.lm_eval.details[task].chance, else slm.metrics.TASKS"),
    Metric("avg_<suite>", "mean headline score of the suite's averaged tasks", "suite_average",
           "eval.lm_eval.averages[suite]", label="<suite> average", direction=HIGHER, stderr="stderr_avg_<suite>",
           chance="chance_avg_<suite>"),
    Metric("stderr_avg_<suite>", "standard error of avg_<suite>: sqrt(sum of the tasks' stderr^2) / k, assuming "
           "independent tasks; empty when a task has no stderr", "suite_stderr", "the members' stderr_<task>"),
    Metric("chance_avg_<suite>", "mean chance level of the averaged tasks (when every one has one)", "suite_chance",
           "the members' chance_<task>"),
    Metric("tasks_avg_<suite>", "the tasks averaged into avg_<suite>, comma-separated", "suite_tasks",
           "eval.lm_eval.average_tasks[suite], else the run's eval config", "text"),
)}
"""Every metric column, in the order the collector writes them (analysis.schema places them after the training
columns). One entry per metric: adding one here adds its column to slm-collect's table and teaches the analysis
how to read it."""


@dataclass(frozen=True)
class LmEvalMetric:
    """One lm-eval metric (the part of a task's "metric,filter" key before the comma)."""

    name: str
    label: str
    direction: str
    fraction: bool = False
    """Its values are fractions (0 to 1): the axis says so."""
    chance: bool = False
    """An argmax accuracy: a random guess has a chance level (the mean over documents of 1 / choices)."""
    elbo_bound: bool = False
    """A perplexity-type metric: an upper bound where the log-likelihoods are ELBO estimates (a masked diffusion
    model's, slm.eval.lm_diffusion). The same list as slm.eval.score_lines.BOUND_METRICS."""


LM_EVAL: dict[str, LmEvalMetric] = {m.name: m for m in (
    LmEvalMetric("acc", "accuracy", HIGHER, fraction=True, chance=True),
    LmEvalMetric("acc_norm", "normalised accuracy", HIGHER, fraction=True, chance=True),
    LmEvalMetric("exact_match", "exact match", HIGHER, fraction=True),
    LmEvalMetric("mc1", "mc1", HIGHER, fraction=True),
    LmEvalMetric("mc2", "MC2", HIGHER, fraction=True),
    LmEvalMetric("f1", "f1", HIGHER, fraction=True),
    LmEvalMetric("em", "em", HIGHER, fraction=True),
    LmEvalMetric("format_valid", "format-valid rate", HIGHER, fraction=True),  # slm_toolcall*: slm.toolcall.verifier
    LmEvalMetric("name_acc", "tool-name accuracy", HIGHER, fraction=True),
    LmEvalMetric("args_acc", "argument accuracy", HIGHER, fraction=True),
    LmEvalMetric("result_acc", "result accuracy", HIGHER, fraction=True),
    LmEvalMetric("bits_per_byte", "bits per byte", LOWER, elbo_bound=True),
    LmEvalMetric("byte_perplexity", "byte perplexity", LOWER, elbo_bound=True),
    LmEvalMetric("word_perplexity", "perplexity per whitespace word", LOWER, elbo_bound=True),
    LmEvalMetric("perplexity", "perplexity", LOWER, elbo_bound=True),
)}
"""lm-eval metrics by what they measure. bits_per_byte is a cross-entropy (bits per UTF-8 byte of the text), not a
perplexity, whatever the task is called. word_perplexity is exp(the document's NLL / its number of whitespace-
separated words): it does not depend on the tokenizer, so it stays valid for a character-level model (and
comparable with a BPE one), but it is per word, not per token, hence much larger than a char model's token
perplexity: labelled as such."""


@dataclass(frozen=True)
class Task:
    """An lm-eval task the analysis knows by name."""

    name: str
    label: str = ""
    """Its display name (empty: the task's own name)."""
    chance: float | None = None
    """Random-guess accuracy when every document has the same number of choices, for records written before the
    evaluation recorded it (eval.lm_eval.details[task].chance)."""


TASKS: dict[str, Task] = {t.name: t for t in (
    Task("slm_shakespeare_bpb", "Shakespeare test text"),
    Task("slm_shakespeare_ppl", "Shakespeare test text"),  # slm_shakespeare_bpb's former name: bits per byte
    Task("slm_shakespeare_mc", "Shakespeare line endings", 0.25),  # the true line end and 3 distractors
    Task("slm_toolcall", "function calls"), Task("slm_toolcall_templates", "function calls, unseen templates"),
    Task("slm_toolcall_long", "function calls, longer numbers"),
    Task("slm_toolcall_combos", "function calls, unseen tool pairs"),
    Task("hellaswag", chance=0.25), Task("mmlu", chance=0.25),  # 4 endings / 4 letters in every document
    Task("piqa", chance=0.5), Task("winogrande", chance=0.5),  # 2 solutions / 2 options in every document
)}
"""Tasks with a display name or a known chance level. Tasks not listed (arc_challenge: 3 to 5 choices;
truthfulqa_mc2: not an argmax accuracy; generation tasks) get no chance level unless their record has one."""

LOWER_WORDS = ("nll", "perplexity", "ppl", "bits_per_byte", "bpb", "loss", "byte_perplexity")
"""A name declared nowhere here (an lm-eval metric or a column the analysis does not know) is better when lower
if it contains one of these."""


# ---------------------------------------------------------------------------------------------- lookups


def register(entry: Metric) -> Metric:
    """Add a metric at run time (what an entry in METRICS does); ValueError for a name already declared."""
    if entry.name in METRICS:
        raise ValueError(f"metric {entry.name!r} is already declared")
    METRICS[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Remove a metric register() added (KeyError for an unknown name)."""
    del METRICS[name]


def resolve(name: str) -> tuple[Metric, str | None] | None:
    """(entry, the placeholder's value) of a column: ("val_nll" entry, None), (score_<task>, "hellaswag") for
    score_hellaswag (the longest pattern prefix wins: stderr_avg_x is stderr_avg_<suite>); None: not a metric."""
    if name in METRICS:
        return METRICS[name], None
    patterns = [m for m in METRICS.values() if m.prefix and name.startswith(m.prefix)]
    if not patterns:
        return None
    entry = max(patterns, key=lambda m: len(m.prefix))
    return entry, name[len(entry.prefix):]


def read_part_way() -> list[Metric]:
    """The metrics read part-way through training (curve_at), latest first: slm-decide's proxies after the final
    losses."""
    return sorted((m for m in METRICS.values() if m.curve_at is not None), key=lambda m: -m.curve_at)


def read_averaged() -> list[Metric]:
    """The metrics averaged over a run's last validations (curve_last): slm-decide's proxies after the final losses."""
    return [m for m in METRICS.values() if m.curve_last is not None]


def metric(name: str) -> Metric | None:
    """The entry a column falls under (a pattern for score_hellaswag), None for a column that is no metric."""
    found = resolve(name)
    return found[0] if found else None


def companion(name: str, pattern: str | None) -> str | None:
    """The column a metric's companion pattern names for this column: companion("score_piqa", "stderr_<task>") is
    "stderr_piqa"; a plain name is returned as it is; None for None."""
    if pattern is None:
        return None
    found = resolve(name)
    if "<" not in pattern or found is None or found[1] is None:
        return pattern
    entry, key = found
    return pattern.replace(entry.placeholder, key)


def direction(name: str | None) -> str:
    """LOWER or HIGHER for a column or an lm-eval metric key ("bits_per_byte,none"): its declaration's, else by
    LOWER_WORDS (a task score without its lm-eval metric at hand: by its name)."""
    if not name:
        return HIGHER
    base = str(name).split(",")[0]
    entry = metric(base)
    if entry is not None and entry.direction in (LOWER, HIGHER):
        return entry.direction
    if base in LM_EVAL:
        return LM_EVAL[base].direction
    return LOWER if any(word in base.lower() for word in LOWER_WORDS) else HIGHER


def task_label(task: str) -> str:
    """A task's display name (TASKS), else its own name."""
    known = TASKS.get(task)
    return known.label if known is not None and known.label else task


def label(name: str) -> str:
    """A metric column's name in plain words: its label, the placeholder filled (a task's display name); the column
    itself where it has none."""
    found = resolve(name)
    if found is None or not found[0].label:
        return name
    entry, key = found
    if key is None:
        return entry.label
    return entry.label.replace(entry.placeholder, task_label(key) if entry.placeholder == "<task>" else key)


def is_bound(entry: Metric, kinds: dict[str, str], lm_metric: str | None = None) -> bool:
    """Whether one run's value of a metric is a bound: `kinds` holds the run's fields the rule reads
    ({"val_nll_kind": "nelbo"}), `lm_metric` a task score's lm-eval metric key."""
    if entry.kind != PER_RUN or entry.bound_when is None:
        return entry.kind == BOUND
    rule = entry.bound_when
    bound = (kinds.get(rule.column) or rule.default) in rule.values
    if rule.lm_eval:
        known = LM_EVAL.get((lm_metric or "").split(",")[0])
        bound = bound and known is not None and known.elbo_bound
    return bound


def chance_level(task: str, metric_key: str | None, recorded: float | None) -> float | None:
    """A task's chance level: None unless its headline metric has one (LM_EVAL: acc, acc_norm); the record's own,
    else TASKS'."""
    known = LM_EVAL.get((metric_key or "").split(",")[0])
    if known is None or not known.chance:
        return None
    if recorded is not None:
        return recorded
    return TASKS[task].chance if task in TASKS else None
