"""The dry run of a sweep (`hydra.sweeper.dry_run=true`): the job list with exact parameter counts,
token budgets and a GPU-hours estimate, from the configs: nothing is trained or downloaded.

For a job whose width is solved for a parameter budget (model.param_budget), the `budget` column is how
far it landed: params_<model.budget_count> / param_budget - 1, with `!` beside it when that is outside
model.budget_tolerance (default 0.25; the solver refuses such a config, so `!` appears only where a
tolerance let it through).

GPU-hours = tokens x flops_per_token / (mfu x peak_flops) / 3600, with flops_per_token the training
FLOPs per token of slm.model.count (PaLM's convention, 6N + attention) and mfu and peak_flops from
`hydra.sweeper.estimate` (default: 40% of an H100 SXM's 989.4 TFLOP/s dense bf16).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from hydra_plugins.slm_sweeps.jobs import Job, one_line
from slm.runs.status import COMPLETED


def _vocab(tokenizer_node: dict, data_node: dict) -> int | None:
    """The model's (padded) vocabulary: from a tokenizer that needs no data (gpt2, hf), or for one fitted
    on the data (char, word) from the prepared data when it is local (shipped corpus, files; cached after
    the first time); None for a fitted vocabulary of hub data, which a dry run does not download."""
    from slm.data import TokenizerConfig, prepare
    from slm.data.tokenizers import tokenizer_class

    cfg = TokenizerConfig.from_node(tokenizer_node)
    try:
        tokenizer = tokenizer_class(cfg.kind).from_config(cfg)
        return cfg.padded((tokenizer.reserve_mask() if cfg.mask else tokenizer).vocab_size)
    except Exception:
        pass
    if any(source.get("kind") == "hub" for source in data_node.get("sources") or []):
        return None
    return prepare(data_node, tokenizer_node).vocab_size


def plan_row(job: Job, estimate: dict) -> dict:
    from slm.cli.params import params_report
    from slm.runs.record import RecordError, load_record
    from slm.runs.status import PENDING, UNREADABLE, live_status
    from slm.training.config import TrainConfig

    try:
        state = live_status((load_record(job.run_dir) or {}).get("status"), job.run_dir) \
            if job.run_dir.exists() else PENDING
        row = {"key": job.key, "state": state, "unreadable": None}
    except RecordError as err:
        row = {"key": job.key, "state": UNREADABLE, "unreadable": str(err)}
    if job.cfg is None:
        return {**row, "error": job.error}
    try:
        cfg = {k: OmegaConf.to_container(job.cfg[k], resolve=True) for k in ("model", "tokenizer", "data", "train")}
        from slm.objectives import tokenizer_node_for

        vocab = _vocab(tokenizer_node_for(cfg["train"].get("objective", "causal_lm"), cfg["tokenizer"]), cfg["data"])
        report = params_report({**cfg["model"], **({"vocab_size": vocab} if vocab else {})})
        train = TrainConfig.from_node(cfg["train"])
        steps = train.max_steps(report["context_length"])
        tokens = steps * train.batch_size * report["context_length"]
    except Exception as err:
        return {**row, "error": one_line(err)}
    flops = tokens * report["flops_per_token"]
    budget_error = report.get("budget_error")
    tolerance = cfg["model"].get("budget_tolerance", 0.25)
    outside = budget_error is not None and tolerance is not None and abs(budget_error) > float(tolerance)
    return {**row, "error": None, "n_layers": report["n_layers"], "d_model": report["d_model"],
            "budget_error": budget_error, "budget_outside": outside,
            "params": report["params_total"], "non_embedding": report["params_non_embedding"],
            "active": report["params_active"], "notes": report["notes"],
            "vocab_fitted": vocab is None, "steps": steps, "tokens": tokens, "flops": flops,
            "gpu_hours": flops / (float(estimate["mfu"]) * float(estimate["peak_flops"])) / 3600}


def print_plan(name: str, sweep_dir: Path, jobs: list[Job], estimate: dict) -> list[dict]:
    rows = [plan_row(job, estimate) for job in jobs]
    width = max([len(r["key"]) for r in rows] + [7])
    print(f"dry run of sweep {name}: {len(rows)} jobs into {sweep_dir}/ (nothing is trained)")
    print(f"{'job key':{width}s} {'layers':>6s} {'d_model':>7s} {'params':>13s} {'non-embed':>13s} {'active':>13s} "
          f"{'steps':>8s} {'tokens':>9s} {'FLOPs':>9s} {'GPU-h':>8s} {'budget':>8s}  state")
    for r in rows:
        if r["error"]:
            print(f"{r['key']:{width}s} invalid: {r['error']}")
            continue
        mark = "*" if r["vocab_fitted"] else " "
        budget = "-" if r.get("budget_error") is None else f"{r['budget_error']:+.1%}" + ("!" if r["budget_outside"] else "")
        print(f"{r['key']:{width}s} {r['n_layers']:6d} {r['d_model']:7d} {r['params']:13,d}{mark}{r['non_embedding']:12,d}"
              f" {r['active']:13,d} {r['steps']:8d} {r['tokens']:9.3g} {r['flops']:9.3g} {r['gpu_hours']:8.2f} {budget:>8s}"
              f"  {r['state']}")
        for note in r["notes"]:
            print(f"{'':{width}s}   note: {note}")
        if r["unreadable"]:
            print(f"{'':{width}s}   unreadable: {r['unreadable']} (the sweep skips this job)")
    ok = [r for r in rows if not r["error"]]
    todo = [r for r in ok if r["state"] != COMPLETED]
    print(f"{'total':{width}s} {'':6s} {'':7s} {'':13s} {'':13s} {'':13s} {'':8s} {sum(r['tokens'] for r in ok):9.3g} "
          f"{sum(r['flops'] for r in ok):9.3g} {sum(r['gpu_hours'] for r in ok):8.2f} {'':8s}  "
          f"({sum(r['gpu_hours'] for r in todo):.2f} GPU-h not completed yet)")
    print(f"GPU-hours = tokens x FLOPs/token / ({float(estimate['mfu']):.0%} MFU x {float(estimate['peak_flops']) / 1e12:.1f} "
          f"TFLOP/s, {estimate.get('device', 'assumed device')}) / 3600; FLOPs/token: training, PaLM convention")
    print("active: parameters one token uses (less the experts a mixture of experts skips); FLOPs follow them")
    if any(r.get("budget_error") is not None for r in ok):
        print("budget: params (the count model.budget_count names) / model.param_budget - 1"
              + ("; !: outside model.budget_tolerance" if any(r.get("budget_outside") for r in ok) else ""))
        outside = [r["key"] for r in ok if r.get("budget_outside")]
        if outside:
            print(f"outside the budget tolerance: {', '.join(outside)}")
    if any(r.get("vocab_fitted") for r in ok):
        print("* vocabulary fitted on hub data (char/word tokenizer), not read by a dry run: counted with model.vocab_size")
    return rows
