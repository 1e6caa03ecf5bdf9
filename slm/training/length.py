"""`train.length`: how long a run trains, as a token budget, optimizer steps or epochs of windows."""

from __future__ import annotations

from dataclasses import dataclass

from slm.settings import Settings, SettingsError, setting

LengthSettingsError = SettingsError  # the name this module's callers knew


def pause_step(fraction: float, max_steps: int) -> int:
    """The step `fraction` of a run of max_steps falls at: round(fraction x max_steps), at least 1 (train.length.pause_at,
    successive halving's rungs)."""
    return max(1, round(float(fraction) * max_steps))


@dataclass
class LengthSettings(Settings):
    """`train.length`: the run's length; epochs win over steps, steps over tokens."""

    tokens: float | None = setting(1.0e6, gt=0, null="steps or epochs")
    """Token budget; steps = tokens // (batch_size * context_length)."""
    steps: int | None = setting(None, gt=0, null="tokens or epochs")
    """Optimizer steps; overrides tokens when set."""
    epochs: int | None = setting(None, gt=0, null="steps or tokens")
    """Epochs of windows_per_epoch windows (arXiv 2512.20877's protocol): steps = epochs x
    ceil(windows_per_epoch / batch_size), validation at the end of each epoch. Overrides steps and tokens."""
    windows_per_epoch: int | None = setting(None, gt=0, null="no epochs, or a records run's records")
    """Training windows (sequences) per epoch; set with epochs. A records run (data.records) leaves it null: an epoch is
    a pass over its training records."""
    pause_at: float | None = setting(None, gt=0, lt=1, null="no pause")
    """Pause at this fraction of the steps (round(fraction x steps), at least 1): the state saved as the run's
    checkpoint, a validation, the record `paused`; the same run started again with a later pause_at, or none, goes
    on from there exactly as if it had not paused. Successive halving's rungs (hydra.sweeper.halving) set it; not part
    of the job key."""

    def check(self, key: str, root) -> None:
        if self.steps is None and self.tokens is None and self.epochs is None:
            raise SettingsError.invalid(f"{key}.tokens", None, f"set a token budget ({key}.tokens), {key}.steps or "
                                        f"{key}.epochs")
        if self.epochs is None and self.windows_per_epoch is not None:  # epochs alone: a records run's records
            raise SettingsError(f"{key}.epochs={self.epochs!r} with {key}.windows_per_epoch="
                                f"{self.windows_per_epoch!r}: set both (a run of epochs) or neither",
                                key=f"{key}.epochs", value=self.epochs)

    def pause_step(self, max_steps: int) -> int | None:
        """The step a run of max_steps pauses at (pause_at), None when it does not pause before its end."""
        if self.pause_at is None:
            return None
        step = pause_step(self.pause_at, max_steps)
        return step if step < max_steps else None

    def steps_per_epoch(self, batch_size: int) -> int | None:
        """Optimizer steps per epoch when the run is measured in epochs (and its size is known), else None."""
        if self.epochs is None or self.windows_per_epoch is None:
            return None
        return -(-self.windows_per_epoch // batch_size)

    def max_steps(self, batch_size: int, context_length: int) -> int:
        """Optimizer steps of the run: epochs of windows, `steps`, or the token budget in whole batches."""
        if self.epochs is not None:
            if self.windows_per_epoch is None:  # a records run sets it from its records when it prepares
                raise SettingsError.invalid("train.length.windows_per_epoch", None, "set it with train.length.epochs "
                                            "(a records run counts its records when it prepares)")
            return self.epochs * self.steps_per_epoch(batch_size)
        if self.steps is not None:
            return self.steps
        per_step = batch_size * context_length
        steps = int(self.tokens // per_step)
        if steps < 1:
            raise SettingsError.invalid("train.length.tokens", self.tokens, f"smaller than one batch (batch_size "
                                        f"{batch_size} x context {context_length} = {per_step} tokens)")
        return steps
