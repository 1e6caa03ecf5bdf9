"""The budget solver's second knob: after the width, the MLP hidden size (mlp.d_ff, or moe.expert_d_ff) is tuned
in steps of model.d_ff_step so that every job of a budgeted sweep lands within model.budget_tolerance."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from slm.model import ConfigError, build_model, config_from_spec, count
from slm.model.budget import KNOB_RANGE, SOLVER_KEYS, budget_fit, budget_knob
from slm.settings import nested
from tests.conftest import compose_model_node
from tests.shipped import shipped_sweeps

TINY = ("model.vocab_size=65", "model.context_length=128", "model.attention.head_dim=16", "model.width_step=16")
FAMILIES = {  # cpu_default's points (LLaMA-style families with 2 KV heads; the MoE sized by its active count)
    "gpt2": ("model=gpt2",),
    "llama3": ("model=llama3", "model.attention.n_kv_heads=2"),
    "lfm2": ("model=lfm2", "model.attention.n_kv_heads=2"),
    "moe": ("model=moe", "model.attention.n_kv_heads=2", "model.moe.n_experts=8", "model.moe.expert_d_ff=160",
            "model.budget_count=active"),
}


def spec(family: str, layers: int, *more: str) -> dict:
    """The family at `layers`, TINY unless `more` sets the same field (a setting is given once)."""
    given = {m.split("=")[0] for m in more}
    return compose_model_node(*FAMILIES[family], *[t for t in TINY if t.split("=")[0] not in given],
                              f"model.n_layers={layers}", *more)


def family_config(node: dict, width: int):
    """The family's own config at `width` (its MLP rule, no budget)."""
    fields = {k: v for k, v in node.items() if k not in SOLVER_KEYS}
    return config_from_spec(nested({**fields, "d_model": width, "attention.n_heads": None}))


def params(cfg, counted: str) -> int:
    return getattr(count(cfg), f"params_{counted}")


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("layers", [3, 4, 8])  # lfm2 needs its unit of 3
def test_the_second_knob_lands_within_the_default_tolerance(family, layers):
    node = spec(family, layers, "model.param_budget=5e5")
    counted = node["budget_count"]
    cfg = config_from_spec(node)
    fit = budget_fit(cfg)
    assert SOLVER_KEYS["budget_tolerance"] == node["budget_tolerance"] == 0.03
    assert abs(params(cfg, counted) / 5e5 - 1) <= 0.03
    knob = "moe.expert_d_ff" if family == "moe" else "mlp.d_ff"
    value = lambda c: c.moe.expert_d_ff if family == "moe" else c.mlp.d_ff  # noqa: E731
    assert fit.knob == knob and fit.d_model == cfg.d_model and fit.value == value(cfg)
    own = value(family_config(node, cfg.d_model))  # the family's rule (or set value) at that width
    assert fit.family_value == own and KNOB_RANGE[0] <= fit.value / own <= KNOB_RANGE[1]
    assert fit.value == own or fit.value % node["d_ff_step"] == 0
    assert (cfg.attention.head_dim, cfg.attention.n_heads * cfg.attention.head_dim) == (16, cfg.d_model)  # heads still follow the width
    # the width is the one the width-only solver picks: the MLP absorbs what is left
    width_only = config_from_spec({**node, "d_ff_step": None, "budget_tolerance": None})
    assert width_only.d_model == cfg.d_model and budget_knob(width_only) == "d_model"
    assert abs(params(cfg, counted) - 5e5) <= abs(params(width_only, counted) - 5e5)
    # no other multiple of d_ff_step in range at this width is closer
    for value in (fit.value - node["d_ff_step"], fit.value + node["d_ff_step"]):
        if KNOB_RANGE[0] * own <= value <= KNOB_RANGE[1] * own:
            fields = {k: v for k, v in node.items() if k not in SOLVER_KEYS}
            fields = {**fields, "d_model": cfg.d_model, "attention.n_heads": None, f"{knob}": value}
            other = config_from_spec(nested(fields))
            assert abs(params(cfg, counted) - 5e5) <= abs(params(other, counted) - 5e5)


def test_what_moved_is_said(capsys):
    cfg = config_from_spec(spec("lfm2", 4, "model.param_budget=5e5"))
    fit = budget_fit(cfg)
    assert fit.family_value == 320 and fit.value != 320  # 3 x 96 rounded up to 64, then tuned
    assert budget_knob(cfg) == fit.moved == f"d_model, mlp.d_ff 320→{fit.value}"
    assert config_from_spec(spec("lfm2", 4)).__dict__.get("_budget_fit") is None  # d_model as given
    assert budget_knob(config_from_spec(spec("lfm2", 4))) is None


@pytest.mark.parametrize("family, width", [("llama3", 96), ("gpt2", 128), ("moe", 96)])
def test_a_spec_already_on_budget_keeps_the_family_mlp(family, width):
    node = spec(family, 4)
    counted = node["budget_count"]
    own = family_config(node, width)
    exact = params(own, counted)
    for budget in (exact, exact * 1.001):  # on it, and off it by less than half a d_ff_step's worth
        cfg = config_from_spec({**node, "param_budget": budget})
        assert cfg == own and budget_knob(cfg) == "d_model"


def test_counts_match_the_built_model():
    for family, layers in (("lfm2", 4), ("moe", 2), ("llama3", 8)):
        node = spec(family, layers, "model.param_budget=5e5")
        cfg = config_from_spec(node)
        model = build_model(cfg)
        assert budget_knob(cfg) != "d_model"  # the MLP was tuned
        assert sum(p.numel() for p in model.parameters()) == count(cfg).params_total
    moe = config_from_spec(spec("moe", 2, "model.param_budget=5e5"))
    experts = build_model(moe).blocks[0].mlp
    assert experts is not None and count(moe).params_active < count(moe).params_total


def test_other_widths_when_the_mlp_alone_cannot_land():
    """Widths in steps of 64: at this budget the closest with LLaMA's MLP (64) would need its MLP beyond 2x; 128
    lands with it near half, within the range."""
    node = spec("llama3", 4, "model.param_budget=480560", "model.width_step=64")
    width_only = config_from_spec({**node, "d_ff_step": None, "budget_tolerance": None})
    cfg = config_from_spec(node)
    assert width_only.d_model == 64 and cfg.d_model == 128
    assert abs(count(cfg).params_total / 480560 - 1) <= 0.03
    assert budget_fit(cfg).family_value == 384 and budget_fit(cfg).value >= 192


def test_d_ff_step_null_is_the_width_alone():
    node = spec("llama3", 4, "model.param_budget=5e5", "model.d_ff_step=null", "model.budget_tolerance=0.25")
    cfg = config_from_spec(node)
    assert (cfg.d_model, cfg.mlp.d_ff) == (96, 256) and count(cfg).params_total == 400_320  # -19.9%: the width alone
    with pytest.raises(ConfigError, match=r"^model.param_budget=500000 is out of reach: the closest width, "
                                          r"d_model=96 \(the MLP size is not tuned: model.d_ff_step=null\), has "
                                          r"400,320 total parameters \(-19.9%; allowed: ±3%"):
        config_from_spec({**node, "budget_tolerance": 0.03})


def test_out_of_reach_names_the_closest_config():
    with pytest.raises(ConfigError, match=r"^model.param_budget=200000 is out of reach: the closest config, "
                                          r"d_model=64 with mlp.d_ff=\d+ \(the family's 192 at that width, moved within "
                                          r"0.5x-2x of it\), has [\d,]+ total parameters \([-+]\d+\.\d%; allowed: ±3%, "
                                          r"model.budget_tolerance\); d_model=64 is the narrowest multiple of "
                                          r"model.width_step=64; model.width_step=32 fits \(d_model=32, .*\), or change "
                                          r"n_layers or the budget$"):
        config_from_spec(spec("llama3", 8, "model.param_budget=2e5", "model.width_step=64"))


def test_a_network_without_an_mlp_says_so():
    node = compose_model_node("model=ladder_linear")
    assert config_from_spec({**node, "param_budget": 1.07e6}).d_model == 128  # the width alone lands
    with pytest.raises(ConfigError, match=r"^model.param_budget=1e\+06 is out of reach: the closest width, "
                                          r"d_model=128 \(kind='linear' has no MLP hidden size to tune as a second "
                                          r"knob\), has 1,073,345 total parameters \(\+7.3%"):
        config_from_spec({**node, "param_budget": 1e6})


@pytest.mark.parametrize("value", [0, -8, 2.5, True, "8"])
def test_bad_d_ff_step(value):
    with pytest.raises(ConfigError, match=rf"^model.d_ff_step={value!r} is invalid: a positive integer"):
        config_from_spec(spec("gpt2", 2, "model.param_budget=5e5") | {"d_ff_step": value})


ROOT = Path(__file__).resolve().parents[1]


def optuna_or_study(path: Path) -> bool:
    """An Optuna sweep file (its jobs are the sampler's, not points: tests/test_optuna_space.py checks its corners) or
    a grid over a study's best trials (${slm_top_trials:...}: its dry run is checked there)."""
    text = path.read_text()
    return "n_trials:" in text or "slm_top_trials" in text


BUDGETED = sorted(p.stem for p in shipped_sweeps() if "param_budget:" in p.read_text() and not optuna_or_study(p))


def _points(sweep: str) -> list[list[str]]:
    """The model overrides of every job of `sweep` (its points crossed with its model.* params, and with a ladder's
    rungs: hydra.sweeper.ladder)."""
    sweeper = OmegaConf.load(ROOT / "sweeps" / f"{sweep}.yaml").hydra.sweeper
    points = [list(point) for point in sweeper.get("points") or [[]]]
    for name, values in (sweeper.get("params") or {}).items():
        if name.startswith("model."):
            points = [[*point, f"{name}={value}"] for point in points for value in str(values).split(",")]
    rungs = (sweeper.get("ladder") or {}).get("rungs") or []
    return [[*point, f"model.param_budget={rung:g}"] for point in points for rung in rungs] if rungs else points


@pytest.mark.parametrize("sweep", BUDGETED)
def test_every_shipped_budgeted_sweep_lands_within_the_default(sweep):
    assert {"cpu_default", "depth_width_budget"} <= set(BUDGETED)
    check_lands(sweep, _points(sweep))


def check_lands(sweep: str, points: list[list[str]]) -> None:
    """Each point of `sweep` solves within the default budget tolerance, as the dry run counts it: the vocabulary from
    the tokenizer (fitted on the local data for char)."""
    from slm.sweeps.plan import _vocab
    from slm.cli.config import compose_config
    from slm.objectives import tokenizer_node_for

    vocabs = {}
    for point in points:
        cfg = compose_config([f"sweep={sweep}", *point])
        node, tokenizer, data = (OmegaConf.to_container(cfg[k], resolve=True) for k in ("model", "tokenizer", "data"))
        objective = cfg.train.get("objective", "causal_lm")
        if objective not in vocabs:
            vocabs[objective] = _vocab(tokenizer_node_for(objective, tokenizer), data)
        vocab = vocabs[objective]
        assert node["param_budget"] and node["budget_tolerance"] == SOLVER_KEYS["budget_tolerance"]
        solved = config_from_spec({**node, **({"vocab_size": vocab} if vocab else {})})  # raises if out of reach
        error = params(solved, node["budget_count"]) / float(node["param_budget"]) - 1
        assert abs(error) <= node["budget_tolerance"], (point, error)


def test_slm_params_and_the_dry_run_show_the_knob(tmp_path, monkeypatch, capsys):
    from slm.sweeps.jobs import Job
    from slm.sweeps.plan import print_plan
    from slm.cli.config import compose_config
    from slm.cli.params import run
    from tests.test_plan_calibration import ESTIMATE

    run(["model=llama3", "model.n_layers=4", "model.param_budget=30e6", "model.attention.head_dim=32", "model.attention.n_kv_heads=2",
         "--json"])
    report = json.loads(capsys.readouterr().out)
    fit = report["budget_fit"]
    assert fit["knob"] == "mlp.d_ff" and fit["moved"] == f"d_model, mlp.d_ff {fit['family_value']}→{report['mlp']['d_ff']}"
    assert abs(report["budget_error"]) <= 0.03
    monkeypatch.setenv("SLM_RUNS", str(tmp_path / "runs"))
    jobs = [Job([name], tmp_path / "plan" / name, compose_config([*overrides, "tokenizer=gpt2", "train.length.tokens=1e6"]))
            for name, overrides in (("solved", ["model=gpt2", "model.n_layers=4", "model.param_budget=30e6"]),
                                    ("given", ["model=gpt2", "model.n_layers=2", "model.d_model=128"]))]
    rows = {r["key"]: r for r in print_plan("t", tmp_path / "plan", jobs, ESTIMATE)}
    out = capsys.readouterr().out
    d_model = rows["solved"]["d_model"]
    assert re.fullmatch(rf"d_model, mlp.d_ff {4 * d_model}→\d+", rows["solved"]["budget_knob"])  # GPT-2's 4 d, tuned
    assert rows["given"]["budget_knob"] is None
    assert "budget knob" in out.splitlines()[1] and rows["solved"]["budget_knob"] in out
    assert "budget knob: d_model solved with the family's MLP, then the MLP hidden size" in out


def test_the_report_column():
    from analysis.collect import row_from_record
    from tests.test_analysis_collect import make_record

    record = make_record()
    record["model"].update(param_budget=5e5, budget_knob="d_model, d_ff 256→344")
    record["config"]["model"].update(param_budget=5e5, budget_tolerance=0.03)
    row = row_from_record(record, "runs/g/a")
    assert row["budget_knob"] == "d_model, d_ff 256→344" and row["budget_tolerance"] == 0.03
    old = make_record()  # a record without budget_knob or budget_tolerance: the width alone, within 0.25
    old["model"]["param_budget"] = old["config"]["model"]["param_budget"] = 5e5
    row = row_from_record(old, "runs/g/b")
    assert row["budget_knob"] == "d_model" and row["budget_tolerance"] == 0.25
    assert row_from_record(make_record(), "runs/g/c").get("budget_knob") is None  # no budget


def test_a_spec_invalid_at_every_width_says_why():
    with pytest.raises(ConfigError, match=r"^model.layer_types=\['conv', 'conv', 'attn'\] is invalid: has 3 entries "
                                          r"for n_layers=2"):
        config_from_spec(spec("lfm2", 2, "model.param_budget=5e5", "model.width_step=512"))
