"""`train.length`: how long a run trains, as a token budget, optimizer steps or epochs of windows."""

from __future__ import annotations

from dataclasses import dataclass


class LengthSettingsError(ValueError):
    """An invalid `train.length` setting; the message names the field, the value and what is allowed."""


@dataclass
class LengthSettings:
    """`train.length`: the run's length; epochs win over steps, steps over tokens."""

    tokens: float | None = 1.0e6
    """Token budget; steps = tokens // (batch_size * context_length)."""
    steps: int | None = None
    """Optimizer steps; overrides tokens when set."""
    epochs: int | None = None
    """Epochs of windows_per_epoch windows (arXiv 2512.20877's protocol): steps = epochs x
    ceil(windows_per_epoch / batch_size), validation at the end of each epoch. Overrides steps and tokens."""
    windows_per_epoch: int | None = None
    """Training windows (sequences) per epoch; set with epochs."""

    def check(self) -> None:
        def bad(name: str, rule: str) -> LengthSettingsError:
            return LengthSettingsError(f"train.length.{name}={getattr(self, name)!r} is invalid: {rule}")

        if self.steps is None and self.tokens is None and self.epochs is None:
            raise bad("tokens", "set a token budget (train.length.tokens), train.length.steps or train.length.epochs")
        if self.steps is not None and self.steps <= 0:
            raise bad("steps", "must be a positive integer")
        if self.tokens is not None and not self.tokens > 0:
            raise bad("tokens", "must be > 0")
        for name in ("epochs", "windows_per_epoch"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise bad(name, "a positive integer, or null")
        if (self.epochs is None) != (self.windows_per_epoch is None):
            raise LengthSettingsError(f"train.length.epochs={self.epochs!r} with train.length.windows_per_epoch="
                                      f"{self.windows_per_epoch!r}: set both (a run of epochs) or neither")

    def steps_per_epoch(self, batch_size: int) -> int | None:
        """Optimizer steps per epoch when the run is measured in epochs, else None."""
        if self.epochs is None:
            return None
        return -(-self.windows_per_epoch // batch_size)

    def max_steps(self, batch_size: int, context_length: int) -> int:
        """Optimizer steps of the run: epochs of windows, `steps`, or the token budget in whole batches."""
        if self.epochs is not None:
            return self.epochs * self.steps_per_epoch(batch_size)
        if self.steps is not None:
            return self.steps
        per_step = batch_size * context_length
        steps = int(self.tokens // per_step)
        if steps < 1:
            raise LengthSettingsError(f"train.length.tokens={self.tokens:g} is invalid: smaller than one batch "
                                      f"(batch_size {batch_size} x context {context_length} = {per_step} tokens)")
        return steps
