"""What the slm sweepers share on Hydra's side: the sweeper's keys as plain values, a sweep file's overrides in
today's spelling, the launcher's answer per job, and the layer's refusals as Hydra's (one line, exit 2)."""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Optional

from hydra.core.utils import JobStatus
from hydra.errors import HydraException
from omegaconf import OmegaConf

from slm.runs.errors import one_line
from slm.settings import SettingsError
from slm.sweeps.jobs import Job, SweepError, say

log = logging.getLogger(__name__)


@contextlib.contextmanager
def refusals_as_hydras():
    """A SettingsError or SweepError of the layer raised as a HydraException: the one line slm-train prints."""
    try:
        yield
    except (SettingsError, SweepError) as err:
        raise HydraException(str(err)) from None


def plain(node: Any) -> Any:
    """A sweeper's key as Hydra hands it (a DictConfig, a ListConfig, a value) as plain values, resolved."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def launcher_settings(launcher: Any) -> dict:
    """hydra.launcher as a dict, interpolations resolved where they can be (${train.parallel.devices}: the sweep's
    value)."""
    if launcher is None:
        return {}
    try:
        return OmegaConf.to_container(launcher, resolve=True)
    except Exception:
        return OmegaConf.to_container(launcher, resolve=False)


def launch(launcher: Any, jobs: list[Job], initial_job_idx: int) -> list[tuple[Any, Optional[str]]]:
    """Launch jobs: per job (Hydra's JobReturn, its error line when it failed); if the launcher itself fails (e.g.
    submitit: a Slurm job died without a result), log it and return (None, None) for each, so that outcomes are read
    from the run directories."""
    try:
        returns = list(launcher.launch([j.overrides for j in jobs], initial_job_idx=initial_job_idx))
    except Exception as err:
        log.error(f"launcher: {one_line(err)}")
        return [(None, None)] * len(jobs)
    return [(r, one_line(r._return_value) if r is not None and r.status == JobStatus.FAILED else None)
            for r in returns]


def _settings_once(lines: list[str], where) -> list[str]:
    """slm.cli.config.settings_once for a sweep file's overrides: its notes on stderr, once per sweep; a setting
    given two values is a HydraException (one line, before any job directory is made)."""
    from slm.cli.config import SettingGivenTwice, settings_once

    try:
        out, notes = settings_once(lines, where)
    except SettingGivenTwice as err:
        raise HydraException(str(err)) from None
    for note in notes:
        if note not in _NOTED:
            _NOTED.add(note)
            say(f"note: {note}")
    return out


_NOTED: set[str] = set()


def upgrade_point(point: list, index: int) -> list[str]:
    """One of hydra.sweeper.points in today's spelling, each setting once (a setting given two values in it is
    refused)."""
    return _settings_once([str(o) for o in point], lambda i: f"hydra.sweeper.points[{index}]")


def upgrade_params(params: dict) -> dict:
    """hydra.sweeper.params with the old spellings of moved settings rewritten (their values are kept); two
    spellings of one setting are one axis when their values agree, else refused."""
    lines = _settings_once([f"{k}={v}" for k, v in params.items()], lambda i: "hydra.sweeper.params")
    return dict(line.split("=", 1) for line in lines)  # as Hydra's basic sweeper writes them: key=value


def with_point(combo: list[str], point: list[str], index: int) -> list[str]:
    """A job's overrides: the crossed ones (command line and hydra.sweeper.params), then the point's. A setting
    in both is kept once when its values agree; with two values the sweep is refused (HydraException, one line),
    since the point's would silently win."""
    return _settings_once(list(combo) + list(point),
                          lambda i: "command line or hydra.sweeper.params" if i < len(combo)
                          else f"hydra.sweeper.points[{index}]")
