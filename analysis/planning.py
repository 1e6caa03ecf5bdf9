"""What a compute budget buys under a scaling law (slm-plan): tokens, tokens per parameter, predicted loss, and the
compute-optimal model size and token count; or, for a model size and a token count, the compute they take and how far
that split is from compute-optimal.

    slm-plan gpu_hours=184 gpu=v100 n_gpus=8 mfu=0.35 params=40e6          # both published fits
    slm-plan gpu_hours=184 gpu=h100 params=40e6 fit=runs/cpu_scaling/fit   # your slm-fit result (fit.json), intervals
    slm-plan flops=1e21 fit=epoch                                          # a compute budget given directly
    slm-plan params=40e6 tokens=800e6 gpu=h100                             # N and D: C = k N D, and the GPU-hours

Compute: C = gpu_hours x 3600 x n_gpus x mfu x peak, with gpu_hours the hours each of the n_gpus GPUs trains (so
gpu_hours x n_gpus GPU-hours) and peak the GPU's dense tensor-core peak (GPU_PEAK_FLOPS, or peak_flops=), or
C = flops= as given, or C = k N D for params= and tokens= (then gpu=, n_gpus= and mfu= turn C into hours).
Tokens: D = C / (k N), k = 6 for the published fits (their convention, C = 6 N D) and, for an
slm-fit result, the runs' measured train_flops / (N D) (fit.json's flops_per_param_token; slm's train_flops and
MFU both count PaLM's FLOPs per token: 6 N plus attention), so MFU and tokens stay in one convention.
Predicted loss: L(N, D) = E + A / N^alpha + B / D^beta. Compute-optimal: minimise L subject to C = k N D
(analysis.fit.optimal); for a given N and D, how far the split is from it: N / N*, D / D* and the predicted loss
above the optimum's at the same compute. For an slm-fit result each bootstrap draw kept in fit.json gives one
value, and the 95% interval is their 2.5 and 97.5 percentiles; the published fits are point estimates here (no
interval).

MFU, when mfu= is not given: the median `mfu` of the completed GPU runs (a `device` that is not a CPU) in runs=PATH
(a results table or a runs directory, analysis.collect.load_results), else in $SLM_RUNS or runs/ when it exists;
with no such run, DEFAULT_MFU (assumed). The output says which.

The published fits predict nats per token on their own data (MassiveText, with a SentencePiece tokenizer of 32,000
tokens: Gopher's, slightly modified), not on another corpus or tokenizer: their losses are not comparable with a character-level model's,
only their allocation (how compute splits between N and D) carries over, and then only roughly.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from analysis.fit import NAMES, optimal, predict
from analysis.fit_output import load_fit

PUBLISHED = {
    "hoffmann": {
        "E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28,
        "name": "Hoffmann et al. 2022 (Chinchilla, approach 3)",
        "source": "Hoffmann et al. 2022, Training Compute-Optimal Large Language Models, arXiv:2203.15556, "
                  "eq. 10 / App. D.2",
    },
    "epoch": {
        "E": 1.8172, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658,
        "name": "Besiroglu et al. 2024 (Epoch AI refit of approach 3)",
        "source": "Besiroglu, Erdil, Barnett, You 2024, Chinchilla Scaling: A replication attempt, arXiv:2404.10102 "
                  "(github.com/epoch-research/analyzing-chinchilla); standard errors E 0.03, A 124.58, B 1293.23, "
                  "alpha 0.02, beta 0.02",
    },
}
"""The published parametric fits, N = total parameters, D = tokens, L in nats/token on MassiveText. Hoffmann et al.'s
constants are the rounded ones of the paper's body (eq. 10). Besiroglu et al. refit the runs they digitised from
Hoffmann et al.'s Figure 4 by the same procedure with the Huber losses summed rather than averaged (E = 1.8172, 1.82
rounded). Both sets checked against the papers' text and independent transcriptions of their tables."""

GPU_PEAK_FLOPS = {
    "v100": (125e12, "V100 SXM2, fp16 tensor cores (no bf16)"),
    "a100": (312e12, "A100, bf16 dense"),
    "h100": (989.4e12, "H100 SXM, bf16 dense"),
    "h100_pcie": (756e12, "H100 PCIe, bf16 dense"),
    "h200": (989.4e12, "H200, bf16 dense (the H100 SXM's compute)"),
    "l40s": (362.1e12, "L40S, bf16 dense"),
    "l4": (121e12, "L4, bf16 dense"),
    "a10": (125e12, "A10, bf16 dense"),
    "rtx4090": (165.2e12, "RTX 4090, bf16 dense, fp32 accumulate"),
}
"""Peak dense FLOP/s per GPU at the usual training precision, from NVIDIA's datasheets (no 2:4 sparsity), the same
figures as slm/training/hardware.py's MFU denominators. Other hardware: peak_flops=."""

DEFAULT_MFU = 0.153
"""MFU assumed when none is given and no completed GPU run measured one."""

KEYS = {
    "gpu_hours": "hours each GPU trains (wall clock); the budget is gpu_hours x n_gpus GPU-hours",
    "gpu": f"GPU type, one of: {', '.join(GPU_PEAK_FLOPS)} (its dense peak FLOP/s)",
    "n_gpus": "number of GPUs (default 1)",
    "mfu": f"model FLOPs utilisation, a fraction (default: the median of your completed GPU runs, else {DEFAULT_MFU})",
    "params": "model size N in parameters (e.g. 40e6); without it only the compute-optimal allocation is shown",
    "fit": "hoffmann, epoch, published (both; the default), or a fit.json written by slm-fit (or its directory)",
    "runs": "results table or runs directory whose completed GPU runs give the default MFU (default: $SLM_RUNS or "
            "runs/ when it exists)",
    "peak_flops": "peak FLOP/s per GPU, for hardware not in the gpu list (overrides gpu's)",
    "flops": "the compute budget in FLOPs, instead of gpu_hours x n_gpus x mfu x peak",
    "tokens": "training tokens D, with params=: the compute is then k N D (with gpu= also in hours), and the output "
              "says how far the N/D split is from compute-optimal",
}

USAGE = """usage: slm-plan key=value ...   e.g. slm-plan gpu_hours=184 gpu=v100 n_gpus=8 mfu=0.35 params=40e6
                                      or slm-plan params=40e6 tokens=800e6 [gpu=h100]

What a compute budget buys under a scaling law: tokens, tokens per parameter and the predicted loss for a model of
`params` parameters, and the compute-optimal model size and token count, under the published fits of Hoffmann et al.
2022 and Besiroglu et al. 2024 (Epoch AI) or your own slm-fit result (with its bootstrap intervals). With params= and
tokens= instead of a budget: the compute they take, the predicted loss, and how far that N/D split is from the
compute-optimal one at the same compute.

keys:
""" + "\n".join(f"  {k:<11} {v}" for k, v in KEYS.items())


class PlanError(ValueError):
    """Bad arguments: one line naming the bad value and what is allowed."""


def parse(argv: list[str]) -> dict:
    """key=value arguments -> {key: raw string}; PlanError for anything else or an unknown key."""
    out = {}
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or not key:
            raise PlanError(f"expected key=value, got {arg!r}; keys: {', '.join(KEYS)}")
        if key not in KEYS:
            raise PlanError(f"unknown key {key!r}; keys: {', '.join(KEYS)}")
        if key in out:
            raise PlanError(f"{key} given twice")
        out[key] = value
    return out


def _positive(args: dict, key: str, integer: bool = False) -> float | None:
    if key not in args:
        return None
    try:
        value = float(args[key])
    except ValueError:
        raise PlanError(f"{key}={args[key]}: expected a positive number") from None
    if not math.isfinite(value) or value <= 0 or (integer and not value.is_integer()):
        raise PlanError(f"{key}={args[key]}: expected a positive {'whole ' if integer else ''}number")
    return int(value) if integer else value


def measured_mfu(path: str | os.PathLike) -> tuple[float | None, str]:
    """(median mfu of the completed GPU runs in `path`, a note); (None, why) when there is none."""
    from analysis.collect import load_results

    table = load_results(path)
    if table.empty or "mfu" not in table:
        return None, f"no run with an MFU in {path}"
    rows = table[table["status"] == "completed"] if "status" in table else table
    mfu = rows["mfu"].astype(float)
    device = rows["device"].astype(str).str.lower() if "device" in rows else None
    gpu = mfu.notna() & (mfu > 0) & (mfu <= 1)
    if device is not None:
        gpu &= ~device.str.startswith("cpu") & (rows["device"].notna())
    if not gpu.any():
        return None, f"no completed GPU run with an MFU in {path}"
    devices = sorted(set(rows.loc[gpu, "device"].astype(str))) if device is not None else []
    value = float(np.median(mfu[gpu]))
    return value, (f"measured: median of {int(gpu.sum())} completed GPU runs in {path}"
                   + (f" ({', '.join(devices)})" if devices else ""))


def choose_mfu(args: dict) -> tuple[float, str]:
    """mfu= as given, else measured from runs= (or $SLM_RUNS / runs/ when it exists), else DEFAULT_MFU."""
    mfu = _positive(args, "mfu")
    if mfu is not None:
        if mfu > 1:
            raise PlanError(f"mfu={args['mfu']}: a fraction in (0, 1], e.g. mfu=0.35 for 35%")
        return mfu, "as given"
    path = args.get("runs")
    if path is not None:
        if not Path(path).exists():
            raise PlanError(f"runs={path}: no such file or directory")
        try:
            value, note = measured_mfu(path)
        except (OSError, ValueError) as err:
            raise PlanError(f"runs={path}: {err}") from None
    else:
        default = Path(os.environ.get("SLM_RUNS") or "runs")
        if not default.is_dir():
            return DEFAULT_MFU, f"assumed (no {default}/ here; give mfu= or runs=)"
        try:
            value, note = measured_mfu(default)
        except (OSError, ValueError) as err:
            value, note = None, f"{default}/ unreadable ({err})"
    if value is None:
        return DEFAULT_MFU, f"assumed ({note})"
    return value, note


def hardware(args: dict) -> tuple[float, str]:
    """(peak FLOP/s per GPU, what it is) from peak_flops= or gpu=."""
    peak = _positive(args, "peak_flops")
    if peak is not None:
        return peak, f"{peak / 1e12:.4g} TFLOP/s peak (peak_flops=)"
    name = args.get("gpu")
    if name is None:
        raise PlanError(f"give gpu= (one of: {', '.join(GPU_PEAK_FLOPS)}) or peak_flops=")
    if name.lower() not in GPU_PEAK_FLOPS:
        raise PlanError(f"gpu={name}: unknown; choose one of: {', '.join(GPU_PEAK_FLOPS)} (or give peak_flops=)")
    peak, what = GPU_PEAK_FLOPS[name.lower()]
    return peak, f"{what}: {peak / 1e12:.4g} TFLOP/s peak"


def compute_budget(args: dict) -> tuple[float, list[str]]:
    """(C in FLOPs, lines saying how it was made)."""
    flops = _positive(args, "flops")
    if flops is not None:
        extra = [k for k in ("gpu_hours", "gpu", "n_gpus", "mfu", "peak_flops") if k in args]
        if extra:
            raise PlanError(f"flops= is the whole budget: leave out {', '.join(extra)}")
        return flops, [f"compute {flops:.3g} FLOPs (as given)"]
    hours = _positive(args, "gpu_hours")
    if hours is None:
        raise PlanError("give gpu_hours= (with gpu= or peak_flops=), flops=, or params= with tokens= "
                        "(see slm-plan --help)")
    n_gpus = _positive(args, "n_gpus", integer=True) or 1
    peak, what = hardware(args)
    mfu, how = choose_mfu(args)
    flops = hours * 3600 * n_gpus * mfu * peak
    gpus = f"{n_gpus} GPU{'s' if n_gpus > 1 else ''}"
    return flops, [f"compute {hours:g} h x {gpus} ({hours * n_gpus:g} GPU-hours) x {what} x MFU {mfu:.3g} "
                   f"= {flops:.3g} FLOPs", f"MFU {mfu:.3g}: {how}"]


def run_hardware(args: dict) -> tuple[dict | None, list[str]]:
    """For params= and tokens=: the GPUs that turn each fit's C = k N D into hours ({peak, n_gpus, mfu}, None without
    gpu= or peak_flops=), and the lines saying so; PlanError for keys that contradict a compute set by N and D."""
    given = [k for k in ("flops", "gpu_hours") if k in args]
    if given:
        raise PlanError(f"params= and tokens= set the compute (C = k N D): leave out {', '.join(given)}")
    if "gpu" not in args and "peak_flops" not in args:
        extra = [k for k in ("n_gpus", "mfu", "runs") if k in args]
        if extra:
            raise PlanError(f"{' and '.join(extra)} {'turns' if len(extra) == 1 else 'turn'} the compute into hours "
                            "on GPUs: give gpu= or peak_flops= too")
        return None, []
    peak, what = hardware(args)
    n_gpus = _positive(args, "n_gpus", integer=True) or 1
    mfu, how = choose_mfu(args)
    return {"peak": peak, "n_gpus": n_gpus, "mfu": mfu}, [f"hours on {n_gpus} x {what} at MFU {mfu:.3g}",
                                                           f"MFU {mfu:.3g}: {how}"]


def laws(args: dict) -> list[dict]:
    """The fits to plan under: [{name, source, law, samples (dict of arrays or None), k, N}]."""
    choice = args.get("fit", "published")
    if choice in ("published", "hoffmann", "epoch"):
        names = ["hoffmann", "epoch"] if choice == "published" else [choice]
        return [{"name": PUBLISHED[n]["name"], "source": PUBLISHED[n]["source"], "key": n,
                 "law": {k: PUBLISHED[n][k] for k in NAMES}, "samples": None, "k": 6.0,
                 "N": "total parameters", "loss": "nats/token on MassiveText (their SentencePiece tokenizer)"}
                for n in names]
    try:
        content = load_fit(choice)
    except FileNotFoundError:
        raise PlanError(f"fit={choice}: no such file; choose hoffmann, epoch, published or a fit.json from "
                        "slm-fit") from None
    except ValueError as err:
        raise PlanError(f"fit={choice}: {err}") from None
    a3 = content["approach3"]
    law = {k: float(a3["constants"][k]) for k in NAMES}
    raw = a3.get("samples") or {}
    samples = None
    if raw and all(k in raw and raw[k] for k in NAMES):
        samples = {k: np.asarray(raw[k], float) for k in NAMES}
        samples = samples if len(samples["E"]) >= 10 else None
    return [{"name": f"your fit ({choice})", "source": f"slm-fit, {len(content.get('data') or [])} runs",
             "key": "fit", "law": law, "samples": samples, "k": float(content.get("flops_per_param_token") or 6.0),
             "N": str(content.get("N", "parameters")), "loss": str(content.get("L", "val_nll (nats/token)"))}]


def _interval(values: np.ndarray) -> tuple[float, float] | None:
    values = np.asarray(values, float)
    values = values[np.isfinite(values)]
    if len(values) < 10:
        return None
    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def plan(args: dict) -> dict:
    """Everything slm-plan prints, as a dict: compute, N, and per fit the tokens, tokens per parameter, predicted
    loss and the compute-optimal allocation (with intervals for an slm-fit result); with tokens=, `plan_run`."""
    params = _positive(args, "params")
    if "tokens" in args:
        return plan_run(args, params)
    compute, how = compute_budget(args)
    out = {"compute": compute, "how": how, "params": params, "fits": []}
    for fit in laws(args):
        law, k, samples = fit["law"], fit["k"], fit["samples"]
        row = {**{key: fit[key] for key in ("name", "source", "key", "N", "loss", "k")}, "law": law}
        if params is not None:
            tokens = compute / (k * params)
            row.update(tokens=tokens, tokens_per_param=tokens / params, loss_at=float(predict(law, params, tokens)))
            if samples is not None:
                row["loss_interval"] = _interval(predict(samples, params, tokens))
        n_opt, d_opt = optimal(law, compute, k)
        row.update(N_opt=float(n_opt), D_opt=float(d_opt), opt_tokens_per_param=float(d_opt / n_opt),
                   loss_opt=float(predict(law, n_opt, d_opt)))
        if samples is not None:
            ns, ds = optimal(samples, compute, k)
            row.update(N_opt_interval=_interval(ns), D_opt_interval=_interval(ds),
                       loss_opt_interval=_interval(predict(samples, ns, ds)))
        out["fits"].append(row)
    return out


def plan_run(args: dict, params: float | None) -> dict:
    """For params= and tokens=, per fit: the compute C = k N D (and the hours with gpu=), the predicted loss, the
    compute-optimal N*, D* at that C, how far the split is from it (N / N*, D / D*) and the loss it costs (with
    intervals for an slm-fit result)."""
    tokens = _positive(args, "tokens")
    if params is None:
        raise PlanError(f"tokens={args['tokens']} needs params= (the model size N): with both, the compute is k N D")
    gpus, how = run_hardware(args)
    out = {"compute": None, "params": params, "tokens": tokens, "fits": [],
           "how": [f"N = {params:.3g} parameters x D = {tokens:.3g} tokens ({tokens / params:.3g} per parameter): "
                   f"compute C = k N D, k per fit", *how]}
    for fit in laws(args):
        law, k, samples = fit["law"], fit["k"], fit["samples"]
        compute = k * params * tokens
        n_opt, d_opt = (float(v) for v in optimal(law, compute, k))
        loss_at, loss_opt = float(predict(law, params, tokens)), float(predict(law, n_opt, d_opt))
        row = {**{key: fit[key] for key in ("name", "source", "key", "N", "loss", "k")}, "law": law,
               "compute": compute, "tokens": tokens, "tokens_per_param": tokens / params, "loss_at": loss_at,
               "N_opt": n_opt, "D_opt": d_opt, "opt_tokens_per_param": d_opt / n_opt, "loss_opt": loss_opt,
               "N_over_opt": params / n_opt, "D_over_opt": tokens / d_opt, "loss_excess": loss_at - loss_opt}
        if gpus is not None:
            row["hours"] = compute / (gpus["n_gpus"] * gpus["mfu"] * gpus["peak"]) / 3600
            row["n_gpus"] = gpus["n_gpus"]
        if samples is not None:
            ns, ds = optimal(samples, compute, k)
            at = predict(samples, params, tokens)
            row.update(loss_interval=_interval(at), N_opt_interval=_interval(ns), D_opt_interval=_interval(ds),
                       loss_opt_interval=_interval(predict(samples, ns, ds)),
                       loss_excess_interval=_interval(at - predict(samples, ns, ds)))
        out["fits"].append(row)
    return out


def _fmt(value: float, interval=None, digits: int = 3, spec: str = "g") -> str:
    text = f"{value:.{digits}{spec}}"
    if interval:
        text += f" [{interval[0]:.{digits}{spec}}, {interval[1]:.{digits}{spec}}]"
    return text


def format_plan(result: dict) -> str:
    """The text slm-plan prints."""
    lines = list(result["how"])
    params = result["params"]
    for fit in result["fits"]:
        law = fit["law"]
        lines += ["", f"{fit['name']}: E={law['E']:.4g}, A={law['A']:.4g}, B={law['B']:.4g}, "
                      f"alpha={law['alpha']:.4g}, beta={law['beta']:.4g}; N = {fit['N']}; C = {fit['k']:.3g} N D"]
        if "compute" in fit:  # params= and tokens=
            hours = (f" = {fit['hours']:.3g} h on {fit['n_gpus']} GPU{'s' if fit['n_gpus'] > 1 else ''} "
                     f"({fit['hours'] * fit['n_gpus']:.3g} GPU-hours)") if "hours" in fit else ""
            lines.append(f"  N = {params:.3g}, D = {fit['tokens']:.3g} tokens ({fit['tokens_per_param']:.3g} per "
                         f"parameter): compute {fit['compute']:.3g} FLOPs{hours}, predicted loss "
                         f"{_fmt(fit['loss_at'], fit.get('loss_interval'), spec='f')}")
        elif params is not None:
            lines.append(f"  N = {params:.3g}: D = {fit['tokens']:.3g} tokens, {fit['tokens_per_param']:.3g} tokens "
                         f"per parameter, predicted loss {_fmt(fit['loss_at'], fit.get('loss_interval'), spec='f')}")
        lines.append(f"  compute-optimal{' at that compute' if 'compute' in fit else ''}: "
                     f"N* = {_fmt(fit['N_opt'], fit.get('N_opt_interval'))}, "
                     f"D* = {_fmt(fit['D_opt'], fit.get('D_opt_interval'))} tokens "
                     f"({fit['opt_tokens_per_param']:.3g} per parameter), predicted loss "
                     f"{_fmt(fit['loss_opt'], fit.get('loss_opt_interval'), spec='f')}")
        if "compute" in fit:
            lines.append(f"  this split: N = {fit['N_over_opt']:.3g} x N*, D = {fit['D_over_opt']:.3g} x D*; predicted "
                         f"loss {_fmt(fit['loss_excess'], fit.get('loss_excess_interval'), 2, 'e')} above the "
                         "compute-optimal one")
        if fit["key"] != "fit":
            note = "a published point estimate (no interval)"
        elif "N_opt_interval" in fit:
            note = "[..]: 95% bootstrap interval over the fit's draws"
        else:
            note = "no interval: fit.json keeps fewer than 10 bootstrap draws (slm-fit --bootstrap)"
        lines.append(f"  loss in {fit['loss']}; {note}")
    if any(f["key"] != "fit" for f in result["fits"]):
        lines += ["", "note: the published fits predict nats/token on MassiveText with their tokenizer (SentencePiece, "
                      "32k): not comparable with losses on other data or tokenizers; their allocation is the part "
                      "that carries over (roughly)."]
    return "\n".join(lines)
