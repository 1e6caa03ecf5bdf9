"""`train.validation.averaging`: averaged weights while a run trains, validated beside the raw weights (issue 51).

kind none (the default) changes nothing. ema keeps an exponential moving average of the parameters, lawa the uniform
average of the last `window` snapshots taken every `every` steps (LAWA: Kaddour, arXiv 2209.14981; in LLM pre-training
at 125M-770M parameters: Sanyal et al., arXiv 2306.03241). Every validation also scores the averaged weights on the
same windows (eval.val_nll_avg, eval.val_curve_avg); `keep` makes them the run's weights at the end. Steps are
absolute (a snapshot at every multiple of `every` from `start` on), so a resumed run and a decay branch average exactly
what a run trained in one go does. The state lives in slm.training.weight_averaging (torch); this file is the settings
only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from slm.settings import Settings, SettingsError, require, setting


@dataclass
class AveragingSettings(Settings):
    """`train.validation.averaging`: which average of the weights is kept beside them, and whether it is the one
    the run keeps."""

    kind: Literal["none", "ema", "lawa"] = "none"
    """none: no averaging; ema: an exponential moving average of the parameters, one extra copy of them in memory;
    lawa: the uniform average of the last `window` snapshots of the parameters (LAWA, arXiv 2306.03241), `window`
    copies in memory. Validated beside the raw weights at every validation (eval.val_nll_avg, eval.val_curve_avg)."""
    decay: float = setting(0.99, gt=0, lt=1)
    """ema: after every optimizer step from `start` on, avg <- avg + (1 - decay) x (weights - avg) (torch.lerp, as
    torch.optim.swa_utils' EMA); the first update copies the weights. Half-life ln 2 / ln(1 / decay) steps: 0.99 is
    69 steps, 0.999 is 693."""
    window: int = setting(5, gt=0)
    """lawa: snapshots averaged (the last `window`, a first-in first-out queue); the average spans window x every
    steps, and arXiv 2502.06761 finds the best span about 1% of the run's steps."""
    every: int = setting(10, gt=0)
    """lawa: a snapshot of the weights after every optimizer step that is a multiple of this, from `start` on."""
    start: int = setting(0, ge=0)
    """The first optimizer step averaged (ema: the step whose weights the average starts from; lawa: no snapshot
    before it); 0: from the first step. Must be below the run's steps."""
    keep: bool = False
    """At the end, the run's weights become the averaged ones (the model saved, tested and scored; the record's
    val_nll is theirs and last_val_nll the raw weights'); not with train.validation.restore_best."""

    @property
    def on(self) -> bool:
        """Whether the run averages its weights."""
        return self.kind != "none"

    def takes(self, step: int) -> bool:
        """Whether the weights after optimizer step `step` (the count of steps done) enter the average."""
        if not self.on or step < max(self.start, 1):
            return False
        return self.kind == "ema" or step % self.every == 0

    def check(self, key: str, root) -> None:
        require((not (self.keep and not self.on), f"{key}.keep", self.keep,
                 f"{key}.kind is none: there are no averaged weights to keep (set {key}.kind=ema or lawa)"))

    def check_length(self, max_steps: int, key: str = "train.validation.averaging") -> None:
        """Refuse an average that the run never updates: `start` at or past its end, or (lawa) no multiple of
        `every` from `start` to its end."""
        if not self.on:
            return
        run = f"the run has {max_steps} step{'' if max_steps == 1 else 's'}"
        if self.start >= max_steps:
            raise SettingsError.invalid(f"{key}.start", self.start, f"must be below the run's steps ({run})")
        first = -(-max(self.start, 1) // self.every) * self.every
        if self.kind == "lawa" and first > max_steps:
            raise SettingsError.invalid(f"{key}.every", self.every, f"no snapshot from step {self.start} to the end "
                                        f"({run}); set a smaller every or start")
