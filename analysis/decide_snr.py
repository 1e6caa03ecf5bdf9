"""Heineman et al.'s signal-to-noise ratio ("Signal and Noise", arXiv 2508.13144), beside slm's (analysis.decide.snr),
so slm-decide's figures can be set beside the paper's.

Their code (allenai/signal-and-noise, snr/metrics.py, signal_to_noise_ratio; the same lines in its README):

    signal = max_{j,k} |m_j - m_k| / mean(m)       the range of the models' scores, relative to their mean
    noise  = std(c) / mean(c)                       numpy's std (ddof 0) of one run's late checkpoints c, relative
    snr    = signal / noise

slm's SNR is the standard deviation (ddof 1) of the configuration means over the pooled seed-to-seed standard
deviation: seeds, not checkpoints, are its noise, and it is not relative. Theirs here:
- m: the configuration means at the rung (each at its chosen lr, over seeds), as slm's;
- c: a run's last slm.metrics.LATE distinct validations (eval.val_curve; the results table's val_nll_late_rsd holds
  std / mean of each run's). Their code takes one run (a model's last 30 checkpoints; its small-scale variant, the last
  5 of each data mix); slm has such a run per configuration and seed, and takes the mean of their relative noises, each
  one theirs of one run.
- It applies to a proxy read at the end of the run from the validation loss (val_nll, val_bpb: the same relative
  spread, bits per byte being nats times a constant of the run; the averaged val_nll_last3): a proxy read part-way has
  no late checkpoints, and an lm-eval score no curve.

A ladder validates 4 times, so its last three validations span the second half of training: their spread is mostly
the loss still falling, not checkpoint-to-checkpoint jitter, and it overstates the noise Heineman et al. measure on the
nearly flat end of a long run.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

NOISE = "val_nll_late_rsd"
"""The results-table column with each run's relative late spread (slm.metrics)."""


def signal_to_noise(signal_scores, noise_scores) -> float:
    """Their signal_to_noise_ratio: the range of `signal_scores` over their mean, divided by the std (ddof 0) of
    `noise_scores` over their mean; inf where the noise is 0."""
    signal = np.asarray(signal_scores, dtype=float)
    noise = np.asarray(noise_scores, dtype=float)
    relative_signal = (signal.max() - signal.min()) / signal.mean()
    relative_noise = noise.std() / noise.mean()
    return math.inf if relative_noise == 0 else float(relative_signal / relative_noise)


def applies(proxy: str) -> bool:
    """Whether a proxy has late checkpoints to measure this noise on: the validation loss read at the end of the run."""
    from slm.metrics import metric as declared

    entry = declared(proxy)
    return entry is not None and entry.curve_at is None and (entry.curve_last is not None
                                                             or proxy in ("val_nll", "val_bpb"))


def rung_snr(means: dict[str, float], noises: list[float]) -> float | None:
    """Heineman's SNR of one rung: the relative range of the configuration means (as recorded: a loss, positive) over
    the mean of the runs' relative late spreads; None with fewer than two means or no spread."""
    values = np.abs(np.array(list(means.values()), dtype=float))
    noises = [n for n in noises if n is not None and math.isfinite(n)]
    if len(values) < 2 or not noises or values.mean() == 0:
        return None
    noise = float(np.mean(noises))
    signal = (values.max() - values.min()) / values.mean()
    return math.inf if noise == 0 else float(signal / noise)


def run_noises(table: pd.DataFrame, config: str, rung: str, at: float, chosen: dict, proxy: str) -> list[float]:
    """The relative late spreads (NOISE) of the completed runs that stand for each configuration at rung `at`: at the
    lr chosen for `proxy` where the rung searched it ({(proxy, rung, configuration): lr}, analysis.decide)."""
    if NOISE not in table:
        return []
    rows = table[pd.to_numeric(table[rung], errors="coerce") == at]
    if "status" in rows:
        rows = rows[rows["status"].fillna("completed") == "completed"]
    lrs = pd.to_numeric(rows["lr"], errors="coerce") if "lr" in rows else pd.Series(math.nan, index=rows.index)
    out = []
    for c, lr, noise in zip(rows[config].astype(str), lrs, pd.to_numeric(rows[NOISE], errors="coerce")):
        want = chosen.get((proxy, at, c))
        if (want is None or (pd.notna(lr) and float(lr) == want)) and pd.notna(noise):
            out.append(float(noise))
    return out


__all__ = ["NOISE", "applies", "rung_snr", "run_noises", "signal_to_noise"]
