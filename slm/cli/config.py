"""Where the Hydra config tree lives and how a CLI reports bad input.

Bad input is one line on stderr, `<prog>: error: <message>`, and exit code 2 (slm.bad_input); with
HYDRA_FULL_ERROR=1 the full traceback is shown instead.
"""

from __future__ import annotations

import errno
import functools
import os
import sys
from pathlib import Path
from typing import Callable

from hydra.errors import HydraException, InstantiationException
from omegaconf.errors import OmegaConfBaseException

from slm.bad_input import fail


CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

# Errors that mean "the user's input is wrong", as opposed to a bug in slm.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, HydraException, OmegaConfBaseException)


def full_errors() -> bool:
    """Whether the user asked for tracebacks (HYDRA_FULL_ERROR=1; slm-train's wrapper keeps the user's choice in
    SLM_FULL_ERROR while it sets HYDRA_FULL_ERROR itself)."""
    return os.environ.get("SLM_FULL_ERROR", os.environ.get("HYDRA_FULL_ERROR")) == "1"


def explain(err: BaseException, overrides: list[str]) -> str:
    """One line for an error of Hydra's config composition, naming the override and, for a misspelt field or
    option, the closest valid one."""
    from hydra.errors import MissingConfigException, OverrideParseException

    from slm.typecheck import did_you_mean

    cause = setting_error(err)
    if cause is not None:  # raised by a resolver of conf/config.yaml (slm_run_group): its own line
        return str(cause)
    if isinstance(err, InstantiationException) and isinstance(err.__cause__, HydraException):
        return explain(err.__cause__, overrides)  # a sweeper's own refusal (hydra.sweeper.lr_search=...): its line
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
    if isinstance(cause, OSError) and str(err).startswith("Unable to configure handler"):  # Hydra's job log file
        where = Path(cause.filename).parent if cause.filename else "the run directory"
        if cause.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return (f"run directory {where} is not writable ({cause.strerror}): make it writable, or set SLM_RUNS "
                    "(or hydra.run.dir) to a directory you can write")
        return f"cannot write the log file {cause.filename} in run directory {where}: {cause.strerror or cause}"
    if isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
        full_key = cause.full_key
        given = next((o for o in overrides if o.split("=")[0].lstrip("+~") == full_key), full_key)
        parent, _, leaf = full_key.rpartition(".")
        moved = _moved(full_key)
        if moved:  # a YAML file (a user's preset or sweep) with a setting's old flat spelling
            return f"{given}: {full_key} is now spelt {moved} (slm/renames.py); write it so in the config file"
        known = _keys_under(parent, overrides)
        where = f"{parent} has no field {leaf!r}" if parent else f"there is no config group or field {leaf!r}"
        if parent in ("model", "train"):
            from slm.renames import closest

            return f"{given}: {where}{closest(parent, leaf, known)}"
        from slm.sweeps.optuna_settings import optuna_only

        if parent == "hydra.sweeper" and optuna_only([leaf]):
            return f"{given}: {where}: it is the Optuna sweeper's: add hydra/sweeper=optuna"
        return f"{given}: {where}{did_you_mean(leaf, known, f'{parent}.' if parent else '')}"
    return " ".join(part.strip() for part in str(err).split("Config search path:")[0].splitlines() if part.strip())


def _moved(full_key: str) -> str | None:
    """Today's spelling of a setting that moved into a nested group (`model.n_experts` -> `model.moe.n_experts`), or
    of a group that moved whole (`model.mup` -> `model.parametrization`)."""
    from slm.renames import moved_group, upgrade_override

    new, note = upgrade_override(f"{full_key}=x")
    return new.rpartition("=")[0] if note else moved_group(full_key)


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


class SettingGivenTwice(ValueError):
    """One setting given twice with two values (in one spelling or in its old and new spelling); one line."""


@functools.lru_cache(maxsize=65536)  # a sweep asks again for every job
def setting_of(line: str):
    """(key, value) of an override as Hydra parses it: the key without its +/++ prefix (with @package when there
    is one), the value parsed (`5` and `5.0` are one value); None for a deletion (`~key`) or a line Hydra cannot
    parse (composing it says why)."""
    try:
        override = _parser().parse_override(line)
    except HydraException:
        return None
    if override.is_delete():
        return None
    key = override.key_or_group + (f"@{override.package}" if override.package else "")
    return key, override.value()


@functools.cache
def _parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def same_value(a, b) -> bool:
    """Whether two parsed override values are one value (1e6 and 1000000 are; True and 1 are not)."""
    try:
        return bool((type(a) is type(b) or (_number(a) and _number(b))) and a == b)
    except Exception:  # noqa: BLE001 - values that cannot be compared are different values
        return False


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def settings_once(lines: list[str], where=None) -> tuple[list[str], list[str]]:
    """Overrides in today's spelling with each setting once, and the notes to print: an old spelling of a moved
    setting is rewritten (slm.renames.upgrade_override: one note); a setting given twice with one value is kept
    once, where it was first given (one note naming both); a setting given twice with two values raises
    SettingGivenTwice naming both spellings and values. `where(i)` says where line i came from, for the messages
    (e.g. the sweep file's points); lines starting with '-' (command-line flags) pass through."""
    from slm.renames import upgrade_override

    out, notes, first = [], {}, {}
    for i, line in enumerate(lines):
        line = str(line)
        if line.startswith("-"):
            out.append(line)
            continue
        new, note = upgrade_override(line)
        given = f"{line!r}" + (f" ({where(i)})" if where else "")
        setting = setting_of(new)
        if setting is not None and setting[0] in first:
            key, value = setting
            before, before_value, kept = first[key]
            if not same_value(value, before_value):
                raise SettingGivenTwice(f"{before} and {given} are one setting, {key}, given two values: give it once")
            notes[key] = f"{before} and {given} are one setting, {key}: read once as {kept!r}"
            continue
        if setting is not None:
            first[setting[0]] = (given, setting[1], new)
        if note:
            notes[setting[0] if setting else new] = note
        out.append(new)
    return out, list(notes.values())


def upgrade_arguments(arguments: list[str], prog: str) -> list[str]:
    """Command-line overrides in today's spelling, each setting once (settings_once), one note line on stderr for
    each old spelling or repeated setting; SettingGivenTwice for one setting given two values."""
    out, notes = settings_once(list(arguments))
    for note in notes:
        print(f"{prog}: note: {note}", file=sys.stderr)
    return out


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
            sys.argv[1:] = upgrade_arguments(sys.argv[1:], prog)
            hydra_main()
        except USER_ERRORS as err:
            if wanted == "1":
                raise
            fail(prog, explain(err, [a for a in sys.argv[1:] if not a.startswith("-")]))
        except OSError as err:
            if wanted == "1" or err.errno not in PATH_ERRNOS:
                raise
            fail(prog, path_error(err))
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    return inner


PATH_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENAMETOOLONG, errno.ENOTDIR, errno.EEXIST,
                         errno.EISDIR})
"""OSErrors of a path that cannot be written (not of a full disk or a failing device): bad input, one line."""


def path_error(err: OSError) -> str:
    """One line for an OSError of a path: the path, the reason, and which setting placed it there."""
    where = err.filename if err.filename is not None else "a path"
    line = f"cannot write {where}: {err.strerror or type(err).__name__}"
    for name in ("SLM_RUNS", "SLM_CACHE"):
        value = os.environ.get(name)
        if value and str(where).startswith(str(Path(value).expanduser())):
            return f"{line} (under {name}={value}: point {name} at a writable directory)"
    if err.errno == errno.ENAMETOOLONG:
        return f"{line}; use a shorter run_group (or a shorter SLM_RUNS)"
    return line


class SettingError(ValueError):
    """A top-level setting of conf/config.yaml refused before the run directory is made (one line)."""


def setting_error(err: BaseException | None) -> ValueError | None:
    """The SettingError or RunGroupError behind `err` (a resolver's error, wrapped by OmegaConf and Hydra)."""
    from slm.runs.paths import RunGroupError

    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, (SettingError, RunGroupError)):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


@functools.cache
def top_level_keys() -> tuple[str, ...]:
    """The keys a run config may hold at its top: conf/config.yaml's groups (model, data, ...) and fields
    (run_group, rerun_failed, bad_checkpoint), and hydra."""
    import yaml

    raw = yaml.safe_load((CONF_DIR / "config.yaml").read_text())
    groups = [next(iter(d)).split(" ")[-1] for d in raw.get("defaults", []) if isinstance(d, dict)]
    keys = [k for k in raw if k != "defaults"]
    return tuple(dict.fromkeys(g for g in groups + keys if "/" not in g))


def check_run_settings(root) -> None:
    """Refuse, before Hydra makes the run directory, what would make a run write where it must not or run with
    a setting it does not understand: an unknown top-level key (`+foo=1`), rerun_failed that is not a boolean,
    bad_checkpoint not one of its choices, a runs directory or data cache that is a file or read-only."""
    from omegaconf import OmegaConf

    from slm.data.cache import cache_root
    from slm.runs.paths import directory_problem, runs_root
    from slm.training.checkpoints import BAD_CHECKPOINT
    from slm.typecheck import did_you_mean

    allowed = top_level_keys()
    for key in root.keys():
        if key not in allowed:
            raise SettingError(f"+{key}: there is no top-level setting {key!r}"
                               f"{did_you_mean(str(key), allowed, '')}; the settings are: "
                               f"{', '.join(k for k in allowed if k != 'hydra')} (a field goes under its group, "
                               "e.g. +train.<field>=...)")
    for section in ("model", "train"):
        stale = old_spelling(OmegaConf.select(root, section, default=None), section)
        if stale:
            raise SettingError(f"{stale}: a config file (a preset or sweep of your own) sets it under its old name "
                               "(slm/renames.py); write it so in the file")
    stray = stray_single_run(root)
    if stray:
        raise SettingError(stray)
    rerun = OmegaConf.select(root, "rerun_failed", default=False)
    if not isinstance(rerun, bool):
        raise SettingError(f"rerun_failed={rerun!r} is invalid: expected true or false")
    policy = OmegaConf.select(root, "bad_checkpoint", default="fail")
    if policy not in BAD_CHECKPOINT:
        raise SettingError(f"bad_checkpoint={policy!r} is invalid: choose one of: {', '.join(BAD_CHECKPOINT)}")
    runs = os.environ.get("SLM_RUNS")
    problem = directory_problem(runs_root(), f"SLM_RUNS={runs}" if runs else "the runs directory runs/ (SLM_RUNS "
                                "unset)", "the runs")
    configured = OmegaConf.select(root, "data.cache_dir", default=None)
    cache = cache_root(configured)
    setting = (f"data.cache_dir={configured}" if configured else
               f"SLM_CACHE={os.environ['SLM_CACHE']}" if os.environ.get("SLM_CACHE") else f"the data cache {cache}")
    problem = problem or directory_problem(cache, setting, "the data cache")
    if problem:
        raise SettingError(problem)


def stray_single_run(root) -> str | None:
    """Why a run without -m that names a sweep file (`slm-train sweep=cpu_default`) would train one stray point
    into the study's run group (which its report would then include), or None: the file sweeps something the
    command line does not choose (params it does not set, several points, or an lr search). A sweep file whose
    axes the command line sets is one run of it (`slm-train sweep=arxiv2512_word data=wikitext2`)."""
    from omegaconf import OmegaConf

    name = OmegaConf.select(root, "hydra.runtime.choices.sweep", default=None)
    if name is None or str(OmegaConf.select(root, "hydra.mode", default="")) != "RunMode.RUN":
        return None
    task = [str(o) for o in OmegaConf.select(root, "hydra.overrides.task", default=None) or []]
    given = {setting[0] for o in task if (setting := setting_of(o)) is not None}
    sweeper = OmegaConf.select(root, "hydra.sweeper", default=None) or {}
    params = [str(k) for k in (sweeper.get("params") or {}) if str(k) not in given]
    points = [list(map(str, p)) for p in sweeper.get("points") or []]
    loose = len(points) > 1 or any(setting_of(o) is None or setting_of(o)[0] not in given for p in points for o in p)
    lr = sweeper.get("lr_search")
    ladder = sweeper.get("ladder")
    if not (params or loose or lr or ladder):
        return None
    what = "; ".join(part for part in (
        f"hydra.sweeper.params {', '.join(params)}" if params else "",
        f"{len(points)} point{'s' if len(points) != 1 else ''} (hydra.sweeper.points)" if loose else "",
        "an lr search (hydra.sweeper.lr_search)" if lr else "",
        "a ladder (hydra.sweeper.ladder)" if ladder else "") if part)
    others = " ".join(o for o in task if not o.startswith("sweep="))
    return (f"sweep={name} sweeps {what}, and without -m slm-train would train one stray run into its run group "
            f"(which its report would then include): run the sweep with `slm-train -m sweep={name}"
            f"{' ' + others if others else ''}` (or set every swept setting on the command line for one run)")


def old_spelling(node, section: str) -> str | None:
    """'<section>.<old> is now spelt <section>.<group>.<field>' for the first flat field of a config node that
    moved into a nested group, or None. A command line's old spellings are rewritten before composing, so one
    found here comes from a YAML file."""
    from omegaconf import OmegaConf

    from slm.renames import SECTIONS

    if not OmegaConf.is_dict(node):
        return None
    keys = set(node.keys())  # `old in node` on a struct DictConfig raises and catches for an absent key: slow
    for old, (group, name) in SECTIONS[section].items():
        if old in keys and old in node and not (old == group and not isinstance(OmegaConf.select(node, old, default=None), str)):
            return f"{section}.{old} is now spelt {section}.{group}.{name}"
    return None


def _run_group(value, *, _root_) -> str:
    """`slm_run_group`: the run group, checked (slm.runs.paths.check_run_group), with the run's other top-level
    settings (check_run_settings); conf/config.yaml's hydra.run.dir and hydra.sweep.dir are made of it, so a
    refusal comes before the run directory exists."""
    from slm.runs.paths import check_run_group

    name = check_run_group(value)
    check_run_settings(_root_)
    return name


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


def compose_config(overrides: list[str], config_name: str = "config", prog: str = "slm"):
    """Compose the run config from conf/ with command-line overrides (no run directory, no logging; old spellings
    rewritten with a note from `prog`); an override that does not compose raises ComposeError, one line naming it
    (HYDRA_FULL_ERROR=1: Hydra's own)."""
    overrides = upgrade_arguments(list(overrides), prog)
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
    """Resolvers used by conf/config.yaml (`${slm_job_key:<overrides>,<exclude_keys>}`, the run-directory name;
    `${slm_run_group:${run_group}}`, the checked run group); safe to call more than once."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("slm_job_key"):
        OmegaConf.register_new_resolver("slm_job_key", _job_key)
    if not OmegaConf.has_resolver("slm_run_group"):
        OmegaConf.register_new_resolver("slm_run_group", _run_group)
    if not OmegaConf.has_resolver("slm_top_trials"):
        OmegaConf.register_new_resolver("slm_top_trials", _top_trials)


def _top_trials(sweep_dir: str, k: int) -> list:
    """`${slm_top_trials:<sweep dir>,<k>}` (hydra.sweeper.points of a grid sweep): the points of the k best complete
    trials of the Optuna study run into that directory, best first (slm.sweeps.study_files.top_points)."""
    from slm.sweeps.study_files import NoStudy, top_points

    try:
        return top_points(sweep_dir, int(k))
    except NoStudy as err:
        raise SettingError(f"hydra.sweeper.points=${{slm_top_trials:{sweep_dir},{k}}} is invalid: {err}") from None


def _job_key(overrides, exclude=(), parent=None) -> str:
    """`slm_job_key`: the key of the job's override list (hydra.overrides.task) less `exclude`; `parent`, the run
    group's directory, finds a run made under the former key spelling (slm.cli.job_keys.key_from_overrides). A
    string is Hydra's override_dirname, the argument conf/config.yaml passed before keys were normalised (a
    .hydra/hydra.yaml written then): escaped as it is."""
    from slm.cli.job_keys import key_from_overrides
    from slm.runs.keys import job_key

    if isinstance(overrides, str):
        return job_key(overrides)
    return key_from_overrides(list(overrides or []), list(exclude or []), parent)
