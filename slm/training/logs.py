"""Lightning's console lines in slm: each once, in slm's own line format (`slm-train: <message>`, as slm-train's
lines read, not Hydra's `[time][logger][INFO] - ...`), none that slm's own lines say already (the device, a resume's
checkpoint, why training stopped: SAID_BY_SLM; the job's log file keeps them), without its advertisement, a
deprecation notice of its own making (lightning 2.6 on torch 2.13: `isinstance(treespec, LeafSpec)`), the srun
hint and the CSV logger's "will be deleted" warning on a resume (CSVHistory keeps those rows)."""

from __future__ import annotations

import logging
import sys
import warnings


class _DropAdvert(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in str(record.msg)


SAID_BY_SLM = ("GPU available:", "TPU available:", "HPU available:", "IPU available:", "`Trainer.fit` stopped",
               "Restoring states from the checkpoint path at", "Restored all states from the checkpoint at")
"""Lightning's info lines that slm's own say already, once per job: the device (the start line), where a resume
starts (`resumed from step N of M (checkpoints/last.ckpt)`) and why training ended (`trained to step N of M`)."""


class _DropRepeats(logging.Filter):
    """Keep Lightning's lines that slm's own lines say already (SAID_BY_SLM) off the console; the job's log file
    keeps them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not str(record.getMessage()).startswith(SAID_BY_SLM)


class _Lines(logging.Formatter):
    """`<prog>: <message>` (`<prog>: warning: <message>` from WARNING up), as slm's own lines."""

    def __init__(self, prog: str):
        super().__init__()
        self.prog = prog

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        return f"{self.prog}: {level}{record.getMessage()}"


class _Stdout(logging.StreamHandler):
    """A console handler on whatever sys.stdout is when a record comes (slm's lines and the progress bar go there
    too)."""

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ sets it; stdout is looked up per record instead
        pass

    def emit(self, record: logging.LogRecord) -> None:
        """On a terminal with a progress bar drawn, the line goes above the bar (tqdm.write clears and redraws it)
        instead of being glued onto its end."""
        from tqdm import tqdm

        if getattr(tqdm, "_instances", None) and sys.stdout.isatty():
            try:
                tqdm.write(self.format(record), file=sys.stdout)
            except Exception:  # noqa: BLE001 - as logging does: a console that fails never stops training
                self.handleError(record)
            return
        super().emit(record)


def tidy_lightning_logging(prog: str = "slm-train") -> None:
    """`import lightning` gives its loggers a console handler of their own, or (when the root logger has
    handlers, as under Hydra) passes their records to the root's console, formatted as Hydra's
    `[time][logger][INFO] - ...` between slm's `slm-train: ...` lines. Here Lightning's records go to stdout
    once, as `<prog>: <message>`, and to the root's other handlers (the job's log file under Hydra, which
    keeps its timestamps) but not to the root's console; the LitLogger tip is dropped. Idempotent, and called
    per job: a sweep's next job has new root handlers, which replace the last job's here."""
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated")
    # slm never launches through srun (submitit starts one process per job): the hint does not apply
    warnings.filterwarnings("ignore", message=r"The `srun` command is available on your system but is not used")
    # a diverged single-process run returns no loss until its losses are read back (slm.training.module), on purpose
    warnings.filterwarnings("ignore", message=r"`training_step` returned `None`")
    # a resumed run's CSV log keeps its rows (slm.training.callbacks.CSVHistory writes them back)
    warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")
    import lightning  # noqa: F401  (installs the handler this removes)

    for name in ("lightning.pytorch", "lightning.fabric"):  # their own console handlers: records go up instead
        child = logging.getLogger(name)
        for handler in list(child.handlers):
            if type(handler) is logging.StreamHandler:
                child.removeHandler(handler)
        child.propagate = True
    ours = logging.getLogger("lightning")
    for handler in list(ours.handlers):
        ours.removeHandler(handler)
    console = _Stdout()
    console.setFormatter(_Lines(prog))
    console.addFilter(_DropRepeats())
    ours.addHandler(console)
    for handler in logging.getLogger().handlers:  # the root's file handlers (a plain StreamHandler is a console)
        if type(handler) is not logging.StreamHandler:
            ours.addHandler(handler)
    ours.propagate = False
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _DropAdvert) for f in rank_zero.filters):
        rank_zero.addFilter(_DropAdvert())
