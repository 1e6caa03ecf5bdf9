"""Short labels of runs and configurations: what differs between the rows of a results table ("gpt2 L12 d512",
"llama3 L32 d384 canon=AC"), the names the report, the plots, the tiers and the lr tables give them.

    labels = run_labels(table)                     # one label per row
    labels = run_labels(table, [c for c in LABEL_AXES if c != "seed"])   # a configuration's (seeds pooled)
"""

from __future__ import annotations

import pandas as pd

from analysis.schema import cell_texts

LABEL_AXES = ["family", "n_layers", "d_model", "n_kv_heads", "position", "norm", "norm_placement", "mlp", "qk_norm",
              "layer_types", "mlp_types", "canon_set", "layer_repeat", "context_length", "window_hidden", "objective",
              "parametrization", "optimizer", "data", "tokenizer", "lr", "batch_size", "schedule", "max_steps", "seed"]
"""Axes that may appear in a run's label (sizes derived from them, like head_dim or d_ff, never do)."""
_SHORT = {"n_layers": "L", "d_model": "d", "seed": "seed ", "n_kv_heads": "kv", "max_steps": "steps="}


def fallback(runs: pd.Series, seeds: bool = True) -> pd.Series:
    """Labels of rows no label axis tells apart: the start of their job key; without `seeds` (a configuration's label,
    its seeds pooled) less its train.seed, and where nothing else is left the sweep's folder."""
    keys = runs.astype(str).str.split("/").str[-1]
    if not seeds:
        keys = keys.str.replace(r"(^|,)train\.seed=[^,]*", "", regex=True).str.strip(",")
        keys = keys.where(keys != "", runs.astype(str).str.split("/").str[0])
    return keys.str[:40]


def _part(column: str, value: str) -> str:
    """A family, depth, width or seed as its label shows it: "gpt2", "L12", "d512", "seed 3"."""
    return value if column == "family" else f"{_SHORT[column]}{value}"


def _other(column: str, value: str) -> str:
    """Another axis where it differs from its family's most common value: "kv2", "canon=AC", "norm=layernorm"."""
    if column in _SHORT:
        return f"{_SHORT[column]}{value}"
    return f"canon={value or '-'}" if column == "canon_set" else f"{column}={value}"


def run_labels(table: pd.DataFrame, columns: list[str] | None = None, dedupe: bool = True) -> pd.Series:
    """Short labels naming what differs between rows, e.g. "gpt2 L12 d512" or "llama3 L32 d384 canon=AC":
    family, L<n_layers> and d<d_model> when they vary; any other axis of LABEL_AXES only where a row
    differs from the most common value of its family (kv heads only for grouped-query attention), and
    "seed N" when seeds vary. With
    `dedupe`, rows that would share a label get their sweep folder added."""
    columns = [c for c in (columns or LABEL_AXES) if c in table]
    if not len(table):
        return pd.Series([], dtype=object)
    text = pd.DataFrame({c: pd.array(cell_texts(table[c]), dtype="str") for c in columns}, index=table.index)
    family = text["family"] if "family" in text else pd.Series("", index=table.index)
    if "n_kv_heads" in text and "n_heads" in table:  # multi-head attention: kv heads = heads, nothing to say
        mha = pd.to_numeric(table["n_kv_heads"], errors="coerce") == pd.to_numeric(table["n_heads"], errors="coerce")
        text.loc[mha, "n_kv_heads"] = ""
    # what varies, and each family's usual value, among the rows that have a config: a partial table's pending rows
    # (no config yet, their cells empty) make no axis vary and no empty value usual
    known = text.copy()
    if "status" in table:
        known.loc[table["status"].astype(str).eq("pending").to_numpy()] = pd.NA
    core = [c for c in ("family", "n_layers", "d_model") if c in text and known[c].nunique() > 1]
    by_family = known.groupby(family)
    candidates = [c for c in columns if c not in ("family", "n_layers", "d_model", "seed")]
    varies = by_family[candidates].nunique() > 1 if candidates else pd.DataFrame()
    others = [c for c in candidates if varies[c].any()]  # differ within some family
    tail = ["seed"] if "seed" in text and known["seed"].nunique() > 1 else []
    mode = {c: by_family[c].agg(lambda v: v.value_counts().index[0] if v.notna().any() else "") for c in others}
    families = family.tolist()
    parts = [[_part(c, value) if value else "" for value in text[c].tolist()] for c in core]
    for c in others:
        usual = dict(zip(mode[c].index, mode[c].tolist()))
        parts.append(["" if value == usual[f] or (value == "" and c != "canon_set") else _other(c, value)
                      for value, f in zip(text[c].tolist(), families)])
    parts += [[_part(c, value) if value else "" for value in text[c].tolist()] for c in tail]
    labels = pd.Series([" ".join(p for p in row if p) for row in zip(*parts)] if parts else [""] * len(table),
                       index=table.index, dtype=object)
    empty = labels == ""
    if empty.any() and "run" in table:
        labels[empty] = fallback(table.loc[empty, "run"], seeds="seed" in columns)
    if dedupe and labels.duplicated(keep=False).any() and "run" in table:
        dup = labels.duplicated(keep=False)
        labels[dup] = labels[dup] + " (" + table.loc[dup, "run"].astype(str).str.split("/").str[0].str[:24] + ")"
    return labels
