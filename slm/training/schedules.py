"""Learning-rate schedules as multipliers of the peak lr, each with linear warmup from 0."""

from __future__ import annotations

import math

from slm.components.registry import Registry

SCHEDULES: Registry[type["Schedule"]] = Registry("schedule")


class Schedule:
    """lr(step) / peak lr for step in [0, max_steps)."""

    def __init__(self, max_steps: int, warmup: int, min_ratio: float, decay_fraction: float):
        self.max_steps, self.warmup, self.min_ratio, self.decay_fraction = max_steps, warmup, min_ratio, decay_fraction

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        return self.after_warmup(step)

    def after_warmup(self, step: int) -> float:
        raise NotImplementedError


@SCHEDULES.register("constant")
class Constant(Schedule):
    def after_warmup(self, step: int) -> float:
        return 1.0


@SCHEDULES.register("cosine")
class Cosine(Schedule):
    """Cosine from 1 to min_ratio over the steps after warmup."""

    def after_warmup(self, step: int) -> float:
        progress = (step - self.warmup) / max(1, self.max_steps - 1 - self.warmup)
        return self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


@SCHEDULES.register("wsd")
class WarmupStableDecay(Schedule):
    """Constant at 1, then linear decay to min_ratio over the last decay_fraction of the steps
    (Hu et al. 2024, MiniCPM)."""

    def after_warmup(self, step: int) -> float:
        decay_steps = max(1, int(self.decay_fraction * self.max_steps))
        start = self.max_steps - decay_steps
        if step < start:
            return 1.0
        progress = (step - start + 1) / decay_steps
        return 1.0 - (1 - self.min_ratio) * min(1.0, progress)
