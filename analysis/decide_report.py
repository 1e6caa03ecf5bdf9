"""A ladder judged once, for slm-decide and for the report's "Rankings across scale" section: decision accuracy per
proxy and rung against the top rung (analysis.decide), the held-out check of the top rung (analysis.forecast), and
the two figures (analysis.decide_plots) drawn where asked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis import document as doc
from analysis.decide import DecideError, DecideResult, decide, default_proxies, is_ladder, ladder_config, ladder_table
from analysis.decide import table_rows
from analysis.decide_decay import TITLE, decay_table
from analysis.decide import markdown as decide_markdown

LEVEL = 0.8
RUNG = "param_budget"


@dataclass
class Judged:
    result: DecideResult
    ladder: pd.DataFrame
    """The runs judged (analysis.decide.ladder_table): what the forecast and the rank flow read."""
    check: object | None
    """The held-out check of the top rung (analysis.forecast.HeldOutResult), None where it cannot be made."""
    why_not: str | None = None
    """Why there is no held-out check."""

    def shares(self) -> dict[float, float]:
        """Each rung's share of the target's compute (the truth's rows; the target itself 1)."""
        r = self.result
        return {row.rung: row.share for row in r.rows if row.proxy == r.truth} | {r.target: 1.0}


def judge(table: pd.DataFrame, config: str | None = None, rung: str = RUNG, proxies=None, target: float | None = None,
          draws: int = 1000, truth: str | None = None, progress=None) -> Judged:
    """Decision accuracy and the held-out check of a ladder's table; DecideError for a table that is not one.
    `config`: the configuration column (default: analysis.decide.ladder_config's choice); `proxies`: default_proxies;
    `progress(label, unit)`: a progress(done, total) callback for each bootstrap."""
    from analysis.forecast import ForecastError, held_out

    table, config = ladder_config(table, config)
    result = decide(table, config, rung, list(proxies or default_proxies(table)), target, draws, truth=truth,
                    progress=progress and progress("decision accuracy:", "seed redraws"))
    ladder = ladder_table(table, config, rung, result.truth)
    if target is not None:
        ladder = ladder[ladder["rung"] <= target]
    try:
        return Judged(result, ladder, held_out(ladder, draws=draws, progress=progress and progress("held-out check:")))
    except ForecastError as err:
        return Judged(result, ladder, None, str(err))


def draw(judged: Judged, out_dir: str | Path, level: float = LEVEL) -> list[Path]:
    """out_dir/decision_accuracy and out_dir/rank_flow (.png and .svg); returns the paths."""
    from analysis.decide_plots import accuracy_plot, rank_flow
    from analysis.plots import save

    return (save(accuracy_plot(judged.result, level), out_dir, "decision_accuracy")
            + save(rank_flow(judged.ladder, judged.result.rung, judged.shares()), out_dir, "rank_flow"))


def held_out_text(judged: Judged) -> str:
    """The held-out check as Markdown, or the line saying why it was not made."""
    from analysis.forecast import markdown

    return markdown(judged.check) if judged.check is not None else \
        f"Held-out check of the top rung: not made ({judged.why_not})\n"


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in text.split("\n\n") if p.strip()]


def ladder_parts(table: pd.DataFrame, figures: Path, draws: int = 1000) -> tuple[list, list]:
    """(the report's Verdict on a ladder, its Rankings across scale section), as blocks; ([], []) when the table is
    not a ladder. The verdict is given at each rung and at the target (analysis.decide_words): a configuration at one
    rung is never ranked against one at another. Numbers are formatted as slm-decide prints them; the figures are
    written into `figures`."""
    from analysis.decide_words import answer, by_rung
    from analysis.forecast import check_rows

    if not is_ladder(table):
        return [], []
    try:
        judged = judge(table, draws=draws)
    except DecideError as err:
        return [], [f"Decision accuracy: not computed ({err})."]
    result = judged.result
    verdict: list = [answer(result, LEVEL, judged.check).rstrip("\n"),
                     "The sweep is a ladder, so the verdict is given per rung and at the target: configurations are "
                     f"compared within a rung ({result.config}, each at its best lr there), never one at a rung "
                     f"against one at another. On {result.truth}:", pd.DataFrame(by_rung(result))]
    blocks: list = [f"The sweep is a ladder: each configuration at {table[RUNG].nunique()} parameter budgets. How often "
                    f"two configurations are ordered by a proxy at a lower rung as by {result.truth} at the top rung "
                    f"(decision accuracy, DataDecide's); `slm-decide` prints the same (docs/decisions.md)."]
    blocks.append(pd.DataFrame(table_rows(result)))
    said = _paragraphs(decide_markdown(result, LEVEL))
    blocks += [p for p in said if p.startswith("- noise ceiling")]  # the ceiling, the cheapest rungs, the notes
    if result.decay:
        blocks += [TITLE, pd.DataFrame(decay_table(result.decay, result.rung))]
    if result.effects:
        from analysis import decide_effects

        blocks += [decide_effects.TITLE, pd.DataFrame(decide_effects.effect_rows(result.effects, result.rung))]
    if result.axes:
        blocks += ["The axes the verdict was checked across (checked, held / checked, changed / not checked):",
                   pd.DataFrame([{"axis": a.name, "state": a.state, "what": a.detail} for a in result.axes])]
    text = _paragraphs(held_out_text(judged))
    blocks.append(text[0])
    if judged.check is not None:
        blocks.append(pd.DataFrame(check_rows(judged.check)))
        blocks += [t for t in text[1:] if not t.startswith("|")]
    draw(judged, figures)
    blocks += [doc.Figure("Decision accuracy against compute", f"{figures.name}/decision_accuracy", ""),
               doc.Figure("Rank of each configuration at each rung", f"{figures.name}/rank_flow", "")]
    return verdict, blocks


def ladder_blocks(table: pd.DataFrame, figures: Path, draws: int = 1000) -> list:
    """The report's Rankings across scale section ([] when the table is not a ladder): ladder_parts' second."""
    return ladder_parts(table, figures, draws)[1]
