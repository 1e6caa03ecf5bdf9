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
  4. else `estimate.assumed_mfu` (default 0.153: the one measured figure, docs/benchmarks.md's compiled llama3 70M
     on one H100, at a quarter of the 70M sweeps' batch; 40% was the default before, never measured, and gave a
     third of the hours that measurement implies).

Runs on a CPU, or on another device or precision, are never used; a result.json that cannot be read is
skipped. A sweep that would train here on the CPU (train.parallel.accelerator cpu, or auto on a machine with no GPU;
not through Slurm) also gets its CPU wall time: each job's FLOPs over the training FLOP/s (tokens_per_s x
flops_per_token) of the completed CPU runs under $SLM_RUNS, the median of its family's, else of every family's (the
jobs one after another; a rough figure, since a CPU's FLOP/s moves with model size and threads). Below the table one line per family says which MFU it used and from which runs; an MFU that is not
measured here (given or assumed) is shown beside the measured figure. With a Slurm launcher the dry run also says
what would be submitted (slurm_lines).
"""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path

from slm.durations import duration
from slm.runs.errors import one_line
from slm.runs.states import COMPLETED
from slm.sweeps.jobs import Job
from slm.words import counted


MEASURED_MFU = 0.153  # docs/benchmarks.md, "Training speed on one H100"
MEASURED = ("llama3 70M, torch.compile, bf16-mixed, one H100, 16 x 1024 tokens per step: docs/benchmarks.md; "
            "the 70M sweeps step 64 x 1024")


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


def _cpu_speed(record: dict, name: str) -> dict | None:
    """A completed CPU run's training FLOP/s (tokens_per_s x flops_per_token), family and device, or None."""
    training, model, env = (record.get(k) or {} for k in ("training", "model", "environment"))
    speed, per_token, device = _number(training.get("tokens_per_s")), _number(model.get("flops_per_token")), \
        env.get("device")
    if record.get("status") != COMPLETED or speed is None or per_token is None or not isinstance(device, str) \
            or not device.startswith("cpu"):
        return None
    return {"name": name, "family": model.get("family"), "flops_per_s": speed * per_token, "device": device}


def measured_runs(root: Path, read=_measured) -> list[dict]:
    """Every completed run under `root` (<group>/<key>/result.json) with an MFU measured on a GPU (read=_cpu_speed:
    with a training speed measured on a CPU); a record that cannot be read is skipped."""
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
            run = read(load_record(path.parent) or {}, f"{group}/{key}")
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
        assumed = float(estimate.get("assumed_mfu", MEASURED_MFU))
        return assumed, (
            f"assumed (hydra.sweeper.estimate.assumed_mfu): {_beside_measured(assumed)}; no completed run under {root}/ "
            f"measured at {float(estimate['peak_flops']) / 1e12:.1f} TFLOP/s{elsewhere}")
    devices = ", ".join(sorted({r["device"] for r in used}))
    return statistics.median(r["mfu"] for r in used), (
        f"measured: median of {len(used)} completed {which} on {devices}: {_names(used)}")


def _percent(value: float) -> str:
    """`40%`, `15.3%`."""
    return f"{value:.1%}".replace(".0%", "%")


def _beside_measured(mfu: float) -> str:
    """What an MFU that is not measured here stands against: docs/benchmarks.md's measured figure."""
    if math.isclose(mfu, MEASURED_MFU, rel_tol=1e-6):
        return f"the one measured figure ({MEASURED})"
    return f"the one measured figure is {_percent(MEASURED_MFU)} ({MEASURED})"


def mfu_by_family(estimate: dict, families: set, root: Path) -> dict[str, tuple[float, str]]:
    """family -> (MFU, where it comes from) for the GPU-hours: the rule in this module's docstring."""
    if estimate.get("mfu") is not None:
        given = float(estimate["mfu"])
        return {f: (given, f"as given (hydra.sweeper.estimate.mfu): {_beside_measured(given)}") for f in families}
    measured = measured_runs(root)
    here = [r for r in measured if math.isclose(r["peak_flops"], float(estimate["peak_flops"]), rel_tol=1e-3)]
    return {f: _family_mfu(f, here, estimate, root, len(measured) - len(here)) for f in families}


def _family(job: Job) -> str:
    try:
        return str(job.select("model.family") or "custom")
    except Exception:
        return "custom"


_MEMO: dict[tuple, object] = {}


def _memo(fn, *args):
    """fn(*args) for plain JSON-like arguments, once per distinct value (the jobs of a sweep share a few models and
    tokenizers; a parameter count takes ~5 ms). The result is shared: callers read it, never change it."""
    key = (fn.__qualname__, json.dumps(args, sort_keys=True, default=repr))
    if key not in _MEMO:
        _MEMO[key] = fn(*args)
    return _MEMO[key]


def plan_row(job: Job, estimate: dict) -> dict:
    from slm.model.params_report import params_report
    from slm.runs.record import RecordError, load_record
    from slm.runs.states import PENDING, UNREADABLE, live_status
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
        cfg = {k: job.section(k) for k in ("model", "tokenizer", "data", "train")}
        from slm.objectives import ObjectiveError, check_preset, tokenizer_node_for

        try:
            check_preset(cfg["model"], cfg["train"].get("objective", "causal_lm"))  # the job itself would refuse it
        except ObjectiveError as err:
            return {**row, "error": str(err)}
        vocab = _memo(_vocab, tokenizer_node_for(cfg["train"].get("objective", "causal_lm"), cfg["tokenizer"]), cfg["data"])
        report = _memo(params_report, {**cfg["model"], **({"vocab_size": vocab} if vocab else {})})
        train = TrainConfig.from_node(cfg["train"])
        steps = train.max_steps(report["context_length"])
        branches = train.decay_branches(report["context_length"])
        extra = sum(b.steps - b.start for b in branches)  # each decay branch trains its decay on top of the run
        tokens = (steps + extra) * train.batch_size * report["context_length"]
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
            "active": report["params_active"],
            "notes": report["notes"] + ([f"with its {len(branches)} decay branch{'es' if len(branches) > 1 else ''} "
                                         f"(train.schedule.decay_branches): {extra} more steps, in its tokens, FLOPs "
                                         "and GPU-h"] if branches else []),
            "vocab_fitted": vocab is None, "steps": steps, "tokens": tokens, "flops": flops,
            "gpu_hours": flops / (float(estimate["mfu"]) * float(estimate["peak_flops"])) / 3600}


def print_plan(name: str, sweep_dir: Path, jobs: list[Job], estimate: dict, launcher: dict | None = None,
               rerun_failed: bool = False, batch_size: int | None = None) -> list[dict]:
    """Print the dry run: the job table, the GPU-hours and where their MFU comes from, and with a Slurm `launcher`
    (hydra.launcher, a plain dict) what would be submitted; returns the rows. A row's `launch`: the sweep would launch the job."""
    from slm.runs.record import settled
    from slm.runs.states import UNREADABLE

    families = [_family(job) for job in jobs]
    mfus = mfu_by_family(estimate, set(families), Path(os.environ.get("SLM_RUNS") or "runs"))
    rows = [{**plan_row(job, {**estimate, "mfu": mfus[f][0]}), "family": f} for job, f in zip(jobs, families)]
    for row, job in zip(rows, jobs):  # as slm.sweeps.grid decides
        row["invalid"] = job.cfg is None
        row["launch"] = job.cfg is not None and row["state"] != UNREADABLE and not settled(row["state"], rerun_failed)
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
    if not str(_launcher_settings(launcher).get("_target_", "")).endswith("SlurmLauncher"):  # Slurm: the cluster's
        for line in cpu_lines(jobs, rows):
            print(line)
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
    for line in slurm_lines(launcher, rows, batch_size):
        print(line)
    return rows


def _on_cpu(job: Job) -> bool:
    """Whether the job would train on this machine's CPU (slm.training.devices.trains_on_cpu)."""
    from slm.training.devices import trains_on_cpu

    try:
        accelerator = str(job.select("train.parallel.accelerator") or "auto")
    except Exception:
        return False
    return trains_on_cpu(accelerator)


def cpu_lines(jobs: list[Job], rows: list[dict]) -> list[str]:
    """The CPU wall time of the jobs not completed that would train on this machine's CPU, at the FLOP/s of the
    completed CPU runs under $SLM_RUNS (per family, else every family's median); [] when none would."""
    root = Path(os.environ.get("SLM_RUNS") or "runs")
    todo = [r for r, job in zip(rows, jobs) if job.cfg is not None and not r.get("error") and r["state"] != COMPLETED
            and _on_cpu(job)]
    if not todo:
        return []
    runs = measured_runs(root, _cpu_speed)
    if not runs:
        return [f"CPU: {counted(len(todo), 'job')} would train on this machine's CPU, where the GPU-hours do not apply; no "
                f"completed CPU run under {root}/ measured its speed yet (train one job, then dry-run again)"]
    seconds, used = 0.0, set()
    for r in todo:
        same = [x for x in runs if x["family"] == r["family"]] or runs
        used.update(x["name"] for x in same)
        seconds += r["flops"] / statistics.median(x["flops_per_s"] for x in same)
    chosen = [x for x in runs if x["name"] in used]
    threads = ", ".join(sorted({x["device"] for x in chosen}))
    groups = sorted({x["name"].split("/")[0] for x in chosen})
    groups_text = ", ".join(groups[:3]) + (f" (+{len(groups) - 3} more)" if len(groups) > 3 else "")
    return [f"CPU: about {duration(seconds)} of training for the {counted(len(todo), 'job')} not completed, one after "
            f"another (slm-workers N: about 1/N with N free cores), at the training FLOP/s of {len(chosen)} completed "
            f"CPU run{'s' if len(chosen) != 1 else ''} under {root}/ (median "
            f"{statistics.median(x['flops_per_s'] for x in chosen) / 1e9:.3g} GFLOP/s on {threads}; run group"
            f"{'s' if len(groups) != 1 else ''} {groups_text}); "
            "rough: a CPU's FLOP/s moves with model size"]


def _launcher_settings(launcher: dict | None) -> dict:
    """hydra.launcher as a plain dict (the sweeper resolves what it can: ${train.parallel.devices}), {} when none."""
    return launcher or {}


def _minutes(value) -> str:
    """Minutes as `1d00h`, `4h00m`, `10m00s`; anything else as it is."""
    return duration(float(value) * 60) if _number(value) else str(value)


def _whole(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def slurm_lines(launcher, rows: list[dict], batch_size: int | None = None) -> list[str]:
    """What a Slurm launcher (hydra/launcher=slurm, slurm_multigpu) would submit for these rows, from its settings
    (conf/hydra/launcher/slurm.yaml): the array (the jobs the sweep would launch: row["launch"]), the resources per
    job, the partition, the time limit and requeues, the array's parallelism; [] for any other launcher. Submits
    nothing."""
    cfg = _launcher_settings(launcher)
    if not str(cfg.get("_target_", "")).endswith("SlurmLauncher"):
        return []
    head = f"Slurm ({cfg['_target_']}), nothing submitted:"
    launched = [r for r in rows if r.get("launch")]
    left_out: dict[str, int] = {}
    for r in rows:
        if not r.get("launch"):
            why = "invalid" if r.get("invalid") else r["state"] if r["state"] in ("completed", "unreadable") \
                else f"recorded {r['state']} (rerun_failed=true adds it)"
            left_out[why] = left_out.get(why, 0) + 1
    out = f" (left out: {', '.join(f'{n} {why}' for why, n in left_out.items())})" if left_out else ""
    if not launched:
        return [f"{head} the sweep would submit no job{out}"]
    size = int(batch_size) if batch_size else len(launched)
    arrays = math.ceil(len(launched) / size)
    lines = [head, f"  array: {counted(len(launched), 'job')}, the jobs not completed{out}"
             + (f", in {arrays} arrays of at most {size} one after another (hydra.sweeper.max_batch_size, else "
                  "the cluster's MaxArraySize)" if arrays > 1 else "")
             + f"; at most {cfg.get('array_parallelism')} running at once (array_parallelism)"]
    nodes, tasks, gpus = cfg.get("nodes"), cfg.get("tasks_per_node"), cfg.get("gpus_per_node")
    gpus_per_job = _whole(gpus) * _whole(nodes) if _whole(gpus) and _whole(nodes) else None
    per_job = [f"{nodes} node{'s' if nodes != 1 else ''} x {tasks} task{'s' if tasks != 1 else ''} per node",
               (f"{gpus} GPU{'s' if gpus != 1 else ''} per node" + (f" ({gpus_per_job} in all)" if nodes != 1 else ""))
               if gpus else "no GPU (gpus_per_node: null)",
               f"{cfg['cpus_per_task']} CPUs per task" if cfg.get("cpus_per_task") else "cpus_per_task: null (Slurm's default)",
               f"{cfg['mem_gb']} GB memory per node" if cfg.get("mem_gb") else "mem_gb: null (the partition's default)"]
    per_job += [f"{k} {cfg[k]}" for k in ("gpus_per_task", "cpus_per_gpu", "mem_per_gpu", "mem_per_cpu", "gres") if cfg.get(k)]
    lines.append("  per job: " + ", ".join(per_job))
    where = [f"partition {cfg['partition']}" if cfg.get("partition") else "partition: the cluster's default (partition: null)"]
    where += [f"{k} {cfg[k]}" for k in ("account", "qos", "constraint", "exclude") if cfg.get(k)]
    if cfg.get("additional_parameters"):
        where.append(f"other sbatch options {cfg['additional_parameters']}")
    if cfg.get("setup"):
        where.append(f"{counted(len(cfg['setup']), 'setup line')} before each job")
    lines.append("  " + "; ".join(where))
    limit, delay, requeues = cfg.get("timeout_min"), _number(cfg.get("signal_delay_s")) or 0, cfg.get("max_num_timeout")
    timing = (f"  time limit: {_minutes(limit)} per attempt (timeout_min={limit}); {delay:g} s before it USR2 checkpoints "
              f"the job and submitit requeues it, up to {requeues} times (max_num_timeout; preemptions without limit)")
    sized = [r for r in launched if not r.get("error")]
    if sized and gpus_per_job and _number(limit):
        hours = max(r["gpu_hours"] for r in sized) / gpus_per_job
        usable = float(limit) - delay / 60  # each attempt stops at the USR2
        timing += f"; the longest job, {hours:.2f} h estimated on its {counted(gpus_per_job, 'GPU')}, "
        if usable <= 0:
            timing += "never trains: signal_delay_s is not shorter than the time limit"
        else:
            attempts = math.ceil(hours * 60 / usable)
            timing += ("fits in one attempt" if attempts <= 1 else f"needs about {attempts} attempts"
                       + (" (more than max_num_timeout allows: raise timeout_min)"
                          if attempts - 1 > (_whole(requeues) or 0) else ""))
    lines.append(timing)
    if sized:
        lines.append(f"  {sum(r['gpu_hours'] for r in sized):.2f} GPU-h for the array at the MFU above")
    return lines


def _print_estimate(estimate: dict, mfus: dict[str, tuple[float, str]]) -> None:
    """How the GPU-hours were estimated: the formula, then the MFU of each family and where it comes from."""
    values = {mfu for mfu, _ in mfus.values()}
    mfu = f"{_percent(values.pop())} MFU" if len(values) == 1 else "MFU below" if values else "MFU"
    print(f"GPU-hours = tokens x FLOPs/token / ({mfu} x {float(estimate['peak_flops']) / 1e12:.1f} "
          f"TFLOP/s, {estimate.get('device', 'assumed device')}) / 3600; FLOPs/token: training, PaLM convention")
    by_source: dict[tuple[float, str], list[str]] = {}
    for family, source in sorted(mfus.items()):
        by_source.setdefault(source, []).append(family)
    for (value, how), families in by_source.items():
        print(f"MFU of {', '.join(families)}: {value:.1%}, {how}")
