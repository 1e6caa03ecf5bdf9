"""Learning-rate schedules as multipliers of the peak lr, each with linear warmup from 0."""

from __future__ import annotations

import math
from dataclasses import dataclass

from slm.components.registry import Registry
from slm.settings import Settings, SettingsError, setting

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


ScheduleSettingsError = SettingsError  # the name this module's callers knew


@dataclass
class ScheduleSettings(Settings):
    """`train.schedule`: the learning-rate schedule, a multiplier of train.lr at each step."""

    kind: str = "cosine"
    """Schedule (SCHEDULES): cosine, wsd (warmup-stable-decay) or constant; all with linear warmup."""
    warmup_fraction: float = setting(0.05, ge=0, lt=1)
    """Warmup length as a fraction of the steps."""
    warmup_steps: int | None = setting(None, ge=0, null="train.schedule.warmup_fraction")
    """Warmup length in steps; overrides warmup_fraction when set."""
    decay_fraction: float = setting(0.2, gt=0, le=1)
    """wsd: fraction of the steps spent in the final (linear) decay."""
    min_lr_ratio: float = setting(0.1, ge=0, le=1)
    """Final learning rate as a fraction of train.lr (cosine and wsd)."""

    def check(self, key: str, root) -> None:
        SCHEDULES.check(self.kind, f"{key}.kind", SettingsError)

    def warmup(self, max_steps: int) -> int:
        """Warmup steps of a run of max_steps."""
        return self.warmup_steps if self.warmup_steps is not None else int(self.warmup_fraction * max_steps)

    def build(self, max_steps: int) -> Schedule:
        """The schedule of a run of max_steps."""
        return SCHEDULES.get(self.kind)(max_steps, self.warmup(max_steps), self.min_lr_ratio, self.decay_fraction)
