"""The report (Markdown + HTML, the figures that have data) and the slm-plot / slm-report entry points."""

from __future__ import annotations

import base64
from html.parser import HTMLParser

import pytest

from analysis import collect, save_results
from analysis.cli import plot_main, report_main
from analysis.plots import FILE_NAMES, KINDS
from analysis.report import build_report
from tests.test_analysis_plots import study_runs


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    table = collect(study_runs(root / "runs"))
    return save_results(table, root / "results.parquet")


class _Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.tables = [], 0

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        self.tables += tag == "table"


DRAWN = [k for k in KINDS if k != "lr"]  # the study ran one lr per configuration: no lr plot


def test_build_report_writes_markdown_html_and_every_figure_with_data(results, tmp_path):
    path = build_report(results, tmp_path / "report")
    assert path == tmp_path / "report" / "report.html"
    md = (tmp_path / "report" / "report.md").read_text()
    for kind in DRAWN:
        for fmt in ("png", "svg"):
            assert (tmp_path / "report" / "figures" / f"{FILE_NAMES[kind]}.{fmt}").stat().st_size > 0
        assert f"figures/{FILE_NAMES[kind]}.png" in md
    # the one without data is not drawn, and one line of the Summary says so and why
    assert not (tmp_path / "report" / "figures" / f"{FILE_NAMES['lr']}.png").exists()
    assert FILE_NAMES["lr"] not in md and "not drawn" not in md.split("## Summary", 1)[0]
    (line,) = [t for t in md.splitlines() if t.startswith("Figures: ")]
    assert line.startswith(f"Figures: {len(DRAWN)} of {len(KINDS)} plots drawn; not drawn: score against learning "
                           "rate (every configuration ran at one lr")
    for heading in ("## Summary", "## Runs that did not complete", "## Tiers", "## Hidden-size threshold",
                    "## Best configuration per family", "## NLL against training FLOPs", "## All runs"):
        assert heading in md
    assert "ValueError: bad width" in md and "stopped" in md       # unfinished runs are listed, not dropped
    assert "2 tiers" in md or "3 tiers" in md
    assert "d_model >= 512 is better" in md
    parser = _Images()
    parser.feed(path.read_text())
    assert len(parser.images) == len(DRAWN) and parser.tables >= 3
    # embedded (the report is whole on its own), not linked: each <img> carries its PNG, in the figures' order
    assert all(src.startswith("data:image/png;base64,") for src in parser.images)
    for src, kind in zip(parser.images, DRAWN):
        png = (tmp_path / "report" / "figures" / f"{FILE_NAMES[kind]}.png").read_bytes()
        assert base64.b64decode(src.split(",", 1)[1]) == png
    assert "href='figures/tiers.svg'" in path.read_text()  # the vector version is linked beside it


def test_cli_plot_and_report(results, tmp_path, capsys):
    plot_main(["--kind", "pareto", str(results), "-o", str(tmp_path / "one")])
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["pareto_nll_flops.png", "pareto_nll_flops.svg"]
    plot_main([str(results), "--kind", "heatmap", "-o", str(tmp_path / "one"), "--format", "png"])
    assert (tmp_path / "one" / "heatmap_tasks.png").is_file()
    report_main([str(results), "-o", str(tmp_path / "rep")])
    out = capsys.readouterr().out
    assert "slm-plot: pareto:" in out and "slm-report: wrote" in out
    assert f"slm-report: Figures: {len(DRAWN)} of {len(KINDS)} plots drawn; not drawn: score against" in out
    plot_main([str(results), "-o", str(tmp_path / "all")])  # every kind: what was drawn, and one line for the rest
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == len(DRAWN) + 1 and lines[-1].startswith(f"slm-plot: Figures: {len(DRAWN)} of {len(KINDS)}")
    assert "warning" not in captured.err
    assert (tmp_path / "rep" / "report.md").is_file()


@pytest.mark.parametrize("main, argv, message", [
    (plot_main, ["{missing}"], "nope.parquet: no such results table or runs directory, here or under"),
    (plot_main, ["{results}", "--score", "score_nope"], "--score score_nope: no such column"),
    (plot_main, ["{results}", "--format", "gif"], "--format gif"),
    (report_main, ["{bad}"], "expected a .parquet or .csv"),
])
def test_cli_bad_input_is_one_line(results, tmp_path, capsys, main, argv, message):
    bad = tmp_path / "results.txt"
    bad.write_text("x")
    argv = [a.format(missing=tmp_path / "nope.parquet", results=results, bad=bad) for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ": error: " in err and message in err


@pytest.fixture(scope="module")
def default_results(tmp_path_factory):
    from tests.test_analysis_verdict import default_study

    root = tmp_path_factory.mktemp("cpu_default")
    return save_results(collect(default_study(root / "runs")), root / "results.parquet")


def test_the_report_opens_with_the_verdict_on_a_metric_that_separates(default_results, tmp_path):
    """The default study: its multiple-choice task is at chance, so the verdict and the figures use the validation
    NLL; the task has its own heading; statistics are captions and an appendix."""
    path = build_report(default_results, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    headings = [line[3:] for line in md.splitlines() if line.startswith("## ")]
    assert headings[:3] == ["Verdict", "Tasks at chance", "Summary"]
    assert headings[-1] == "Appendix: how the verdict was decided"
    verdict = md.split("## Verdict", 1)[1].split("\n## ", 1)[0]
    assert "Headline metric: **validation NLL**" in verdict and "gpt2 is behind" in verdict
    assert "| rank | configuration | validation NLL | 95% interval |" in verdict
    assert "How tiers are decided: appendix." in md and "Tiers: configurations (seeds pooled)" in md.split(
        "## Appendix", 1)[1]
    # figure captions carry the statistics (Markdown under the image, HTML in the figcaption)
    assert "_No threshold: no cut separates val_nll beyond chance" in md
    html_text = path.read_text()
    assert "<figcaption class='note'>Hidden-size threshold: No threshold:" in html_text
    assert "12 of 12 CPU record(s) do not say what else ran on the machine (older records)" in html_text
    # the figures plot the verdict's metric, not the task at chance
    tiers_svg = (tmp_path / "report" / "figures" / "tiers.svg").read_text()
    assert "validation NLL" in tiers_svg and "line endings" not in tiers_svg


def test_an_explicit_score_is_the_reports_headline(default_results, tmp_path, capsys):
    report_main([str(default_results), "-o", str(tmp_path / "rep"), "--score", "score_slm_shakespeare_mc"])
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "**Shakespeare line endings** was chosen by the user (--score)" in md
    assert "| rank | configuration | Shakespeare line endings | 95% interval |" in md
    assert "chosen with --score" in md


def test_markdown_and_html_are_rendered_from_one_list_of_blocks(results):
    """The report is one list of blocks (analysis.report.document); each block renders itself to Markdown and to
    HTML, so the two files hold the same headings, paragraphs, bullets, tables and figures in the same order."""
    import html as html_
    import re

    import pandas as pd

    from analysis import document as doc
    from analysis.report import document, sections

    blocks = [doc.Heading("Title", 1), doc.Note("Generated now by slm-report."), doc.Heading("A <section>"),
              doc.Paragraph.of("**Bold** and `code`\n- first\n- second"), doc.Table(pd.DataFrame({"x": [1.5, 2000]})),
              doc.Figure("Tiers", "figures/tiers", "a caption")]
    md, page = doc.markdown(blocks), doc.html(blocks)
    assert md == ("# Title\n\n_Generated now by slm-report._\n\n\n## A <section>\n\n**Bold** and `code`\n- first\n"
                  "- second\n\n| x |\n| --- |\n| 1.5 |\n| 2,000 |\n\n![Tiers](figures/tiers.png)\n\n_a caption_\n")
    assert ("<title>Title</title>" in page and "<h2>A &lt;section&gt;</h2>" in page
            and "<p><strong>Bold</strong> and <code>code</code></p><ul><li>first</li><li>second</li></ul>" in page
            and "<td>2,000</td>" in page and "<img src='figures/tiers.png' alt='Tiers'>" in page)
    # a whole report: every block of the one list is in both renderings, in order
    from analysis import load_results

    parts = sections(load_results(results), str(results))
    blocks = document("slm results", parts, "T", {"tiers": "the tiers' caption"})
    assert [b.text for b in blocks if isinstance(b, doc.Heading) and b.level == 2] == [h for h, _ in parts]
    md, page = doc.markdown(blocks), doc.html(blocks)
    assert "_the tiers' caption_" in md
    assert re.findall(r"^## (.+)$", md, re.M) == [html_.unescape(h) for h in re.findall(r"<h2>(.+?)</h2>", page)]
    assert md.count("\n| --- |") + md.count("_(none)_") == page.count("<table>") + page.count("<em>(none)</em>")
    assert md.count("![") == page.count("<img ") > 0


def test_runs_that_did_not_complete_say_what_stopped_them_and_pending_jobs_take_one_line(tmp_path):
    """A stopped run's error cell holds the signal and step its record names (it was empty); jobs never started are
    one line, not one tall row each."""
    import json

    from analysis.report import sections
    from tests.test_analysis_collect import make_record, write

    root = tmp_path / "runs" / "g"
    write(root / "model.n_layers=2", make_record(n_layers=2))
    write(root / "model.n_layers=4", make_record(n_layers=4, val_nll=2.9))
    stopped = make_record(status="running", n_layers=8)
    stopped["training"] = {"interrupted": {"step": 8, "signal": "SIGINT", "at": "2026-11-28T00:00:00"}}
    write(root / "model.n_layers=8", stopped)
    jobs = {f"model.n_layers={n}": [f"model.n_layers={n}"] for n in (2, 4, 8, 16, 32)}
    (root / "sweep.json").write_text(json.dumps({"jobs": jobs}))
    (root / "multirun.yaml").write_text("hydra: {}\n")
    table = collect(root)
    row = table[table["run"].str.endswith("n_layers=8")].iloc[0]
    assert row["status"] == "stopped" and row["error"].startswith("SIGINT at step 8: checkpointed")
    (_, blocks), = [s for s in sections(table, "t.parquet") if s[0] == "Runs that did not complete"]
    frame, line = blocks
    assert list(frame["status"]) == ["stopped"] and "SIGINT at step 8" in frame["error"].iloc[0]
    assert line == "2 jobs of the sweep not started yet (`slm-status g` lists them)."
