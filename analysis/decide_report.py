"""The report's "Rankings across scale" section for a ladder sweep (hydra.sweeper.ladder): decision accuracy per proxy
and rung against the top rung, the noise ceiling, the cheapest rung at 0.8, the held-out forecast of the top rung,
and the two figures (analysis.decide_plots), drawn into the report's figures folder."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import document as doc
from analysis.decide import DecideError, decide, default_proxies, is_ladder, ladder_config, ladder_table
from analysis.decide import markdown as decide_markdown

LEVEL = 0.8
RUNG = "param_budget"


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in text.split("\n\n") if p.strip()]


def ladder_blocks(table: pd.DataFrame, figures: Path, draws: int = 1000) -> list:
    """The section's blocks ([] when the table is not a ladder), its figures written into `figures`."""
    if not is_ladder(table):
        return []
    from analysis.decide_plots import accuracy_plot, rank_flow
    from analysis.forecast import ForecastError, held_out
    from analysis.forecast import markdown as forecast_markdown
    from analysis.plots import save

    proxies = default_proxies(table)
    table, config = ladder_config(table)
    try:
        result = decide(table, config, RUNG, proxies, draws=draws)
        ladder = ladder_table(table, config, RUNG, result.truth)
    except DecideError as err:
        return [f"Decision accuracy: not computed ({err})."]
    blocks: list = [f"The sweep is a ladder: each configuration at {table[RUNG].nunique()} parameter budgets. How often "
                    f"two configurations are ordered by a proxy at a lower rung as by {result.truth} at the top rung "
                    f"(decision accuracy, DataDecide's); `slm-decide` prints the same (docs/decisions.md)."]
    blocks.append(pd.DataFrame([{"proxy": r.proxy, "rung": r.rung, "% of top compute": None if r.share is None
                                 else round(100 * r.share, 3), "configurations": r.configurations,
                                 "decision accuracy": r.accuracy,
                                 "95% interval": "-" if r.low is None else f"{r.low:.3f}-{r.high:.3f}",
                                 "SNR": r.snr} for r in result.rows]))
    blocks.append(_paragraphs(decide_markdown(result, LEVEL))[-1])  # the ceilings, the cheapest rungs, the notes
    try:
        check = held_out(ladder, draws=draws)
    except ForecastError as err:
        blocks.append(f"Held-out check of the top rung: not made ({err}).")
    else:
        text = _paragraphs(forecast_markdown(check))
        blocks.append(text[0])
        blocks.append(pd.DataFrame([{"configuration": c.config, "predicted": c.predicted, "observed": c.observed,
                                     "error": c.error, "relative": c.relative} for c in check.checks]))
        blocks += [t for t in text[1:] if not t.startswith("|")]
    shares = {r.rung: r.share for r in result.rows if r.proxy == result.truth} | {result.target: 1.0}
    for name, title, fig in (("decision_accuracy", "Decision accuracy against compute", accuracy_plot(result, LEVEL)),
                             ("rank_flow", "Rank of each configuration at each rung", rank_flow(ladder, RUNG, shares))):
        save(fig, figures, name)
        blocks.append(doc.Figure(title, f"{figures.name}/{name}", ""))
    return blocks
