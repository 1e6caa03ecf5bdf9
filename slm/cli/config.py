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


CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

# Errors that mean "the user's input is wrong", as opposed to a bug in slm.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, HydraException, OmegaConfBaseException)


def fail(prog: str, message: str, code: int = 2) -> None:
    """Print the message folded into one line and exit (Hydra's messages span several lines)."""
    text = str(message).split("Config search path:")[0]  # Hydra's search-path dump is noise here
    line = " ".join(part.strip() for part in text.splitlines() if part.strip())
    print(f"{prog}: error: {line}", file=sys.stderr)
    sys.exit(code)


def full_errors() -> bool:
    """Whether the user asked for tracebacks (HYDRA_FULL_ERROR=1; slm-train's wrapper keeps the user's choice in
    SLM_FULL_ERROR while it sets HYDRA_FULL_ERROR itself)."""
    return os.environ.get("SLM_FULL_ERROR", os.environ.get("HYDRA_FULL_ERROR")) == "1"


def explain(err: BaseException, overrides: list[str]) -> str:
    """One line for an error of Hydra's config composition, naming the override and, for a misspelt field or
    option, the closest valid one."""
    from hydra.errors import MissingConfigException, OverrideParseException

    from slm.typecheck import did_you_mean

    if isinstance(err, OverrideParseException):
        reason = " ".join(line.strip() for line in err.message.splitlines() if not line.startswith("See https"))
        reason = reason.replace(f"Error parsing override '{err.override}' ", "")
        return (f"cannot parse the override {err.override!r}: {reason} (the grammar: "
                "https://hydra.cc/docs/advanced/override_grammar/basic/)")
    if isinstance(err, MissingConfigException) and err.options is not None and err.missing_cfg_file:
        group, _, name = err.missing_cfg_file.rpartition("/")
        where = "sweeps/" if group == "sweep" else f"conf/{group}/"
        return (f"{group}={name}: there is no {where}{name}.yaml{did_you_mean(name, err.options, f'{group}=')}; "
                f"choose one of: {', '.join(err.options)}")
    cause = err.__cause__
    if isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
        full_key = cause.full_key
        given = next((o for o in overrides if o.split("=")[0].lstrip("+~") == full_key), full_key)
        parent, _, leaf = full_key.rpartition(".")
        known = _keys_under(parent, overrides)
        where = f"{parent} has no field {leaf!r}" if parent else f"there is no config group or field {leaf!r}"
        return f"{given}: {where}{did_you_mean(leaf, known, f'{parent}.' if parent else '')}"
    return " ".join(part.strip() for part in str(err).split("Config search path:")[0].splitlines() if part.strip())


def _keys_under(parent: str, overrides: list[str]) -> list[str]:
    """The keys of the config node `parent` ('' for the root), composed with the overrides that choose a group
    option (model=gpt2), so that a misspelt field is matched against the fields it could have meant."""
    from omegaconf import OmegaConf

    groups = [o for o in overrides if "=" in o and "." not in o.split("=")[0] and not o.startswith(("+", "~"))]
    try:
        cfg = _compose(groups)
    except Exception:  # noqa: BLE001 - a second bad override: match against the defaults
        cfg = _compose([])
    node = OmegaConf.select(cfg, parent) if parent else cfg
    keys = list(node.keys()) if OmegaConf.is_dict(node) else []
    if not parent:
        keys += [path.name for path in CONF_DIR.iterdir() if path.is_dir()]  # groups: model, train, ...
    return keys


def one_line_errors(prog: str, hydra_main: Callable) -> Callable:
    """Wrap a @hydra.main function so that an error of Hydra's own (a bad override, an unknown field, a missing
    config option) is one line and exit 2, like every other bad input; HYDRA_FULL_ERROR=1 shows the traceback."""

    @functools.wraps(hydra_main)
    def inner() -> None:
        saved = {name: os.environ.get(name) for name in ("SLM_FULL_ERROR", "HYDRA_FULL_ERROR")}
        wanted = "1" if full_errors() else "0"
        os.environ["SLM_FULL_ERROR"] = wanted
        os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises instead of printing its multi-line report
        try:
            hydra_main()
        except USER_ERRORS as err:
            if wanted == "1":
                raise
            fail(prog, explain(err, [a for a in sys.argv[1:] if not a.startswith("-")]))
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    return inner


def reports_user_errors(prog: str) -> Callable:
    """Decorator: turn USER_ERRORS into one line and exit 2, unless HYDRA_FULL_ERROR=1."""

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except USER_ERRORS as err:
                if full_errors():
                    raise
                fail(prog, str(err) or type(err).__name__)

        return inner

    return wrap


class ComposeError(ValueError):
    """Overrides that do not compose; the message is `explain`'s one line."""


def compose_config(overrides: list[str], config_name: str = "config"):
    """Compose the run config from conf/ with command-line overrides (no run directory, no logging); an
    override that does not compose raises ComposeError, one line naming it (HYDRA_FULL_ERROR=1: Hydra's own)."""
    try:
        return _compose(overrides, config_name)
    except (HydraException, OmegaConfBaseException) as err:
        if full_errors():
            raise
        raise ComposeError(explain(err, overrides)) from err


def _compose(overrides: list[str], config_name: str = "config"):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(config_name, overrides=overrides)


def register_resolvers() -> None:
    """Resolvers used by conf/config.yaml (`${slm_job_key:<overrides>,<exclude_keys>}`, the run-directory name);
    safe to call more than once."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("slm_job_key"):
        OmegaConf.register_new_resolver("slm_job_key", _job_key)


def _job_key(overrides, exclude=()) -> str:
    """`slm_job_key`: the key of the job's override list (hydra.overrides.task) less `exclude`. A string is
    Hydra's override_dirname, the argument conf/config.yaml passed before keys were normalised (a
    .hydra/hydra.yaml written then): escaped as it is."""
    from slm.cli.job_keys import key_from_overrides
    from slm.runs.keys import job_key

    if isinstance(overrides, str):
        return job_key(overrides)
    return key_from_overrides(list(overrides or []), list(exclude or []))
