"""lm-eval's environment report, gathered once per process instead of once per evaluation.

lm_eval.simple_evaluate adds to every results JSON an environment report (lm_eval.loggers.utils.add_env_info:
pretty_env_info, transformers_version, lm_eval_version, upper_git_hash). torch's collect_env runs a dozen
subprocesses for it (pip list, lscpu, nvidia-smi, ...): 0.2-0.5 s on an idle machine, more on a busy one, for
text that does not change while a sweep runs. Inside `reused_env_info()` the report is made once per process
and working directory and copied into every later results JSON, so in a sweep run by Hydra's basic launcher
(`make sweep`: every job in one process) only the first job pays for it. The results JSON holds the same keys
and values as with a report made per evaluation.
"""

from __future__ import annotations

import contextlib
import copy
import os

_REPORTS: dict[str, dict] = {}
"""Working directory -> the report lm-eval made there (upper_git_hash is read from the directory above it)."""


@contextlib.contextmanager
def reused_env_info():
    """While the block runs, lm-eval's add_env_info adds the report this process made before in the same
    working directory, making it only the first time."""
    import lm_eval.evaluator

    original = lm_eval.evaluator.add_env_info

    def add_env_info(storage: dict) -> None:
        key = os.getcwd()
        if key not in _REPORTS:
            report: dict = {}
            original(report)
            _REPORTS[key] = report
        storage.update(copy.deepcopy(_REPORTS[key]))

    lm_eval.evaluator.add_env_info = add_env_info
    try:
        yield
    finally:
        lm_eval.evaluator.add_env_info = original
