"""The dry run of a sweep (`hydra.sweeper.dry_run=true`): the job list with exact parameter counts,
token budgets and a GPU-hours estimate, from the configs: nothing is trained or downloaded.

For a job whose width is solved for a parameter budget (model.param_budget), the `budget` column is how
far it landed: params_<model.budget_count> / param_budget - 1, with `!` beside it when that is outside
model.budget_tolerance (default 0.03; the solver refuses such a config, so `!` appears only where a
tolerance let it through), and the `budget knob` column, which sizes the solver moved: `d_model` (the width
alone, the family's MLP kept) or e.g. `d_model, d_ff 256→336` (the MLP hidden size tuned after the width;
slm.model.budget).

GPU-hours = tokens x flops_per_token / (mfu x peak_flops) / 3600, with flops_per_token the training
FLOPs per token of slm.model.count (PaLM's convention, 6N + attention) and peak_flops from
`hydra.sweeper.estimate` (default: an H100 SXM's 989.4 TFLOP/s dense bf16). The MFU, per model family:

  1. `estimate.mfu` when it is set (a number): used as given, nothing is measured;
  2. else measured: the median `training.mfu` of the completed runs of the family under $SLM_RUNS (default
     runs/; any run group) that ran on a GPU whose recorded peak (`training.peak_flops`: device and
     precision) is the estimate's peak_flops; MFU is FLOPs-normalised, so it carries across model sizes;
  3. else the median of such runs of every family;
  4. else `estimate.assumed_mfu` (default 0.4).

Runs on a CPU, or on another device or precision, are never used; a result.json that cannot be read is
skipped. Below the table one line per family says which MFU it used and from which runs.
"""

from __future__ import annotations

import math
import os
import statistics
from pathlib import Path

from omegaconf import OmegaConf

from hydra_plugins.slm_sweeps.jobs import Job
from slm.runs.errors import one_line
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


def _number(value) -> float | None:
    """A finite positive number, else None (JSON writes non-finite floats as strings)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return float(value) if ok else None


def _measured(record: dict, name: str) -> dict | None:
    """A completed run's measured MFU, family, peak and device, or None if it is not one measured on a GPU."""
    training, model, env = (record.get(k) or {} for k in ("training", "model", "environment"))
    mfu, peak, device = _number(training.get("mfu")), _number(training.get("peak_flops")), env.get("device")
    if record.get("status") != COMPLETED or mfu is None or peak is None or not isinstance(device, str) \
            or device.startswith("cpu"):
        return None
    return {"name": name, "family": model.get("family"), "mfu": mfu, "peak_flops": peak, "device": device}


def measured_runs(root: Path) -> list[dict]:
    """Every completed run under `root` (<group>/<key>/result.json) with an MFU measured on a GPU; a record
    that cannot be read is skipped."""
    from slm.runs.record import RESULT_FILE, RecordError, load_record

    runs = []
    try:
        paths = sorted(root.glob(f"*/*/{RESULT_FILE}"))
    except OSError:
        return []
    for path in paths:
        group, key = path.parent.parent.name, path.parent.name
        if group.startswith(".") or key.startswith("."):
            continue
        try:
            run = _measured(load_record(path.parent) or {}, f"{group}/{key}")
        except RecordError:
            continue
        if run is not None:
            runs.append(run)
    return runs


def _names(runs: list[dict], most: int = 3) -> str:
    names = ", ".join(r["name"] for r in runs[:most])
    return names + (f" (+{len(runs) - most} more)" if len(runs) > most else "")


def _family_mfu(family: str, runs: list[dict], estimate: dict, root: Path, others: int) -> tuple[float, str]:
    """The MFU for `family` from `runs` (measured at the estimate's peak), and where it comes from."""
    same = [r for r in runs if r["family"] == family]
    used = same or runs
    plural = "s" if len(used) != 1 else ""
    which = f"{family} run{plural}" if same else f"run{plural} of any family"
    if not used:
        elsewhere = f" ({others} at other peaks: set hydra.sweeper.estimate.peak_flops to theirs)" if others else ""
        return float(estimate.get("assumed_mfu", 0.4)), (
            f"assumed (hydra.sweeper.estimate.assumed_mfu): no completed run under {root}/ measured at "
            f"{float(estimate['peak_flops']) / 1e12:.1f} TFLOP/s{elsewhere}")
    devices = ", ".join(sorted({r["device"] for r in used}))
    return statistics.median(r["mfu"] for r in used), (
        f"measured: median of {len(used)} completed {which} on {devices}: {_names(used)}")


def mfu_by_family(estimate: dict, families: set, root: Path) -> dict[str, tuple[float, str]]:
    """family -> (MFU, where it comes from) for the GPU-hours: the rule in this module's docstring."""
    if estimate.get("mfu") is not None:
        return {f: (float(estimate["mfu"]), "as given (hydra.sweeper.estimate.mfu)") for f in families}
    measured = measured_runs(root)
    here = [r for r in measured if math.isclose(r["peak_flops"], float(estimate["peak_flops"]), rel_tol=1e-3)]
    return {f: _family_mfu(f, here, estimate, root, len(measured) - len(here)) for f in families}


def _family(job: Job) -> str:
    try:
        return str(OmegaConf.select(job.cfg, "model.family", default=None) or "custom")
    except Exception:
        return "custom"


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
        from slm.objectives import ObjectiveError, check_preset, tokenizer_node_for

        try:
            check_preset(cfg["model"], cfg["train"].get("objective", "causal_lm"))  # the job itself would refuse it
        except ObjectiveError as err:
            return {**row, "error": str(err)}
        vocab = _vocab(tokenizer_node_for(cfg["train"].get("objective", "causal_lm"), cfg["tokenizer"]), cfg["data"])
        report = params_report({**cfg["model"], **({"vocab_size": vocab} if vocab else {})})
        train = TrainConfig.from_node(cfg["train"])
        steps = train.max_steps(report["context_length"])
        tokens = steps * train.batch_size * report["context_length"]
    except Exception as err:
        return {**row, "error": one_line(err)}
    flops = tokens * report["flops_per_token"]
    from slm.model.budget import SOLVER_KEYS

    budget_error = report.get("budget_error")
    tolerance = cfg["model"].get("budget_tolerance", SOLVER_KEYS["budget_tolerance"])
    outside = budget_error is not None and tolerance is not None and abs(budget_error) > float(tolerance)
    return {**row, "error": None, "n_layers": report["n_layers"], "d_model": report["d_model"],
            "budget_error": budget_error, "budget_outside": outside,
            "budget_knob": (report.get("budget_fit") or {}).get("moved"),
            "params": report["params_total"], "non_embedding": report["params_non_embedding"],
            "active": report["params_active"], "notes": report["notes"],
            "vocab_fitted": vocab is None, "steps": steps, "tokens": tokens, "flops": flops,
            "gpu_hours": flops / (float(estimate["mfu"]) * float(estimate["peak_flops"])) / 3600}


def print_plan(name: str, sweep_dir: Path, jobs: list[Job], estimate: dict) -> list[dict]:
    families = [_family(job) for job in jobs]
    mfus = mfu_by_family(estimate, set(families), Path(os.environ.get("SLM_RUNS") or "runs"))
    rows = [{**plan_row(job, {**estimate, "mfu": mfus[f][0]}), "family": f} for job, f in zip(jobs, families)]
    width = max([len(r["key"]) for r in rows] + [7])
    knobs = max([len(r.get("budget_knob") or "") for r in rows] + [12])
    print(f"dry run of sweep {name}: {len(rows)} job{'' if len(rows) == 1 else 's'} into {sweep_dir}/ (nothing is trained)")
    print(f"{'job key':{width}s} {'layers':>6s} {'d_model':>7s} {'params':>13s} {'non-embed':>13s} {'active':>13s} "
          f"{'steps':>8s} {'tokens':>9s} {'FLOPs':>9s} {'GPU-h':>8s} {'budget':>8s}  {'budget knob':{knobs}s}  state")
    for r in rows:
        if r["error"]:
            print(f"{r['key']:{width}s} invalid: {r['error']}")
            continue
        mark = "*" if r["vocab_fitted"] else " "
        budget = "-" if r.get("budget_error") is None else f"{r['budget_error']:+.1%}" + ("!" if r["budget_outside"] else "")
        print(f"{r['key']:{width}s} {r['n_layers']:6d} {r['d_model']:7d} {r['params']:13,d}{mark}{r['non_embedding']:12,d}"
              f" {r['active']:13,d} {r['steps']:8d} {r['tokens']:9.3g} {r['flops']:9.3g} {r['gpu_hours']:8.2f} {budget:>8s}"
              f"  {r.get('budget_knob') or '-':{knobs}s}  {r['state']}")
        for note in r["notes"]:
            print(f"{'':{width}s}   note: {note}")
        if r["unreadable"]:
            print(f"{'':{width}s}   unreadable: {r['unreadable']} (the sweep skips this job)")
    ok = [r for r in rows if not r["error"]]
    todo = [r for r in ok if r["state"] != COMPLETED]
    print(f"{'total':{width}s} {'':6s} {'':7s} {'':13s} {'':13s} {'':13s} {'':8s} {sum(r['tokens'] for r in ok):9.3g} "
          f"{sum(r['flops'] for r in ok):9.3g} {sum(r['gpu_hours'] for r in ok):8.2f} {'':8s}  {'':{knobs}s}  "
          f"({sum(r['gpu_hours'] for r in todo):.2f} GPU-h not completed yet)")
    _print_estimate(estimate, {r["family"]: mfus[r["family"]] for r in ok})
    print("active: parameters one token uses (less the experts a mixture of experts skips); FLOPs follow them")
    if any(r.get("budget_error") is not None for r in ok):
        print("budget: params (the count model.budget_count names) / model.param_budget - 1"
              + ("; !: outside model.budget_tolerance" if any(r.get("budget_outside") for r in ok) else ""))
        print("budget knob: d_model solved with the family's MLP, then the MLP hidden size (d_ff, or moe.expert_d_ff when "
              "set) tuned at that width in steps of model.d_ff_step within 0.5x-2x of the family's: from→to")
        outside = [r["key"] for r in ok if r.get("budget_outside")]
        if outside:
            print(f"outside the budget tolerance: {', '.join(outside)}")
    if any(r.get("vocab_fitted") for r in ok):
        print("* vocabulary fitted on hub data (char/word tokenizer), not read by a dry run: counted with model.vocab_size")
    return rows


def _print_estimate(estimate: dict, mfus: dict[str, tuple[float, str]]) -> None:
    """How the GPU-hours were estimated: the formula, then the MFU of each family and where it comes from."""
    values = {mfu for mfu, _ in mfus.values()}
    mfu = f"{values.pop():.0%} MFU" if len(values) == 1 else "MFU below" if values else "MFU"
    print(f"GPU-hours = tokens x FLOPs/token / ({mfu} x {float(estimate['peak_flops']) / 1e12:.1f} "
          f"TFLOP/s, {estimate.get('device', 'assumed device')}) / 3600; FLOPs/token: training, PaLM convention")
    by_source: dict[tuple[float, str], list[str]] = {}
    for family, source in sorted(mfus.items()):
        by_source.setdefault(source, []).append(family)
    for (value, how), families in by_source.items():
        print(f"MFU of {', '.join(families)}: {value:.1%}, {how}")
