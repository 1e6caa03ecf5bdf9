"""What a run says while it trains: a line when it starts (or resumes), then either a progress bar (on a terminal)
or a progress line every `train.logging.print_interval` steps (anywhere else: a file, a pipe, a Slurm log).

The loss and the learning rate are the floats LanguageModelModule keeps (`last_train_loss`, `last_lr`); a progress
line first asks the module to read its queued losses back (`settle`: one device read per line, every
print_interval steps), the terminal bar shows the latest loss read back on the logging cadence, and time is the
host clock, so showing progress adds no per-step device synchronisation. Rates are over the steps since the last line (the bar: since the session started), validation excluded;
the ETA is the session's wall time per step since its first step (validation and checkpoints included) times the
steps left.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

import lightning as L
import torch
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

from slm.durations import duration
from slm.training.callbacks import step_ended


def interactive(stream: TextIO | None = None) -> bool:
    """Whether `stream` (default sys.stdout, where the bar is drawn) is a terminal; a bar anywhere else writes
    every redraw, carriage returns included, into the file."""
    stream = sys.stdout if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def rate(tokens_per_s: float) -> str:
    """`812 tok/s`, `45.2k tok/s`, `1.31M tok/s`."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if tokens_per_s >= scale:
            return f"{tokens_per_s / scale:.3g}{suffix} tok/s"
    return f"{tokens_per_s:.0f} tok/s"


def device_name(device: torch.device) -> str:
    """`cpu (2 threads)`, `cpu (1 thread)`, `cuda:0 (NVIDIA H100 80GB HBM3)`."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    if device.type == "cpu":
        threads = torch.get_num_threads()
        idle = "; a CUDA GPU is available, unused" if torch.cuda.is_available() else ""
        return f"cpu ({threads} thread{'' if threads == 1 else 's'}{idle})"
    return str(device)


def perplexity(kind: str, ppl: float) -> str:
    """exp(val_nll) named for what it is: `ppl 9.2` for an exact NLL; for a masked diffusion objective's NELBO
    (an upper bound on the NLL) `ppl <= 9.2, a bound`: a bound on the perplexity."""
    return f"ppl {ppl:.4g}" if kind == "nll" else f"ppl <= {ppl:.4g}, a bound"


def _say(line: str, stream: TextIO | None = None) -> None:
    stream = sys.stdout if stream is None else stream
    print(line, file=stream, flush=True)


class StartLine(L.Callback):
    """One line when training starts: the device and precision, and where it starts: `step 0 of M`,
    `resumed from step N of M (<checkpoint>)`, or for a decay branch at its first start (`branch_of`: the run it
    branched from and the step), `starts from the main run's step N of M`."""

    def __init__(self, resumed_from: str | None = None, stream: TextIO | None = None,
                 branch_of: tuple[str, int] | None = None):
        self.resumed_from, self.stream, self.branch_of = resumed_from, stream, branch_of

    def on_train_start(self, trainer, pl_module) -> None:
        where = f"{device_name(pl_module.device)}, precision {trainer.precision}"
        step, total = trainer.global_step, trainer.max_steps
        if self.resumed_from is not None and self.branch_of is not None and step == self.branch_of[1]:
            _say(f"slm-train: a decay branch: starts from the main run's step {step} of {total} ({self.branch_of[0]}); "
                 f"training on {where}", self.stream)
        elif self.resumed_from is not None:
            _say(f"slm-train: resumed from step {step} of {total} ({self.resumed_from}); training on {where}",
                 self.stream)
        else:
            _say(f"slm-train: training on {where}: step {step} of {total}", self.stream)


class _Clock:
    """Host-clock bookkeeping of a training session: validation time is set aside."""

    def __init__(self):
        self.started = self.first_step_at = self.validation_started = None
        self.start_step = self.first_step = 0
        self.validation_seconds = 0.0

    def start(self, step: int) -> None:
        """The session starts at global step `step` (0, or the step it resumed from)."""
        self.started, self.start_step, self.first_step_at = time.perf_counter(), step, None
        self.validation_seconds = 0.0

    def step_done(self, step: int) -> None:
        if self.first_step_at is None:  # the session's first step (compilation, warm-up) is left out of the ETA
            self.first_step_at, self.first_step = time.perf_counter(), step

    def eta(self, step: int, max_steps: int) -> float | None:
        """Seconds to max_steps at the session's pace since its first step (None before a second step)."""
        if self.first_step_at is None or step <= self.first_step:
            return None
        per_step = (time.perf_counter() - self.first_step_at) / (step - self.first_step)
        return per_step * (max_steps - step)

    def validation_start(self) -> None:
        self.validation_started = time.perf_counter()

    def validation_end(self) -> None:
        if self.validation_started is not None:
            self.validation_seconds += time.perf_counter() - self.validation_started
            self.validation_started = None


class ProgressLog(L.Callback):
    """A progress line on stdout (flushed) every `every` steps, and at a session's first and the run's last step:

        step  120/1000 | loss 2.3456 | lr 9.87e-04 | 45.2k tok/s | mfu 31.4% | eta 8m03s

    tokens/s over the steps since the previous line (validation time excluded); MFU only where the device's peak
    is known (ThroughputMonitor's); and after each validation during training

        step  200/1000 | val nll 2.2190 (ppl 9.20)

    (`val nelbo 2.4310 (ppl <= 11.36, a bound)` for a masked diffusion objective). `every` 0 prints nothing.
    """

    def __init__(self, throughput, max_steps: int, every: int, stream: TextIO | None = None):
        self.throughput, self.max_steps, self.every, self.stream = throughput, max_steps, every, stream
        self.clock = _Clock()
        self._width = len(str(max_steps))
        self._mark: tuple[float, int, float] | None = None  # (time, step, validation seconds) of the last line

    def on_train_start(self, trainer, pl_module) -> None:
        self.clock.start(trainer.global_step)
        self._mark = (time.perf_counter(), trainer.global_step, 0.0)

    def _due(self, step: int) -> bool:
        return bool(self.every) and (step % self.every == 0 or step == self.max_steps
                                     or step == self.clock.start_step + 1)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if self._mark is None or pl_module.diverged is not None or not step_ended(trainer, batch_idx):
            return
        due = self._due(step)
        self.clock.step_done(step)
        if not due:
            return
        pl_module.settle()  # the loss of this step (one read back, on the progress cadence)
        if pl_module.diverged is not None or pl_module.last_train_loss is None:
            return
        now = time.perf_counter()
        then, then_step, then_validation = self._mark
        seconds = now - then - (self.clock.validation_seconds - then_validation)
        parts = [f"step {step:>{self._width}}/{self.max_steps}", f"loss {pl_module.last_train_loss:.4f}"]
        if pl_module.last_lr is not None:
            parts.append(f"lr {pl_module.last_lr:.2e}")
        if step > then_step and seconds > 0:
            tokens_per_s = (step - then_step) * self.throughput.tokens_per_step / seconds
            parts.append(rate(tokens_per_s))
            if self.throughput.peak:
                parts.append(f"mfu {100 * self.throughput.flops_per_token * tokens_per_s / self.throughput.peak:.1f}%")
        eta = self.clock.eta(step, self.max_steps)
        if step >= self.max_steps:
            parts.append(f"done in {duration(now - self.clock.started)}")
        elif eta is not None:
            parts.append(f"eta {duration(eta)}")
        _say(" | ".join(parts), self.stream)
        self._mark = (now, step, self.clock.validation_seconds)

    def on_validation_start(self, trainer, pl_module) -> None:
        self.clock.validation_start()

    def on_validation_end(self, trainer, pl_module) -> None:
        self.clock.validation_end()
        metrics = pl_module.val_metrics
        if (not self.every or self._mark is None or getattr(pl_module, "scoring_test", False)
                or metrics.get("val_step") != trainer.global_step or "val_nll" not in metrics):
            return
        kind = getattr(pl_module.objective, "nll_kind", "nll")
        _say(f"step {trainer.global_step:>{self._width}}/{self.max_steps} | val {kind} {metrics['val_nll']:.4f} "
             f"({perplexity(kind, metrics['val_ppl'])})", self.stream)

    def on_train_end(self, trainer, pl_module) -> None:
        self._mark = None  # validations after fit (the final one, the test split) are slm.runs.job's to report


class StepsBar(TQDMProgressBar):
    """Lightning's tqdm bar counting the run's optimizer steps: total max_steps, position the global step (right
    after a resume too), no epoch and no logger version; the postfix shows the loss, tokens/s and the last
    validation.

    Lightning's own bar counts the batches of an epoch (`Epoch 0/-2` with max_epochs -1, `1464/1213` after a
    resume) and reads its postfix from the logged metrics (a device synchronisation per refresh)."""

    def __init__(self, throughput, refresh_rate: int = 1):
        super().__init__(refresh_rate=refresh_rate, leave=False)
        self.throughput = throughput
        self.clock = _Clock()

    def _new_bar(self, trainer) -> Tqdm:
        # initial: tqdm's rate and ETA count from the step the session starts at
        return Tqdm(desc="train", total=trainer.max_steps, initial=trainer.global_step,
                    position=2 * self.process_position, disable=self.is_disabled, leave=True, dynamic_ncols=True,
                    file=sys.stdout, smoothing=0, bar_format=self.BAR_FORMAT)

    def on_train_start(self, trainer, pl_module) -> None:
        self.train_progress_bar = self._new_bar(trainer)
        self.clock.start(trainer.global_step)

    def on_train_epoch_start(self, trainer, *_) -> None:
        # Lightning starts a new bar for each epoch's batches; this one spans the run's steps
        if self._train_progress_bar is None:
            self.train_progress_bar = self._new_bar(trainer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        bar = self._train_progress_bar
        if bar is not None and step_ended(trainer, batch_idx) and self._should_update(step, bar.total):
            bar.n = step
            bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=False)
            bar.refresh()

    def on_validation_start(self, trainer, pl_module) -> None:
        self.clock.validation_start()
        super().on_validation_start(trainer, pl_module)

    def on_validation_end(self, trainer, pl_module) -> None:
        self.clock.validation_end()
        super().on_validation_end(trainer, pl_module)

    def get_metrics(self, trainer, pl_module) -> dict:
        items = {}
        if pl_module.last_train_loss is not None:
            items["loss"] = f"{pl_module.last_train_loss:.4f}"
        if self.clock.started is not None:
            seconds = time.perf_counter() - self.clock.started - self.clock.validation_seconds
            steps = trainer.global_step - self.clock.start_step
            if steps > 0 and seconds > 0:
                items["tok/s"] = rate(steps * self.throughput.tokens_per_step / seconds).removesuffix(" tok/s")
        if "val_nll" in pl_module.val_metrics:
            items["val"] = f"{pl_module.val_metrics['val_nll']:.4f}"
        return items
