"""slm-search-sim: a finished grid's measured job durations and validation curves replayed through the searches that
prune (synchronous successive halving, ASHA, Hyperband) on a cluster of 8, 64, 512 workers, for time to the answer
and idle worker-time (issue 52 §5, docs/search.md).

    slm-search-sim runs/halving_cpu_grid --eta 3 --rungs 1/9,1/3,1 --workers 8,64,512 --seed 0 --reps 3

What it reads (result.json and sweep.json only): every job of the sweep (sweep.json's `jobs`); a configuration is a job
less its seed (slm.runs.keys.configuration, as halving groups them). Per job: its pace, the measured
`training.train_seconds / training.session_steps` (the training loop's time per optimizer step, data loading included,
the grid's own validations excluded: the grid validates more often than a search would), its steps, its validation
curve (`eval.val_curve`) and its final `eval.val_nll`. A rung at fraction f of a job's steps falls at
round(f x steps), at least 1 (slm.training.length.pause_step, as halving pauses a job); its score there is the curve's
value at that step, the last rung's the final val_nll. A grid that did not validate at a rung's step is refused (or,
with --snap N, read at its validation nearest the step, at most N steps away, and timed to the rung's own step).

What it replays, per worker count and repetition (a seeded random order of the jobs per repetition):
  grid        every job to its end, each on the worker free first, in that order: the full grid's time
  sync        synchronous successive halving as slm.sweeps.halving runs it: at each rung every job of the surviving
              configurations trains to the rung (a launch each: a job continues from its checkpoint), a barrier, then
              the configurations ranked by the mean over their seeds of the rung score (a failed or diverged seed:
              +inf; ties by name) and the best ceil(n / eta) (at least 1) go on; the pick is the survivor with the
              lowest final val_nll (the mean over its seeds)
  asha        slm's Optuna sweeper with `pruner: successive_halving`: a trial is one job (a configuration at one seed,
              as the sweeper runs it); each worker takes the next job, trains it rung by rung in one launch, and at
              each rung but the last reports the score (trial.report) and asks Optuna's SuccessiveHalvingPruner
              (trial.should_prune: a real in-memory study, min_resource 1, reduction_factor eta) whether to stop;
              no barrier; the pick is the study's best trial. A rung i is reported at step eta^i, Optuna's i-th rung,
              so Optuna's rungs are the --rungs whatever each job's steps (slm reports every validation at its own
              step: the same where the sweep's validations fall on Optuna's rungs)
  hyperband   the same with Optuna's HyperbandPruner (min_resource 1, max_resource eta^(rungs-1), reduction_factor
              eta): its brackets start pruning at later rungs

Left out: launch and scheduling delays (but --launch-s per launch), data loading beyond the training loop's, a
validation's cost, checkpoint save and load at a pause, queue waits, preemption, failures of the machines,
heterogeneous hardware (every worker runs a job at its grid pace), and contention between workers.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path

from slm.metrics import VAL_CURVE
from slm.runs.keys import configuration, configuration_parts, short_names
from slm.runs.record import RecordError, load_record
from slm.sweeps.store import sweep_sections

METHODS = ("grid", "sync", "asha", "hyperband")


class SimError(ValueError):
    """Input the simulation cannot use: one line naming the value and what is allowed."""


@dataclass
class GridJob:
    """One job of the grid: its pace (seconds per step), its steps, how far it trained, its curve and final value."""

    key: str
    config: str
    pace: float
    steps: int
    reached: int
    curve: dict[int, float]
    final: float
    parts: list[str] = field(default_factory=list)
    """The overrides its configuration is made of (slm.runs.keys.configuration_parts)."""
    rungs: list[int] = field(default_factory=list)
    """The step each rung ends at (round(fraction x steps), at least 1)."""
    scores: list[float] = field(default_factory=list)
    """The score at each rung (+inf where it failed or diverged before)."""

    def at(self, rung: int) -> int:
        """How far the job trains by the end of `rung` (-1: nothing): the rung's step, or where it stopped."""
        return 0 if rung < 0 else min(self.rungs[rung], self.reached)

    def to_the_end(self) -> "GridJob":
        """The job with its last rung only: as the full grid trains it."""
        return replace(self, rungs=self.rungs[-1:], scores=self.scores[-1:])


def parse_rungs(text: str) -> list[float]:
    """`1/9,1/3,1` -> [0.111.., 0.333.., 1.0]; SimError unless increasing fractions in (0, 1], the last 1."""
    try:
        values = [float(Fraction(t.strip())) for t in text.split(",")]
    except (ValueError, ZeroDivisionError):
        raise SimError(f"--rungs={text} is invalid: comma-separated fractions of each job's steps, e.g. 1/9,1/3,1")
    if len(values) < 2 or any(not 0 < v <= 1 for v in values) or any(a >= b for a, b in zip(values, values[1:])) \
            or values[-1] != 1:
        raise SimError(f"--rungs={text} is invalid: two or more increasing fractions of each job's steps in (0, 1], "
                       "the last 1, e.g. 1/9,1/3,1")
    return values


def pause_step(fraction: float, steps: int) -> int:
    """The step a rung at `fraction` of a run of `steps` falls at: slm.training.length.pause_step's rule (the tests
    hold it to it; analysis does not import slm.training)."""
    return max(1, round(float(fraction) * steps))


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _job(sweep_dir: Path, key: str, overrides: list[str], searched: bool = False) -> GridJob | None:
    """The job's GridJob from its record, None without one; SimError for a record the simulation cannot replay.
    `searched`: the sweep searched lr (hydra.sweeper.lr_search), so the configuration is named with its lr, as
    halving names it."""
    try:
        record = load_record(sweep_dir / key)
    except RecordError as err:
        raise SimError(f"{sweep_dir / key}: {err}")
    if not record:
        return None
    status = record.get("status")
    if status not in ("completed", "failed", "diverged"):
        raise SimError(f"{sweep_dir / key}: status {status}: the simulation replays a finished full grid (every job "
                       "completed, failed or diverged), not a sweep that paused or pruned")
    training, ev = record.get("training") or {}, record.get("eval") or {}
    seconds, steps = _number(training.get("train_seconds")), _number(training.get("steps"))
    timed = _number(training.get("session_steps")) or steps
    total = _number(training.get("max_steps")) or steps
    if seconds is None or not timed or not total:
        raise SimError(f"{sweep_dir / key}: training.train_seconds, steps and max_steps are needed for its pace "
                       f"(seconds per step); this record has {seconds}, {steps} and {total}")
    curve = {int(s): (float(v) if _number(v) is not None and math.isfinite(v) else math.inf)
             for s, v in ev.get(VAL_CURVE) or [] if _number(s) is not None}
    done = status == "completed" and _number(ev.get("val_nll")) is not None
    lr = _number(((record.get("config") or {}).get("train") or {}).get("lr")) if searched else None
    return GridJob(key, configuration(overrides, lr), seconds / timed, int(total),
                   int(total) if done else int(steps or 0), curve, float(ev["val_nll"]) if done else math.inf,
                   configuration_parts(overrides, lr))


def read_grid(sweep_dir: Path) -> list[GridJob]:
    """Every job of the grid (sweep.json's jobs) from its record; SimError when one has none (or all)."""
    try:
        sections = sweep_sections(sweep_dir, ("jobs", "lr_multipliers"))
    except RecordError as err:
        raise SimError(str(err))
    jobs, searched = sections["jobs"], bool(sections["lr_multipliers"])
    found = {key: _job(sweep_dir, key, overrides, searched) for key, overrides in sorted(jobs.items())}
    missing = [key for key, job in found.items() if job is None]
    if not jobs or len(missing) == len(jobs):
        raise SimError(f"{sweep_dir}: no records of a sweep's jobs here (sweep.json's jobs, each <key>/result.json): "
                       "name the run group directory of a finished grid sweep")
    if missing:
        raise SimError(f"{sweep_dir}: {len(missing)} of the sweep's {len(jobs)} jobs have no record (e.g. "
                       f"{missing[0]}): the simulation replays a finished grid; run the sweep to its end first")
    return [job for job in found.values() if job is not None]


def place_rungs(jobs: list[GridJob], fractions: list[float], snap: int = 0) -> None:
    """Each job's rung steps and scores; SimError (naming the step and the run) where the grid did not validate at a
    rung's step of a job that got there (with `snap`: its validation nearest the step, at most `snap` steps away)."""
    for job in jobs:
        job.rungs = [pause_step(f, job.steps) for f in fractions]
        if len(set(job.rungs)) < len(job.rungs):
            raise SimError(f"--rungs: the rungs fall at steps {job.rungs} of run {job.key} ({job.steps} steps): each "
                           "rung must be a step of its own (halving refuses this too); use fewer rungs")
        job.scores = []
        for i, step in enumerate(job.rungs):
            if i == len(job.rungs) - 1:
                job.scores.append(job.final)
                continue
            near = sorted((abs(s - step), s) for s in job.curve if abs(s - step) <= snap)
            if near:
                job.scores.append(job.curve[near[0][1]])
            elif job.reached < step:
                job.scores.append(math.inf)
            else:
                shown = ", ".join(map(str, sorted(job.curve)[:12]))
                raise SimError(f"--rungs: rung {i + 1} falls at step {step} of {job.steps} in run {job.key}, which its "
                               f"grid did not validate (it validated at steps {shown or 'none'}); choose rungs on the "
                               "grid's validations (train.validation.interval) or allow --snap")


def mean_scores(jobs: list[GridJob], rung: int) -> dict[str, float]:
    """{configuration: the mean over its seeds of the rung's score} (+inf where a seed's is)."""
    values: dict[str, list[float]] = {}
    for job in jobs:
        values.setdefault(job.config, []).append(job.scores[rung])
    return {c: statistics.fmean(v) if all(math.isfinite(x) for x in v) else math.inf for c, v in values.items()}


def ranked(scores: dict[str, float]) -> list[str]:
    return sorted(scores, key=lambda c: (scores[c], c))


@dataclass
class Outcome:
    """One replay: when the search ended, when the grid's best configuration was trained to the end (None if it was
    not), what it picked, and the worker-seconds spent."""

    end: float
    best_done: float | None
    pick: str | None
    busy: float
    workers: int

    @property
    def idle(self) -> float:
        return self.workers * self.end - self.busy

    @property
    def utilisation(self) -> float:
        return self.busy / (self.workers * self.end) if self.end > 0 else 0.0


def _list_schedule(tasks: list[tuple[str, float]], workers: int, start: float) -> dict[str, float]:
    """Each task (key, seconds), in order, on the worker free first (ties: the lowest numbered): {key: its end}."""
    free = [(start, w) for w in range(workers)]
    ends = {}
    for key, seconds in tasks:
        t, w = heapq.heappop(free)
        ends[key] = t + seconds
        heapq.heappush(free, (t + seconds, w))
    return ends


def sync_halving(jobs: list[GridJob], eta: float, workers: int, launch_s: float = 0.0,
                 best: str | None = None) -> tuple[Outcome, list[list[str]]]:
    """Synchronous successive halving over `jobs` (in the order given: which job a free worker takes next) with a
    barrier at each rung; returns the outcome and the configurations trained at each rung. A single rung is the full
    grid. `best`: the grid's best configuration (default: the lowest mean final val_nll of `jobs`)."""
    best = best or ranked(mean_scores(jobs, -1))[0]
    alive = sorted({j.config for j in jobs})
    trained, t, busy, ends = [], 0.0, 0.0, {}
    for rung in range(len(jobs[0].rungs)):
        members = [j for j in jobs if j.config in alive]
        trained.append(alive)
        tasks = [(j.key, launch_s + j.pace * (j.at(rung) - j.at(rung - 1))) for j in members
                 if j.at(rung - 1) < j.reached]  # a job that ended (failed) is not launched again
        ends = _list_schedule(tasks, workers, t)
        busy += sum(s for _, s in tasks)
        t = max(ends.values(), default=t)
        scores = mean_scores(members, rung)
        alive = ranked(scores)[:max(1, math.ceil(len(scores) / eta))] if rung < len(jobs[0].rungs) - 1 else alive
    finals = mean_scores([j for j in jobs if j.config in alive], -1)
    done = [ends.get(j.key, t) for j in jobs if j.config == best] if best in alive else []
    return Outcome(t, max(done) if done else None, ranked(finals)[0], busy, workers), trained


def _pruner(method: str, eta: int, rungs: int):
    import optuna

    if method == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=eta, min_early_stopping_rate=0)
    return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=eta ** (rungs - 1), reduction_factor=eta)


def optuna_search(jobs: list[GridJob], eta: int, workers: int, method: str = "asha", launch_s: float = 0.0,
                  best: str | None = None, name: str = "search-sim") -> tuple[Outcome, dict[str, str]]:
    """The jobs (in the order given) as trials of an in-memory Optuna study whose pruner (`asha`: SuccessiveHalving,
    `hyperband`) decides after each rung but the last, `workers` at a time and no barrier; returns the outcome and
    each job's end: {key: completed | pruned at rung i | failed}."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    best = best or ranked(mean_scores(jobs, -1))[0]
    last = len(jobs[0].rungs) - 1
    study = optuna.create_study(study_name=name, direction="minimize", pruner=_pruner(method, eta, last + 1),
                                sampler=optuna.samplers.RandomSampler(seed=0))
    queue, events, running, fate, trial_job = list(jobs), [], {}, {}, {}
    busy, t, done = 0.0, 0.0, []

    def begin(worker: int, now: float, rung: int, job: GridJob, trial) -> None:
        nonlocal busy
        seconds = (launch_s if rung == 0 else 0.0) + job.pace * (job.at(rung) - job.at(rung - 1))
        busy += seconds
        running[worker] = (trial, job, rung)
        heapq.heappush(events, (now + seconds, worker))

    def take(worker: int, now: float) -> None:
        if queue:
            job = queue.pop(0)
            trial = study.ask()
            trial_job[trial.number] = job
            begin(worker, now, 0, job, trial)

    for w in range(workers):
        take(w, 0.0)
    while events:
        t, w = heapq.heappop(events)
        trial, job, rung = running.pop(w)
        if job.reached < job.rungs[rung]:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            fate[job.key] = "failed"
        elif rung == last:
            study.tell(trial, job.final)
            fate[job.key] = "completed"
            done += [t] if job.config == best else []
        else:
            trial.report(job.scores[rung], eta ** rung)
            if trial.should_prune():
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                fate[job.key] = f"pruned at rung {rung + 1}"
            else:
                begin(w, t, rung + 1, job, trial)
                continue
        take(w, t)
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    pick = trial_job[study.best_trial.number].config if complete else None  # None: every trial failed
    return Outcome(t, max(done) if done else None, pick, busy, workers), fate


def replay(jobs: list[GridJob], method: str, eta: int, workers: int, seed: int, launch_s: float,
           best: str) -> Outcome:
    """One replay of `method` with the jobs in the seed's random order."""
    order = random.Random(seed).sample(jobs, len(jobs))
    if method == "grid":
        return sync_halving([j.to_the_end() for j in order], eta, workers, launch_s, best)[0]
    if method == "sync":
        return sync_halving(order, eta, workers, launch_s, best)[0]
    return optuna_search(order, eta, workers, method, launch_s, best, name=f"search-sim-{seed}")[0]


def simulate(jobs: list[GridJob], fractions: list[float], eta: int, workers: list[int], seed: int = 0,
             reps: int = 3, launch_s: float = 0.0, methods=METHODS, snap: int = 0) -> dict:
    """Every method at every worker count, `reps` times (the jobs' order drawn from seed, seed + 1, ...):
    {grid facts, runs: {(method, workers): [Outcome per repetition]}}."""
    place_rungs(jobs, fractions, snap)
    truth = mean_scores(jobs, -1)
    order = ranked(truth)
    labels = short_names({j.config: j.parts for j in jobs})
    runs = {(m, w): [replay(jobs, m, eta, w, seed + r, launch_s, order[0]) for r in range(reps)]
            for m in methods for w in workers}
    seeds: dict[str, int] = {}
    for job in jobs:
        seeds[job.config] = seeds.get(job.config, 0) + 1
    return {"jobs": len(jobs), "configurations": len(truth), "seeds": max(seeds.values()), "fractions": fractions,
            "eta": eta, "seed": seed, "reps": reps, "launch_s": launch_s, "snap": snap, "order": order,
            "truth": truth, "labels": labels, "runs": runs,
            "steps": sorted({j.steps for j in jobs}), "serial": sum(j.pace * j.reached for j in jobs)}


def _seconds(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _share(x: float) -> str:
    return f"{x:.0%}"


def _spread(values: list[float], fmt=_seconds) -> str:
    """The mean, and the range in brackets where the repetitions differ (as printed)."""
    low, high = fmt(min(values)), fmt(max(values))
    return fmt(statistics.fmean(values)) + ("" if low == high else f" ({low}–{high})")


def _row(method: str, workers: int, outs: list[Outcome], order: list[str], grid_busy: float) -> str:
    kept = [o.best_done for o in outs if o.best_done is not None]
    best = (_spread(kept) + (f" ({len(kept)} of {len(outs)})" if len(kept) < len(outs) else "")) if kept else "pruned"
    ranks = ", ".join(f"#{order.index(o.pick) + 1}" if o.pick is not None else "none" for o in outs)
    busy = [o.busy for o in outs]
    return (f"| {method} | {workers} | {_spread([o.end for o in outs])} | {best} | {ranks} | {_spread(busy)} "
            f"({statistics.fmean(busy) / grid_busy:.0%}) | {_spread([o.idle for o in outs])} | "
            f"{_spread([o.utilisation for o in outs], _share)} |")


LEFT_OUT = ("Left out: launch and scheduling delays (except --launch-s per launch: a sync job launches once per rung, "
            "an ASHA or Hyperband trial once), data loading beyond the training loop's, the validations' cost, "
            "checkpoint save and load at a pause, queue waits, preemption, failures of machines, heterogeneous "
            "hardware (every job runs at its grid pace on any worker), and contention between workers.")


def markdown(result: dict) -> str:
    """The table (one row per method and worker count), the picks named, what the workers beyond the jobs do, and
    what the simulation leaves out."""
    r, order = result, result["order"]
    rungs = ", ".join(str(Fraction(f).limit_denominator(1000)) for f in r["fractions"])
    seeds = f"{r['seed']}-{r['seed'] + r['reps'] - 1}" if r["reps"] > 1 else str(r["seed"])
    lines = [f"{r['configurations']} configurations x {'up to ' if r['seeds'] > 1 else ''}{r['seeds']} "
             f"seed{'s' if r['seeds'] > 1 else ''} = {r['jobs']} jobs of "
             f"{', '.join(map(str, r['steps']))} steps; {_seconds(r['serial'])} s of training in all (one worker, the grid "
             f"pace). Rungs at {rungs} of each job's steps, eta {r['eta']}"
             + (f", a rung read at the grid's validation at most {r['snap']} steps from it" if r["snap"] else "")
             + f"; launch {r['launch_s']:g} s; {r['reps']} repetition{'s' if r['reps'] != 1 else ''} (the jobs' order "
             f"drawn from seed {seeds}): the mean, the range in brackets where they differ.", "",
             "| search | workers | end of search (s) | grid's best trained to the end at (s) | pick: rank in the grid "
             "| busy (worker-s, share of the grid's) | idle (worker-s) | utilisation |",
             "|---|---:|---:|---:|---|---:|---:|---:|"]
    busy = {w: statistics.fmean(o.busy for o in outs) for (m, w), outs in r["runs"].items() if m == "grid"}
    for (method, workers), outs in r["runs"].items():
        lines.append(_row(method, workers, outs, order, busy.get(workers) or statistics.fmean(o.busy for o in outs)))
    picked = sorted({order.index(o.pick) for outs in r["runs"].values() for o in outs if o.pick is not None})
    lines += ["", "Picks (rank in the grid by final val_nll, the mean over seeds): "
              + "; ".join(f"#{i + 1} {r['labels'][order[i]]} ({r['truth'][order[i]]:.4f})" for i in picked) + "."]
    many = [w for (m, w) in r["runs"] if m == "grid" and w > r["jobs"]]
    if many:
        lines += ["", f"At {', '.join(map(str, many))} workers there are more workers than the grid's {r['jobs']} jobs: "
                  "the workers beyond them never get one, and their time is counted idle (the simulation does not "
                  "invent configurations or seeds to fill them)."]
    return "\n".join(lines + ["", LEFT_OUT]) + "\n"
