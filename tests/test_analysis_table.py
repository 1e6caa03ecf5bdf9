"""The results table's declared schema (analysis.schema) on the records shipped in docs/: every column the
collector writes is declared with a doc, the table of the stored records is the one collect made before the
schema was declared (its columns and values, and an independent reading of the JSON), old flat model fields
and today's nested ones give the same columns, and docs/results_table.md is current."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pandas as pd
import pytest

from analysis.collect import collect, override_column, row_from_record
from analysis.records import model_section
from analysis.schema import (BLOCKS, COLUMNS, DOCS_PAGE, KINDS, MODEL, ROLE_DOCS, declared, describe, markdown,
                             model_cells, role_of)
from slm.renames import MODEL_MOVED, model_column
from slm.runs.record import load_record
from tests.test_analysis_collect import make_record, write

DOCS = Path(__file__).resolve().parents[1] / "docs"
CLAIMS = DOCS / "claims" / "runs" / "claims_cpu"
LADDER = DOCS / "2512.20877" / "runs"

CLAIMS_COLUMNS_BEFORE = [
    "run", "sweep", "status", "error", "eval_error", "family", "n_layers", "d_model", "n_heads", "n_kv_heads",
    "head_dim", "d_ff", "position", "norm", "norm_placement", "mlp", "layer_types", "mlp_types", "n_experts", "top_k",
    "qk_norm", "canon_set", "layer_repeat", "init", "sliding_window", "tie_embeddings", "context_length", "vocab_size",
    "objective", "parametrization", "data", "tokenizer", "optimizer", "lr", "lr_multiplier", "batch_size", "schedule",
    "precision", "seed", "params_total", "params_active", "params_embedding", "params_non_embedding",
    "flops_per_token", "tokens", "steps", "max_steps", "train_flops", "param_budget", "budget_count",
    "budget_tolerance", "budget_error", "budget_knob", "val_nll", "val_nll_kind", "val_ppl", "val_bpb", "val_step",
    "decode_tokens_per_s", "generate_tokens_per_s", "time_to_first_token_s", "peak_memory_bytes",
    "peak_memory_measure", "kv_cache_bytes", "decode_device", "decode_dtype", "decoder", "decode_sampler",
    "decode_threads", "decode_prompt_tokens", "decode_new_tokens", "decode_cuda_graph", "decode_compile",
    "decode_other_cores", "wall_seconds", "train_seconds", "train_tokens_per_s", "mfu", "final_train_loss",
    "diverged_step", "moe_max_load", "train_other_cores", "kind", "window_hidden", "d_ff_multiple", "mlp_ratio",
    "loop_layers", "loop_steps", "norm_eps", "qk_norm_scope", "rope_theta", "rope_theta_local", "rotary_fraction",
    "expert_d_ff", "shared_expert_d_ff", "norm_topk_prob", "moe_aux_coef", "moe_aux_scope", "moe_z_coef",
    "gelu_approximate", "causal", "attention_block", "attn_scale", "attn_logit_softcap", "final_logit_softcap",
    "conv_kernel", "memory_layers", "memory_segment", "memory_chunk", "memory_depth", "memory_hidden", "memory_heads",
    "persistent_tokens", "memory_lr", "canon", "canon_b_after_qk_norm", "canon_kernel", "bias", "mask_token_id",
    "embedding_padding_idx", "scale_embeddings", "dropout", "dropout_at", "init_std", "head_bias", "final_norm",
    "notes", "scaling", "test_nll", "test_targets", "test_bpb", "val_bytes_per_token", "test_bytes_per_token",
    "epochs", "windows_per_epoch", "device", "git_revision", "updated_at", "run_dir"]
"""collect(CLAIMS)'s columns as the collector wrote them before the schema was declared (records of flat model
fields: n_experts, canon, ... as they were stored)."""

CLAIMS_VALUES_BEFORE = {
    "model.n_kv_heads=2,model.n_layers=1,model=llama3,train.lr=0.001,train.seed=0": {
        "family": "llama3", "n_layers": 1, "d_model": 128, "layer_types": "attn", "n_experts": 0, "canon": "conv",
        "canon_set": "", "params_total": 200192, "params_active": 200192, "train_flops": 159677153280.0,
        "val_nll": 2.4593945503234864, "val_bpb": 3.548156321341036, "seed": 0, "lr": 0.001,
        "data": "tiny_shakespeare", "tokenizer": "char", "precision": "32", "scaling": "{}", "notes": ""},
    "model.n_layers=4,model=gpt2,train.seed=2": {
        "family": "gpt2", "n_layers": 4, "d_model": 64, "layer_types": "attn", "n_experts": 0, "canon": "conv",
        "params_total": 200064, "train_flops": 168642478080.0, "val_nll": 2.5951608419418335,
        "val_bpb": 3.74402567697871, "seed": 2, "lr": 0.004, "precision": "32"},
}
"""A few of its values, as collected then."""

NEW_NAME = {old: model_column(group, field) for old, (group, field) in MODEL_MOVED.items()}
"""A flat model field's column today: its nested setting's <group>_<field> (n_experts -> moe_n_experts), or its own
name for the fields that moved into the groups made from flat fields (n_heads -> n_heads: slm.renames.model_column)."""


@pytest.fixture(scope="module")
def claims() -> pd.DataFrame:
    return collect(CLAIMS)


ADDED_SINCE = ("lr_rule", "ladder_point", "val_nll_25", "val_nll_50", "health", "health_note")
"""Columns added after that table was collected (issue 41: a ladder's lr rule, the validation curve's proxies; issue
48: the training health, which these records predate)."""
READ_SINCE = {"warmup_steps": 6.0}
"""Columns added since that these records have from their config (issue 48: the warmup, 5% of 120 steps)."""


def test_the_stored_records_table_is_the_one_collected_before(claims):
    before = [NEW_NAME.get(c, c) for c in CLAIMS_COLUMNS_BEFORE]
    known = before + list(ADDED_SINCE) + list(READ_SINCE)
    assert set(known) <= set(claims.columns)
    # a column added to the schema later (a new metric: one entry in slm.metrics) is empty in these records
    later = [c for c in claims.columns if c not in known]
    assert claims[list(ADDED_SINCE) + later].isna().all().all()  # no ladder, and no curve in these records
    assert all((claims[c] == v).all() for c, v in READ_SINCE.items())
    moved = set(NEW_NAME.values())  # a nested setting's columns sit with their group, the others keep their order
    assert [c for c in claims.columns if c not in moved and c in before] == [
        c for c in before if c not in moved]
    rows = claims.set_index("run")
    for run, values in CLAIMS_VALUES_BEFORE.items():
        for column, value in values.items():
            assert rows.at[run, NEW_NAME.get(column, column)] == value, (run, column)
    assert len(claims) == 135 and claims["family"].value_counts().to_dict() == {
        "llama3": 90, "lfm2": 15, "llama3_canon": 15, "gpt2": 15}
    assert claims["train_other_cores"].isna().all() and claims["decode_cuda_graph"].isna().all()


def _read(path: Path) -> dict:
    """A few columns of one record, read from its JSON without the collector."""
    r = json.loads(path.read_text())
    model, training, ev = r["model"], r["training"], r["eval"]
    moe, canon = model.get("moe") or {}, model.get("canon")
    return {"status": r["status"], "family": model["family"], "n_layers": model["n_layers"],
            "moe_n_experts": moe.get("n_experts", model.get("n_experts")),
            "canon_kind": canon.get("kind") if isinstance(canon, dict) else canon,
            "seed": r["config"]["train"]["seed"], "lr": float(r["config"]["train"]["lr"]),
            "data": r["data"]["name"], "tokenizer": r["data"]["tokenizer"]["name"],
            "tokens": float(training["tokens"]), "train_flops": float(model["flops_per_token"] * training["tokens"]),
            "train_tokens_per_s": training["tokens_per_s"], "val_nll": ev["val_nll"],
            "test_nll": ev.get("test_nll", math.nan), "device": r["environment"]["device"]}


@pytest.mark.parametrize("root", [CLAIMS, LADDER], ids=["claims_cpu", "2512.20877"])
def test_every_stored_record_reads_as_its_json_says(root):
    table = collect(root).set_index("run")
    paths = sorted(root.rglob("result.json"))
    assert len(paths) == len(table)
    for path in paths:
        run = str(path.parent.relative_to(root))
        for column, value in _read(path).items():
            got = table.at[run, column]
            assert got == value or (isinstance(value, float) and math.isnan(value) and pd.isna(got)), (run, column)


def test_every_column_written_on_the_stored_records_is_declared_with_a_doc():
    paths = sorted(DOCS.rglob("result.json"))
    assert len(paths) >= 300
    undeclared, seen = set(), set()
    for path in paths:
        record = load_record(path.parent)
        model = set(model_cells(model_section(record)))  # the open-ended model section: one column per field
        kind = (path.parent.parent, record.get("status"), bool(record.get("branch")), tuple(sorted(record)),
                tuple(sorted(record.get("eval") or {})), tuple(sorted(model)))
        if kind in seen:  # a sweep's records of one status and shape write the same columns: one row of each
            continue
        seen.add(kind)
        row = row_from_record(record, path.parent, DOCS)
        undeclared |= {c for c in set(row) - model if declared(c) is None or not declared(c).doc}
        overridden = {c for c in model if declared(c) and declared(c).source is not MODEL}
        assert overridden <= {"param_budget", "budget_knob"}, path  # model fields read with a fallback, on purpose
    assert not undeclared


def test_each_declaration_is_complete():
    names = [c.name for c in COLUMNS]
    assert len(names) == len(set(names))
    for c in COLUMNS:
        assert c.role in ROLE_DOCS and c.kind in KINDS and c.block in (*BLOCKS, None) and c.doc and c.where(), c
        assert callable(c.source) or isinstance(c.source, (tuple, str)), c
    for c in ("seed", "lr", "lr_multiplier"):
        assert role_of(c) == "nuisance"
    for c in ("test_ppl", "val_attention_block", "params_other", "score_x", "stderr_avg_x", "tasks_avg_x"):
        assert role_of(c) == "metric" or c == "params_other" and role_of(c) == "count", c
    assert role_of("moe_n_experts") == role_of("mup_base_width") == role_of("d_model") == "config"


def test_docs_page_is_current():
    assert DOCS_PAGE.read_text() == markdown(), \
        'docs/results_table.md is stale: .venv/bin/python -c "import analysis.schema as s; s.write_docs_page()"'


def test_describe_gives_each_column_its_role_and_doc(claims):
    frame = describe(claims).set_index("column")
    assert frame.at["train_flops", "role"] == "count" and "flops_per_token x tokens" in frame.at["train_flops", "doc"]
    assert frame.at["d_model", "role"] == "config" and "ModelConfig" in frame.at["d_model", "doc"]
    assert frame["doc"].str.len().gt(0).all()


FLAT = {"n_experts": 8, "top_k": 2, "moe_aux_coef": 0.01, "canon": "conv", "canon_set": "AC", "memory_layers": [1],
        "persistent_tokens": 4}
NESTED = {"moe": {"n_experts": 8, "top_k": 2, "aux_coef": 0.01}, "canon": {"kind": "conv", "set": "AC"},
          "memory": {"layers": [1], "persistent_tokens": 4}}


def test_old_flat_and_todays_nested_model_settings_are_the_same_columns(tmp_path, caplog):
    for name, fields in (("flat", FLAT), ("nested", NESTED)):
        record = make_record(family=name)
        del record["model"]["canon_set"]  # make_record's flat canon_set
        record["model"].update(fields)
        write(tmp_path / "grid" / name, record)
    both = make_record(family="both")
    both["model"].update(n_experts=8, moe={"n_experts": 4})
    write(tmp_path / "grid" / "both", both)
    with caplog.at_level(logging.WARNING, logger="analysis.collect"):
        table = collect(tmp_path).set_index("family")
    (warning,) = [r.getMessage() for r in caplog.records]  # one setting spelt twice, with two values: named
    assert "grid/both/result.json" in warning and "model.moe.n_experts" in warning
    columns = {"moe_n_experts": 8, "moe_top_k": 2, "moe_aux_coef": 0.01, "canon_kind": "conv", "canon_set": "AC",
               "memory_layers": "[1]", "memory_persistent_tokens": 4}
    for family in ("flat", "nested"):
        assert {c: table.at[family, c] for c in columns} == columns, family
    assert not {"n_experts", "top_k", "canon", "persistent_tokens", "moe", "memory"} & set(table.columns)


def test_mup_settings_are_columns_only_where_a_parametrization_reads_them(tmp_path):
    for parametrization in ("sp", "mup"):
        record = make_record(family=parametrization)
        record["model"].update(parametrization=parametrization, mup={"base_width": 256, "base_depth": 2})
        write(tmp_path / parametrization, record)
    table = collect(tmp_path).set_index("family")
    assert table.at["mup", "mup_base_width"] == 256 and pd.isna(table.at["sp", "mup_base_width"])


@pytest.mark.parametrize("key, column", [
    ("model.n_layers", "n_layers"), ("model.moe.top_k", "moe_top_k"), ("model.top_k", "moe_top_k"),
    ("model.canon_set", "canon_set"), ("model.canon.set", "canon_set"), ("train.lr", "lr"), ("train.seed", "seed"),
    ("model.parametrization.base_width", None), ("model.position.rope_theta", None), ("data", None), ("hydra.job.name", None)])
def test_a_sweep_override_names_its_column(key, column):
    assert override_column(key) == column
