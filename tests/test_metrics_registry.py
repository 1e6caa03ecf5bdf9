"""The metric registry (slm.metrics): a metric is declared once, and everything that reads metrics reads it there.
Adding one is one entry: a metric registered at run time is collected into the results table, documented, tried
as a headline, ranked in its direction by the tiers and the verdict, and labelled by the report with its unit; every
metric the analysis names is declared; the registry is standard library only and agrees with what the evaluation
prints (slm.eval.score_lines)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import slm.metrics as registry
import analysis.records as records
from analysis import collect
from analysis.headline import candidate_columns, choose_headline
from analysis.metrics import (bound_rows, bounds_left_out, comparable_rows, higher_is_better, lower_is_better,
                              name_of, score_columns, stderr_column)
from analysis.plot_style import AXIS_LABELS, score_label
from analysis.report import run_table, sections, write_report
from analysis.schema import columns, declared, markdown, role_of
from analysis.tiers import find_tiers
from slm.eval.score_lines import BOUND_METRICS
from slm.metrics import BOUND, EXACT, HIGHER, LOWER, METRICS, NELBO, PER_RUN, Metric
from tests.test_analysis_collect import make_record, write

ROOT = Path(__file__).resolve().parents[1]

ACCURACY = Metric("val_acc", "share of validation tokens predicted right (argmax)", ("eval", "val_acc"),
                  block="metrics", label="validation accuracy", short="val acc", unit="fraction", direction=HIGHER,
                  headline=True)
"""A metric the registry does not have: one entry, and nothing else changed."""


@pytest.fixture
def accuracy():
    registry.register(ACCURACY)
    try:
        yield ACCURACY
    finally:
        registry.unregister(ACCURACY.name)


def _runs(root: Path, accuracy: dict[int, float], nll: float = 3.0, bound_depth: int | None = None) -> Path:
    """Three depths x three seeds; the validation NLL the same for every depth (within seed noise), the accuracy
    apart by depth (beyond it)."""
    rng = np.random.default_rng(0)
    for depth, acc in accuracy.items():
        for seed in range(3):
            record = make_record(n_layers=depth, d_model=64, seed=seed, val_nll=nll + 0.01 * rng.standard_normal())
            record["eval"]["val_acc"] = acc + 0.002 * rng.standard_normal()
            if depth == bound_depth:
                record["eval"]["val_nll_kind"] = "nelbo"
            write(root / f"L{depth}_s{seed}", record)
    return root


def test_adding_a_metric_is_one_entry(accuracy, tmp_path):
    table = collect(_runs(tmp_path / "runs", {2: 0.30, 4: 0.40, 8: 0.50}))
    # collected, in the metrics block, with its role and documentation
    assert table["val_acc"].notna().all() and role_of("val_acc") == "metric"
    assert list(table.columns).index("val_acc") < list(table.columns).index("decode_tokens_per_s"
                                                                            if "decode_tokens_per_s" in table else
                                                                            "wall_seconds")
    assert declared("val_acc").doc == ACCURACY.doc and "val_acc" in [c.name for c in columns()]
    page = markdown()
    assert "| `val_acc` | number | eval.val_acc | share of validation tokens" in page
    assert "| `val_acc` | validation accuracy | higher | fraction | exact |" in page
    # read by the analysis: direction, label, unit
    assert higher_is_better(table, "val_acc") and not lower_is_better("val_acc")
    assert name_of("val_acc") == "validation accuracy"
    assert score_label(table, "val_acc") == "validation accuracy (fraction), higher is better"
    assert "val_acc" in score_columns(table)
    # a headline candidate after the validation loss: the loss does not separate the depths, the accuracy does
    assert candidate_columns(table)[-1] == "val_acc"
    headline = choose_headline(table)
    assert headline.column == "val_acc", headline.why
    assert headline.candidate("val_nll").separates is False and headline.candidate("val_acc").separates
    # ranked in its direction by the tiers and the verdict
    tiers = find_tiers(table, "val_acc", n_sim=200, n_boot=100)
    assert tiers.higher_is_better and tiers.tiers[0].members == ["L8", "L4", "L2"]  # best first
    report = tmp_path / "report"
    write_report(tmp_path / "runs", report, table=table)
    md = (report / "report.md").read_text()
    assert "Headline metric: **validation accuracy**" in md
    assert "**Ranking** on validation accuracy (higher is better;" in md
    assert "Score used below: **val_acc** (validation accuracy (fraction), higher is better;" in md
    assert "val acc" not in run_table(table, "val_acc").columns  # its column is shown under its own name
    assert "val_acc" in run_table(table, "val_acc").columns


def test_the_bound_rule_and_the_comparison_rule_are_read_from_the_entry(tmp_path):
    """An entry whose values are bounds where val_nll_kind is nelbo, compared on exact values only: the plots mark
    the bound runs and every comparison leaves them out, as for val_nll."""
    entry = Metric("val_acc_bound", "an accuracy bound", ("eval", "val_acc"), label="bounded accuracy",
                   direction=HIGHER, kind=PER_RUN, bound_when=NELBO, exact_only=True)
    registry.register(entry)
    try:
        table = collect(_runs(tmp_path, {2: 0.3, 4: 0.4}, bound_depth=4))
        bound = bound_rows(table, "val_acc_bound")
        assert bound.sum() == 3 and (table.loc[bound, "n_layers"] == 4).all()
        assert len(comparable_rows(table, "val_acc_bound")) == 3 and len(bounds_left_out(table, "val_acc_bound")) == 3
    finally:
        registry.unregister(entry.name)
    assert bound_rows(table, "val_acc").sum() == 0  # not declared: no bound


def test_every_metric_the_analysis_names_is_declared():
    """Every column name the analysis's code spells out that is a metric (a results-table column of role metric,
    or val_* / test_*) is an entry of the registry, and no plot label restates one."""
    names = set()
    for path in (ROOT / "analysis").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)+", node.value):
                names.add(node.value)
    metrics = {n for n in names if role_of(n) == "metric"}
    assert {"val_nll", "val_bpb", "val_nll_kind"} <= metrics  # the scan sees them
    assert not [n for n in metrics if registry.metric(n) is None]
    assert not [c for c in AXIS_LABELS if registry.metric(c) is not None]  # a metric's label is its entry's
    # every metric column of the table is declared there, and the results table's metric columns are the registry's
    assert [c.name for c in columns() if c.role == "metric"] == list(METRICS)


def test_every_score_the_report_names_is_declared(tmp_path):
    from tests.test_analysis_verdict import default_study

    table = collect(default_study(tmp_path / "runs"))
    for column in [*candidate_columns(table), *score_columns(table)]:
        entry = registry.metric(column)
        assert entry is not None and entry.is_score, column
    named = set()
    for heading, blocks in sections(table, "results.parquet"):
        for block in blocks:
            if isinstance(block, pd.DataFrame):
                named |= {str(c) for c in block.columns} | {str(v) for v in block.get("metric", [])}
    assert {c for c in named if c in table and role_of(c) == "metric"} <= {
        c for c in named if registry.metric(c) is not None}
    assert "val_nll" in named


def test_the_metrics_the_analysis_needs_are_declared_and_well_formed():
    """Membership, not the whole list: the metrics the analysis reads by name are there with their direction, and
    every entry (a metric added later too) is well formed; adding one breaks nothing here."""
    needed = {"val_nll": LOWER, "val_ppl": LOWER, "val_ppl_bound": LOWER, "val_bpb": LOWER, "val_nll_25": LOWER,
              "val_nll_50": LOWER, "test_nll": LOWER, "test_bpb": LOWER, "score_<task>": registry.BY_METRIC,
              "avg_<suite>": HIGHER, "val_nll_kind": None, "val_step": None, "stderr_<task>": None}
    assert {name: METRICS[name].direction for name in needed if name in METRICS} == needed
    part_way = registry.read_part_way()  # latest first
    assert [m.curve_at for m in part_way] == sorted((m.curve_at for m in part_way), reverse=True)
    assert [m.name for m in part_way if m.name in ("val_nll_50", "val_nll_25")] == ["val_nll_50", "val_nll_25"]
    for m in METRICS.values():
        assert re.fullmatch(r"[a-z][a-z0-9_]*(<task>|<suite>)?", m.name) and m.doc.strip(), m.name
        assert m.direction in (LOWER, HIGHER, registry.BY_METRIC, None) and m.kind in (EXACT, BOUND, PER_RUN), m.name
        assert (m.kind == PER_RUN) == (m.bound_when is not None), m.name
        assert m.value in ("number", "integer", "text") and m.block in ("metrics", None), m.name
        assert not m.is_score or m.label, f"{m.name}: a score needs a label"
        if m.curve_at is not None:
            assert 0 < m.curve_at < 1 and m.source in (registry.CURVE, registry.AVG_CURVE), m.name
        elif isinstance(m.source, str):
            assert callable(getattr(records, m.source, None)), f"{m.name}: no reader analysis.records.{m.source}"
        for pattern in (m.stderr, m.chance, m.lm_metric):
            assert pattern is None or registry.metric(registry.companion(m.name.replace(
                m.placeholder or "", "x"), pattern)) is not None, (m.name, pattern)


def test_directions_units_and_bounds():
    assert registry.direction("bits_per_byte,none") == LOWER and registry.direction("acc_norm,none") == HIGHER
    assert registry.direction("some_loss") == LOWER and registry.direction("rouge") == HIGHER  # undeclared: words
    assert {m for m, facts in registry.LM_EVAL.items() if facts.elbo_bound} == set(BOUND_METRICS)
    assert registry.metric("val_ppl_bound").kind == BOUND and registry.metric("val_ppl").kind == EXACT
    assert registry.ppl_field("nll") == "val_ppl" and registry.ppl_field("nelbo") == "val_ppl_bound"
    # the per-run rule on one record's fields (what slm.runs and slm-eval can ask of a run)
    nelbo = {"val_nll_kind": "nelbo"}
    assert registry.is_bound(METRICS["val_nll"], nelbo) and not registry.is_bound(METRICS["val_nll"], {})
    assert registry.is_bound(METRICS["score_<task>"], nelbo, "bits_per_byte,none")
    assert not registry.is_bound(METRICS["score_<task>"], nelbo, "acc,none")
    assert registry.is_bound(METRICS["val_ppl_bound"], {}) and not registry.is_bound(METRICS["val_ppl"], nelbo)
    assert registry.resolve("stderr_avg_study7") == (registry.METRICS["stderr_avg_<suite>"], "study7")
    assert registry.companion("score_piqa", "stderr_<task>") == "stderr_piqa"
    assert registry.label("score_slm_shakespeare_mc") == "Shakespeare line endings"
    assert registry.chance_level("piqa", "acc,none", None) == 0.5
    assert registry.chance_level("piqa", "bits_per_byte,none", 0.5) is None
    assert stderr_column(pd.DataFrame(columns=["avg_x", "stderr_avg_x"]), "avg_x") == "stderr_avg_x"
    with pytest.raises(ValueError, match="already declared"):
        registry.register(METRICS["val_nll"])


def _curve_runs(root: Path, rng_seed: int = 0) -> Path:
    """Two families x two rungs x two seeds, each validating at 25%, 50%, 75% and 100% of its 100 steps; the curve's
    values apart by family."""
    rng = np.random.default_rng(rng_seed)
    for family, offset in (("gpt2", 0.0), ("llama3", 0.3)):
        for budget in (1e5, 2e5):
            for seed in range(2):
                curve = [[s, 4.0 + offset - s / 100 - budget / 1e6 + 0.01 * rng.standard_normal()]
                         for s in (25, 50, 75, 100)]
                record = make_record(family=family, seed=seed, val_nll=curve[-1][1])
                record["eval"]["val_curve"] = curve
                record["model"]["param_budget"] = budget
                write(root / f"{family}_{budget:g}_s{seed}", record)
    return root


def test_a_metric_read_from_the_curve_is_one_entry(tmp_path):
    """DESIGN.md's recipe: a metric at 75% of training is one entry with curve_at; the table, the documentation and
    slm-decide's proxies have it with no other edit."""
    from analysis.decide import decide, default_proxies, part_read

    entry = Metric("val_nll_75_probe", "the validation NLL at 75% of training", registry.CURVE, block="metrics",
                   label="validation NLL at 75% of training", short="val NLL @75%", unit="nats/token",
                   direction=LOWER, kind=PER_RUN, bound_when=NELBO, exact_only=True, curve_at=0.75)
    registry.register(entry)
    try:
        table = collect(_curve_runs(tmp_path / "runs"))
        assert role_of("val_nll_75_probe") == "metric"
        for _, row in table.iterrows():  # the curve's value at step 75, read from the record
            record = json.loads(Path(row["run_dir"], "result.json").read_text())
            assert row["val_nll_75_probe"] == pytest.approx(dict(map(tuple, record["eval"]["val_curve"]))[75])
        assert "| `val_nll_75_probe` | number | eval.val_curve at 75% of training.max_steps |" in markdown()
        assert name_of("val_nll_75_probe") == "validation NLL at 75% of training" and not higher_is_better(table,
                                                                                                     "val_nll_75_probe")
        assert "val_nll_75_probe" in default_proxies(table) and part_read("val_nll_75_probe") == 0.75
        result = decide(table, config="family", rung="param_budget", proxies=["val_nll_75_probe"], draws=0)
        at_target = [r for r in result.rows if r.proxy == "val_nll_75_probe" and r.rung == 2e5]
        assert at_target and at_target[0].share == pytest.approx(0.75)  # judged at the target rung, at 75% of it
    finally:
        registry.unregister(entry.name)


def test_a_metric_the_curve_gives_by_another_rule_is_an_entry_and_a_reader(tmp_path, monkeypatch):
    """The two-file form: an entry naming its reader, and the reader (here set on analysis.records by the test)."""
    def val_nll_best(r):
        """the lowest validation of eval.val_curve"""
        return min(point[1] for point in records.get(r.record, ("eval", "val_curve")))

    monkeypatch.setattr(records, "val_nll_best", val_nll_best, raising=False)
    entry = Metric("val_nll_best", "the lowest validation NLL of the run", "val_nll_best", block="metrics",
                   label="best validation NLL", unit="nats/token", direction=LOWER)
    registry.register(entry)
    try:
        table = collect(_curve_runs(tmp_path / "runs"))
        assert (table["val_nll_best"] <= table["val_nll"]).all() and table["val_nll_best"].notna().all()
        assert "| `val_nll_best` | number | the lowest validation of eval.val_curve |" in markdown()
    finally:
        registry.unregister(entry.name)


def test_the_registry_is_standard_library_only():
    imports = set()
    for node in ast.walk(ast.parse((ROOT / "slm" / "metrics.py").read_text())):
        if isinstance(node, ast.Import):
            imports |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imports.add((node.module or "").split(".")[0])
    assert imports <= set(sys.stdlib_module_names) | {"__future__"}, imports
    probe = ("import sys, slm.metrics\n"
             "print(sorted(m for m in ('pandas', 'numpy', 'torch', 'analysis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]
