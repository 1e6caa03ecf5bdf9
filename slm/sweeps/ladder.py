"""`hydra.sweeper.ladder`: any family comparison as a ladder, every configuration trained at several rungs of scale.

    hydra:
      sweeper:
        ladder:
          rungs: [5.0e4, 8.0e4, 1.26e5, 2.0e5]   # model.param_budget of each rung (the budget solver sizes each point)
          tokens_per_param: 5                    # train.length.tokens = rung x this (null: the sweep's own length)
          lr: search                             # search | transfer | fixed (below)
          search_rungs: 2                        # transfer: how many of the lowest rungs search the lr
          validations: 4                         # validations per job, evenly spaced (the 25% and 50% proxies)
          seeds: [5, 5, 3, 3]                    # seeds per rung (the first N train.seed values); null: all

A job of the ladder is a point (or params combination) at a rung: its overrides plus `model.param_budget=<rung>`,
`train.length.tokens=<rung x tokens_per_param>` and, with validations > 1, `train.validation.interval=<steps //
validations>`. The batch size is the sweep's at every rung (fixed). The jobs run rung by rung, the lowest first.

The lr rule, recorded per job in the sweep's sweep.json (`ladder`: rung, lr_rule, and where a carried lr came from):
- `search` (the honest default): hydra.sweeper.lr_search at every rung; the analysis takes each configuration at
  its best lr per rung. It needs an lr_search (refused without one).
- `fixed`: the point's lr at every rung, no lr_search (the default when no lr_search is set; refused with one).
- `transfer` (the cheap one): the lr is searched at the lowest `search_rungs` rungs only; each configuration's best
  multiplier there (the lowest mean validation NLL over its seeds at the highest searched rung; a failed or diverged
  seed ranks a multiplier last) is carried up to the rungs above, once every searched job of that configuration at
  that rung has ended. The choice is written to sweep.json (`carried`) and kept: a sweep started again carries the same
  lr, so its carried jobs keep their keys. This is what muP/CompleteP promise, so the rule needs
  model.parametrization.kind mup or completep.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from slm.runs.record import FINAL
from slm.runs.states import RUNNING
from slm.sweeps import jobs as J
from slm.sweeps.jobs import SweepError
from slm.sweeps.lr_search import at_lr, search_lr
from slm.sweeps.settings import LadderSettings

TRANSFERS = ("mup", "completep")
RUNG_KEYS = ("model.param_budget", "train.length.tokens", "train.validation.interval")


@dataclass
class RungJob:
    """One job of the ladder: a base job (point x params) at a rung."""

    index: int
    rung: float
    config: tuple
    """The configuration it belongs to: its base overrides without train.seed (one per family, shape, ...)."""
    job: J.Job
    base: J.Job


@dataclass
class Plan:
    ladder: LadderSettings
    searched: list[RungJob] = field(default_factory=list)
    deferred: list[RungJob] = field(default_factory=list)
    """transfer: the jobs of the upper rungs, composed at the point's lr until the carried lr is known."""


def _configuration(overrides: list[str]) -> tuple:
    return tuple(sorted(o for o in overrides if not str(o).lstrip("+").startswith("train.seed=")))


def _up(value: float) -> str:
    """`value` rounded up to 3 significant digits (a minimum that, as printed, is still enough)."""
    scale = 10.0 ** (math.floor(math.log10(value)) - 2)
    return f"{math.ceil(round(value / scale, 9)) * scale:.3g}"


def _rung_overrides(base: J.Job, ladder: LadderSettings, rung: float) -> list[str]:
    """The overrides that put a base job at a rung (see the module docstring)."""
    from slm.training.config import TrainConfig

    out = [f"model.param_budget={rung:g}"]
    train = base.section("train")
    if ladder.tokens_per_param is not None:
        length = train.get("length") or {}
        for key in ("steps", "epochs"):
            if length.get(key) is not None:
                raise SweepError(f"train.length.{key}={length[key]} would override the ladder's token budget "
                                 "(hydra.sweeper.ladder.tokens_per_param): leave it unset in a ladder")
        tokens = rung * ladder.tokens_per_param
        context = int(base.select("model.context_length"))
        batch = TrainConfig.from_node(train).batch_size * context
        if float(f"{tokens:g}") < batch:
            raise SweepError(
                f"hydra.sweeper.ladder: rung {rung:g} x tokens_per_param {ladder.tokens_per_param:g} = {tokens:g} "
                f"tokens is less than one batch (train.batch_size {batch // context} x model.context_length {context} = "
                f"{batch} tokens): tokens_per_param must be at least {_up(batch / rung)} at this rung, or the rung at "
                f"least {_up(batch / ladder.tokens_per_param)}")
        out.append(f"train.length.tokens={tokens:g}")
        train["length"] = {**length, "tokens": float(f"{tokens:g}")}
    if ladder.validations > 1:
        steps = TrainConfig.from_node(train).max_steps(int(base.select("model.context_length")))
        out.append(f"train.validation.interval={max(1, steps // ladder.validations)}")
    return out


def _seed(overrides) -> str | None:
    return next((str(o).split("=", 1)[1] for o in overrides if str(o).lstrip("+").startswith("train.seed=")), None)


def _seeded(jobs: list[J.Job], count: int | None) -> list[J.Job]:
    """The jobs whose train.seed is among the first `count` seed values of `jobs` (in their order); a job without a
    train.seed override is always kept."""
    if count is None:
        return jobs
    order = list(dict.fromkeys(s for s in (_seed(j.overrides) for j in jobs) if s is not None))
    keep = set(order[:count])
    return [j for j in jobs if _seed(j.overrides) is None or _seed(j.overrides) in keep]


def expand(compose: Callable[[list[str]], J.Job], jobs: list[J.Job], ladder: LadderSettings) -> Plan:
    """Every base job at every rung, the lowest rung first (a base job that does not compose is kept once, as given)."""
    plan = Plan(ladder)
    for job in jobs:
        for o in job.overrides:
            name = str(o).lstrip("+").split("=", 1)[0]
            if name in RUNG_KEYS:
                raise SweepError(f"{o}: the ladder sets {name} per rung (hydra.sweeper.ladder); leave it out of the "
                                 "points, params and command line")
        kind = job.select("model.parametrization.kind", "sp") if job.cfg is not None else None
        if ladder.lr == "transfer" and job.cfg is not None and kind not in TRANSFERS:
            raise SweepError(f"hydra.sweeper.ladder.lr=transfer carries the lr across width, which only "
                             f"{' or '.join(TRANSFERS)} promise; this sweep has model.parametrization.kind={kind}: "
                             "set model.parametrization.kind=mup, or ladder.lr=search")
    for index, rung in enumerate(ladder.rungs):
        for job in _seeded(jobs, ladder.seeds[index] if ladder.seeds else None):
            if job.cfg is None:
                if index == 0:
                    plan.searched.append(RungJob(index, rung, _configuration(job.overrides), job, job))
                continue
            composed = compose(list(job.overrides) + _rung_overrides(job, ladder, rung))
            entry = RungJob(index, rung, _configuration(job.overrides), composed, job)
            (plan.searched if ladder.searched(index) else plan.deferred).append(entry)
    return plan


def info(plan: Plan, keys: dict[str, RungJob], carried: Optional[dict[str, dict]] = None,
         searching: bool = True) -> dict[str, dict]:
    """{job key: what sweep.json records of it}: its rung, the lr rule (search, transfer, or fixed where no
    hydra.sweeper.lr_search is set), its configuration and, for a carried lr, where it came from."""
    out = {}
    for key, entry in keys.items():
        rule = ("search" if plan.ladder.searched(entry.index) else "transfer") if searching else "fixed"
        out[key] = {"rung": entry.rung, "rung_index": entry.index, "lr_rule": rule, "config": ",".join(entry.config),
                    **({"lr_from": carried[key]} if carried and key in carried else {})}
    return out


def search(compose: Callable[[list[str]], J.Job], plan: Plan, multipliers: list[float]
           ) -> tuple[list[J.Job], dict[str, float], dict[str, RungJob]]:
    """The searched rungs' jobs at every lr multiplier: (jobs, {key: multiplier}, {key: its RungJob})."""
    jobs, searched, owners = [], {}, {}
    for entry in plan.searched:
        found, mult = search_lr(compose, [entry.job], multipliers)
        for job in found:
            owners[job.key] = entry
            jobs.append(job)
        searched.update(mult)
    return J.unique(jobs), searched, owners


def wait_for_others(name: str, jobs: list[J.Job], poll: float = 10.0) -> None:
    """Block until no job of `jobs` is being trained by another process (a copy of this sweep, slm-workers): the
    carried lr is chosen from every searched job's record."""
    said = False
    while True:
        running = [j for j in jobs if J.outcome(j)["status"] == RUNNING]
        if not running:
            return
        if not said:
            print(f"sweep {name}: waiting for {len(running)} searched job(s) another process trains before the lr is "
                  "carried up", flush=True)
            said = True
        time.sleep(poll)


def carry(compose: Callable[[list[str]], J.Job], plan: Plan, jobs: list[J.Job], multipliers: dict[str, float],
          owners: dict[str, RungJob], pinned: dict[str, dict]) -> tuple[list[J.Job], dict[str, RungJob], dict[str, dict]]:
    """The deferred jobs at their configuration's best searched multiplier: (jobs, {key: RungJob}, {key: where the lr
    came from}).

    The best multiplier is the one with the lowest mean val_nll over its seeds at the highest searched rung; one whose
    runs include a failed or diverged seed ranks below every multiplier whose seeds all completed. It is chosen once
    every searched job of the configuration at that rung has ended, and then kept: `pinned` ({configuration: choice},
    sweep.json's `carried`, updated here) makes a restarted sweep carry the same lr whatever has run since. A
    configuration whose searched jobs have not all ended is left for a later run of the sweep (none of its jobs is
    returned); one with no completed searched run gets jobs that do not compose (recorded failed, with the reason)."""
    top = plan.ladder.search_rungs - 1
    scores: dict[tuple, dict[float, list[float]]] = {}
    unsettled: set[tuple] = set()
    for job in jobs:
        entry = owners.get(job.key)
        if entry is None or entry.index != top:
            continue
        value = J.outcome(job)
        if value["status"] not in FINAL:  # not ended: running elsewhere, stopped, or unreadable
            unsettled.add(entry.config)
            continue
        nll = value["val_nll"] if value["status"] == "completed" else None
        ok = nll is not None and math.isfinite(nll)
        scores.setdefault(entry.config, {}).setdefault(multipliers.get(job.key, 1.0), []).append(nll if ok else math.inf)
    out, keyed, sources, waiting = [], {}, {}, set()
    rung_text = f"{plan.ladder.rungs[top]:g}"
    for entry in plan.deferred:
        name = ",".join(entry.config)
        if entry.job.cfg is None:  # the rung itself does not compose (the budget solver refused it): recorded failed
            out.append(entry.job)
            keyed[entry.job.key] = entry
            continue
        choice = pinned.get(name)
        if choice is None:
            if entry.config in unsettled:
                waiting.add(name)
                continue
            by_mult = {m: v for m, v in (scores.get(entry.config) or {}).items() if any(math.isfinite(x) for x in v)}
            if not by_mult:
                job = J.Job(entry.job.overrides, entry.job.run_dir, None,
                            f"hydra.sweeper.ladder.lr=transfer: no completed run of this configuration at rung "
                            f"{rung_text} to carry the lr from")
                out.append(job)
                keyed[job.key] = entry
                continue
            means = {m: statistics.fmean(v) for m, v in by_mult.items()}  # inf where a seed failed or diverged
            finite = {m: statistics.fmean(x for x in v if math.isfinite(x)) for m, v in by_mult.items()}
            best = min(means, key=lambda m: (means[m], finite[m], abs(math.log(m))))
            choice = {"rung": plan.ladder.rungs[top], "multiplier": best, "val_nll": finite[best],
                      "seeds": sum(math.isfinite(x) for x in by_mult[best]), "of": len(by_mult[best])}
            pinned[name] = choice
        job = at_lr(compose, entry.job, float(choice["multiplier"]))
        out.append(job)
        keyed[job.key] = entry
        sources[job.key] = choice
    for name in sorted(waiting):
        J.say(f"ladder: the lr of {name} is not carried up yet: some of its searched jobs at rung {rung_text} have "
              "not ended (another process trains them, or they were stopped); run the sweep again once they have")
    return out, keyed, sources


def print_ladder(plan: Plan, rows: list[dict], owners: dict[str, RungJob], multipliers: list[float]) -> None:
    """The dry run's ladder: per rung its budget, tokens, jobs, non-embedding share of the parameters, FLOPs per job and
    per rung, its share of the top rung's compute (FLOPs per job) and its lr rule; a note on a rung that is mostly
    embedding."""
    ladder = plan.ladder
    by_rung: dict[int, list[dict]] = {}
    for row in rows:
        entry = owners.get(row["key"])
        if entry is not None and not row.get("error"):
            by_rung.setdefault(entry.index, []).append(row)
    per_job = {i: statistics.fmean(r["flops"] for r in rs) for i, rs in by_rung.items()}
    body = {i: statistics.fmean(r["non_embedding"] / r["params"] for r in rs) for i, rs in by_rung.items()}
    last = len(ladder.rungs) - 1
    top = per_job.get(last)
    tokens = "the sweep's train.length" if ladder.tokens_per_param is None else f"{ladder.tokens_per_param:g} per parameter"
    rule = {"transfer": f" (searched at the lowest {ladder.search_rungs}, carried up)",
            "fixed": " (the point's lr at every rung: no hydra.sweeper.lr_search)"}.get(ladder.lr, "")
    print(f"ladder: {len(ladder.rungs)} rungs of model.param_budget, tokens {tokens}, the sweep's batch size at every "
          f"rung, lr rule {ladder.lr}{rule}")
    mults = ", ".join(f"x{m:g}" for m in multipliers) or "the point's lr"
    print(f"{'rung':>5s} {'budget':>10s} {'tokens':>10s} {'jobs':>5s} {'non-emb':>8s} {'FLOPs/job':>10s} {'FLOPs':>10s} "
          f"{'% of top':>9s}  lr")
    for i, rung in enumerate(ladder.rungs):
        rs = by_rung.get(i, [])
        if not rs:
            print(f"{i + 1:5d} {rung:10.3g}  (no valid job)")
            continue
        share = f"{100 * per_job[i] / top:.3g}%" if top else "-"
        lr = ("fixed: the point's lr" if ladder.lr == "fixed" else f"searched: {mults}") if ladder.searched(i) else \
            f"carried from rung {ladder.search_rungs} ({ladder.rungs[ladder.search_rungs - 1]:g}) once it has run"
        print(f"{i + 1:5d} {rung:10.3g} {statistics.fmean(r['tokens'] for r in rs):10.3g} {len(rs):5d} "
              f"{100 * body[i]:7.3g}% {per_job[i]:10.3g} {sum(r['flops'] for r in rs):10.3g} {share:>9s}  {lr}")
    print("non-emb: the non-embedding share of a job's parameters (params_non_embedding / params_total, the rung's mean)")
    mostly = [i for i in sorted(body) if body[i] < 0.5]
    if mostly:
        where = ", ".join(f"{ladder.rungs[i]:g} ({100 * (1 - body[i]):.3g}% embedding)" for i in mostly)
        print(f"note: mostly embedding at rung{'s' if len(mostly) > 1 else ''} {where}: there the budget buys vocabulary, "
              "not depth or width; model.budget_count=non_embedding sizes every rung by its non-embedding parameters "
              "(Chinchilla's and OLMo's convention)")
    if top:
        spent = sum(sum(r["flops"] for r in rs) for i, rs in by_rung.items() if i < last)
        total = sum(sum(r["flops"] for r in rs) for rs in by_rung.values())
        low = min(per_job)
        line = f"the rungs below the top cost {100 * spent / total:.3g}% of the ladder's FLOPs"
        if low == 0:
            line += f"; the lowest rung's job {100 * per_job[0] / top:.3g}% of a top-rung job's"
        elif low < last:
            line += (f"; the lowest rung has no valid job: the lowest that has one, rung {low + 1} "
                     f"({ladder.rungs[low]:g}), {100 * per_job[low] / top:.3g}% of a top-rung job's")
        else:
            line += "; no rung below the top has a valid job"
        print(line)
    elif by_rung:
        print("the top rung has no valid job: no rung's share of its compute")
