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
    assert rows[1][7] == "100%" and float(rows[0][7].rstrip("%")) < 50
    assert 50 < float(rows[0][4].rstrip("%")) < 100  # the non-embedding share of the parameters
    assert "carried from rung 1 (20000) once it has run" in out.stdout
    assert not (tmp_path / "runs" / "lad").exists()


def test_seeds_per_rung_train_the_first_seeds_only_at_the_rungs_that_ask_for_fewer(tmp_path):
    ladder = "hydra.sweeper.ladder={rungs:[2e4,4e4],tokens_per_param:0.5,lr:transfer,search_rungs:1,seeds:[2,1]}"
    out = slm(tmp_path, "-m", "run_group=lad", *TINY, *MUP, ladder, SEARCH, "train.seed=0,1",
              "hydra.sweeper.dry_run=true")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.strip().startswith(("1 ", "2 "))]
    assert [(r[0], r[3]) for r in rows] == [("1", "6"), ("2", "1")]  # 2 seeds x 3 lrs, then seed 0 only
    keys = [line.split()[0] for line in out.stdout.splitlines() if "model.param_budget=40000" in line]
    assert len(keys) == 1


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
    ("{rungs:[1e4,2e4],lr:transfer}", [], "hydra.sweeper.ladder.lr='transfer' is invalid: it carries the lr "
                                          "searched at the lowest rungs: set hydra.sweeper.lr_search"),
    ("{rungs:[2e4,4e4],lr:transfer}", [SEARCH], "which only mup or completep promise; this sweep has "
                                                "model.parametrization.kind=sp"),
    ("{rungs:[2e4,4e4]}", ["train.length.steps=5"], "train.length.steps=5 would override the ladder's token budget"),
    ("{rungs:[2e4,4e4],seeds:[2]}", [], "hydra.sweeper.ladder.seeds=[2] is invalid: one seed count per rung "
                                        "(2 rungs), e.g. [5, 5, 5, 3]"),
    ("{rungs:[2e4,4e4],lr:sometimes}", [], "hydra.sweeper.ladder.lr='sometimes' is invalid: choose one of: search, "
                                           "transfer"),
    ("{rungs:[2e4,4e4],search_rungs:2,lr:transfer}", [SEARCH], "hydra.sweeper.ladder.search_rungs=2 is invalid"),
    # below one batch: the ladder, the rung and tokens_per_param, and the least that fits (2048 / 2e4 = 0.1024)
    ("{rungs:[2e4,4e4],tokens_per_param:0.001}", [], "hydra.sweeper.ladder: rung 20000 x tokens_per_param 0.001 = 20 "
     "tokens is less than one batch (train.batch_size 16 x model.context_length 128 = 2048 tokens): tokens_per_param "
     "must be at least 0.103 at this rung, or the rung at least 2.05e+06"),
    ("{rungs:[2e4,4e4],tokens_per_param:0.001,validations:1}", [], "rung 20000 x tokens_per_param 0.001 = 20 tokens"),
    ("{rungs:[2e4,4e4],lr:search}", [], "hydra.sweeper.ladder.lr='search' is invalid: it searches the lr at "
                                        "every rung: set hydra.sweeper.lr_search too (e.g. [0.5, 1, 2, 4]), or use "
                                        "lr: fixed"),
    ("{rungs:[2e4,4e4],lr:fixed}", [SEARCH], "hydra.sweeper.ladder.lr='fixed' is invalid: it trains the point's lr "
                                             "at every rung, but hydra.sweeper.lr_search=[0.5, 1.0, 2.0] is set"),
])
def test_a_bad_ladder_is_one_line_before_anything_runs(tmp_path, ladder, extra, says):
    out = slm(tmp_path, "-m", "run_group=bad", *TINY, *extra, f"hydra.sweeper.ladder={ladder}")
    assert out.returncode == 2 and says in out.stderr, out.stderr[-2000:]
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "runs" / "bad").exists()


def test_an_upper_rung_the_budget_solver_refuses_is_recorded_failed_after_the_lower_rungs_ran(tmp_path):
    ladder = "hydra.sweeper.ladder={rungs:[2e4,3.3e4],tokens_per_param:0.5,lr:transfer,search_rungs:1}"
    out = slm(tmp_path, "-m", "run_group=lad", *TINY, *MUP, ladder, "hydra.sweeper.lr_search=[2]")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    recs = records(tmp_path / "runs" / "lad")
    assert sorted(r["status"] for r in recs.values()) == ["completed", "completed", "failed"]
    failed, = (r for r in recs.values() if r["status"] == "failed")
    assert "model.param_budget=33000 is out of reach" in failed["error"]


def test_a_lowest_rung_with_no_valid_job_is_said_not_priced_at_zero(tmp_path):
    """W3: the solver refuses rung 2e3 (too small for the model): the dry run says so and prices the lowest rung that
    has a job, never "the lowest rung's job 0%"; without an lr_search the rule is fixed, and the dry run says it."""
    out = slm(tmp_path, "-m", "run_group=lad", *TINY, "hydra.sweeper.ladder={rungs:[2e3,2e4,4e4]}",
              "hydra.sweeper.dry_run=true")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "lr rule fixed (the point's lr at every rung: no hydra.sweeper.lr_search)" in out.stdout
    lines = out.stdout.splitlines()
    assert any(line.split()[:2] == ["1", "2e+03"] and line.endswith("(no valid job)") for line in lines)
    last = next(line for line in lines if line.startswith("the rungs below the top cost"))
    assert last.endswith("; the lowest rung has no valid job: the lowest that has one, rung 2 (20000), 25% of a top-rung "
                         "job's") and " 0%" not in last, last


def _row(key: str, params: int, non_embedding: int, flops: float) -> dict:
    return {"key": key, "error": None, "params": params, "non_embedding": non_embedding, "flops": flops,
            "tokens": 5.0 * params}


def test_the_dry_run_says_which_rungs_are_mostly_embedding(capsys):
    """The 70M recipe's lowest rung is 73% embedding: the ladder prints each rung's non-embedding share and a note."""
    from slm.sweeps.ladder import Plan, RungJob
    from slm.sweeps.settings import LadderSettings

    plan = Plan(LadderSettings([8.75e6, 35e6, 70e6], lr="fixed"))
    shares = {8.75e6: 0.27, 35e6: 0.6, 70e6: 0.75}
    owners = {f"k{i}": RungJob(i, rung, (), None, None) for i, rung in enumerate(plan.ladder.rungs)}
    rows = [_row(f"k{i}", int(rung), int(rung * shares[rung]), rung * 1e6) for i, rung in enumerate(plan.ladder.rungs)]
    from slm.sweeps.ladder import print_ladder

    print_ladder(plan, rows, owners, [])
    out = capsys.readouterr().out
    assert [line.split()[4] for line in out.splitlines() if line.split()[:1] in (["1"], ["2"], ["3"])] == \
        ["27%", "60%", "75%"]
    assert "note: mostly embedding at rung 8.75e+06 (73% embedding): there the budget buys vocabulary, not depth or " \
           "width; model.budget_count=non_embedding sizes every rung by its non-embedding parameters" in out


def test_budget_count_non_embedding_solves_the_width_for_the_parameters_less_the_embeddings():
    """model.budget_count=non_embedding (Chinchilla's, OLMo's convention): the solved width's non-embedding count is
    within the tolerance of the budget, where a total budget of the same size is a narrower model."""
    from slm.model.budget import solve_budget
    from slm.model.counting import count

    spec = {"n_layers": 2, "vocab_size": 1024, "context_length": 64, "attention": {"head_dim": 16}}
    body, _ = solve_budget(dict(spec), 2e5, step=16, counted="non_embedding", tolerance=0.03)
    total, _ = solve_budget(dict(spec), 2e5, step=16, counted="total", tolerance=0.03)
    n = count(body)
    assert abs(n.params_non_embedding / 2e5 - 1) <= 0.03 and n.params_total > 1.3 * 2e5  # 1024 x d_model embeddings
    assert abs(count(total).params_total / 2e5 - 1) <= 0.03 and total.d_model < body.d_model
