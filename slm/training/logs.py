"""Lightning's console lines in slm: each once, without its advertisement, a deprecation notice of its
own making (lightning 2.6 on torch 2.13: `isinstance(treespec, LeafSpec)`), the srun hint and the CSV logger's
"will be deleted" warning on a resume (CSVHistory keeps those rows)."""

from __future__ import annotations

import logging
import warnings


class _DropAdvert(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in str(record.msg)


def tidy_lightning_logging() -> None:
    """`import lightning` gives the "lightning" logger a console handler of its own while still passing its
    records on to the root logger; under Hydra (root handlers configured) every line is printed twice.
    Keep the root's copy (it also goes to the job's log file), and drop the LitLogger tip. Idempotent."""
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated")
    # slm never launches through srun (submitit starts one process per job): the hint does not apply
    warnings.filterwarnings("ignore", message=r"The `srun` command is available on your system but is not used")
    # a resumed run's CSV log keeps its rows (slm.training.callbacks.CSVHistory writes them back)
    warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")
    import lightning  # noqa: F401  (installs the handler this removes)

    if logging.getLogger().handlers:
        ours = logging.getLogger("lightning")
        for handler in list(ours.handlers):
            if type(handler) is logging.StreamHandler:
                ours.removeHandler(handler)
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _DropAdvert) for f in rank_zero.filters):
        rank_zero.addFilter(_DropAdvert())
