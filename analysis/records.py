"""Values out of one result.json, as the results table's columns read them: numbers, the model section in
today's spelling, the lm-eval scores per task and per suite, and the functions analysis.schema names as the
sources of its derived columns (each docstring says what it reads; a metric's reader is named by its entry in
slm.metrics, whose `where` the results table's documentation shows).

Nothing here knows the table's layout: analysis.schema declares the columns, analysis.collect walks the runs
and builds the table.
"""

from __future__ import annotations

import os

import json
import math
from pathlib import Path

from analysis.readers import BadFile, shown
from slm.eval import RENAMED_TASKS
from slm.metrics import BOUND, LATE, NELBO, NLL_KINDS, VAL_CURVE, chance_level
from slm.renames import TRAIN_MOVED, RenameError, upgrade_model_fields, upgrade_train_fields
from slm.runs.health import describe
from slm.runs.record import RESULT_FILE
from slm.runs.states import interruption, live_status


def number(value):
    """A float for numbers and the record's non-finite strings ("nan", "inf"); None for anything else."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def scalar(value):
    """A list or dict as one cell: a list of names as "conv,conv,attn" (as a layer pattern is written on the
    command line), others as JSON; anything else as it is."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, sort_keys=True)
    return value


def get(record: dict, path: tuple[str, ...]):
    """The value at `path` in the record (None where a section or field is missing or null); a section of the
    wrong type (a list where an object belongs) raises AttributeError: the record is skipped, named."""
    node = record
    for key in path:
        node = (node or {}).get(key)
    return node


# ---------------------------------------------------------------------------------------------- model section


def model_section(record: dict) -> dict:
    """The record's model section (its config's model node for a run that failed before writing one) in
    today's spelling (slm.renames: flat fields moved into their groups, the legacy attention_pattern made
    layer_types), with what records from before a field existed imply: a dense model's active parameters are its
    total, the init scheme gpt2, the parametrization sp, the feed-forward dense.
    Raises slm.renames.RenameError (a ValueError) for fields that cannot be read."""
    model = record.get("model") or {}
    config = record.get("config") or {}
    if not model and isinstance(config.get("model"), dict):
        model = config["model"]
    model = upgrade_model_fields(model)
    if "layer_types" in model:
        model.setdefault("mlp_types", ["dense"])
    if "params_total" in model:
        scheme = model["parametrization"] = dict(model.get("parametrization") or {})
        scheme.setdefault("init", "gpt2")  # the one scheme before init schemes were a choice
        model.setdefault("params_active", model["params_total"])
        scheme.setdefault("kind", "sp")  # the only one before model.parametrization
    return model


# ---------------------------------------------------------------------------------------------- lm-eval scores


def lm_eval(record: dict) -> dict:
    """eval.lm_eval with its tasks under today's names (RENAMED_TASKS); a task recorded under both names keeps
    the new name's entries."""
    lm = dict(get(record, ("eval", "lm_eval")) or {})
    for key in ("scores", "metrics", "details"):
        entries = lm.get(key)
        if isinstance(entries, dict) and any(name in entries for name in RENAMED_TASKS):
            lm[key] = {RENAMED_TASKS.get(name, name): value for name, value in entries.items()
                       if name not in RENAMED_TASKS or RENAMED_TASKS[name] not in entries}
    return lm


def task_stderr(details: dict, metric: str | None) -> float | None:
    """lm-eval's standard error of a task's headline metric (details["acc_norm_stderr,none"] for
    "acc_norm,none", or without the filter), None when it has none ("N/A")."""
    if not metric:
        return None
    name, _, filt = metric.partition(",")
    for key in (f"{name}_stderr,{filt}" if filt else f"{name}_stderr", f"{name}_stderr"):
        value = number(details.get(key))
        if value is not None and math.isfinite(value):
            return value
    return None


def chance_of(task: str, details: dict, metric: str | None) -> float | None:
    """The chance level of a task's headline score (slm.metrics.chance_level): the record's own
    (slm.eval.summary.chance_level), else slm.metrics.TASKS'; None unless the headline metric has one (an argmax
    accuracy: acc, acc_norm)."""
    level = number(details.get("chance"))
    return chance_level(task, metric, level if level is not None and math.isfinite(level) else None)


def average_members(lm: dict, config: dict, suite: str) -> list[str] | None:
    """The tasks averaged into a suite: eval.lm_eval.average_tasks (written since the evaluation records it),
    else the run's `eval` config when it names this suite; None when unknown."""
    tasks = (lm.get("average_tasks") or {}).get(suite)
    ev = config.get("eval") if isinstance(config.get("eval"), dict) else {}
    average = ev.get("average")
    if not (isinstance(tasks, list) and tasks):
        if ev.get("name") == suite and isinstance(average, list) and average:
            tasks = average
        elif isinstance(average, dict) and isinstance(average.get(suite), list) and average[suite]:
            tasks = average[suite]
        else:
            return None
    return [RENAMED_TASKS.get(str(t), str(t)) for t in tasks]


def average_stderr(stderrs) -> float | None:
    """Standard error of the mean of k task scores, sqrt(sum se_i^2) / k, assuming the tasks' errors are
    independent; None when any se_i is unknown."""
    values = [number(v) for v in stderrs]
    if not values or any(v is None or not math.isfinite(v) for v in values):
        return None
    return math.sqrt(sum(v * v for v in values)) / len(values)


ABSENT = object()
"""A source's answer for "this row has no such column" (a column only where some run has a value)."""


class Record:
    """One result.json as the column sources read it: the record, its model section in today's spelling
    (analysis.records.model_section), its lm-eval section under today's task names, the run directory, and the
    row written so far (sources may read earlier columns)."""

    def __init__(self, record: dict, model: dict, run_dir: Path, root):
        record = _train_upgraded(record)
        self.record, self.model, self.run_dir, self.root = record, model, run_dir, root
        self.config = record.get("config") or {}
        self.lm = lm_eval(record)
        self.row: dict = {}
        self._members: dict[str, list[str] | None] = {}

    def members(self, suite: str) -> list[str] | None:
        if suite not in self._members:
            self._members[suite] = average_members(self.lm, self.config, suite)
        return self._members[suite]

    def details(self, task: str) -> dict:
        return (self.lm.get("details") or {}).get(task) or {}

    def metric(self, task: str) -> str | None:
        return (self.lm.get("metrics") or {}).get(task)


def _train_upgraded(record: dict) -> dict:
    """The record with its config.train in today's spelling (slm.renames: flat length and schedule fields of
    runs made before they moved into groups); a train section that cannot be read is left as it is."""
    config = record.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("train"), dict):
        return record
    try:
        train_ = upgrade_train_fields(config["train"])
    except RenameError:
        return record
    return {**record, "config": {**config, "train": train_}}


def relative(run_dir: Path, root) -> str:
    """The run directory relative to the collected root (its name when it is not under it)."""
    if root is None:
        return run_dir.name
    try:
        rel = run_dir.resolve().relative_to(Path(root).resolve())
    except ValueError:
        return run_dir.name
    text = str(rel)
    return Path(root).resolve().name if text == "." else text


# ---------------------------------------------------------------------------------------------- column sources


def run(r):
    """the run directory, relative to the collected root"""
    return relative(r.run_dir, r.root)


def sweep(r):
    """the run directory's parent folder"""
    return r.run_dir.parent.name if r.root is not None else None


def status(r):
    """status, or for a run recorded running: its lock (slm.runs.states.live_status)"""
    return live_status(r.record.get("status"), r.run_dir)


def error(r):
    """the record's error line; for a stopped run, the signal and step that stopped it (training.interrupted)"""
    said = r.record.get("error")
    if said is not None and not isinstance(said, str):
        raise BadFile(f"{r.run_dir / RESULT_FILE}: error is {shown(said)}, not a string")
    if said or status(r) != "stopped":
        return said
    return interruption(r.record.get("training") or {})


def run_dir(r):
    """the run directory as collected"""
    return os.path.abspath(r.run_dir)  # a saved table stores it relative to itself (analysis.collect.save_results)


def data(r):
    """data.name, else config.data.name"""
    return (r.record.get("data") or {}).get("name") or (r.config.get("data") or {}).get("name")


def tokenizer(r):
    """data.tokenizer.name, else config.tokenizer.name"""
    tokenizer = (r.record.get("data") or {}).get("tokenizer")
    name = tokenizer.get("name") if isinstance(tokenizer, dict) else None
    return name or (r.config.get("tokenizer") or {}).get("name")


def optimizer(r):
    """config.train.optimizer (adamw for records before train.optimizer)"""
    return get(r.record, ("config", "train", "optimizer")) or "adamw"


def precision(r):
    """training.precision, else config.train.precision, as text"""
    value = get(r.record, ("training", "precision")) or get(r.record, ("config", "train", "precision"))
    return None if value is None else str(value)


def train_flops(r):
    """model.flops_per_token x training.tokens"""
    fpt, tokens = number(r.model.get("flops_per_token")), number(get(r.record, ("training", "tokens")))
    return fpt * tokens if fpt is not None and tokens is not None else None


def _model_config(r) -> dict:
    model = r.config.get("model")
    return model if isinstance(model, dict) else {}


def param_budget(r):
    """model.param_budget, else config.model.param_budget"""
    return number(r.model.get("param_budget", _model_config(r).get("param_budget")))


def _budget(r) -> float | None:
    budget = param_budget(r)
    return budget if budget is not None and budget > 0 else None


def budget_count(r):
    """config.model.budget_count (total when unset), for a budgeted run"""
    return ABSENT if _budget(r) is None else str(_model_config(r).get("budget_count") or "total")


DEFAULT_BUDGET_TOLERANCE = 0.25
"""model.budget_tolerance of a record that predates it: such runs were solved with 0.25."""


def budget_tolerance(r):
    """config.model.budget_tolerance (0.25 for records before it), for a budgeted run"""
    if _budget(r) is None:
        return ABSENT
    model_cfg = _model_config(r)
    return number(model_cfg["budget_tolerance"]) if "budget_tolerance" in model_cfg else DEFAULT_BUDGET_TOLERANCE


def budget_error(r):
    """model.params_<budget_count> / param_budget - 1, for a budgeted run"""
    budget = _budget(r)
    if budget is None:
        return ABSENT
    params = number(r.model.get(f"params_{budget_count(r)}"))
    return params / budget - 1 if params is not None else None


def budget_knob(r):
    """model.budget_knob (d_model for records before the second knob), for a budgeted run"""
    return ABSENT if _budget(r) is None else r.model.get("budget_knob") or "d_model"


def diverged_step(r):
    """training.diverged.step"""
    diverged = get(r.record, ("training", "diverged"))
    return number(diverged.get("step")) if isinstance(diverged, dict) else None


def moe_max_load(r):
    """training.moe_load.max_load"""
    load = get(r.record, ("training", "moe_load"))
    return number(load.get("max_load")) if isinstance(load, dict) else None


def health_note(r):
    """health, in one line (slm.runs.health.describe: each spike's step and loss against the median before it, the
    validation rises); empty for a healthy run"""
    return describe(get(r.record, ("health",)))


def warmup_steps(r):
    """health.warmup, else train.schedule.warmup_steps, else int(warmup_fraction x training.max_steps) (the schedule's
    rule, slm.training.schedules)"""
    recorded = number(get(r.record, ("health", "warmup")))
    if recorded is not None:
        return recorded
    steps = number(get(r.record, train("warmup_steps")))
    if steps is not None:
        return steps
    fraction = number(get(r.record, train("warmup_fraction")))
    max_steps = number(get(r.record, ("training", "max_steps")))
    return float(int(fraction * max_steps)) if fraction is not None and max_steps is not None else None


def val_nll_kind(r):
    """eval.val_nll_kind (slm.metrics.NELBO's default, nll, for records before it)"""
    kind = get(r.record, ("eval", "val_nll_kind"))
    return kind or (NELBO.default if number(get(r.record, ("eval", "val_nll"))) is not None else None)


def _curve(record: dict, field: str = VAL_CURVE) -> tuple[list[tuple[float, float]], float | None]:
    """(eval.<field>'s [(step, nll)] with numbers, training.max_steps); ([], None) without a curve. The field is
    eval.val_curve, or eval.val_curve_avg (the averaged weights', train.validation.averaging)."""
    curve, steps = get(record, ("eval", field)), number(get(record, ("training", "max_steps")))
    if not isinstance(curve, list) or not steps:
        return [], None
    points = [(number(p[0]), number(p[1])) for p in curve if isinstance(p, (list, tuple)) and len(p) == 2]
    return [(s, v) for s, v in points if s is not None and v is not None], steps


def _at_step(record: dict, step: float, field: str = VAL_CURVE) -> float | None:
    """The validation of the record's curve (eval.<field>) nearest `step`, within 5% of its run's steps; None
    otherwise."""
    points, steps = _curve(record, field)
    if not points:
        return None
    near, value = min(points, key=lambda p: abs(p[0] - step))
    return value if abs(near - step) <= 0.05 * steps else None


def curve_at(r, fraction: float, field: str = VAL_CURVE):
    """The validation NLL of eval.<field> ([[step, nll], ...]; val_curve, or the averaged weights' val_curve_avg)
    nearest `fraction` of training.max_steps, if it is within 5% of the steps of it; None otherwise (no curve, or no
    validation near there): the reader of every metric declared with curve_at (slm.metrics)."""
    steps = number(get(r.record, ("training", "max_steps")))
    return _at_step(r.record, fraction * steps, field) if steps else None


def validations(record: dict) -> list[float]:
    """The curve's validation NLLs, one per distinct point of training, in step order: a validation within 5% of the
    run's steps of the next one is that one (a ladder's last interval validation and its final one, 2 steps apart,
    are one point; the later stands)."""
    points, steps = _curve(record)
    out: list[tuple[float, float]] = []
    for step, value in sorted(points):
        if out and step - out[-1][0] <= 0.05 * steps:
            out[-1] = (step, value)
        else:
            out.append((step, value))
    return [v for _, v in out]


def curve_mean(r, last: int):
    """The mean of the run's last `last` distinct validations (validations); None with fewer: the reader of every
    metric declared with curve_last (slm.metrics)."""
    late = validations(r.record)[-last:]
    return sum(late) / last if len(late) == last else None


def late_rsd(r):
    """eval.val_curve's last 3 distinct validations: std / mean"""
    late = validations(r.record)[-LATE:]
    if len(late) < LATE:
        return None
    mean = sum(late) / LATE
    return math.sqrt(sum((v - mean) ** 2 for v in late) / LATE) / mean if mean else None


def stable_loss(r):
    """eval.val_curve of the run named by branch.of, at branch.steps"""
    branch = r.record.get("branch") or {}
    of, steps = branch.get("of"), number(branch.get("steps"))
    if not of or steps is None:
        return None
    path = Path(r.run_dir).parent / str(of) / RESULT_FILE
    try:
        parent = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return _at_step(parent, steps) if isinstance(parent, dict) else None


def _bound(r) -> bool:
    """Whether the run's val_nll is a bound (slm.metrics.NLL_KINDS: a NELBO)."""
    return NLL_KINDS.get(val_nll_kind(r)) == BOUND


def val_ppl(r):
    """eval.val_ppl of a run whose val_nll is exact"""
    return None if _bound(r) else number(get(r.record, ("eval", "val_ppl")))


def val_ppl_bound(r):
    """eval.val_ppl_bound, else (records before it) eval.val_ppl, of a diffusion run"""
    if not _bound(r):
        return ABSENT
    ev = r.record.get("eval") or {}
    return number(ev.get("val_ppl_bound", ev.get("val_ppl")))


def _measured(r, value, where: str) -> float | None:
    """number(value), or BadFile naming the record and `where` for a value that is no number (a string, a list)."""
    cell = number(value)
    if cell is None and value is not None:
        raise BadFile(f"{r.run_dir / RESULT_FILE}: {where} is {shown(value)}, not a number")
    return cell


def score(r, task):
    """eval.lm_eval.scores[task]"""
    return _measured(r, r.lm["scores"][task], f"eval.lm_eval.scores.{task}")


def stderr(r, task):
    """eval.lm_eval.details[task]["<metric>_stderr,<filter>"]"""
    return task_stderr(r.details(task), r.metric(task))


def metric(r, task):
    """eval.lm_eval.metrics[task]"""
    return r.metric(task)


def samples(r, task):
    """eval.lm_eval.details[task].samples"""
    return number(r.details(task).get("samples"))


def chance(r, task):
    """eval.lm_eval.details[task].chance, else slm.metrics.TASKS"""
    return chance_of(task, r.details(task), r.metric(task))


def suite_average(r, suite):
    """eval.lm_eval.averages[suite]"""
    return _measured(r, r.lm["averages"][suite], f"eval.lm_eval.averages.{suite}")


def suite_tasks(r, suite):
    """eval.lm_eval.average_tasks[suite], else the run's eval config"""
    members = r.members(suite)
    return ",".join(members) if members else ABSENT


def suite_stderr(r, suite):
    """the members' stderr_<task>"""
    members = r.members(suite)
    return average_stderr([r.row.get(f"stderr_{t}") for t in members]) if members else ABSENT


def suite_chance(r, suite):
    """the members' chance_<task>"""
    members = r.members(suite)
    if not members:
        return ABSENT
    chances = [r.row.get(f"chance_{t}") for t in members]
    return sum(chances) / len(chances) if all(c is not None for c in chances) else None


def decoder(r):
    """eval.throughput.decoder (autoregressive for records before diffusion)"""
    tp = get(r.record, ("eval", "throughput")) or {}
    return tp.get("decoder", "autoregressive") if tp else None


def decode_sampler(r):
    """eval.throughput.sampler (block_length, steps, remasking, threshold)"""
    sampler = get(r.record, ("eval", "throughput", "sampler")) or {}
    if not sampler:
        return None
    return (f"blocks of {sampler.get('block_length')}, {sampler.get('steps')} steps, {sampler.get('remasking')}"
            + (f" {sampler['threshold']}" if sampler.get("threshold") else ""))


def train(field: str) -> tuple[str, ...]:
    """The path of a training setting in the record (config.train, in today's spelling: a moved field, e.g.
    `epochs`, is read from its group, config.train.length.epochs)."""
    group, name = TRAIN_MOVED.get(field, (None, field))
    return ("config", "train", group, *name.split(".")) if group else ("config", "train", field)


def throughput(field: str) -> tuple[str, ...]:
    return ("eval", "throughput", field)


def tasks(r) -> list[str]:
    return list((r.lm.get("scores") or {}).keys())


def suites(r) -> list[str]:
    return list((r.lm.get("averages") or {}).keys())
