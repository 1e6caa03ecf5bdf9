"""The analysis at scale (bench/analysis_scale.py times it): each run's configuration key is made column by column and
once per table, the per-row loops became column operations, and none of it changes a result. Each fast version is
checked against the row-by-row definition it replaced, on the records shipped in docs/ and on odd values; the shipped
lr-transfer page is rebuilt byte for byte; and a report on the shipped claims records makes the table's keys once."""

from __future__ import annotations

import decimal
import html
import io
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analysis.schema as schema
from analysis import collect
from analysis.document import fmt, html_table, markdown_table
from analysis.labels import LABEL_AXES, run_labels
from analysis.schema import config_columns, config_keys, keys_of
from analysis.tuning import CURVE_COLUMNS, _usable, at_best_lr, lr_curves, rows_at

DOCS = Path(__file__).resolve().parents[1] / "docs"
GROUPS = {"claims": DOCS / "claims" / "runs" / "claims_cpu", "ladder": DOCS / "decisions" / "runs" / "ladder_cpu_mup",
          "width": DOCS / "lr_transfer" / "runs" / "lr_transfer_width",
          "scaling": DOCS / "scaling" / "runs" / "cpu_scaling"}


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    return {name: collect(path) for name, path in GROUPS.items()}


def _keys_by_row(table: pd.DataFrame) -> pd.Series:
    """The definition config_keys had: each row's config cells as text, joined (DataFrame.agg over the rows)."""
    columns = config_columns(table)
    if not columns:
        return pd.Series(["" for _ in table.index], index=table.index, dtype=object)
    return table[columns].map(schema._text).agg("|".join, axis=1)


def _odd() -> pd.DataFrame:
    """Values that tell the texts apart: 1 == True == 1.0 in one object column, NaT, Decimal NaN, -0.0, a missing
    integer, a string column with gaps."""
    return pd.DataFrame({
        "family": pd.Series([True, 1, 1.0, 0, False, None, np.nan, "x", pd.NaT, decimal.Decimal("NaN")], dtype=object),
        "n_layers": [4.0, 4, np.nan, -0.0, 0.0, 1e20, 2.5, 1e-7, math.inf, 3],
        "d_model": pd.array([1, None, 3, 4, 5, 6, 7, 8, 9, 10], dtype="Int64"),
        "norm": pd.Series(["a", None, "b", "a", np.nan, "c", "", "|", "a", "b"], dtype="str"),
        "position": pd.Series([None, "rope", None, pd.NA, "s", "s", None, None, None, None], dtype=object),
        "qk_norm": [True, False] * 5, "seed": range(10), "lr": 0.1, "run": [f"g/r{i}" for i in range(10)]})


def test_config_keys_are_the_row_by_row_keys(tables):
    cases = [*tables.values(), tables["claims"].iloc[::7], tables["claims"][["run", "seed"]], _odd(),
             pd.read_csv(io.StringIO(tables["ladder"].to_csv(index=False)))]  # 4 read back as 4.0
    for table in cases:
        pd.testing.assert_series_equal(config_keys(table), _keys_by_row(table))


def test_keys_of_a_row_subset_are_its_own_and_a_repeated_index_is_keyed_afresh(tables):
    table = tables["claims"]
    keys = config_keys(table)
    part = table[table["seed"] == 1]
    pd.testing.assert_series_equal(keys_of(part, keys), config_keys(part))
    doubled = pd.concat([table, table])  # index labels twice: not looked up, made again
    pd.testing.assert_series_equal(keys_of(doubled.iloc[:5], config_keys(doubled)), config_keys(doubled.iloc[:5]))


def _labels_by_row(table: pd.DataFrame, columns: list[str] | None = None, dedupe: bool = True) -> pd.Series:
    """The definition run_labels had: one row at a time."""
    short = {"n_layers": "L", "d_model": "d", "seed": "seed ", "n_kv_heads": "kv", "max_steps": "steps="}
    columns = [c for c in (columns or LABEL_AXES) if c in table]
    text = table[columns].map(schema._text)
    family = text["family"] if "family" in text else pd.Series("", index=table.index)
    if "n_kv_heads" in text and "n_heads" in table:
        mha = pd.to_numeric(table["n_kv_heads"], errors="coerce") == pd.to_numeric(table["n_heads"], errors="coerce")
        text.loc[mha, "n_kv_heads"] = ""
    core = [c for c in ("family", "n_layers", "d_model") if c in text and text[c].nunique() > 1]
    others = [c for c in columns if c not in ("family", "n_layers", "d_model", "seed") and
              (text.groupby(family)[c].nunique() > 1).any()]
    tail = ["seed"] if "seed" in text and text["seed"].nunique() > 1 else []
    mode = {c: text.groupby(family)[c].agg(lambda v: v.value_counts().index[0]) for c in others}

    def one(i) -> str:
        parts = [text.at[i, c] if c == "family" else f"{short[c]}{text.at[i, c]}" for c in core if text.at[i, c]]
        for c in others:
            value = text.at[i, c]
            if value == mode[c][family[i]] or (value == "" and c != "canon_set"):
                continue
            parts.append(f"{short[c]}{value}" if c in short else f"canon={value or '-'}" if c == "canon_set"
                         else f"{c}={value}")
        return " ".join(parts + [f"{short[c]}{text.at[i, c]}" for c in tail if text.at[i, c]])

    labels = pd.Series([one(i) for i in table.index], index=table.index, dtype=object)
    empty = labels == ""
    if empty.any() and "run" in table:
        labels[empty] = [_fallback(run, "seed" in columns) for run in table.loc[empty, "run"].astype(str)]
    if dedupe and labels.duplicated(keep=False).any() and "run" in table:
        dup = labels.duplicated(keep=False)
        labels[dup] = labels[dup] + " (" + table.loc[dup, "run"].astype(str).str.split("/").str[0].str[:24] + ")"
    return labels


def _fallback(run: str, seeds: bool) -> str:
    """A label no axis makes: the job key's start, a configuration's (seeds pooled) less its train.seed."""
    key = run.split("/")[-1]
    if not seeds:
        key = ",".join(p for p in key.split(",") if not p.startswith("train.seed=")) or run.split("/")[0]
    return key[:40]


def test_run_labels_are_the_row_by_row_labels(tables):
    mixed = pd.concat([tables["claims"], tables["ladder"], tables["width"]], ignore_index=True)
    mixed.loc[::3, "canon_set"] = None
    pooled = [c for c in LABEL_AXES if c not in ("seed", "lr")]
    for table in [*tables.values(), mixed.iloc[::4], mixed.iloc[:1], _odd(), _odd().drop(columns="run")]:
        for columns, dedupe in ((None, True), (pooled, True), (pooled, False), (["lr"], True)):
            pd.testing.assert_series_equal(run_labels(table, columns, dedupe), _labels_by_row(table, columns, dedupe))


def _curves_by_group(table: pd.DataFrame, score: str) -> pd.DataFrame:
    """The definition lr_curves had: one sub-table per (configuration, lr)."""
    rows = _usable(table, score)
    out = []
    for (key, lr), group in rows.groupby([config_keys(rows), pd.to_numeric(rows["lr"])], sort=True):
        values = pd.to_numeric(group[score], errors="coerce").dropna().to_numpy(float)
        out.append({"config_key": key, "lr": float(lr), "mean": float(values.mean()) if len(values) else math.nan,
                    "sd": float(values.std(ddof=1)) if len(values) >= 2 else math.nan, "n_seeds": len(values),
                    "n_diverged": int((group["status"] == "diverged").sum()), "runs": list(group.index)})
    return pd.DataFrame(out, columns=CURVE_COLUMNS)


def test_lr_curves_are_the_curves_of_each_group(tables):
    table = pd.concat([tables["claims"], tables["width"]], ignore_index=True).sample(frac=1, random_state=0)
    table.loc[table.index[::9], "status"] = "diverged"
    table.loc[table.index[::9], "val_nll"] = np.nan
    for rows in (table, tables["ladder"], tables["claims"]):
        pd.testing.assert_frame_equal(lr_curves(rows, "val_nll"), _curves_by_group(rows, "val_nll"))


def test_rows_at_keeps_the_runs_math_isclose_keeps(tables):
    table = tables["claims"].copy()
    table.loc[table.index[:3], "lr"] = [np.nan, np.inf, table["lr"].iloc[3] * (1 + 1e-12)]
    for which in ("tuned", "shared"):
        best = at_best_lr(table, "val_nll")
        target = dict(zip(best["config_key"], best["best_lr" if which == "tuned" else "shared_lr"]))
        keys, lr = config_keys(table), pd.to_numeric(table["lr"])
        want = [i for i in table.index if target.get(keys[i]) is not None and not pd.isna(target[keys[i]])
                and math.isclose(float(lr[i]), float(target[keys[i]]), rel_tol=1e-9)]
        got = rows_at(table, "val_nll", which)
        assert list(got.index) == want and len(want) > 0
        pd.testing.assert_frame_equal(rows_at(table, "val_nll", which, keys=keys), got)


def test_tables_show_each_cell_as_iterrows_gave_it():
    frames = [pd.DataFrame({"n": [12_345_678_901, 2], "x": [0.5, np.nan]}),  # numbers only: iterrows made floats
              pd.DataFrame({"run": ["a|b", None], "n": [12_345_678_901, 2], "ok": [True, False]}),
              pd.DataFrame({"a": ["x", None], "b": ["y", "z"]}),
              pd.DataFrame({"n": pd.array([1, None], dtype="Int64")})]
    for frame in frames:
        cells = [[fmt(v) for v in row] for _, row in frame.iterrows()]
        assert markdown_table(frame).splitlines()[2:] == [
            "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in row) + " |" for row in cells]
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in cells)
        assert html_table(frame).endswith(f"<tbody>{body}</tbody></table>")


def test_the_shipped_lr_transfer_records_give_the_documented_page(tmp_path):
    from analysis.lr_transfer import write

    table = pd.concat([collect(DOCS / "lr_transfer" / "runs" / g) for g in ("lr_transfer_width", "lr_transfer_depth")],
                      ignore_index=True)
    assert write(table, tmp_path).read_text() == (DOCS / "lr_transfer" / "lr_transfer.md").read_text()


def test_a_report_makes_the_tables_keys_once(tables, monkeypatch):
    """The study's keys reach every grouping of the report's sections and claims: config_keys runs once on the
    table's config columns (the depth claim's keys, of the config apart from the shape, are other keys)."""
    from analysis.report import sections
    from analysis.study import analyse

    table = tables["claims"]
    made, original = [], schema.config_keys

    def counted(rows):
        made.append(len(config_columns(rows)) == len(config_columns(table)))
        return original(rows)

    for module in [m for name, m in sys.modules.items() if name.startswith("analysis.")]:
        if getattr(module, "config_keys", None) is original:
            monkeypatch.setattr(module, "config_keys", counted)
    parts = dict(sections(table, "results.parquet", "val_nll", study=analyse(table, "val_nll")))
    assert {"Tiers", "Best configuration per family", "Learning rate", "Claims"} <= set(parts)
    assert sum(made) == 1
