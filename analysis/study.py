"""Every statistic of a study computed once: the report's sections, its figures, the claims table and the notebook
read one Study, so a test has one value wherever it is quoted.

    study = analyse(table)                  # or analyse(table, "score_hellaswag"): the headline metric
    study.headline, study.verdict           # analysis.headline, analysis.verdict
    study.tiers("val_nll")                  # the Tiers section and figure (each configuration at its best lr)
    study.threshold()                       # the Hidden-size threshold section and figure (d_model)
    study.view("shared").tiers(study.score) # at the shared lr: the Learning rate section, the claims' "shared" rows
    judge(table, study=study)               # the claims table (analysis.claims), from the same results, kept here

One rule for which runs a comparison uses (`comparable_rows`, analysis.metrics): completed runs with a value;
where a validation loss holds exact NLLs and masked-diffusion NELBO bounds, the exact ones only (a bound is not an
NLL). Views: "as
run" when every configuration ran at one lr; else "best" (each configuration at its best lr, analysis.tuning) and
"shared" (at its shared lr). Tiers and thresholds use their modules' defaults (analysis.tiers.TierTest: 4000
reference samples, 2000 redraws; 4000 permutations; seed `seed`), computed on first use and kept. Each run's
configuration key (analysis.schema.config_keys) is made once, for the study's table (`keys`), and handed to every
grouping of its runs (the tuning, tiers, thresholds, headline, verdict, claims, report and plots).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from analysis.headline import Headline, choose_headline
from analysis.metrics import comparable_rows
from analysis.schema import config_keys
from analysis.thresholds import ThresholdResult, find_threshold
from analysis.tiers import TierResult, find_tiers
from analysis.tuning import lr_varies, rows_at

AS_RUN, SHARED, BEST = "as run", "shared", "best"


@dataclass
class View:
    """The study's runs at one choice of lr: `rows` is the table (BEST, AS_RUN: each configuration's best lr is
    taken by analysis.tiers.units_of) or its runs at the shared lr (SHARED)."""

    name: str
    rows: pd.DataFrame
    seed: int = 0
    keys: pd.Series | None = None
    """config_keys of the study's table (`rows` is a row subset of it)."""
    _tiers: dict = field(default_factory=dict, repr=False)
    _thresholds: dict = field(default_factory=dict, repr=False)

    def comparable(self, column: str) -> pd.DataFrame:
        """The runs of this view that `column` compares (the module docstring's rule)."""
        return comparable_rows(self.rows, column)

    def tiers(self, column: str) -> TierResult:
        if column not in self._tiers:
            self._tiers[column] = find_tiers(self.comparable(column), column, seed=self.seed, keys=self.keys)
        return self._tiers[column]

    def threshold(self, column: str, axis: str = "d_model") -> ThresholdResult | None:
        """None when the table has no `axis`."""
        if (column, axis) not in self._thresholds:
            rows = self.comparable(column)
            self._thresholds[(column, axis)] = (find_threshold(rows, axis, column, seed=self.seed, keys=self.keys)
                                                if axis in rows else None)
        return self._thresholds[(column, axis)]


@dataclass
class Study:
    table: pd.DataFrame
    headline: Headline
    seed: int = 0
    views: dict = field(default_factory=dict)
    _verdict: object = field(default=None, repr=False)
    _computed: dict = field(default_factory=dict, repr=False)
    keys: pd.Series | None = field(default=None, repr=False)
    """config_keys(table), made once (analyse)."""

    @property
    def score(self) -> str | None:
        """The headline metric (the score every section uses)."""
        return self.headline.column

    @property
    def lr_searched(self) -> bool:
        return bool(self.score) and SHARED in self.views

    def keys_for(self, table: pd.DataFrame) -> pd.Series:
        """config_keys of `table`: the study's own where it is the study's table, else made for it."""
        return self.keys if table is self.table and self.keys is not None else config_keys(table)

    def view(self, name: str = BEST) -> View:
        """BEST (AS_RUN where every configuration ran at one lr, and the other way round) or SHARED."""
        if name in (BEST, AS_RUN):
            return self.views.get(BEST) or self.views[AS_RUN]
        return self.views[name]

    def tiers(self, column: str | None = None) -> TierResult:
        return self.view().tiers(column or self.score)

    def threshold(self, column: str | None = None, axis: str = "d_model") -> ThresholdResult | None:
        return self.view().threshold(column or self.score, axis)

    @property
    def verdict(self):
        if self._verdict is None:
            from analysis.verdict import build_verdict

            self._verdict = build_verdict(self.table, self.headline, keys=self.keys_for(self.table))
        return self._verdict

    def computed(self, key, make):
        """A result made from this study once and kept (make() on first use): what a reader of the study computes
        from it, e.g. analysis.claims.judge's table, so every section quotes one value."""
        if key not in self._computed:
            self._computed[key] = make()
        return self._computed[key]


def analyse(table: pd.DataFrame, score: str | None = None, seed: int = 0, headline: Headline | None = None) -> Study:
    """The study of `table` on `score` (None: the headline metric, analysis.headline). KeyError for an unknown
    score. Nothing is tested until a section asks for it."""
    keys = config_keys(table)
    headline = headline or choose_headline(table, score, keys=keys)
    study = Study(table, headline, seed, keys=keys)
    column = headline.column
    if column and lr_varies(comparable_rows(table, column), column, keys):
        study.views[BEST] = View(BEST, table, seed, keys)
        done = comparable_rows(table, column)
        study.views[SHARED] = View(SHARED, rows_at(done, column, "shared", keys=keys), seed, keys)
    else:
        study.views[AS_RUN] = View(AS_RUN, table, seed, keys)
    return study
