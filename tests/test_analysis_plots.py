"""Each of the plots renders from a small table (PNG and SVG written, the expected axis labels) and draws the
table's numbers (read back from the matplotlib artists: every run's point where it belongs, the means, ranks and
frontiers computed here by hand), and degrades to a clear fallback when the table lacks what it needs."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from analysis import collect
from analysis.plot_style import choose_score
from analysis.plots import FILE_NAMES, KINDS, TITLES, draw, draw_all
from analysis.plots.tiers import plot_tiers
from tests.test_analysis_collect import make_record, write

GRID = [(4, 768), (12, 512), (16, 448), (24, 384), (32, 384), (48, 320), (64, 256)]


def study_runs(root, with_scores=True, with_throughput=True):
    """Fabricated runs shaped like the study's depth/width grid: two families, two seeds of one point, a failed
    and a running job. lm-eval scores (made up, for tests only) put d_model >= 512 in a higher tier."""
    rng = np.random.default_rng(0)
    for family, offset in (("gpt2", 0.0), ("llama3", 0.01)):
        for n_layers, d_model in GRID:
            for seed in (0, 1) if (n_layers, d_model) == (12, 512) else (0,):
                top = d_model >= 512
                scores = None
                if with_scores:
                    scores = {"hellaswag": (0.30 + 0.05 * top + offset + 0.002 * rng.standard_normal(), 0.004),
                              "piqa": (0.55 + 0.04 * top + offset + 0.003 * rng.standard_normal(), 0.011),
                              "slm_shakespeare_ppl": (4.5 - 0.3 * top + 0.01 * rng.standard_normal(), None)}
                record = make_record(family=family, n_layers=n_layers, d_model=d_model, seed=seed,
                                     tokens=2e6 * (1 + n_layers / 64), val_nll=3.2 - 0.1 * top - 0.001 * n_layers,
                                     scores=scores, throughput=4000 / n_layers if with_throughput else None)
                write(root / family / f"L{n_layers}_d{d_model}_s{seed}", record)
    write(root / "gpt2" / "L8_d33", make_record("failed", n_layers=8, d_model=33, error="ValueError: bad width"))
    write(root / "gpt2" / "L8_d64", make_record("running", n_layers=8, d_model=64))
    return root


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return collect(study_runs(tmp_path_factory.mktemp("runs")))


def svg_text(path) -> str:
    root = ET.parse(path).getroot()
    return " ".join(t.strip() for t in root.itertext() if t.strip())


EXPECTED = {  # words that must appear in the plot's axis labels
    "tiers": ["offline suite: mean score", "configuration"],
    "threshold": ["hidden size d_model (channels)", "higher is better"],
    "depth": ["depth (layers)", "hellaswag", "piqa"],
    "throughput": ["decode speed (tokens/s)", "batch 1 on CPU", "other jobs may have shared the machine"],
    "pareto": ["training compute (FLOPs)", "validation NLL (nats/token)"],
    "heatmap": ["configuration", "hellaswag"],
    "lr": ["peak learning rate (train.lr)", "best lr"],
}


def with_lr_search(table: pd.DataFrame) -> pd.DataFrame:
    """The table plus each completed run again at twice its lr, a little worse (an lr axis per configuration)."""
    extra = table[table["status"] == "completed"].copy()
    extra["lr"] = extra["lr"] * 2
    for column in [c for c in extra.columns if c.startswith(("score_", "avg_"))]:
        extra[column] = extra[column] - 0.01
    extra["val_nll"] = extra["val_nll"] + 0.05
    extra["run"] = extra["run"] + "_lr2"
    return pd.concat([table, extra], ignore_index=True)


@pytest.mark.parametrize("kind", KINDS)
def test_each_plot_renders(table, tmp_path, kind):
    fig, paths = draw(kind, with_lr_search(table) if kind == "lr" else table, tmp_path)
    assert [p.name for p in paths] == [f"{FILE_NAMES[kind]}.png", f"{FILE_NAMES[kind]}.svg"]
    assert all(p.stat().st_size > 2000 for p in paths)
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not hasattr(fig, "slm_placeholder")
    labels = " ".join(ax.get_xlabel() + " " + ax.get_ylabel() + " " + ax.get_title() for ax in fig.axes)
    labels += " " + " ".join(t.get_text() for ax in fig.axes for t in ax.get_xticklabels())
    text = svg_text(paths[1])
    for word in EXPECTED[kind]:
        assert word in labels or word in text, f"{kind}: {word!r} not in {labels!r}"
    for ax in fig.axes:
        if ax.get_xlabel():
            assert ax.get_xlabel() in text  # SVG keeps text as text


SCORE = "avg_offline"  # the score the plots choose for this table (asserted below)
SHOWN = ["score_hellaswag", "score_piqa", "score_slm_shakespeare_bpb", "avg_offline"]  # the heatmap's columns


def completed(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["status"] == "completed"]


def drawn_points(ax) -> np.ndarray:
    """Every scatter point of the axes, (x, y) rows in sorted order."""
    from matplotlib.collections import PathCollection

    points = [tuple(map(float, p)) for c in ax.collections if isinstance(c, PathCollection) for p in c.get_offsets()]
    return np.array(sorted(points))


def table_points(rows: pd.DataFrame, x: str, y: str) -> np.ndarray:
    return np.array(sorted(zip(rows[x].astype(float), rows[y].astype(float))))


def label_of(family, n_layers, d_model) -> str:
    return f"{family} L{n_layers} d{d_model}"


def configuration_means(rows: pd.DataFrame, column: str) -> dict[str, float]:
    """{configuration label: mean of `column` over its seeds}."""
    means = rows.groupby(["family", "n_layers", "d_model"])[column].mean()
    return {label_of(*key): float(v) for key, v in means.items()}


def non_dominated(points: np.ndarray) -> np.ndarray:
    """The points no other point beats on both axes (less x and less y, one strictly): a Pareto frontier."""
    keep = [p for p in points if not any(q[0] <= p[0] and q[1] <= p[1] and (q != p).any() for q in points)]
    return np.array(sorted(map(tuple, keep)))


def check_tiers(fig, table):
    ax = fig.axes[0]
    line = ax.containers[0].lines[0]  # the errorbar's points: x the configuration's score, y its row
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert dict(zip(labels, line.get_xdata())) == pytest.approx(configuration_means(completed(table), SCORE))
    assert list(line.get_ydata()) == list(range(len(labels)))
    assert (np.diff(line.get_xdata()) >= 0).all()  # higher is better: the best at the top


def check_threshold(fig, table):
    np.testing.assert_allclose(drawn_points(fig.axes[0]), table_points(completed(table), "d_model", SCORE))


def check_throughput(fig, table):
    np.testing.assert_allclose(drawn_points(fig.axes[0]),
                               table_points(completed(table), "decode_tokens_per_s", SCORE))


def check_pareto(fig, table):
    rows = completed(table)
    points = table_points(rows, "train_flops", "val_nll")
    frontier = non_dominated(points)
    assert len(frontier) < len(points)
    # every run once, and the frontier's runs ringed once more
    expected = np.array(sorted(map(tuple, np.concatenate([points, frontier]))))
    np.testing.assert_allclose(drawn_points(fig.axes[0]), expected)
    np.testing.assert_allclose(table_points(rows.loc[fig.slm_frontier], "train_flops", "val_nll"), frontier)
    best = {}  # each family's best run at each depth, joined in order of depth
    for family, part in rows.groupby("family"):
        part = part.loc[part.groupby("n_layers")["val_nll"].idxmin()].sort_values("n_layers")
        best[family] = list(zip(part["train_flops"].astype(float), part["val_nll"].astype(float)))
    lines = [list(zip(ln.get_xdata(), ln.get_ydata())) for ln in fig.axes[0].get_lines()
             if len(ln.get_xdata()) == len(GRID)]
    np.testing.assert_allclose(np.array(sorted(lines)), np.array(sorted(best.values())))


def check_depth(fig, table):
    rows = completed(table)
    panels = {ax.get_title(): ax for ax in fig.axes}
    for column, title in (("score_hellaswag", "hellaswag"), ("score_piqa", "piqa")):
        ax = panels[title]
        np.testing.assert_allclose(drawn_points(ax), table_points(rows, "n_layers", column))
        for family, part in rows.groupby("family"):  # the line: the family's mean at each depth
            mean = part.groupby("n_layers")[column].mean()
            (line,) = [ln for ln in ax.get_lines() if ln.get_label() == family]
            assert list(line.get_xdata()) == list(mean.index)
            assert list(line.get_ydata()) == pytest.approx(list(mean.values))


def check_heatmap(fig, table):
    ax = fig.axes[0]
    ranks = np.asarray(ax.images[0].get_array(), float)  # (configurations, tasks): 1 best, 0 worst
    labels = [t.get_text() for t in ax.get_yticklabels()]
    headers = [t.get_text() for t in ax.get_xticklabels()]
    assert ranks.shape == (len(labels), len(SHOWN))
    for j, (column, header) in enumerate(zip(SHOWN, headers)):
        means = configuration_means(completed(table), column)
        values = np.array([means[label] for label in labels])
        sign = 1 if "↑" in header else -1  # the header's arrow says which way is better
        assert sign == (-1 if column == "score_slm_shakespeare_bpb" else 1), header
        assert ranks[:, j].max() == 1 and ranks[:, j].min() == 0
        assert (np.sign(np.subtract.outer(ranks[:, j], ranks[:, j]))
                == sign * np.sign(np.subtract.outer(values, values))).all(), header
    order = [configuration_means(completed(table), SCORE)[label] for label in labels]
    assert order == sorted(order, reverse=True)  # rows in order of the chosen score, best first


def check_lr(fig, table):
    rows = completed(with_lr_search(table))
    means = rows.groupby(["family", "n_layers", "d_model", "lr"])[SCORE].mean()
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    stars = sorted((float(ln.get_xdata()[0]), float(ln.get_ydata()[0])) for ln in fig.axes[0].get_lines()
                   if ln.get_marker() == "*")
    best = []
    for (family, n_layers, d_model), curve in means.groupby(level=[0, 1, 2]):
        line = lines[label_of(family, n_layers, d_model)]
        lrs = curve.index.get_level_values("lr")
        assert list(line.get_xdata()) == pytest.approx(list(lrs))
        assert list(line.get_ydata()) == pytest.approx(list(curve.values))
        best.append((float(lrs[curve.argmax()]), float(curve.max())))
    np.testing.assert_allclose(stars, sorted(best))


DATA_CHECKS = {"tiers": check_tiers, "threshold": check_threshold, "throughput": check_throughput,
               "pareto": check_pareto, "depth": check_depth, "heatmap": check_heatmap, "lr": check_lr}


@pytest.mark.parametrize("kind", KINDS)
def test_each_plot_draws_the_table_s_numbers(table, kind):
    assert choose_score(table)[0] == SCORE
    fig, _ = draw(kind, with_lr_search(table) if kind == "lr" else table)
    assert not hasattr(fig, "slm_placeholder")
    DATA_CHECKS[kind](fig, table)


def test_tier_plot_shows_the_split(table):
    fig = plot_tiers(table, "score_hellaswag")
    result = fig.slm_result
    assert result.split and result.k >= 2
    assert fig._suptitle.get_text().startswith(f"hellaswag: {result.k} tiers\n")
    annotations = [t.get_text() for t in fig.axes[0].texts]
    assert any(t.startswith("gap ") for t in annotations)
    assert not any(s in t for t in annotations for s in ("T =", "p =", "p <"))  # statistics: the caption
    assert "T = " in fig.slm_caption and "against one population" in fig.slm_caption
    assert any("tier 1" in t for t in annotations)


def test_threshold_plot_draws_the_line(table):
    fig, _ = draw("threshold", table)
    assert fig.slm_result.found and fig.slm_result.threshold == 512
    assert any("d_model ≥ 512" in t.get_text() for t in fig.axes[0].texts)


def test_without_lm_eval_scores_the_nll_is_used_and_said(tmp_path):
    bare = collect(study_runs(tmp_path / "runs", with_scores=False, with_throughput=False))
    assert choose_score(bare) == ("val_nll", "no lm-eval scores: validation NLL used as the score")
    out = draw_all(bare, tmp_path / "plots")
    assert set(out) == set(KINDS)
    for kind in ("tiers", "threshold", "depth", "heatmap"):
        fig, paths = out[kind]
        assert not hasattr(fig, "slm_placeholder") and all(p.stat().st_size > 0 for p in paths)
        assert "validation NLL" in fig._suptitle.get_text(), kind
    fig, paths = out["throughput"]  # no data for it: not drawn, and said why
    assert "no decode throughput" in fig.slm_placeholder and paths == []
    assert not (tmp_path / "plots" / f"{FILE_NAMES['throughput']}.png").exists()
    assert not hasattr(out["pareto"][0], "slm_placeholder")


def test_nearly_empty_tables_draw_nothing_and_say_why(tmp_path):
    """Only what has data is drawn: a plot without it is not saved (an earlier drawing of it is removed), and
    drawn_line names it with why, in one line."""
    from analysis.plots import drawn_line, skipped

    (tmp_path / "tiers.png").write_bytes(b"an earlier drawing")
    failed_only = pd.DataFrame([{"run": "a", "status": "failed", "error": "x", "family": "gpt2"}])
    drawn = {}
    for kind in KINDS:
        fig, paths = draw(kind, failed_only, tmp_path)
        assert hasattr(fig, "slm_placeholder") and paths == [], kind
        drawn[kind] = (fig, paths)
    assert list(tmp_path.iterdir()) == []
    line = drawn_line(skipped(drawn))
    assert "\n" not in line and line.startswith(f"Figures: 0 of {len(KINDS)} plots drawn; not drawn: ")
    assert all(f"{TITLES[kind].lower()} (" in line for kind in KINDS)


def test_unknown_kind_and_score(table):
    with pytest.raises(ValueError, match="unknown plot kind"):
        draw("violin", table)
    with pytest.raises(KeyError, match="no column"):
        draw("tiers", table, score="score_nope")


def test_throughput_plot_rings_diffusion_runs_and_names_their_sampler(tmp_path):
    from analysis.plots.throughput import plot_throughput

    scores = {"hellaswag": (0.3, 0.004)}
    write(tmp_path / "ar", make_record(family="llama3", scores=scores, throughput=200.0))
    diffusion = make_record(family="dllm", scores=scores, throughput=700.0)
    diffusion["eval"]["throughput"].update(decoder="masked_diffusion", generate_tokens_per_s=650.0, sampler={
        "gen_length": 128, "block_length": 32, "steps": 32, "threshold": None, "remasking": "low_confidence"})
    write(tmp_path / "dllm", diffusion)
    table = collect(tmp_path)
    rows = table.set_index("family")
    assert rows.loc["llama3", "decoder"] == "autoregressive" and rows.loc["dllm", "decoder"] == "masked_diffusion"
    assert rows.loc["dllm", "decode_sampler"] == "blocks of 32, 32 steps, low_confidence"
    assert rows.loc["dllm", "generate_tokens_per_s"] == 650.0
    fig = plot_throughput(table, "score_hellaswag")
    title = fig._suptitle.get_text() + " ".join(t.get_text() for t in fig.texts)
    assert "ringed: masked diffusion" in title and "blocks of 32" in title
    from matplotlib.collections import PathCollection

    scatters = [c for c in fig.axes[0].collections if isinstance(c, PathCollection)]  # error bars: LineCollections
    rings = [c for c in scatters if not len(c.get_facecolors())]
    points = [c for c in scatters if len(c.get_facecolors())]
    assert len(rings) == 1 and [tuple(map(float, p)) for p in rings[0].get_offsets()] == [(700.0, 0.3)]
    assert tuple(map(float, rings[0].get_edgecolors()[0][:3])) == (0.0, 0.0, 0.0)  # a black ring around the dllm
    assert sorted(tuple(map(float, p)) for c in points for p in c.get_offsets()) == [(200.0, 0.3), (700.0, 0.3)]
    assert {tuple(map(float, e[:3])) for c in points for e in c.get_edgecolors()} == {(1.0, 1.0, 1.0)}  # filled:
    # an accuracy is exact even for a diffusion model, so not hollow


@pytest.mark.parametrize("kind", KINDS)
def test_titles_are_short_and_statistics_go_to_the_caption(table, kind):
    """At most a title and two lines of how to read the figure; no p-values or test statistics in it."""
    fig, _ = draw(kind, with_lr_search(table) if kind == "lr" else table)
    title = fig._suptitle.get_text()
    assert title.count("\n") <= 2, title
    for statistic in ("p =", "p <", "T =", "D =", "Bonferroni", "separation"):
        assert statistic not in title, (kind, title)
    if kind in ("tiers", "threshold"):
        assert "p " in fig.slm_caption  # the test behind the figure, for the report's caption


def legend_entries(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for lg in ax.findobj(lambda a: a.__class__.__name__ == "Legend")
            for t in lg.get_texts()]


@pytest.mark.parametrize("kind", ["threshold", "throughput", "pareto"])
def test_points_are_keyed_colour_by_family_marker_by_depth(table, kind):
    from matplotlib.collections import PathCollection

    fig, _ = draw(kind, table)
    entries = legend_entries(fig)
    assert "family (colour)" in entries and "depth (marker)" in entries
    assert {"gpt2", "llama3"} <= set(entries) and {"4", "12", "64"} <= set(entries)
    scatters = [c for c in fig.axes[0].collections if isinstance(c, PathCollection) and len(c.get_offsets())]
    colours = {tuple(np.round(c.get_facecolors()[0][:3], 3)) for c in scatters if len(c.get_facecolors())}
    assert len(colours) >= 2  # one per family
    shapes = {c.get_paths()[0].vertices.round(3).tobytes() for c in scatters}
    assert len(shapes) >= 7  # one marker per depth (4, 12, 16, 24, 32, 48, 64)


def test_the_pareto_plot_labels_every_point_of_a_small_study(tmp_path):
    from tests.test_analysis_verdict import default_study

    study = collect(default_study(tmp_path))
    fig, _ = draw("pareto", study)
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert sorted(labels) == sorted(run_labels_of(study))  # 12 runs: each named where it is
    entries = legend_entries(fig)
    assert "a family's best at each depth" in entries and "hollow: a bound (NELBO)" in entries
    # one line per family through its depths: gpt2's lies above llama3's and llama3_canon's at every depth
    lines = {tuple(np.round(ln.get_color() if isinstance(ln.get_color(), tuple) else
                            __import__("matplotlib.colors").colors.to_rgb(ln.get_color()), 3)): ln.get_ydata()
             for ln in fig.axes[0].get_lines() if len(ln.get_ydata()) == 3}
    assert len(lines) == 3
    ys = sorted(lines.values(), key=lambda y: -float(np.mean(y)))  # gpt2 highest
    assert all(ys[0][i] > ys[1][i] > ys[2][i] for i in range(3))
    dllm = study.index[study["family"] == "dllm"][0]
    assert dllm not in fig.slm_frontier


def run_labels_of(table) -> list[str]:
    from analysis.tiers import run_labels

    return run_labels(table[table["status"] == "completed"]).tolist()


def test_the_throughput_plot_names_a_gpu_and_leaves_the_cpu_caveat_off(tmp_path):
    from analysis.plots.throughput import plot_throughput

    for family, speed in (("gpt2", 900.0), ("llama3", 700.0)):
        record = make_record(family=family, scores={"hellaswag": (0.3, 0.004)}, throughput=speed)
        record["environment"]["device"] = "NVIDIA H100 80GB HBM3"
        record["eval"]["throughput"].update(device="cuda:0", cuda_graph=True, prompt_tokens=128, new_tokens=128,
                                            peak_memory_measure="cuda_max_memory_allocated")
        write(tmp_path / family, record)
    fig = plot_throughput(collect(tmp_path), "score_hellaswag")
    title = fig._suptitle.get_text()
    assert "batch 1 on NVIDIA H100 80GB HBM3; 128-token prompt + 128 new tokens" in title
    assert "autoregressive: greedy with a KV cache, CUDA graph" in title
    assert "other jobs" not in title and "other jobs" not in fig.slm_caption
    assert not fig.slm_conditions.cpu


@pytest.mark.parametrize("loads, said", [
    ((0.02, 0.1), "machine otherwise idle"),
    ((0.02, 1.4), "beside other work (it kept 0.0-1.4 cores busy)"),
    ((0.9, None), "other jobs may have shared the machine"),  # one record without the load: unknown, said so
])
def test_the_throughput_plot_states_the_load_each_cpu_run_was_measured_under(tmp_path, loads, said):
    from analysis.plots.throughput import plot_throughput

    for family, load in zip(("gpt2", "llama3"), loads):
        record = make_record(family=family, scores={"hellaswag": (0.3, 0.004)}, throughput=500.0)
        record["eval"]["throughput"].update(torch_threads=2, **({} if load is None else {"other_cores_busy": load}))
        write(tmp_path / family, record)
    table = collect(tmp_path)
    assert table.set_index("family").loc["gpt2", "decode_other_cores"] == loads[0]
    assert table.set_index("family").loc["gpt2", "decode_threads"] == 2
    assert said in plot_throughput(table, "score_hellaswag")._suptitle.get_text()


def test_other_work_is_the_machine_s_busy_time_less_this_process_s(tmp_path, monkeypatch):
    """/proc/stat's busy jiffies (user, nice, system, irq, softirq, steal; not idle or iowait) over the window,
    less this process's CPU time, per second of wall time. A fake stat file: 300 busy jiffies at 100 Hz in 2 s,
    of which this process used 1 s: 1 core of other work."""
    import os
    import time

    from slm import cpu_busy

    stat = tmp_path / "stat"
    clock = iter([10.0, 12.0])
    own = iter([5.0, 6.0])
    monkeypatch.setattr(cpu_busy.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(cpu_busy, "own_seconds", lambda: next(own))
    monkeypatch.setattr(cpu_busy.os, "sysconf", lambda name: 100)
    stat.write_text("cpu  1000 0 500 90000 4000 0 0 0 0 0\ncpu0 ...\n")
    other = cpu_busy.OtherWork(str(stat))
    with other:
        stat.write_text("cpu  1200 0 600 90100 9000 0 0 0 0 0\n")  # +300 busy; idle and iowait ignored
    assert other.cores == 1.0
    monkeypatch.undo()
    with cpu_busy.OtherWork(str(tmp_path / "none")) as unknown:  # no stat file: unknown, never guessed
        pass
    assert unknown.cores is None and unknown.as_dict()["other_cores_busy"] is None
    if os.path.exists(cpu_busy.STAT):  # the real file parses, and the result is a sane number of cores
        with cpu_busy.OtherWork() as real:
            end = time.perf_counter() + 0.3  # many clock ticks (10 ms each: /proc/stat's resolution)
            while time.perf_counter() < end:
                sum(i * i for i in range(1000))
        assert real.cores is not None and 0 <= real.cores <= cpu_busy.host_cpus()  # the whole machine's CPUs


def test_depth_plot_family_line_is_at_each_configurations_best_lr():
    """With an lr searched, the depth plot's family mean is taken at each configuration's best lr, as the tiers and
    the verdict take it (it averaged every lr: a bad lr dragged the line)."""
    from analysis.plots.depth import plot_depth

    rows = []
    for family in ("gpt2", "llama3"):
        for n_layers in (2, 4, 8):
            for lr, worse in ((1e-3, 0.0), (1e-2, 1.0)):
                rows.append({"status": "completed", "family": family, "n_layers": n_layers, "d_model": 64,
                             "lr": lr, "seed": 0, "val_nll": 3.0 - 0.1 * n_layers / 8 + worse + (family == "gpt2") * 0.05,
                             "run": f"{family}/{n_layers}/{lr}"})
    fig = plot_depth(pd.DataFrame(rows))
    lines = {line.get_label(): line for line in fig.axes[0].get_lines() if not line.get_label().startswith("_")}
    for family in ("gpt2", "llama3"):
        want = [3.0 - 0.1 * n / 8 + (family == "gpt2") * 0.05 for n in (2, 4, 8)]
        assert np.allclose(lines[family].get_ydata(), want), (family, lines[family].get_ydata())


def test_legends_list_only_what_is_drawn_and_the_marker_means_one_axis(table):
    """A family with no drawn point (its only run failed) is not in a legend; a plot whose own axis is the marker's
    (width on the threshold plot, where depth does not vary) draws plain circles, not heads as the marker."""
    import matplotlib.pyplot as plt

    from analysis.plot_style import PointKeys
    from analysis.plots.threshold import plot_threshold

    failed = pd.DataFrame([{**table.iloc[0].to_dict(), "family": "moe", "status": "failed", "run": "moe/x"}])
    grown = pd.concat([table, failed], ignore_index=True)
    fig = plot_tiers(grown, "avg_suite") if "avg_suite" in grown else plot_tiers(grown)
    texts = [t.get_text() for ax in fig.axes for legend in [ax.get_legend()] if legend for t in legend.get_texts()]
    assert "gpt2" in texts and "moe" not in texts, texts
    plt.close(fig)
    one_depth = table.assign(n_layers=12, n_heads=lambda t: pd.to_numeric(t["d_model"], errors="coerce") // 64)
    keys = PointKeys(one_depth, exclude=("d_model",))
    assert PointKeys(one_depth).marker == "d_model" and keys.marker is None and keys.markers == {}
    plt.close(plot_threshold(one_depth))
