"""Training health: loss spikes in a run's train_log.jsonl and rises of its validation curve, each by a stated rule;
the record's `health` section (slm.runs.job_record writes it; slm-status, the sweeps' summary and the report read it).

Loss spike. Step t's training loss L_t is a spike when

    L_t > m_t + max(REL x m_t, Z x s_t)

m_t: the median of the WINDOW steps' losses before t; s_t: the step-to-step noise of the NOISE_WINDOW steps before t
(as many as there are), 1.4826 x median |L_i - L_(i-1)| / sqrt(2) (a robust standard deviation of one step's loss,
which a falling trend barely inflates). REL = 0.1, Z = 6, WINDOW = 10, NOISE_WINDOW = 50. Every step with WINDOW steps
before it is judged, the last steps of warmup too (a spike at the step the learning rate peaks is one). Why: a run's
trend never raises its loss 10% in one step (it falls), and six times its own noise keeps a run with noisy steps from
being flagged for its scatter. While the loss falls fast the median lags above it, so the rule is conservative there:
a bump of 8% over the median is not flagged. Consecutive spike steps are one spike: its first step, its highest loss,
the median before it and how many steps it lasted. The default study's llama3 run at depth 2 went from 3.26 to 5.17
nats at step 13, 1.5 x the median 3.48; a step's noise there is about 0.08 nats (0.03 late on).

A sampled objective (nll_kind nelbo: masked diffusion, whose times and masks are drawn per step, each masked token
weighted 1/t) has heavy tails: at fixed weights and batch, 1% of 900 draws of the default study's dllm loss landed
15% above their median and the largest 28% above (robust sd 0.12 nats of 3.05). Its REL is REL_SAMPLED = 0.3, above
the largest draw, so the objective's own tail is not called a spike (the study's dllm run has a step 18% above the
median, step 202).

Validation rise. Between two consecutive validations the NLL rose by more than VAL_REL = 1% of the earlier one.
Validation scores the same windows every time (a diffusion run also the same masks), so two validations differ only
by the model: a 1% rise is the model getting worse on them, not sampling noise.

The flag: `spike` if the run had a spike, else `val_rise` if its validation rose, else `ok`. Standard library only.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from statistics import median

TRAIN_LOG = "train_log.jsonl"  # slm.training.train_log.NAME (not imported: the analysis reads this module)
REL, Z, WINDOW, NOISE_WINDOW = 0.1, 6.0, 10, 50
REL_SAMPLED = 0.3
SAMPLED_KINDS = ("nelbo",)  # slm.metrics.NLL_KINDS whose training loss is a heavy-tailed Monte Carlo estimate
VAL_REL = 0.01
OK, SPIKE, VAL_RISE = "ok", "spike", "val_rise"
RULE = (f"spike: a step's loss above the median m of the {WINDOW} steps before it by more than max({REL:g} m "
        f"({REL_SAMPLED:g} m for a sampled objective, masked diffusion's), {Z:g} x the step-to-step noise of the "
        f"{NOISE_WINDOW} steps before); val_rise: a validation more than {VAL_REL:.0%} above the one before")
"""The rules in one line, as the record and the report state them."""


def read_losses(run_dir: str | os.PathLike) -> list[tuple[int, float]]:
    """(step, loss) of each readable line of the run's train_log.jsonl, in step order (a damaged or non-finite line
    is left out); [] without the file."""
    try:
        text = (Path(run_dir) / TRAIN_LOG).read_text(errors="replace")
    except OSError:
        return []
    rows = {}
    for line in text.splitlines():
        try:
            row = json.loads(line)
            step, loss = int(row["step"]), float(row["loss"])
        except (ValueError, KeyError, TypeError):
            continue
        if math.isfinite(loss):
            rows[step] = loss
    return sorted(rows.items())


def _noise(window: list[float]) -> float:
    """A robust standard deviation of one step's loss: 1.4826 x the median absolute step-to-step change / sqrt(2)."""
    changes = [abs(b - a) for a, b in zip(window, window[1:])]
    return 1.4826 * median(changes) / math.sqrt(2) if changes else 0.0


def spikes(losses: list[tuple[int, float]], rel: float = REL) -> list[dict]:
    """The loss spikes of (step, loss) pairs in step order (module docstring; `rel`: REL, or REL_SAMPLED): {step (the
    first), loss (the highest), median (the WINDOW steps' before it), steps (how many in a row)} each."""
    found: list[dict] = []
    values = [loss for _, loss in losses]
    previous = None  # index of the last spike step
    for i in range(WINDOW, len(losses)):
        step, loss = losses[i]
        level = median(values[i - WINDOW:i])
        if loss <= level + max(rel * level, Z * _noise(values[max(0, i - NOISE_WINDOW):i])):
            continue
        if previous == i - 1 and found:
            found[-1]["loss"] = max(found[-1]["loss"], loss)
            found[-1]["steps"] += 1
        else:
            found.append({"step": step, "loss": loss, "median": level, "steps": 1})
        previous = i
    return found


def val_rises(curve: list) -> list[dict]:
    """The rises of a validation curve [[step, val_nll], ...] (in step order) by more than VAL_REL of the validation
    before: {step, val_nll, previous_step, previous} each."""
    points = [(int(p[0]), float(p[1])) for p in curve or []
              if isinstance(p, (list, tuple)) and len(p) == 2 and math.isfinite(float(p[1]))]
    return [{"step": s, "val_nll": v, "previous_step": ps, "previous": pv}
            for (ps, pv), (s, v) in zip(points, points[1:]) if v > pv * (1 + VAL_REL)]


def assess(losses: list[tuple[int, float]], warmup: int, curve: list | None = None, kind: str = "nll") -> dict:
    """The record's `health` section: flag (ok, spike, val_rise), the spikes and validation rises found, how many
    steps were judged, the run's warmup steps, the REL it was judged with and the rules (RULE). `kind`: the objective's nll_kind (a sampled one,
    SAMPLED_KINDS, is judged with REL_SAMPLED)."""
    rel = REL_SAMPLED if kind in SAMPLED_KINDS else REL
    found, rises = spikes(losses, rel), val_rises(curve or [])
    flag = SPIKE if found else VAL_RISE if rises else OK
    judged = max(0, len(losses) - WINDOW)
    return {"flag": flag, "spikes": found, "val_rises": rises, "warmup": warmup, "steps_judged": judged, "rel": rel,
            "rule": RULE}


def check_run(run_dir: str | os.PathLike, warmup: int, curve: list | None = None, kind: str = "nll") -> dict:
    """assess() of the run's train_log.jsonl and validation curve."""
    return assess(read_losses(run_dir), warmup, curve, kind)


def describe(health) -> str | None:
    """One line on what went wrong in a record's `health` section ('loss spike at step 13: 5.17 against a median of
    3.34 (1.5x); ...'), None for a healthy run or no section."""
    if not isinstance(health, dict) or health.get("flag") in (None, OK):
        return None
    parts = []
    found = [s for s in health.get("spikes") or [] if isinstance(s, dict)]
    for s in found[:3]:
        try:
            ratio = float(s["loss"]) / float(s["median"])
            lasted = f", {s['steps']} steps" if s.get("steps", 1) > 1 else ""
            parts.append(f"step {s['step']}: {float(s['loss']):.2f} against a median of {float(s['median']):.2f} "
                         f"({ratio:.1f}x{lasted})")
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            continue
    text = []
    if found:
        more = f" and {len(found) - 3} more" if len(found) > 3 else ""
        text.append(f"loss spike{'s' if len(found) > 1 else ''} at " + "; ".join(parts) + more)
    rises = [r for r in health.get("val_rises") or [] if isinstance(r, dict)]
    if rises:
        r = rises[0]
        try:
            first = (f" (step {r['previous_step']} {float(r['previous']):.3f} -> step {r['step']} "
                     f"{float(r['val_nll']):.3f})")
        except (KeyError, TypeError, ValueError):
            first = ""
        text.append(f"validation rose {len(rises)} time{'s' if len(rises) > 1 else ''}{first}")
    return "; ".join(text) or f"health {health.get('flag')}"
