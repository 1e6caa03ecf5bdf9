"""How often and how a run validates, reports and keeps checkpoints: `train.validation`, `train.logging`,
`train.checkpoint`. None of these changes the weights a run trains, except validation's choice of which weights
to keep (`restore_best`, `averaging.keep`) and of the windows scored."""

from __future__ import annotations

from dataclasses import dataclass

from slm.settings import Settings, SettingsError, require, setting
from slm.training.averaging import AveragingSettings

LOGGERS = ("csv", "tensorboard", "wandb")


@dataclass
class ValidationSettings(Settings):
    """`train.validation`: when the run is validated, on which windows, and which weights it keeps."""

    interval: int = setting(200, ge=0)
    """Validate every this many steps (and always at the end); 0: only at the end."""
    batches: int = setting(20, gt=0)
    """Validation batches (fixed windows of the held-out split)."""
    windows: int | None = setting(None, gt=0, null="batches of windows spread over the split")
    """Validate on the first `windows` windows of the validation split at stride 1 (starts 0, 1, 2, ...: arXiv
    2512.20877's protocol), and after training score the same windows of the test split (eval.test_nll); None:
    `batches` batches of windows spread evenly over the validation split, and no test score."""
    restore_best: bool = False
    """At the end, restore the weights of the best validation (the model saved, tested and scored is that one;
    arXiv 2512.20877's protocol)."""
    averaging: AveragingSettings = setting(factory=AveragingSettings)
    """Averaged weights validated beside the raw ones (slm.training.averaging), train.validation.averaging.<field>:
    kind (none, ema, lawa), decay, window, every, start, keep."""

    def check(self, key: str, root) -> None:
        require((not (self.averaging.keep and self.restore_best), f"{key}.averaging.keep", self.averaging.keep,
                 f"not with {key}.restore_best=true (both choose the weights the run keeps)"))


@dataclass
class LoggingSettings(Settings):
    """`train.logging`: what the run reports while it trains, and where."""

    interval: int = setting(10, gt=0)
    """Send metrics to the loggers every this many steps."""
    loggers: list[str] = setting(factory=lambda: ["csv"], choices=LOGGERS, each=True)
    """Any of csv, tensorboard, wandb."""
    progress_bar: bool = True
    """Show a progress bar (steps of max_steps, loss, tokens/s, ETA) when stdout is a terminal; when it is not (a
    file, a pipe, a Slurm log), or when false, print_interval's progress lines instead."""
    print_interval: int | None = setting(None, ge=0, null="about every 1% of the run")
    """Without a progress bar (progress_bar false, or stdout not a terminal), print a progress line to stdout every
    this many steps, and at the first and the last step of each session: step/max, loss, lr, tokens/s, MFU where
    the device's peak is known, ETA (and one line per validation). None: about every 1% of the run
    (max_steps // 100, at least 1); 0: no progress lines."""
    peak_flops: float | None = setting(None, gt=0, null="look the device up")
    """Peak FLOP/s of one device for MFU; None looks the device up in slm.training.hardware."""
    detect_anomaly: bool = False
    """torch.autograd anomaly detection (slow; for debugging)."""

    def derive(self, root) -> None:
        if isinstance(self.loggers, str):  # train.logging.loggers=csv,tensorboard on the command line
            self.loggers = [name.strip() for name in self.loggers.split(",") if name.strip()]

    def print_every(self, max_steps: int) -> int:
        """Steps between progress lines: print_interval, or about 1% of the run when it is None (0: none)."""
        return self.print_interval if self.print_interval is not None else max(1, max_steps // 100)

    def check_installed(self) -> None:
        """Refuse a logger whose package is not installed (before any data is prepared; Lightning would fail after
        it, with a traceback)."""
        import importlib.util

        if "wandb" in self.loggers and importlib.util.find_spec("wandb") is None:
            raise SettingsError("train.logging.loggers has wandb, but the wandb package is not installed: pip "
                                "install -e '.[wandb]' in the slm checkout (the package named slm on PyPI is another "
                                "project), or leave wandb out of train.logging.loggers",
                                key="train.logging.loggers", value=self.loggers)


@dataclass
class CheckpointSettings(Settings):
    """`train.checkpoint`: the checkpoint a run resumes from, and the ones it keeps."""

    interval: int = setting(200, gt=0)
    """Write last.ckpt every this many steps (and at the end)."""
    keep_every: int | None = setting(None, gt=0, null="none")
    """Also keep the checkpoint of every this many steps as checkpoints/step-<N>.ckpt (full training state, written
    atomically, never replaced nor deleted; train.init_from takes its path). None: none."""
    keep_steps: list[int] = setting(factory=list, gt=0, each=True)
    """Steps whose checkpoint is kept as checkpoints/step-<N>.ckpt (with keep_every's), e.g. [1000, 5000]."""

    def keeps(self, step: int) -> bool:
        """Whether the checkpoint of optimizer step `step` is kept as checkpoints/step-<step>.ckpt."""
        return step in self.keep_steps or (self.keep_every is not None and step > 0 and step % self.keep_every == 0)
