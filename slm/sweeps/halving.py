"""`hydra.sweeper.halving`: successive halving (Jamieson & Talwalkar 2016; the synchronous form of ASHA, Li et al.
2020) over a grid sweep's configurations, so that a sweep stops spending on its losers.

    hydra.sweeper.halving: {eta: 3, rungs: 3}              rungs at 1/9, 1/3 and all of each job's steps
    hydra.sweeper.halving: {eta: 3, fractions: [0.1, 0.3, 1]}

A configuration is a job's overrides less train.seed: its seeds are its jobs (an lr of hydra.sweeper.lr_search is a
configuration of its own, as each arm is in ASHA; the analysis takes each point at its best lr, as ever). Rung by rung:

  1. every job of the configurations still in trains to the rung's fraction of its steps (round(fraction x steps), at
     least 1) and pauses there: `train.length.pause_at=<fraction>` is added to its overrides at launch, a setting left
     out of the job key, so each rung continues the same run from its checkpoint (slm.runs.job: status `paused`, the
     validation loss at that step in its validation curve). The schedule must be wsd and every rung but the last must
     fall in its stable phase: the run paused at a rung is the run that goes on, not a shorter run decayed early;
  2. once every such job has reached the rung (or failed, or diverged), the configurations are ranked by the mean over
     their seeds of the validation loss at the rung (score: the stable phase's loss, which is what a continued run
     has; a failed or diverged seed ranks its configuration below every configuration whose seeds all reached it; ties
     by name), and the best ceil(n / eta) go on. The decision is pinned in sweep.json (`halving`: per rung its
     fraction, the scores, who went on), so a sweep started again, or a copy of it (slm-workers), makes the same one
     whatever has run since;
  3. the jobs of the others are recorded `pruned` (slm.runs.record: a final status, never launched again, never
     counted failed), with `halving` in their record: rung, fraction, step, configuration, score and rank of how many.

The last rung trains the survivors to their end (`completed`, as any job), and the sweep's summary ends with the winner:
the survivor with the lowest final validation loss (slm.sweeps.status.halving_winner). Rungs are numbered from 1 in the
console, in sweep.json and in the records alike. A configuration's name is its overrides less train.seed and sweep=
(slm.runs.keys), with its lr under an lr search (whose x1 job's overrides do not name it), so no name is ""; what tells
it from the others (its label) is how the console, sweep.json's `labels` and the report show it. Halving owns
train.length.pause_at: a job that sets it is refused (one line, before anything is made). A rung on Slurm is one job
array. A sweep killed at any point and started again trains nothing twice: a job paused at or past a rung is not launched for it, and
the pinned decisions are reread. While a rung's jobs are trained elsewhere (another copy, a Slurm array of another
process), the decision waits for them.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable, Optional

from slm.runs.states import RUNNING
from slm.sweeps import jobs as J
from slm.sweeps.jobs import SweepError
from slm.sweeps.settings import HalvingSettings
from slm.words import counted

PAUSE = "train.length.pause_at"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def rung_steps(job: J.Job, halving: HalvingSettingsSettings) -> list[int]:
    """The step each rung ends at for this job; SweepError (one line) when the rungs do not fit its schedule: a
    schedule other than wsd, two rungs at one step, or a rung but the last past the stable phase."""
    from slm.training.config import TrainConfig
    from slm.training.length import pause_step
    from slm.training.schedules import decay_start

    train = TrainConfig.from_node(job.section("train"))
    steps = train.max_steps(int(job.select("model.context_length")))
    schedule = train.schedule
    if schedule.kind != "wsd":
        raise SweepError(f"{job.key}: hydra.sweeper.halving continues each job from its checkpoint, which needs "
                         f"train.schedule.kind=wsd (its stable phase); this job has {schedule.kind}")
    fractions = halving.rung_fractions()
    out = [pause_step(f, steps) for f in fractions]
    stable = decay_start(steps, schedule.decay_fraction)
    if len(set(out)) < len(out) or any(s > stable for s in out[:-1]):
        raise SweepError(f"{job.key}: hydra.sweeper.halving.fractions {fractions} do not fit its {steps} "
                         f"steps: the rungs fall at steps {out}, and every rung but the last must be a distinct step "
                         f"of the stable phase (steps 1-{stable}, before train.schedule.decay_fraction="
                         f"{schedule.decay_fraction}'s decay); use fewer rungs or a longer run")
    return out


def configuration(job: J.Job, searched: bool = False) -> str:
    """A job's configuration (slm.runs.keys.configuration: its overrides less train.seed and sweep=, with its lr where
    `searched`: the sweep has an lr search, whose x1 job's overrides do not name its lr)."""
    from slm.runs.keys import configuration as of_overrides

    return of_overrides(job.overrides, _lr(job) if searched else None)


def _lr(job: J.Job) -> Optional[float]:
    lr = job.select("train.lr") if job.cfg is not None else None
    return float(lr) if _number(lr) else None


def _labels(configs: dict[str, list[J.Job]], searched: bool) -> dict[str, str]:
    """{configuration: what tells it from the others} (slm.runs.keys.short_names), as the console, sweep.json and
    the report name it."""
    from slm.runs.keys import configuration_parts, short_names

    return short_names({n: configuration_parts(jobs[0].overrides, _lr(jobs[0]) if searched else None)
                        for n, jobs in configs.items()})


def check_pause(job: J.Job) -> None:
    """SweepError (one line) when the user set train.length.pause_at: halving sets each job's pause at its rungs."""
    value = job.select(PAUSE) if job.cfg is not None else None
    if value is not None:
        raise SweepError(f"{PAUSE}={value} is refused: hydra.sweeper.halving pauses every job at its rungs "
                         f"(hydra.sweeper.halving.rungs or fractions); drop {PAUSE}")


def _curve_point(record: dict, step: int) -> Optional[float]:
    for point in (record.get("eval") or {}).get("val_curve") or []:
        if isinstance(point, list) and len(point) == 2 and point[0] == step:
            return float(point[1]) if _number(point[1]) else math.inf
    return None


def score_at(job: J.Job, step: int) -> Optional[float]:
    """The job's validation loss at `step` (its validation curve, whatever became of the run after it), inf when it
    failed or diverged before, None when it has not reached the step (yet)."""
    from slm.runs.record import RecordError, load_record

    try:
        record = load_record(job.run_dir) or {}
    except RecordError:
        return math.inf
    found = _curve_point(record, step)
    if found is not None:
        return found
    return math.inf if record.get("status") in ("failed", "diverged") else None


def reached(job: J.Job, step: int) -> bool:
    """True if the job need not train for a rung ending at `step`: it ended (completed, failed, diverged, pruned) or
    its record says it is at or past the step."""
    from slm.runs.record import FINAL, RecordError, load_record

    try:
        record = load_record(job.run_dir) or {}
    except RecordError:
        return True  # unreadable: never launched (jobs.unreadable says so)
    if record.get("status") in FINAL or _curve_point(record, step) is not None:
        return True  # (validated at the step: a later rung of a sweep started again has begun from there)
    at = (record.get("training") or {}).get("steps")
    return record.get("status") == "paused" and isinstance(at, int) and at >= step


def _pinned(decisions: list[dict], rung: int) -> Optional[dict]:
    return decisions[rung] if rung < len(decisions) else None


def survivors(n: int, eta: float, rungs: int) -> list[int]:
    """How many of n configurations train at each rung (ceil(n / eta) kept each time, at least 1)."""
    out = [n]
    for _ in range(rungs - 1):
        out.append(max(1, math.ceil(out[-1] / eta)))
    return out


def print_halving(halving: HalvingSettings, jobs: list[J.Job], rows: list[dict], searched: bool = False) -> None:
    """The dry run's halving: the rungs, how many configurations and jobs train at each, and the compute at most (the
    most expensive configurations kept at every rung) against the full grid's."""
    flops = {r["key"]: r.get("flops") for r in rows if not r.get("error")}
    configs: dict[str, float] = {}
    seeds: dict[str, int] = {}
    for job in jobs:
        if job.cfg is not None and flops.get(job.key) is not None:
            name = configuration(job, searched)
            configs[name] = configs.get(name, 0.0) + flops[job.key]
            seeds[name] = seeds.get(name, 0) + 1
    if not configs:
        return
    fractions = halving.rung_fractions()
    counts = survivors(len(configs), halving.eta, len(fractions))
    costly = sorted(configs.values(), reverse=True)
    spent, before = 0.0, 0.0
    for kept, fraction in zip(counts, fractions):
        spent += sum(costly[:kept]) * (fraction - before)
        before = fraction
    full = sum(configs.values())
    rungs = ", ".join(f"{f:.3g} ({k} configuration{'s' if k != 1 else ''})" for f, k in zip(fractions, counts))
    print(f"halving (eta {halving.eta:g}): {len(configs)} configurations of {max(seeds.values())} seed(s); rungs at "
          f"{rungs} of each job's steps; the others recorded pruned")
    print(f"halving: at most {spent:.3g} FLOPs, {spent / full:.1%} of the full grid's {full:.3g} (the costliest "
          f"configurations kept at every rung); the GPU-hours above are the full grid's")


def decide(rung: int, fraction: float, configs: dict[str, list[J.Job]], steps: dict[str, int], eta: float,
           rungs: int = 0, labels: Optional[dict] = None) -> Optional[dict]:
    """The rung's decision once every job of `configs` has reached it, else None: {rung (its number, from 1, as the
    console prints it), rungs (how many), fraction, scores, kept, jobs (configuration -> its job keys), labels
    (configuration -> what tells it from the others)}."""
    scores = {}
    for name, jobs in configs.items():
        values = [score_at(j, steps[j.key]) for j in jobs]
        if any(v is None for v in values):
            return None
        scores[name] = statistics.fmean(values) if all(math.isfinite(v) for v in values) else math.inf
    order = sorted(scores, key=lambda n: (scores[n], n))
    kept = order[:max(1, math.ceil(len(order) / eta))]
    return {"rung": rung + 1, "rungs": rungs, "fraction": fraction, "kept": kept,
            "scores": {n: (s if math.isfinite(s) else None) for n, s in scores.items()},
            "jobs": {n: [j.key for j in jobs] for n, jobs in configs.items()},
            "labels": {n: (labels or {}).get(n, n) for n in configs}}


def prune(job: J.Job, name: str, decision: dict, step: int) -> None:
    """Record a job of configuration `name`, which the rung stopped, as `pruned` (unless it ended otherwise already):
    `halving` in its record holds the rung's number (from 1, as the console prints it) of how many, fraction, step,
    the configuration's label, score and rank of how many."""
    from slm.runs.record import FINAL, RecordError, load_record, update_record
    from slm.runs.lock import lock_held

    try:
        record = load_record(job.run_dir) or {}
    except RecordError:
        return
    if record.get("status") in FINAL or not record or lock_held(job.run_dir):
        return
    order = sorted(decision["scores"], key=lambda n: (math.inf if decision["scores"][n] is None
                                                      else decision["scores"][n], n))
    update_record(job.run_dir, status="pruned", halving={
        "rung": decision["rung"], "rungs": decision["rungs"], "fraction": decision["fraction"], "step": step,
        "configuration": (decision.get("labels") or {}).get(name, name), "score": decision["scores"][name],
        "rank": order.index(name) + 1, "of": len(order), "kept": len(decision["kept"])})


def _upgraded(decision: Optional[dict], rung: int, rungs: int, legacy: dict[str, str]) -> Optional[dict]:
    """A pinned decision in today's form: an earlier version's counts its rung from 0 and names a configuration without
    the lr of an lr search (`legacy`: {that name: today's}); its names are translated."""
    if decision is None or "jobs" in decision:
        return decision
    rename = lambda n: legacy.get(n, n)  # noqa: E731
    return {**decision, "rung": rung + 1, "rungs": rungs, "kept": [rename(n) for n in decision["kept"]],
            "scores": {rename(n): v for n, v in decision["scores"].items()}}


def _configurations(jobs: list[J.Job], searched: bool) -> tuple[dict[str, list[J.Job]], dict[str, str], dict]:
    """({configuration: its jobs}, {configuration: its label}, {an earlier version's name of it: configuration})."""
    from slm.runs.keys import configuration_parts

    configs: dict[str, list[J.Job]] = {}
    for job in jobs:
        if job.cfg is not None:
            configs.setdefault(configuration(job, searched), []).append(job)
    legacy = {",".join(configuration_parts(js[0].overrides)): n for n, js in configs.items()}
    return configs, _labels(configs, searched), legacy


def run(name: str, jobs: list[J.Job], halving: HalvingSettings, launch: Callable[[list[J.Job], list[str]], list],
        pinned: Callable[[], list[dict]], pin: Callable[[list[dict]], None], poll: float = 10.0,
        searched: bool = False) -> list:
    """Run the rungs: launch(jobs, extra overrides) trains jobs (the sweeper's _run), pinned() reads the decisions
    pinned so far (sweep.json's `halving`: an earlier start's, or another copy's), `pin` saves them; `searched`: the
    sweep has an lr search (each lr a configuration of its own). Returns the launcher's returns."""
    steps = {j.key: rung_steps(j, halving) for j in jobs if j.cfg is not None}
    configs, labels, legacy = _configurations(jobs, searched)
    alive = sorted(configs)
    returns = []
    fractions = halving.rung_fractions()
    rungs = len(fractions)
    if len(configs) == 1:
        print(f"sweep {name}: halving over one configuration ({labels[alive[0]]}: its jobs differ in train.seed only): "
              "nothing to prune; its jobs pause at each rung and train to their end", flush=True)
    for rung, fraction in enumerate(fractions):
        last = rung == rungs - 1
        todo = [j for n in alive for j in configs[n] if not reached(j, steps[j.key][rung])]
        extra = [] if last else [f"{PAUSE}={fraction!r}"]
        share = "all" if fraction == 1 else f"{fraction:.3g}"
        print(f"sweep {name}: halving rung {rung + 1} of {rungs}: {counted(len(alive), 'configuration')} to {share} of "
              f"their steps; {counted(len(todo), 'job')} to train", flush=True)
        if todo:
            returns += launch(todo if rung else todo + [j for j in jobs if j.cfg is None], extra)
        if last:
            break
        decision = _upgraded(_pinned(pinned(), rung), rung, rungs, legacy)
        if decision is None:
            members = {n: configs[n] for n in alive}
            rung_at = {j.key: steps[j.key][rung] for n in alive for j in configs[n]}
            decision = decide(rung, fraction, members, rung_at, halving.eta, rungs, labels)
            said = False
            while decision is None and any(J.outcome(j)["status"] == RUNNING for n in alive for j in configs[n]):
                if not said:
                    print(f"sweep {name}: waiting for the rung's jobs another process trains", flush=True)
                    said = True
                time.sleep(poll)
                decision = decide(rung, fraction, members, rung_at, halving.eta, rungs, labels)
            if decision is None:
                print(f"sweep {name}: halving stops at rung {rung + 1}: some of its jobs have not reached it (stopped, "
                      "or unreadable); run the sweep again to go on")
                return returns
            # another copy decided meanwhile: its decision holds
            decision = _upgraded(_pinned(pinned(), rung), rung, rungs, legacy) or decision
            pin(pinned()[:rung] + [decision])
        out = [n for n in alive if n not in decision["kept"]]
        for n in out:
            for job in configs[n]:
                prune(job, n, decision, steps[job.key][rung])
        alive = [n for n in alive if n in decision["kept"]]
        print(f"sweep {name}: rung {rung + 1} of {rungs}: {counted(len(alive), 'configuration')} "
              f"{'goes' if len(alive) == 1 else 'go'} on ({_names(alive, labels)}), {len(out)} pruned", flush=True)
    return returns


def _names(names: list[str], labels: dict[str, str], limit: int = 5) -> str:
    shown = [labels.get(n, n) for n in names[:limit]]
    return ", ".join(shown) + (f" and {len(names) - limit} more" if len(names) > limit else "")
