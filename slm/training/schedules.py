"""Learning-rate schedules as multipliers of the peak lr, each with linear warmup from 0; and wsd's decay branches
(train.schedule.decay_branches: one run, several token budgets, slm.runs.branches)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from slm.components.registry import Registry
from slm.settings import Settings, SettingsError, require, setting

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
        start = decay_start(self.max_steps, self.decay_fraction)
        decay_steps = self.max_steps - start
        if step < start:
            return 1.0
        progress = (step - start + 1) / decay_steps
        return 1.0 - (1 - self.min_ratio) * min(1.0, progress)


def decay_start(max_steps: int, decay_fraction: float) -> int:
    """The first step of a wsd run's decay: the run's last max(1, int(decay_fraction x max_steps)) steps decay. Never
    decreases as max_steps grows, so a shorter wsd run's stable phase is a prefix of a longer one's."""
    return max_steps - max(1, int(decay_fraction * max_steps))


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
    decay_branches: list[float] = setting(factory=list, gt=0, lt=1, each=True)
    """wsd: fractions of the run (e.g. [0.25, 0.5]) at which a decay branches off the stable phase into a run of its
    own, the wsd run of that fraction of the length (slm.runs.branches), while this run goes on; [] for none. Each
    branch keeps this run's warmup in steps, so a warmup_fraction sized for the whole run is long for a short branch:
    size train.schedule.warmup_steps for the shortest."""

    def check(self, key: str, root) -> None:
        SCHEDULES.check(self.kind, f"{key}.kind", SettingsError)
        branches = self.decay_branches
        if branches:
            twice = next((f for i, f in enumerate(branches) if f in branches[:i]), None)
            require((self.kind == "wsd", f"{key}.decay_branches", branches,
                     f"decay branches need {key}.kind=wsd (a stable phase to branch from), not {self.kind}"),
                    (twice is None, f"{key}.decay_branches", branches, f"{twice} is listed twice"))

    def warmup(self, max_steps: int) -> int:
        """Warmup steps of a run of max_steps."""
        return self.warmup_steps if self.warmup_steps is not None else int(self.warmup_fraction * max_steps)

    def build(self, max_steps: int) -> Schedule:
        """The schedule of a run of max_steps."""
        return SCHEDULES.get(self.kind)(max_steps, self.warmup(max_steps), self.min_lr_ratio, self.decay_fraction)
