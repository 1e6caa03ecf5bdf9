"""hydra.sweeper.ladder as a user runs it: the dry run's rungs, a transfer ladder whose upper rung trains at the lower
rung's best lr (recorded, and the same on a second run), the table's lr_rule and curve proxies, and the bad values."""

from __future__ import annotations

import json
import pytest

from tests.test_sweep_grid import records, slm

TINY = ["model=debug", "eval=none", "model.n_layers=1", "model.width_step=16", "train.validation.batches=1",
        "train.logging.interval=2", "train.logging.progress_bar=false"]
MUP = ["model.parametrization.kind=mup", "model.parametrization.base_width=32"]
LADDER = "hydra.sweeper.ladder={rungs:[2e4,4e4],tokens_per_param:0.5,lr:transfer,search_rungs:1}"
SEARCH = "hydra.sweeper.lr_search=[0.5,2]"

pytestmark = pytest.mark.xdist_group("ladder")


def test_dry_run_prints_each_rung_with_its_compute_and_lr_rule(tmp_path):
    out = slm(tmp_path, "-m", "run_group=lad", *TINY, *MUP, LADDER, SEARCH, "hydra.sweeper.dry_run=true")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.strip().startswith(("1 ", "2 "))]
    assert [r[0] for r in rows] == ["1", "2"] and rows[0][3] == "3" and rows[1][3] == "1"  # 3 lrs, then 1 carried
    assert rows[1][6] == "100%" and float(rows[0][6].rstrip("%")) < 50
    assert "carried from rung 1 (20000) once it has run" in out.stdout
    assert not (tmp_path / "runs" / "lad").exists()


def test_transfer_ladder_carries_the_best_lr_up_and_a_second_run_trains_nothing(tmp_path):
    args = ["-m", "run_group=lad", *TINY, *MUP, LADDER, SEARCH]
    out = slm(tmp_path, *args)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sweep lad: ladder: 3 jobs at the 1 searched rung(s) first; 1 more at the rungs above" in out.stdout
    sweep = tmp_path / "runs" / "lad"
    recs = records(sweep)
    ladder = json.loads((sweep / "sweep.json").read_text())["ladder"]
    assert len(recs) == 4 and set(ladder) == set(recs)
    low = {k: r for k, r in recs.items() if ladder[k]["rung_index"] == 0}
    top, = (k for k in recs if ladder[k]["rung_index"] == 1)
    assert {ladder[k]["lr_rule"] for k in low} == {"search"} and ladder[top]["lr_rule"] == "transfer"
    best = min(low, key=lambda k: low[k]["eval"]["val_nll"])  # one seed: the best lr is the lowest loss
    best_lr = low[best]["config"]["train"]["lr"]
    assert recs[top]["config"]["train"]["lr"] == pytest.approx(best_lr)
    assert ladder[top]["lr_from"]["val_nll"] == pytest.approx(low[best]["eval"]["val_nll"])
    assert recs[top]["config"]["model"]["param_budget"] == 4e4
    assert recs[top]["training"]["tokens"] <= 0.5 * 4e4  # tokens_per_param, rounded down to whole steps
    curve = recs[top]["eval"]["val_curve"]
    # every steps // 4 steps (9 steps: 2, 4, 6, 8) and at the end
    assert [p[0] for p in curve] == [2, 4, 6, 8, 9] and curve[-1][1] == pytest.approx(recs[top]["eval"]["val_nll"])

    carried = json.loads((sweep / "sweep.json").read_text())["carried"]
    assert len(carried) == 1
    choice = next(iter(carried.values()))
    assert choice["val_nll"] == pytest.approx(low[best]["eval"]["val_nll"]) and choice["seeds"] == choice["of"] == 1
    again = slm(tmp_path, *args)  # the choice is kept (sweep.json's carried): the carried job is found done
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Training: " not in again.stdout and "trained to step" not in again.stdout
    assert sorted(records(sweep)) == sorted(recs)

    from analysis.collect import collect
    from analysis.decide import is_ladder

    table = collect(sweep)
    assert sorted(table["lr_rule"].dropna()) == ["search"] * 3 + ["transfer"] and is_ladder(table)
    row = table.loc[table["lr_rule"] == "transfer"].iloc[0]
    # the validation nearest 25% of 9 steps is step 2 (0.25 steps off, within 5% of 9); none is within 0.45 of 4.5
    assert row["val_nll_25"] == pytest.approx(curve[0][1]) and row["val_nll_50"] != row["val_nll_50"]


@pytest.mark.parametrize("ladder, extra, says", [
    ("{rungs:[1e5]}", [], "hydra.sweeper.ladder.rungs=[100000.0] is invalid: at least two distinct positive"),
    ("{rungs:[1e4,2e4],lr:transfer}", [], "hydra.sweeper.ladder.lr=transfer carries the lr searched at the lowest "
                                          "rungs: set hydra.sweeper.lr_search"),
    ("{rungs:[2e4,4e4],lr:transfer}", [SEARCH], "which only mup or completep promise; this sweep has "
                                                "model.parametrization.kind=sp"),
    ("{rungs:[2e4,4e4]}", ["train.length.steps=5"], "train.length.steps=5 would override the ladder's token budget"),
    ("{rungs:[2e4,4e4],lr:sometimes}", [], "hydra.sweeper.ladder.lr='sometimes' is invalid: choose one of: search, "
                                           "transfer"),
    ("{rungs:[2e4,4e4],search_rungs:2,lr:transfer}", [SEARCH], "hydra.sweeper.ladder.search_rungs=2 is invalid"),
])
def test_a_bad_ladder_is_one_line_before_anything_runs(tmp_path, ladder, extra, says):
    out = slm(tmp_path, "-m", "run_group=bad", *TINY, *extra, f"hydra.sweeper.ladder={ladder}")
    assert out.returncode != 0 and says in out.stderr, out.stderr[-2000:]
    assert not (tmp_path / "runs" / "bad").exists()


def test_an_upper_rung_the_budget_solver_refuses_is_recorded_failed_after_the_lower_rungs_ran(tmp_path):
    ladder = "hydra.sweeper.ladder={rungs:[2e4,3.3e4],tokens_per_param:0.5,lr:transfer,search_rungs:1}"
    out = slm(tmp_path, "-m", "run_group=lad", *TINY, *MUP, ladder, "hydra.sweeper.lr_search=[2]")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    recs = records(tmp_path / "runs" / "lad")
    assert sorted(r["status"] for r in recs.values()) == ["completed", "completed", "failed"]
    failed, = (r for r in recs.values() if r["status"] == "failed")
    assert "model.param_budget=33000 is out of reach" in failed["error"]
