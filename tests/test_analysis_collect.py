"""The collector: fabricated result.json files of every status, an unreadable one, Hydra job folders
without a record, a multirun.yaml job that never started; the slm-collect CLI; the layering rule."""

from __future__ import annotations

import ast
import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from analysis import collect, load_results, save_results
from analysis.cli import collect_main
from analysis.collect import lower_is_better
from analysis.schema import declared
from slm.runs.states import PENDING, STOPPED

ROOT = Path(__file__).resolve().parents[1]


def make_record(status="completed", family="gpt2", n_layers=4, d_model=128, seed=0, tokens=1_000_000,
                val_nll=3.0, scores=None, throughput=None, error=None, model_section=True) -> dict:
    """A result.json as slm.runs.job and slm.eval.run write it (only the fields the collector reads, plus
    a few it must ignore)."""
    model = {"family": family, "n_layers": n_layers, "d_model": d_model, "n_heads": d_model // 32,
             "n_kv_heads": d_model // 32, "head_dim": 32, "d_ff": 4 * d_model, "vocab_size": 256,
             "context_length": 128, "tie_embeddings": True, "layer_repeat": 1, "norm": "layernorm",
             "position": "learned", "mlp": "gelu", "canon_set": "", "qk_norm": False, "attention_pattern": "G",
             "sliding_window": None, "rope_theta_local": None, "params_total": 1000 * n_layers * d_model,
             "params_embedding": 256 * d_model, "params_non_embedding": 1000 * n_layers * d_model - 256 * d_model,
             "flops_per_token": 6000 * n_layers * d_model, "flops_convention": "PaLM ...", "param_budget": None}
    config = {"model": {"family": family, "n_layers": n_layers, "d_model": d_model},
              "data": {"name": "tiny_shakespeare"}, "tokenizer": {"name": "char"},
              "train": {"seed": seed, "objective": "causal_lm", "lr": 1e-3, "batch_size": 16, "schedule": "cosine",
                        "precision": "32"}}
    record = {"schema_version": 1, "created_at": "2026-01-01T00:00:00+00:00", "status": status, "error": error,
              "config": config, "environment": {"device": "cpu (2 threads)", "git_revision": "abc"},
              "updated_at": "2026-01-01T00:01:00+00:00"}
    if model_section:
        record["model"] = model
        record["data"] = {"name": "tiny_shakespeare", "tokenizer": {"name": "char", "vocab_size": 65}}
    if status in ("completed", "diverged"):
        record["training"] = {"max_steps": 100, "steps": 100 if status == "completed" else 40,
                              "tokens": tokens if status == "completed" else tokens * 0.4, "wall_seconds": 10.0,
                              "train_seconds": 9.0, "tokens_per_s": 1e5, "mfu": None, "final_train_loss": 3.1,
                              "diverged": {"step": 40, "loss": "nan"} if status == "diverged" else None,
                              "precision": "32"}
    elif status == "running":
        record["training"] = {"max_steps": 100, "tokens_per_step": 2048}
    if status == "completed":
        ev = {"val_nll": val_nll, "val_ppl": 2.718281828 ** val_nll, "val_step": 100}
        if scores:
            ev["lm_eval"] = {
                "scores": {t: v for t, (v, _) in scores.items()},
                "metrics": {t: ("bits_per_byte,none" if "ppl" in t else "acc_norm,none") for t in scores},
                "details": {t: {("bits_per_byte,none" if "ppl" in t else "acc_norm,none"): v,
                                ("bits_per_byte_stderr,none" if "ppl" in t else "acc_norm_stderr,none"):
                                    "N/A" if se is None else se,
                                "num_fewshot": 0, "samples": 447, "limit": None} for t, (v, se) in scores.items()},
                "averages": {"offline": float(np.mean([v for t, (v, _) in scores.items() if "ppl" not in t]))},
                "version": "0.4.13", "results_file": "eval/results.json"}
        if throughput:
            ev["throughput"] = {"decode_tokens_per_s": throughput, "time_to_first_token_s": 0.002,
                                "peak_memory_bytes": 400 * 2 ** 20, "peak_memory_measure": "process_peak_rss",
                                "kv_cache_bytes": 1000, "device": "cpu", "dtype": "float32"}
        record["eval"] = ev
    return record


def write(run_dir: Path, record: dict | str) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / ".hydra").mkdir(exist_ok=True)
    text = record if isinstance(record, str) else json.dumps(record)
    (run_dir / "result.json").write_text(text)
    return run_dir


@pytest.fixture
def sweep(tmp_path) -> Path:
    root = tmp_path / "runs" / "grid"
    write(root / "model.d_model=128,model.n_layers=4", make_record(
        scores={"slm_shakespeare_mc": (0.31, 0.02), "slm_shakespeare_ppl": (4.2, None)}, throughput=900.0))
    write(root / "model.d_model=64,model.n_layers=4", make_record(d_model=64, val_nll=3.3))
    write(root / "model.d_model=64,model.n_layers=8", make_record("running", n_layers=8, d_model=64))
    write(root / "model.d_model=32,model.n_layers=8", make_record("diverged", n_layers=8, d_model=32,
                                                                error="non-finite training loss nan at step 40"))
    write(root / "model.d_model=33,model.n_layers=8", make_record(
        "failed", n_layers=8, d_model=33, error="ValueError: d_model 33 is not divisible by n_heads",
        model_section=False))
    write(root / "model.d_model=16,model.n_layers=2", '{"status": "completed", "config": ')   # truncated file
    (root / "model.d_model=16,model.n_layers=16" / ".hydra").mkdir(parents=True)               # never wrote a record
    multirun = {"hydra": {
        "sweep": {"dir": "runs/grid", "subdir": "${slm_job_key:${hydra.job.override_dirname}}"},
        "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper", "params": None},
        "job": {"config": {"override_dirname": {"kv_sep": "=", "item_sep": ",",
                                                "exclude_keys": ["run_group", "train.logging.progress_bar"]}}},
        "overrides": {"task": ["model.n_layers=4,8", "model.d_model=64,256", "run_group=grid",
                               "train.logging.progress_bar=false"]}}}
    (root / "multirun.yaml").write_text(yaml.safe_dump(multirun))
    return root


def test_every_status_is_a_row_and_the_unreadable_file_is_named(sweep, caplog):
    with caplog.at_level(logging.WARNING, logger="analysis.collect"):
        table = collect([sweep])
    unreadable = [r for r in caplog.records if "model.d_model=16,model.n_layers=2" in r.getMessage()]
    assert len(unreadable) == 1 and "skipped" in unreadable[0].getMessage()
    assert not table["run"].str.contains("n_layers=2$").any()
    by_run = table.set_index(table["run"].str.split("/").str[-1])
    assert by_run.loc["model.d_model=128,model.n_layers=4", "status"] == "completed"
    assert by_run.loc["model.d_model=64,model.n_layers=8", "status"] == "stopped"  # recorded running, no process
    assert by_run.loc["model.d_model=32,model.n_layers=8", "status"] == "diverged"
    failed = by_run.loc["model.d_model=33,model.n_layers=8"]
    assert failed["status"] == "failed" and "not divisible" in failed["error"]
    assert failed["d_model"] == 33  # from the config when the model section is missing
    assert by_run.loc["model.d_model=16,model.n_layers=16", "status"] == STOPPED
    # multirun.yaml asked for 4 x {64, 256} and 8 x {64, 256}: the two with d_model=256 never got a folder
    missing = table[table["error"].fillna("").str.contains("no job folder")]
    assert sorted(missing["run"].str.split("/").str[-1]) == ["model.d_model=256,model.n_layers=4",
                                                             "model.d_model=256,model.n_layers=8"]
    assert (missing["status"] == PENDING).all() and set(missing["d_model"]) == {256}
    assert len(table) == 8


def test_columns_units_and_values(sweep):
    table = collect(sweep)
    row = table[table["run"].str.endswith("model.d_model=128,model.n_layers=4")].iloc[0]
    for column in ("family", "n_layers", "d_model", "n_heads", "n_kv_heads", "position", "norm", "mlp", "canon_set",
                   "data", "tokenizer", "seed", "objective", "params_total", "params_non_embedding",
                   "flops_per_token", "tokens", "train_flops", "val_nll", "val_ppl", "decode_tokens_per_s",
                   "time_to_first_token_s", "peak_memory_bytes", "status", "error", "run_dir", "sweep"):
        assert column in table, column
    assert row["train_flops"] == row["flops_per_token"] * row["tokens"] == 6000 * 4 * 128 * 1_000_000
    assert row["score_slm_shakespeare_mc"] == 0.31 and row["stderr_slm_shakespeare_mc"] == 0.02
    assert row["metric_slm_shakespeare_mc"] == "acc_norm,none" and row["samples_slm_shakespeare_mc"] == 447
    assert pd.isna(row["stderr_slm_shakespeare_bpb"])  # lm-eval's "N/A"; recorded as slm_shakespeare_ppl
    assert row["avg_offline"] == 0.31 and row["data"] == "tiny_shakespeare" and row["seed"] == 0
    assert row["sweep"] == "grid" and row["decode_tokens_per_s"] == 900.0
    assert pd.api.types.is_numeric_dtype(table["d_model"]) and pd.api.types.is_numeric_dtype(table["val_nll"])
    assert lower_is_better("bits_per_byte,none") and lower_is_better("val_nll") and not lower_is_better("acc,none")
    # the fixture is a record from before layer_types: upgraded on the way in
    assert (row["layer_types"], row["mlp_types"], row["params_active"]) == ("attn", "dense", row["params_total"])
    assert "attention_pattern" not in table and "attention" not in table


def test_old_names_collect_into_todays_columns(tmp_path):
    """Records written before names said what their numbers are: slm_shakespeare_ppl (whose headline is bits per
    byte) is read as slm_shakespeare_bpb, members of an average included; a diffusion run's val_ppl (exp of a
    NELBO) as val_ppl_bound; a record scored again under the new name keeps the new name's numbers."""
    old = make_record(scores={"slm_shakespeare_mc": (0.31, 0.02), "slm_shakespeare_ppl": (4.2, None)})
    old["eval"]["lm_eval"]["averages"] = {"both": 2.0}
    old["eval"]["lm_eval"]["average_tasks"] = {"both": ["slm_shakespeare_ppl", "slm_shakespeare_mc"]}
    write(tmp_path / "old", old)
    diffusion = make_record(family="dllm", val_nll=3.0)
    diffusion["eval"]["val_nll_kind"] = "nelbo"  # val_ppl = e^3 as such runs recorded it
    write(tmp_path / "dllm_old", diffusion)
    new = make_record(family="dllm", val_nll=3.0)
    new["eval"].update(val_nll_kind="nelbo", val_ppl_bound=new["eval"].pop("val_ppl"))
    write(tmp_path / "dllm_new", new)
    rescored = make_record(family="llama3",
                           scores={"slm_shakespeare_mc": (0.3, 0.02), "slm_shakespeare_ppl": (4.2, None)})
    lm = rescored["eval"]["lm_eval"]
    for key, value in (("scores", 3.9), ("metrics", "bits_per_byte,none"), ("details", {"bits_per_byte,none": 3.9})):
        lm[key]["slm_shakespeare_bpb"] = value
    write(tmp_path / "rescored", rescored)
    table = collect(tmp_path).set_index("run")
    assert not [c for c in table.columns if "slm_shakespeare_ppl" in c]
    assert table.at["old", "score_slm_shakespeare_bpb"] == 4.2
    assert table.at["old", "metric_slm_shakespeare_bpb"] == "bits_per_byte,none"
    assert table.at["old", "samples_slm_shakespeare_bpb"] == 447
    assert table.at["old", "tasks_avg_both"] == "slm_shakespeare_bpb,slm_shakespeare_mc"
    assert table.at["rescored", "score_slm_shakespeare_bpb"] == 3.9  # the new name wins
    assert table.at["old", "val_ppl"] == pytest.approx(2.718281828 ** 3) and pd.isna(table.at["old", "val_ppl_bound"])
    for run in ("dllm_old", "dllm_new"):
        assert pd.isna(table.at[run, "val_ppl"]) and table.at[run, "val_ppl_bound"] == pytest.approx(2.718281828 ** 3)
    assert declared("val_ppl_bound").doc and "val_ppl_bound" not in collect(tmp_path / "old")  # bounds only


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_round_trip_and_load_results(sweep, tmp_path, suffix):
    table = collect(sweep)
    path = save_results(table, tmp_path / f"results{suffix}")
    back = load_results(path)
    assert list(back["run"]) == list(table["run"]) and list(back["status"]) == list(table["status"])
    assert back["val_nll"].equals(table["val_nll"])
    assert len(load_results(sweep)) == len(table)  # a runs directory is collected on the fly
    with pytest.raises(FileNotFoundError):
        load_results(tmp_path / "nope.parquet")


def test_single_run_dir_and_result_file(sweep):
    run = sweep / "model.d_model=128,model.n_layers=4"
    assert collect(run)["status"].tolist() == ["completed"]
    assert collect(run / "result.json")["status"].tolist() == ["completed"]


def test_cli_collect(sweep, tmp_path, capsys):
    out = tmp_path / "out" / "results.parquet"
    collect_main([str(sweep), "-o", str(out)])
    printed = capsys.readouterr()
    assert out.is_file() and "8 runs" in printed.out and "completed" in printed.out
    assert "slm-collect: warning: cannot read" in printed.err and "model.d_model=16,model.n_layers=2" in printed.err


@pytest.mark.parametrize("argv, message", [
    (["/no/such/dir"], "/no/such/dir: no such run, run group or result.json, here or under"),
    (["{empty}"], "no runs found"),
    (["{empty}", "-o", "x.xlsx"], "expected a .parquet or .csv"),
])
def test_cli_collect_bad_input_is_one_line(tmp_path, capsys, argv, message):
    (tmp_path / "empty").mkdir()
    argv = [a.replace("{empty}", str(tmp_path / "empty")) for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        collect_main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("slm-collect: error: ") and message in err and err.count("\n") == 1


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


LIGHT_SLM = ("slm.runs", "slm.bad_input", "slm.pipes", "slm.renames", "slm.eval", "slm.eval.score_lines",
             "slm.metrics", "slm.words", "slm.sweeps", "slm.sweeps.store", "slm.sweeps.study_files")
"""What analysis may import of slm: modules that load neither torch nor lightning (slm.eval: its __init__ only;
slm.metrics: the metric registry, slm.words: counted words, both standard library only; slm.sweeps.store: a sweep's
sweep.json; slm.sweeps.study_files: an Optuna sweep's study, read back with optuna)."""


def test_layering_analysis_imports_only_light_slm_modules_and_slm_never_imports_analysis():
    for path in (ROOT / "analysis").rglob("*.py"):
        bad = [m for m in _imports(path) if m.split(".")[0] == "slm" and m not in LIGHT_SLM
               and not m.startswith("slm.runs.")]
        assert not bad, f"{path} imports {bad}"
    for path in (ROOT / "slm").rglob("*.py"):
        assert not [m for m in _imports(path) if m.split(".")[0] == "analysis"], path


ABOVE_RUNS = ("slm.sweeps", "slm.cli", "hydra_plugins", "analysis", "bench")
"""The layers above slm.runs (slm.runs -> slm.sweeps -> slm.cli, analysis -> hydra_plugins -> bench)."""


def test_layering_slm_runs_imports_nothing_from_the_layers_above_it():
    """slm.runs reads and writes one run; a sweep's sweep.json and its states (slm.sweeps) sit above it, so what runs
    needs of a sweep is handed to it, never imported (function-level imports count too)."""
    for path in (ROOT / "slm" / "runs").rglob("*.py"):
        bad = [m for m in _imports(path) if any(m == up or m.startswith(up + ".") for up in ABOVE_RUNS)]
        assert not bad, f"{path} imports {bad}"


def _analysis_graph() -> dict[str, set[str]]:
    """{module: the analysis modules it imports}, function-level imports included; `from analysis import x` imports
    the package (its __init__) too."""
    modules = {("analysis" if p.stem == "__init__" else f"analysis.{p.stem}"): p
               for p in (ROOT / "analysis").glob("*.py")}
    graph = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def test_the_analysis_has_no_import_cycles():
    """No two modules of analysis/ import each other, directly or through others (what two modules share lives in
    the module it belongs to: metric facts in slm.metrics / analysis.metrics, labels in analysis.labels)."""
    graph = _analysis_graph()

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    cycles = sorted({m for m in graph if m in reach(m)})
    assert not cycles, f"import cycles through {cycles}"


def test_the_analysis_loads_neither_torch_nor_lightning():
    modules = sorted(p.stem for p in (ROOT / "analysis").glob("*.py") if p.stem != "__init__")
    probe = ("import sys\n" + "".join(f"import analysis.{m}\n" for m in modules)
             + "print(','.join(m for m in ('torch', 'lightning', 'slm.model', 'slm.training') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == ""


def test_a_mixture_of_experts_is_sized_by_its_active_parameters(tmp_path):
    """A record with layer_types / mlp_types and params_active (this schema): the table and the report's run
    table size it by its active parameters, and say so."""
    from analysis.report import run_table, sections

    moe = make_record(family="moe")
    del moe["model"]["attention_pattern"]  # today's record: layer_types, and the experts' settings in model.moe
    moe["model"].update(layer_types=["attn"], mlp_types=["moe"], moe={"n_experts": 8, "top_k": 2}, init="normal",
                        params_active=moe["model"]["params_total"] // 3, notes=[])
    moe["training"] = {**moe.get("training", {}), "moe_load": {"per_layer": [[0.125] * 8], "max_load": 1.0,
                                                              "min_load": 1.0, "steps": 10}}
    write(tmp_path / "grid" / "moe", moe)
    write(tmp_path / "grid" / "dense", make_record(family="llama3", n_layers=2))
    table = collect(tmp_path)
    row = table.set_index("family").loc["moe"]
    assert (row["mlp_types"], row["moe_n_experts"], row["init"], row["moe_max_load"]) == ("moe", 8, "normal", 1.0)
    assert row["params_active"] == row["params_total"] // 3
    dense = table.set_index("family").loc["llama3"]
    assert dense["params_active"] == dense["params_total"] and dense["init"] == "gpt2"  # an older record
    runs = run_table(table, None)
    assert {"active params", "total params"} <= set(runs.columns)
    blocks = dict(sections(table, "results.parquet"))["All runs"]
    assert any(isinstance(b, str) and "active parameters per token" in b for b in blocks)


def test_a_diffusion_bound_is_never_silently_an_nll(tmp_path):
    """val_nll_kind says which runs hold a NELBO; labels, the score choice and the Pareto plot say so too."""
    from analysis.plot_style import choose_score, score_label
    from analysis.plots.pareto import plot_pareto

    diffusion = make_record(family="dllm", n_layers=2, val_nll=2.5)
    diffusion["eval"]["val_nll_kind"] = "nelbo"
    write(tmp_path / "grid" / "dllm", diffusion)
    write(tmp_path / "grid" / "ar", make_record(family="llama3", n_layers=2, val_nll=2.0))
    write(tmp_path / "grid" / "ar4", make_record(family="llama3", n_layers=4, val_nll=1.9, tokens=2_000_000))
    table = collect(tmp_path)
    kinds = dict(zip(table["family"] + table["n_layers"].astype(str), table["val_nll_kind"]))
    assert kinds == {"dllm2": "nelbo", "llama32": "nll", "llama34": "nll"}  # older records: nll
    assert "hollow: NELBO (an upper bound)" in score_label(table, "val_nll")
    score, note = choose_score(table.drop(columns=[c for c in table if c.startswith(("score_", "avg_"))]))
    assert score == "val_nll" and "not comparable" in note
    assert "NELBO" in score_label(table[table["family"] == "dllm"], "val_nll")
    fig = plot_pareto(table)
    assert "left off the frontier of exact NLLs" in fig.texts[-1].get_text() + "".join(t.get_text() for t in fig.texts)


def test_the_jobs_a_sweep_listed_in_sweep_json_are_pending_rows(tmp_path):
    """A sweep with keys made by slm_job_key's override list (not expandable from multirun.yaml) shows its
    jobs not started from the sweep.json its sweeper wrote."""
    root = tmp_path / "runs" / "g"
    write(root / "model.d_model=64", make_record(d_model=64))
    (root / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"sweep": {
        "subdir": "${slm_job_key:${hydra.overrides.task},${hydra.job.config.override_dirname.exclude_keys}}"}}}))
    (root / "sweep.json").write_text(json.dumps({"jobs": {"model.d_model=64": ["model.d_model=64"],
                                                          "model.d_model=128": ["model.d_model=128", "sweep=x"]}}))
    table = collect(root)
    pending = table[table["status"] == PENDING]
    assert list(pending["run"].str.split("/").str[-1]) == ["model.d_model=128"] and list(pending["d_model"]) == [128]
    assert len(table) == 2


def test_a_saved_table_finds_its_runs_from_anywhere(tmp_path, monkeypatch):
    """run_dir is stored relative to the table file and resolved against its location: a table collected with a
    relative path, read from another working directory or after the whole folder moved, still names each run's
    directory; a table written before (paths relative to where slm-collect ran) is read from there."""
    import shutil

    write(tmp_path / "runs" / "grid" / "a", make_record(family="gpt2"))
    write(tmp_path / "runs" / "grid" / "b", make_record(family="llama3"))
    monkeypatch.chdir(tmp_path)
    path = save_results(collect(Path("runs") / "grid"), Path("runs") / "grid" / "results.parquet")
    stored = pd.read_parquet(path)["run_dir"].tolist()
    assert sorted(stored) == ["a", "b"]  # relative to the table's folder: portable
    monkeypatch.chdir(tmp_path.parent)
    for move in (False, True):  # read from elsewhere; then with the whole folder moved
        if move:
            shutil.move(tmp_path / "runs", tmp_path / "moved")
        table = load_results(tmp_path / ("moved" if move else "runs") / "grid" / "results.parquet")
        assert all(Path(d).is_absolute() and (Path(d) / "result.json").is_file() for d in table["run_dir"])
    legacy = pd.read_parquet(tmp_path / "moved" / "grid" / "results.parquet")
    legacy["run_dir"] = ["moved/grid/" + d for d in legacy["run_dir"]]  # as an older slm-collect wrote them
    legacy.to_parquet(tmp_path / "moved" / "grid" / "old.parquet")
    monkeypatch.chdir(tmp_path)
    assert all((Path(d) / "result.json").is_file() for d in load_results(Path("moved/grid/old.parquet"))["run_dir"])


def test_collect_reports_progress_over_the_records(sweep, capsys):
    """slm-collect on thousands of records says how far it is (slm-fit's progress line): collect calls progress
    with (done, total) from 0 to the last record, and the line reads `read i of n records`."""
    from analysis.cli import _Progress

    calls = []
    table = collect(sweep, progress=lambda done, total: calls.append((done, total)))
    total = calls[0][1]
    assert calls[0] == (0, total) and calls[-1] == (total, total) and total == len(table[table["status"] != "pending"])
    import io

    stream = io.StringIO()
    collect(sweep, progress=_Progress("slm-collect", label="read", unit="records", first="slm-collect: reading",
                                      stream=stream))
    lines = stream.getvalue().splitlines()
    assert lines[0] == "slm-collect: reading" and lines[-1].startswith(f"slm-collect: read {total} of {total} records")
