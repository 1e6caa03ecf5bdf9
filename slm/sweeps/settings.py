"""`hydra.sweeper.*` of the grid sweeper (conf/hydra/sweeper/grid.yaml, written from these classes by `make conf`):
the crossed and paired axes, the lr search, a ladder of scale, successive halving, the dry run and its estimate.

The sweeper hands its keys, as the user wrote them, to `SweepSettings.read`: one SettingsError naming the dotted key
(`hydra.sweeper.halving.eta=1 is invalid: must be a number > 1`) before any job is composed. A new option is a field
here (with its doc line and limits) and the code that reads it; then `make conf`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Optional

from slm.settings import Settings, SettingsError, require, setting

KEY = "hydra.sweeper"
RULES = ("search", "transfer", "fixed")


@dataclass
class LadderSettings(Settings):
    """`hydra.sweeper.ladder`: every job again at several rungs of scale, the lowest first (slm/sweeps/ladder.py)."""

    optional: ClassVar[bool] = True

    rungs: Optional[list[float]] = setting(None, gt=0, each=True)
    """model.param_budget of each rung, at least two distinct (e.g. [5e4, 1e5, 2e5]); the budget solver sizes each
    point at each rung."""
    tokens_per_param: Optional[float] = setting(5.0, gt=0, null="the sweep's own train.length")
    """train.length.tokens = rung x this; null: the sweep's own length."""
    lr: Optional[Literal["search", "transfer", "fixed"]] = None
    """The lr rule: search (hydra.sweeper.lr_search at every rung), transfer (searched at the lowest search_rungs,
    each configuration's best carried up; needs muP or CompleteP) or fixed (the point's lr); null: search with an
    lr_search, else fixed."""
    search_rungs: Optional[int] = setting(None, ge=1, null="2, or the rungs less one when fewer")
    """lr: transfer: how many of the lowest rungs search the lr (null: 2, at most the rungs less one)."""
    validations: int = setting(4, ge=1)
    """Validations per job, evenly spaced (4: the curve at 25%, 50%, 75% and 100%)."""
    seeds: Optional[list[int]] = setting(None, ge=1, each=True, null="every seed at every rung")
    """How many seeds each rung trains, one count per rung, lowest first (e.g. [5, 5, 5, 3]: the first 3 of the
    params' train.seed values, in their order, at the top rung); null: every seed at every rung. A count above the
    seeds given trains them all."""

    def searched(self, index: int) -> bool:
        """Whether the jobs of rung `index` (0: the lowest) run in the first phase (search the lr, or train a fixed one)."""
        return self.lr != "transfer" or index < self.search_rungs

    def derive(self, root: "SweepSettings") -> None:
        if self.rungs is not None:
            self.rungs = sorted(float(r) for r in self.rungs)
        if self.tokens_per_param is not None:
            self.tokens_per_param = float(self.tokens_per_param)
        if self.lr is None:
            self.lr = "search" if root.lr_search else "fixed"
        if self.search_rungs is None and self.rungs:
            self.search_rungs = min(2, len(self.rungs) - 1)

    def check(self, key: str, root: "SweepSettings") -> None:
        rungs = self.rungs or []
        require((len(rungs) >= 2 and len(set(rungs)) == len(rungs), f"{key}.rungs", self.rungs,
                 "at least two distinct positive parameter budgets, e.g. [5e4, 1e5, 2e5]"))
        searched = root.lr_search or []
        require(
            (self.lr != "search" or searched, f"{key}.lr", self.lr,
             f"it searches the lr at every rung: set {KEY}.lr_search too (e.g. [0.5, 1, 2, 4]), or use lr: fixed for "
             "the point's lr at every rung"),
            (self.lr != "fixed" or not searched, f"{key}.lr", self.lr,
             f"it trains the point's lr at every rung, but {KEY}.lr_search={searched} is set: use lr: search (or "
             "transfer), or drop lr_search"),
            (self.lr != "transfer" or searched, f"{key}.lr", self.lr,
             f"it carries the lr searched at the lowest rungs: set {KEY}.lr_search too (e.g. [0.5, 1, 2])"))
        require((self.seeds is None or len(self.seeds) == len(rungs), f"{key}.seeds", self.seeds,
                 f"one seed count per rung ({len(rungs)} rungs), e.g. [5, 5, 5, 3]"))
        require((self.search_rungs < len(rungs), f"{key}.search_rungs", self.search_rungs,
                 f"how many of the lowest rungs search the lr (lr: transfer): 1 to {len(rungs) - 1}, so that a rung "
                 "above is left to carry it to"))


@dataclass
class HalvingSettings(Settings):
    """`hydra.sweeper.halving`: successive halving over the grid's configurations (slm/sweeps/halving.py)."""

    optional: ClassVar[bool] = True

    eta: float = setting(3.0, gt=1)
    """The share of the configurations kept at each rung is 1/eta."""
    rungs: Optional[int] = setting(None, ge=2, null="fractions given instead")
    """How many rungs, at 1/eta^(rungs-1), ..., 1/eta, 1 of each job's steps (or fractions instead)."""
    fractions: Optional[list[float]] = setting(None, gt=0, le=1, each=True, null="rungs given instead")
    """The rungs as fractions of each job's steps, increasing, the last 1 (e.g. [0.11, 0.33, 1]; or rungs instead)."""

    def derive(self, root) -> None:
        self.eta = float(self.eta)

    def check(self, key: str, root: "SweepSettings") -> None:
        example = "e.g. {eta: 3, rungs: 3} or {eta: 3, fractions: [0.11, 0.33, 1]}"
        given = {k: v for k, v in (("eta", self.eta), ("rungs", self.rungs), ("fractions", self.fractions))
                 if v is not None}
        f = self.fractions or []
        require((root.ladder is None, key, given, f"cannot be combined with {KEY}.ladder: a ladder trains every "
                 "configuration at every rung; drop one"),
                ((self.rungs is None) != (self.fractions is None), key, given,
                 f"needs one of rungs or fractions (not both), {example}"),
                (self.fractions is None or (len(f) >= 2 and all(a < b for a, b in zip(f, f[1:])) and f[-1] == 1),
                 f"{key}.fractions", self.fractions,
                 "two or more increasing fractions of each job's steps in (0, 1], the last 1, e.g. [0.11, 0.33, 1]"))

    def rung_fractions(self) -> list[float]:
        """The fraction of each job's steps every rung ends at, the last 1."""
        if self.fractions is not None:
            return [float(f) for f in self.fractions]
        return [self.eta ** -(self.rungs - 1 - i) for i in range(self.rungs)]


@dataclass
class EstimateSettings(Settings):
    """`hydra.sweeper.estimate`: the dry run's GPU-hours, tokens x FLOPs/token / (mfu x peak_flops)
    (slm/sweeps/plan.py)."""

    device: str = "H100 SXM, bf16 dense"
    """The device the estimate assumes, as the dry run names it."""
    peak_flops: float = setting(989.4e12, gt=0)
    """Its peak FLOP/s (NVIDIA datasheet; slm.training.hardware)."""
    mfu: Optional[float] = setting(None, gt=0, le=1, null="measured")
    """Model FLOPs utilisation; null: measured, per model family, from the completed runs under $SLM_RUNS at this
    peak_flops; a number: used as given."""
    assumed_mfu: float = setting(0.153, gt=0, le=1)
    """When no such run was measured: the one measured figure (docs/benchmarks.md: llama3 70M compiled on one H100 at
    16 x 1024 tokens per step), stated beside the estimate."""


@dataclass
class SweepSettings(Settings):
    """`hydra.sweeper` of the grid sweeper: Hydra's basic sweeper plus paired points, an lr search, a ladder,
    successive halving and a dry run."""

    max_batch_size: Optional[int] = setting(None, gt=0, null="all in one")
    """Jobs handed to a Slurm launcher at once (one array each); null: all, within the cluster's MaxArraySize."""
    params: Optional[dict[str, Any]] = None
    """Crossed axes: {key: "v1,v2,..."} (Hydra's sweep syntax: a,b / range() / choice())."""
    points: Optional[list[list[str]]] = None
    """Paired axes: [[k1=a, k2=b], [k1=c, k2=d]]: one job per point, crossed with params."""
    lr_search: Optional[list[float] | float] = setting(None, gt=0, each=True, null="no search")
    """Multipliers of each point's train.lr, e.g. [0.25,0.5,1,2,4]: an lr axis per point (1 always runs: the shared
    lr); the analysis ranks each configuration at its best lr."""
    ladder: Optional[LadderSettings] = None
    """Every job at several rungs of scale: {rungs: [5e4, 1e5, 2e5] (model.param_budget), tokens_per_param: 5, lr:
    search | transfer | fixed, search_rungs: 2, validations: 4, seeds: [5, 5, 3] (per rung)}; null: none."""
    halving: Optional[HalvingSettings] = None
    """Successive halving: {eta: 3, rungs: 3} (rungs at 1/9, 1/3, 1 of each job's steps) or {eta: 3, fractions: [0.11,
    0.33, 1]}: at each rung only the best 1/eta of the configurations go on, the others recorded pruned (needs a wsd
    schedule); null: none."""
    dry_run: bool = False
    """True: print the jobs with parameters, tokens and GPU-hours (with hydra/launcher=slurm: the arrays it would
    submit); train nothing."""
    estimate: EstimateSettings = field(default_factory=EstimateSettings)
    """The dry run's GPU-hours: tokens x FLOPs/token / (mfu x peak_flops)."""

    def derive(self, root) -> None:
        """lr_search as a sorted list of distinct multipliers that holds 1 (None: no search)."""
        if self.lr_search is not None:
            values = self.lr_search if isinstance(self.lr_search, list) else [self.lr_search]
            self.lr_search = sorted({float(v) for v in values} | {1.0})

    @property
    def multipliers(self) -> list[float]:
        """The lr search's multipliers, [] without one."""
        return self.lr_search or []

    @classmethod
    def read(cls, node: dict) -> "SweepSettings":
        """The settings from the sweeper's keys (plain values), settled: SettingsError for a bad one."""
        settings = cls.from_node(node, KEY)
        settings.settle(KEY)
        return settings
