"""docs/search.md's tables come from the records `make search` wrote (shipped in docs/search/runs: each run's
result.json, the sweeps' sweep.json, the studies' journals): rebuilt here, they equal the pages beside them."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNS = Path("docs/search/runs")


@pytest.fixture(autouse=True)
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the pages name the shipped directories from the repository's root


def test_the_comparison_table_is_rebuilt_from_the_shipped_records():
    from analysis.search_compare import compare, markdown

    assert markdown(compare(RUNS)) == (ROOT / "docs/search/compare.md").read_text()


def test_the_search_s_own_report_is_rebuilt_from_its_study_and_its_rerun():
    from analysis.search import report

    text = report(RUNS / "search_cpu", RUNS / "search_cpu_top")
    assert text == (ROOT / "docs/search/search_cpu.md").read_text()
    assert "**The search's order holds on 90% of the 10 pairs**" in text


def test_the_simulation_is_rebuilt_from_the_shipped_grid(capsys):
    from analysis.cli import search_sim_main

    search_sim_main([str(RUNS / "halving_cpu_grid")])
    assert capsys.readouterr().out == (ROOT / "docs/search/search_sim.md").read_text()


def test_the_pages_name_every_shipped_study_s_pick_in_the_docs():
    page = (ROOT / "docs/search.md").read_text()
    for line in (ROOT / "docs/search/compare.md").read_text().splitlines():
        if line.startswith("| full grid |"):
            assert line in page  # docs/search.md quotes the table as it was rebuilt
