"""Where the Hydra config tree lives and how a CLI reports bad input.

Bad input is one line on stderr, `<prog>: error: <message>`, and exit code 2; with HYDRA_FULL_ERROR=1
the full traceback is shown instead.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Callable

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from slm.runs.keys import job_key  # the run-directory name, resolver `slm_job_key`

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

# Errors that mean "the user's input is wrong", as opposed to a bug in slm.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, HydraException, OmegaConfBaseException)


def fail(prog: str, message: str, code: int = 2) -> None:
    """Print the message folded into one line and exit (Hydra's messages span several lines)."""
    text = str(message).split("Config search path:")[0]  # Hydra's search-path dump is noise here
    line = " ".join(part.strip() for part in text.splitlines() if part.strip())
    print(f"{prog}: error: {line}", file=sys.stderr)
    sys.exit(code)


def reports_user_errors(prog: str) -> Callable:
    """Decorator: turn USER_ERRORS into one line and exit 2, unless HYDRA_FULL_ERROR=1."""

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except USER_ERRORS as err:
                if os.environ.get("HYDRA_FULL_ERROR") == "1":
                    raise
                fail(prog, str(err) or type(err).__name__)

        return inner

    return wrap


def compose_config(overrides: list[str], config_name: str = "config"):
    """Compose the run config from conf/ with command-line overrides (no run directory, no logging)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(config_name, overrides=overrides)


def register_resolvers() -> None:
    """Resolvers used by conf/config.yaml (`${slm_job_key:...}`); safe to call more than once."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("slm_job_key"):
        OmegaConf.register_new_resolver("slm_job_key", job_key)
