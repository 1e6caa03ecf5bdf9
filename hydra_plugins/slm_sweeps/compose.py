"""Each job's config for planning a sweep, composed in milliseconds rather than a third of a second.

Hydra's `load_sweep_config` re-reads and re-merges every YAML file of the defaults tree for every job (0.2-0.5 s
each: a 10,000-job sweep would plan for ~35 minutes). Hydra itself composes a config in two stages: the defaults
tree from the overrides that pick config-group options (`model=gpt2`, `+x=y` of a group, `~group`), then every other
override applied to the merged tree (`ConfigLoaderImpl._apply_overrides_to_config`). So `Composer` runs the first
stage once per distinct *base* (the job's group choices, `hydra.*` overrides and top-level settings such as
`run_group=` or `rerun_failed=`, in the job's order) and the second per job, on a copy of the base without its
`hydra` node (the part a sweeper reads; the launcher composes each job in full, as before, when it runs it):

    base  = load_sweep_config(master, base overrides)          once per base
    job   = copy(base less hydra) + the job's other overrides   Hydra's own override application
    run   = hydra.sweep.dir / slm_job_key(task overrides)      the key conf/config.yaml's subdir resolves

and checks the job's top-level settings as the `slm_run_group` resolver does. Anything that raises on this path
(an override that does not apply, a setting refused, an interpolation into the `hydra` node) is composed again the
slow way (compose_job), so a job that does not compose gets Hydra's own error line. The resolved configs and run
directories are those of the slow path: tests/test_sweep_compose.py compares them for every shipped sweep.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import Any, NamedTuple, Optional

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, OmegaConf, open_dict

from slm.runs.errors import one_line
from slm.sweeps.jobs import Job


def _key(overrides: list[str], master: DictConfig) -> str:
    """The job key of raw overrides, as hydra.sweep.subdir makes it (for a job whose config does not compose)."""
    from slm.cli.job_keys import key_from_overrides

    return key_from_overrides(overrides, master.hydra.job.config.override_dirname.exclude_keys,
                              str(master.hydra.sweep.dir))


def compose_job(config_loader: Any, master: DictConfig, overrides: list[str]) -> Job:
    """The job's config and run directory (hydra.sweep.dir / hydra.sweep.subdir), as the launcher will
    make them; a config that does not compose gives cfg None, its error line and the directory its key
    names. Hydra's full composition (a third of a second): the sweepers compose through Composer, which
    takes this path only where its own does not apply."""
    try:
        cfg = config_loader.load_sweep_config(master, list(overrides))
        return Job(list(overrides), Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir), cfg)
    except Exception as err:
        from slm.cli.config import setting_error

        run_dir = Path(str(master.hydra.sweep.dir)) / _key(list(overrides), master)
        return Job(list(overrides), run_dir, None, one_line(setting_error(err) or err))  # a resolver's own line


FULL_ENV = "SLM_COMPOSE_IN_FULL"
"""=1: every job composed by Hydra in full (compose_job), as before this module: the reference path, for
bench/sweep_plan.py and for ruling this module out when something looks wrong."""


class _Base(NamedTuple):  # (not a dataclass: Hydra's plugin scan executes this module outside sys.modules)
    light: bytes  # the base config less its hydra node, pickled: unpickling is the cheapest deep copy (~1 ms)
    sweep_dir: str
    exclude: list[str]
    values: Optional[dict]  # its resolved plain values, where the plain path may apply overrides to them
    interpolated: list[tuple[str, frozenset]]  # (dotted key, the names its interpolation mentions) of each one


class Composer:
    """`composer(overrides) -> Job`, as compose_job(loader, master, overrides) makes it, with the defaults tree
    composed once per distinct base (see the module docstring)."""


    def __init__(self, config_loader: Any, master: DictConfig) -> None:
        self.loader, self.master = config_loader, master
        self.parser = OverridesParser.create()
        self.bases: dict[tuple[str, ...], Optional[_Base]] = {}
        self.parsed: dict[str, Optional[Override]] = {}
        self.groups: dict[str, bool] = {}
        # a search path of the config's own changes where groups are found: then every job is composed in full
        self.fast = os.environ.get(FULL_ENV) != "1" and not OmegaConf.select(master, "hydra.searchpath", default=None)
        self.slow_jobs = 0  # jobs composed the slow way (the tests read it)

    def __call__(self, overrides: list[str]) -> Job:
        overrides = [str(o) for o in overrides]
        split = self._split(overrides) if self.fast else None
        if split is not None:
            base_lines, values = split
            base = self._base(tuple(base_lines))
            if base is not None:
                try:
                    return self._fast(base, overrides, values)
                except Exception:
                    pass  # composed again below: Hydra's own error line, or whatever the slow path makes of it
        self.slow_jobs += 1
        return compose_job(self.loader, self.master, overrides)

    def _override(self, line: str) -> Optional[Override]:
        if line not in self.parsed:
            try:
                self.parsed[line] = self.parser.parse_override(line)
            except Exception:
                self.parsed[line] = None
        return self.parsed[line]

    def _is_group(self, key: str) -> bool:
        if key not in self.groups:
            self.groups[key] = bool(self.loader.repository.group_exists(key))
        return self.groups[key]

    def _split(self, overrides: list[str]) -> Optional[tuple[list[str], list[Override]]]:
        """(the base's override lines, the job's other overrides parsed) in the job's order, or None when an override
        does not parse or sweeps (the slow path says why)."""
        base, values, top = [], [], []
        for line in overrides:
            override = self._override(line)
            if override is None or override.is_sweep_override() or "${" in line:
                return None  # (the job key resolves an interpolation in an override's value: Hydra's path does)
            key = override.key_or_group
            value_like = "." in key and not override.is_hydra_override() and (
                isinstance(override.value(), dict) or not self._is_group(key))
            if value_like:
                values.append(override)
            else:
                base.append(line)
                top.append(key.lstrip("+~"))
        if any(v.key_or_group.lstrip("+~").startswith(t + ".") for v in values for t in top if not self._is_group(t)):
            return None  # a top-level value and a field under it (`train={...}`, `train.lr=...`): order matters
        return base, values

    def _base(self, lines: tuple[str, ...]) -> Optional[_Base]:
        """The composed base for these override lines (once), or None when it does not compose or its sweep
        directory does not resolve (then its jobs take the slow path, which records why)."""
        if lines not in self.bases:
            try:
                cfg = self.loader.load_sweep_config(self.master, list(lines))
                sweep_dir = str(cfg.hydra.sweep.dir)  # the slm_run_group resolver checks the top-level settings here
                exclude = [str(k) for k in cfg.hydra.job.config.override_dirname.exclude_keys]
                with open_dict(cfg):
                    del cfg["hydra"]
                values, interpolated = _plain(cfg)
                self.bases[lines] = _Base(pickle.dumps(cfg), sweep_dir, exclude, values, interpolated)
            except Exception:
                self.bases[lines] = None
        return self.bases[lines]

    def _fast(self, base: _Base, overrides: list[str], values: list[Override]) -> Job:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl

        from slm.cli.config import check_run_settings
        from slm.cli.job_keys import key_from_overrides

        cfg = _apply_plain(base, values)
        if cfg is None:
            cfg = pickle.loads(base.light)
            ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
            check_run_settings(cfg)  # as the slm_run_group resolver checks the job's root when its directory is named
        task = [line for line in overrides if not self._override(line).is_hydra_override()]
        key = key_from_overrides(task, base.exclude, base.sweep_dir)
        return Job(overrides, Path(base.sweep_dir) / key, cfg)


# The plain path: a base whose every node is untyped (plain YAML: AnyNode leaves), resolved once; a job's `key=value`
# overrides (no +, ++, ~ or @package) of existing leaves with plain values (None, bool, int, float, a string that is not
# an interpolation, or a flat list of them) are set on a copy of its values, as OmegaConf.update would set them on the
# DictConfig. An interpolation of the base whose text names an overridden key (or one above or below it) is resolved
# again the Hydra way: the job takes the DictConfig path. So does anything else.

_NAME = re.compile(r"[A-Za-z_][\w.]*")
_SCALARS = (type(None), bool, int, float, str)


def _plain(cfg: DictConfig) -> tuple[Optional[dict], list[tuple[str, frozenset]]]:
    """(the resolved values of a base config, its interpolations with the names each mentions), or (None, []) when
    the base is not plain (a typed node, a relative interpolation, or one that does not resolve)."""
    from omegaconf import AnyNode, ListConfig

    interpolated = []

    def walk(node, prefix: str) -> bool:
        if isinstance(node, DictConfig) and OmegaConf.get_type(node) is not dict:
            return False  # a structured config: its fields convert what is set on them
        for key in (node.keys() if isinstance(node, DictConfig) else range(len(node))):
            child = node._get_node(key)
            path = f"{prefix}{key}"
            if isinstance(child, (DictConfig, ListConfig)):
                if child._is_none() or child._is_missing() or child._is_interpolation():
                    return False
                if not walk(child, path + "."):
                    return False
            elif not isinstance(child, AnyNode):
                return False
            elif child._is_interpolation():
                text = str(child._value())
                if "${." in text or "${" not in text:
                    return False
                interpolated.append((path, frozenset(_NAME.findall(text))))
        return True

    try:
        if not walk(cfg, ""):
            return None, []
        return OmegaConf.to_container(cfg, resolve=True), interpolated
    except Exception:
        return None, []


def _mentions(names: frozenset, key: str) -> bool:
    return any(n == key or n.startswith(key + ".") or key.startswith(n + ".") for n in names)


def _plain_value(value: Any) -> bool:
    if isinstance(value, str):
        return "${" not in value and value != "???"
    if isinstance(value, list):
        return all(isinstance(v, _SCALARS) and _plain_value(v) for v in value)
    return isinstance(value, _SCALARS)


def _apply_plain(base: _Base, overrides: list[Override]) -> Optional[dict]:
    """The job's resolved values on the plain path, or None where it does not apply (the DictConfig path then)."""
    from hydra.core.override_parser.types import OverrideType

    if base.values is None:
        return None
    out = dict(base.values)
    for override in overrides:
        key, value = override.key_or_group, override.value()
        if override.type != OverrideType.CHANGE or override.package is not None or not _plain_value(value) \
                or key == "data.cache_dir" or any(_mentions(names, key) for _, names in base.interpolated):
            return None
        parts = key.split(".")
        node, original = out, base.values
        for part in parts[:-1]:
            if not isinstance(original, dict) or not isinstance(original.get(part), dict) or part not in node:
                return None
            node[part] = dict(node[part])  # copied along the path: the base's values are shared, never changed
            node, original = node[part], original[part]
        last = parts[-1]
        if not isinstance(node, dict) or last not in node or isinstance(node[last], dict) \
                or isinstance(value, list) != isinstance(node[last], list) and not (isinstance(value, list)
                                                                                   and node[last] is None):
            return None  # a list set on a list or a null, a value on a value; nothing else
        node[last] = list(value) if isinstance(value, list) else value
    return out
