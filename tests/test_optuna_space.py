"""The Optuna sweeper's search space across components (slm.sweeps.optuna_space; issue 52 §3): bundles of overrides,
conditional dimensions that exist only under their condition, the grid sampler over a space of choices, the best
trials' points read back for a rerun (${slm_top_trials:...}), and one-line refusals of a malformed space."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from slm.sweeps.optuna_space import Dimension, SearchSpace, grid_sampler
from slm.sweeps.study_files import NoStudy, top_points
from slm.training.trial_link import open_storage
from tests.test_sweep_grid import TINY, slm

SPACE = SearchSpace([
    Dimension("mixer", CategoricalDistribution(["attention", "conv_attn"]), {},
              {"attention": ["model.layer_types=[attn]"], "conv_attn": ["model.layer_types=[conv,attn]"]}),
    Dimension("model.conv.kernel", IntDistribution(2, 4), {"mixer": ["conv_attn"]}),
    Dimension("train.lr", FloatDistribution(1e-3, 3e-2, log=True)),
], fixed=["model=llama3"])


def test_a_conditional_dimension_exists_exactly_where_its_condition_holds():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(20):
        trial = study.ask()
        SPACE.sample(trial)
        p = trial.params
        seen.add(p["mixer"])
        assert ("model.conv.kernel" in p) == (p["mixer"] == "conv_attn") and 1e-3 <= p["train.lr"] <= 3e-2
        assert SPACE.matches(p)
        point = SPACE.point(p, str)
        assert point[0] == ("model.layer_types=[attn]" if p["mixer"] == "attention" else "model.layer_types=[conv,attn]")
        assert SPACE.overrides(p, str) == ["model=llama3", *point]
        study.tell(trial, 1.0)
    assert seen == {"attention", "conv_attn"}
    assert not SPACE.matches({"mixer": "attention", "model.conv.kernel": 3, "train.lr": 0.01})  # kernel not active
    assert not SPACE.matches({"mixer": "conv_attn", "train.lr": 0.01})  # kernel missing
    assert not SPACE.matches({"mixer": "ssm", "train.lr": 0.01})  # not a choice


def test_the_grid_sampler_asks_each_point_of_a_space_of_choices_once():
    space = SearchSpace([Dimension("shape", CategoricalDistribution(["a", "b", "c"]), {}, {"a": [], "b": [], "c": []}),
                         Dimension("train.lr", CategoricalDistribution([1e-3, 4e-3]))])
    study = optuna.create_study(sampler=grid_sampler(space, seed=1))
    points = []
    for _ in range(6):
        trial = study.ask()
        space.sample(trial)
        points.append((trial.params["shape"], trial.params["train.lr"]))
        study.tell(trial, 1.0)
    assert sorted(points) == sorted((s, lr) for s in "abc" for lr in (1e-3, 4e-3))
    with pytest.raises(ValueError, match="conditional"):
        SPACE.grid()
    with pytest.raises(ValueError, match="continuous"):
        SearchSpace([SPACE.dims[2]]).grid()


def _study_with_points(path, values):
    study = optuna.create_study(study_name=path.name, storage=open_storage(str(path / "optuna.journal")))
    for i, value in enumerate(values):
        trial = study.ask()
        trial.set_user_attr("point", [f"train.lr={value}"] if value is not None else [])
        study.tell(trial, value) if value is not None else study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    return study


def test_top_points_are_the_best_complete_trials_best_first(tmp_path):
    _study_with_points(tmp_path, [0.3, None, 0.1, 0.2, 0.1])
    assert top_points(tmp_path, 2) == [["train.lr=0.1"], ["train.lr=0.2"]]  # an equal point once; the pruned one left
    with pytest.raises(NoStudy, match="holds 3 complete trials"):
        top_points(tmp_path, 4)
    with pytest.raises(NoStudy, match="no Optuna study there"):
        top_points(tmp_path / "elsewhere", 1)


def test_a_grid_sweep_reruns_the_top_trials_and_refuses_a_search_with_too_few(tmp_path):
    search = tmp_path / "runs" / "search_cpu"
    search.mkdir(parents=True)
    study = optuna.create_study(study_name="search_cpu", storage=open_storage(str(search / "optuna.journal")))
    for i, lr in enumerate([0.002, 0.004, 0.008, 0.001, 0.016, 0.003]):
        trial = study.ask()
        trial.set_user_attr("point", [f"model.n_layers={1 + i % 2}", f"train.lr={lr}"])
        study.tell(trial, 3.0 - lr)
    out = slm(tmp_path, "-m", "sweep=search_cpu_top", "hydra.sweeper.dry_run=true")
    assert out.returncode == 0, out.stderr[-2000:]
    planned = [line for line in out.stdout.splitlines() if line.startswith("model.")]
    assert len(planned) == 15, out.stdout[-3000:]  # 5 points x 3 seeds
    assert not any("train.lr=0.001," in line for line in planned)  # the 6th best is not among the top 5
    empty = slm(tmp_path / "other", "-m", "sweep=search_cpu_top", "hydra.sweeper.dry_run=true")
    assert empty.returncode == 2 and empty.stderr.count("\n") == 1, empty.stderr
    assert "hydra.sweeper.points=${slm_top_trials:" in empty.stderr and "no Optuna study there" in empty.stderr


def test_the_shipped_searches_land_within_the_budget_at_their_corners():
    """search_cpu_grid's 9 shapes, and search_cpu's heaviest and lightest corners (depth, mixer, Canon, position, MLP):
    the budget solver reaches 2e5 parameters within its tolerance (a trial it could not would be recorded failed)."""
    from omegaconf import OmegaConf

    from tests.test_budget import ROOT, check_lands

    shapes = OmegaConf.load(ROOT / "sweeps" / "search_cpu_grid.yaml").hydra.sweeper.params.shape.choose
    check_lands("search_cpu_grid", [list(v) for v in shapes.values()])
    corners = [(8, "conv,attn", "ABCD", "learned", "gelu"), (8, "attn", "ABCD", "learned", "swiglu"),
               (2, "attn", "", "none", "swiglu"), (2, "conv,attn", "ABCD", "learned", "gelu"),
               (8, "attn", "", "rope", "gelu"), (4, "conv,attn", "AC", "rope", "swiglu")]
    check_lands("search_cpu", [[f"model.n_layers={n}", f"model.layer_types=[{mix}]", f"model.canon.set={canon}",
                                f"model.position.kind={pos}", f"model.mlp.kind={mlp}"]
                               for n, mix, canon, pos, mlp in corners])


@pytest.mark.parametrize("params, needle", [
    (["x={values: 'choice(1,2)', when: {nowhere: 1}}"], "names 'nowhere', which is not a dimension above it"),
    (["a={choose: {p: [], q: []}}", "x={values: 'choice(1,2)', when: {a: r}}"], "a='r' is not one of a's choices"),
    (["x={values: 'choice(1,2)', choose: {a: []}}"], "give a sweep string, {values: <sweep>, when: {...}}"),
    (["x={choose: {a: 'model=llama3'}}"], "x.choose={'a': 'model=llama3'} is invalid"),
    (["a={choose: {p: [], q: []}}"], "the grid sampler needs choice(...) or range(...)"),
])
def test_a_malformed_space_is_one_line_and_exit_2(tmp_path, params, needle):
    extra = ["hydra.sweeper.sampler={name: grid}", "train.lr=interval(0.1,0.2)"] if "grid" in needle else []
    space = [f"+hydra.sweeper.params.{p}" for p in params]
    out = slm(tmp_path, "-m", "hydra/sweeper=optuna", "run_group=bad", *TINY, "hydra.sweeper.params=null", *space, *extra)
    assert out.returncode == 2 and needle in out.stderr and out.stderr.count("\n") == 1, out.stderr[-2000:]
    assert not (tmp_path / "runs" / "bad" / "optuna.journal").exists()  # refused before the study is made


@pytest.mark.parametrize("args, needle", [
    (["sweep=search_cpu_grid", "hydra.sweeper.n_trials=1"], "hydra.sweeper.n_trials is the Optuna sweeper's"),
    (["model=debug", "+hydra.sweeper.pruner={name: median}"], "hydra.sweeper.pruner is the Optuna sweeper's"),
    (["model=debug", "hydra.sweeper.pruner={name: median}"], "no field 'pruner': it is the Optuna sweeper's"),
])
def test_an_optuna_setting_without_the_optuna_sweeper_says_what_to_add(tmp_path, args, needle):
    """A pruner (or an Optuna sweep file) given to the grid sweeper, which cannot prune: one line, exit 2."""
    out = slm(tmp_path, "-m", *args)
    assert out.returncode == 2 and needle in out.stderr and "add hydra/sweeper=optuna" in out.stderr \
        and out.stderr.count("\n") == 1, out.stderr[-2000:]
