"""Traps of a first hour with slm (issue 39 §3): slm-params counts what slm-train trains (the tokenizer's vocabulary,
a mask token, padding); slm-plan takes a model size and a token count; the budget solver names the setting that
keeps a budget out of reach; slm-generate says what it can do with prompt characters its tokenizer lacks."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from slm.model import ConfigError, config_from_spec, count
from tests.conftest import compose_model_node

TINY_TRAIN = ["eval=none", "train.length.steps=1", "train.batch_size=2", "train.validation.batches=1",
              "train.logging.print_interval=0", "train.logging.progress_bar=false"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SLM_CACHE", str(tmp_path.parent / "slm-cache"))  # fitted vocabularies and shards, shared


def _params_json(capsys, *settings: str) -> dict:
    from slm.cli.params import run

    run([*settings, "--json"])
    return json.loads(capsys.readouterr().out)


# ======================================================================== slm-params counts what slm-train builds
@pytest.mark.parametrize("settings, vocab", [
    ([], "65: the char vocabulary fitted on the shipped slm/data/corpora/tiny_shakespeare/train.txt"),
    (["tokenizer=word", "model.param_budget=2e6", "model.width_step=16", "model.attention.n_kv_heads=1"],
     "22,073: the word vocabulary fitted on"),
    (["model.attention.causal=false", "train.objective=mdlm", "tokenizer.pad_vocab_multiple=8"],
     "72: the char vocabulary fitted on the shipped slm/data/corpora/tiny_shakespeare/train.txt (65 ids) + a mask "
     "token (train.objective=mdlm), padded to a multiple of 8 (tokenizer.pad_vocab_multiple)"),
], ids=["char", "word-budget", "mdlm-padded"])
def test_slm_params_counts_the_model_slm_train_trains(tmp_path, cache, capsys, settings, vocab):
    from slm.cli.config import compose_config
    from slm.runs.job import train_run

    report = _params_json(capsys, *settings)
    assert report["vocabulary"]["from"].startswith(vocab)
    rec = train_run(OmegaConf.to_container(compose_config([*settings, *TINY_TRAIN]), resolve=True), tmp_path / "run")
    assert rec["status"] == "completed", rec.get("error")
    assert report["params_total"] == rec["model"]["params_total"]
    assert report["vocab_size"] == rec["data"]["tokenizer"]["padded_vocab_size"] == report["vocabulary"]["vocab_size"]


def test_the_summary_says_where_the_vocabulary_came_from(cache, capsys):
    from slm.cli.params import run

    run([])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("vocabulary 65") and lines[1].startswith("  vocabulary     65: the char vocabulary fitted")
    assert lines[2] == "  parameters     102,784 (102.8k)"
    gpt2 = _params_json(capsys, "model=gpt2", "tokenizer=gpt2")
    assert gpt2["params_total"] == 124_439_808 and gpt2["vocabulary"]["from"] == "50,257: the gpt2 tokenizer's"


def test_a_model_vocab_size_is_replaced_as_slm_train_replaces_it(cache, capsys):
    report = _params_json(capsys, "model.vocab_size=1000")
    assert report["vocab_size"] == 65 and report["vocabulary"]["replaced"] == 1000
    assert report["vocabulary"]["from"].endswith("; model.vocab_size=1000 is replaced, as slm-train replaces it")
    assert report["params_total"] == _params_json(capsys)["params_total"]


def test_a_vocabulary_fitted_on_hub_data_is_not_downloaded_and_that_is_said(cache, capsys, monkeypatch):
    import slm.data.hub

    monkeypatch.setattr(slm.data.hub, "documents", lambda *a, **k: pytest.fail("slm-params read the hub"))
    report = _params_json(capsys, "data=fineweb_edu")
    assert report["vocab_size"] == 256  # the debug preset's: no char vocabulary to count yet
    assert report["vocabulary"]["from"].startswith("256: model.vocab_size, not the tokenizer's: the char vocabulary "
                                                   "is fitted on hub dataset 'HuggingFaceFW/fineweb-edu'")
    assert "slm-params does not download it" in report["vocabulary"]["from"]
    assert _params_json(capsys, "data=fineweb_edu", "tokenizer=gpt2")["vocab_size"] == 50_257  # needs no data


@pytest.mark.parametrize("argv, line", [
    (["train.objective=foo"], "train.objective=foo: unknown objective 'foo'; choose one of: causal_lm, last_token, mdlm"),
    (["train.objective=mdlm"], "train.objective=mdlm needs a bidirectional model: set model.attention.causal=false"),
    (["model=dllm", "train.objective=causal_lm"], "train.objective=causal_lm contradicts the model preset (dllm)"),
])
def test_slm_params_checks_the_objective_as_slm_train_does(cache, capsys, argv, line):
    from slm.cli.params import run

    with pytest.raises(SystemExit) as exit_:
        run(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith(f"slm-params: error: {line}"), err


@pytest.mark.parametrize("override", ["train.lr=3e-4", "seed=3", "eval=none"])
def test_settings_that_do_not_change_the_counts_are_refused_naming_those_that_do(capsys, override):
    from slm.cli.params import run

    with pytest.raises(SystemExit) as exit_:
        run(["model=debug", override])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith(f"slm-params: error: {override}: ")
    assert "takes the settings that change what slm-train builds (model=..., model.<field>=..., tokenizer=..., " \
           "data=..., train.objective=...)" in err and "does not change the counts" in err


# ====================================================================================== slm-plan takes N and D
def test_slm_plan_takes_params_and_tokens(capsys):
    from analysis.cli import plan_main
    from analysis.fit import optimal, predict
    from analysis.planning import PUBLISHED, parse, plan

    result = plan(parse(["params=40e6", "tokens=800e6"]))
    hoffmann, epoch = result["fits"]
    law = {k: PUBLISHED["hoffmann"][k] for k in ("E", "A", "B", "alpha", "beta")}
    compute = 6 * 40e6 * 800e6
    n_opt, d_opt = optimal(law, compute)
    assert hoffmann["compute"] == pytest.approx(compute) and hoffmann["tokens_per_param"] == pytest.approx(20)
    assert hoffmann["loss_at"] == pytest.approx(1.69 + 406.4 / 40e6 ** 0.34 + 410.7 / 800e6 ** 0.28)
    assert (hoffmann["N_opt"], hoffmann["D_opt"]) == pytest.approx((float(n_opt), float(d_opt)))
    assert hoffmann["N_over_opt"] == pytest.approx(40e6 / n_opt) and hoffmann["D_over_opt"] == pytest.approx(800e6 / d_opt)
    assert hoffmann["loss_excess"] == pytest.approx(hoffmann["loss_at"] - float(predict(law, n_opt, d_opt)))
    assert hoffmann["loss_excess"] > 0 and epoch["loss_excess"] > 0  # off the optimum costs loss under either fit
    assert "hours" not in hoffmann
    on_gpus = plan(parse(["params=40e6", "tokens=800e6", "gpu=h100", "n_gpus=2", "mfu=0.4"]))["fits"][0]
    assert on_gpus["hours"] == pytest.approx(compute / (2 * 0.4 * 989.4e12) / 3600)

    plan_main(["params=40e6", "tokens=800e6"])
    out = capsys.readouterr().out
    assert "N = 4e+07, D = 8e+08 tokens (20 per parameter): compute 1.92e+17 FLOPs, predicted loss" in out
    assert "compute-optimal at that compute: N* = " in out and "this split: N = 1.05 x N*, D = 0.956 x D*" in out


def test_slm_plan_with_params_and_tokens_uses_an_slm_fit_results_convention_and_intervals(tmp_path):
    import numpy as np

    from analysis.fit import FitData, fit, predict
    from analysis.fit_output import write
    from analysis.planning import parse, plan

    law = {"E": 1.5, "A": 300.0, "B": 400.0, "alpha": 0.35, "beta": 0.3}
    N, D = (g.ravel() for g in np.meshgrid(np.logspace(6, 8, 4), np.logspace(8, 10, 4), indexing="ij"))
    L = predict(law, N, D) * np.exp(np.random.default_rng(0).normal(0, 0.01, N.size))
    data = FitData([f"r{i}" for i in range(N.size)], N, D, L, 7.0 * N * D, "params_non_embedding", 7.0, "train_flops")
    write(fit(data, draws=12), tmp_path / "fit")  # 10 draws at least give an interval
    (row,) = plan(parse(["params=3e7", "tokens=1e9", f"fit={tmp_path / 'fit'}"]))["fits"]
    assert row["compute"] == pytest.approx(7.0 * 3e7 * 1e9)  # the fit's FLOPs per parameter-token, not 6
    assert 7.0 * row["N_opt"] * row["D_opt"] == pytest.approx(row["compute"])
    lo, hi = row["loss_excess_interval"]
    assert lo <= row["loss_excess"] <= hi and row["loss_excess"] >= 0


@pytest.mark.parametrize("argv, needle", [
    (["tokens=8e8"], "tokens=8e8 needs params= (the model size N)"),
    (["params=4e7", "tokens=8e8", "flops=1e20"], "params= and tokens= set the compute (C = k N D): leave out flops"),
    (["params=4e7", "tokens=8e8", "gpu_hours=10", "gpu=h100"], "leave out gpu_hours"),
    (["params=4e7", "tokens=8e8", "mfu=0.3"], "mfu turns the compute into hours on GPUs: give gpu= or peak_flops="),
    (["params=4e7", "tokens=0"], "tokens=0: expected a positive number"),
    (["params=4e7", "tokens=8e8", "gpu=b300"], "gpu=b300: unknown"),
])
def test_slm_plan_refuses_a_bad_combination_in_one_line(capsys, argv, needle):
    from analysis.cli import plan_main

    with pytest.raises(SystemExit) as exit_:
        plan_main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("slm-plan: error: ") and needle in err, err


# ======================================================= the budget error names the setting that blocks the fit
def _refusal(*overrides: str) -> str:
    """The solver's refusal for the overrides, a later one of a setting replacing an earlier one."""
    settings = {o.split("=")[0]: o for o in overrides}
    with pytest.raises(ConfigError) as err:
        config_from_spec(compose_model_node(*settings.values()))
    return str(err.value)


TINY_LLAMA = ("model=llama3", "model.n_layers=4", "model.vocab_size=65", "model.attention.head_dim=16", "model.width_step=16")


def test_the_presets_kv_heads_are_named_when_they_refuse_the_widths():
    """llama3's 4 KV heads make d_model a multiple of 16 x 4 = 64: 4e5 falls between 64 and 128."""
    line = _refusal(*TINY_LLAMA, "model.param_budget=4e5")
    assert "the widths between d_model=64 and 128 are refused by the llama3 config's model.attention.n_kv_heads=4 (d_model=80: " \
           "model.attention.n_kv_heads=4 is invalid: must divide n_heads=5)" in line
    assert "model.attention.n_kv_heads=3 fits (d_model=96" in line and "width_step" not in line and "head_dim" not in line
    fixed = config_from_spec(compose_model_node(*TINY_LLAMA, "model.param_budget=4e5", "model.attention.n_kv_heads=3"))
    assert abs(count(fixed).params_total / 4e5 - 1) <= 0.03  # the suggestion lands
    narrow = _refusal(*TINY_LLAMA, "model.param_budget=5e4")
    assert "narrower widths are refused by the llama3 config's model.attention.n_kv_heads=4" in narrow
    assert "model.attention.n_kv_heads=2 fits (d_model=32" in narrow


def test_head_dim_width_step_and_the_embeddings_are_named_when_they_block():
    head = _refusal("model=llama3", "model.n_layers=4", "model.vocab_size=65", "model.param_budget=5e5")
    assert "refused by the llama3 config's model.attention.head_dim=48" in head and "model.attention.head_dim=16 fits" in head
    step = _refusal(*TINY_LLAMA, "model.attention.n_kv_heads=2", "model.n_layers=8", "model.param_budget=2e5",
                    "model.width_step=64")
    assert "d_model=64 is the narrowest multiple of model.width_step=64; model.width_step=32 fits" in step
    vocab = _refusal(*TINY_LLAMA, "model.vocab_size=50304", "model.param_budget=5e5")
    assert "most of it is the embeddings, 3,219,456 parameters (vocabulary 50,304)" in vocab
    assert vocab.endswith("change n_layers or the budget, or use a smaller vocabulary (the tokenizer sets it)")
    none = _refusal(*TINY_LLAMA, "model.attention.n_kv_heads=2000", "model.param_budget=5e5")
    assert none.startswith("model.param_budget=500000 is invalid: every d_model up to 16384 in steps of "
                           "model.width_step=16 is refused by the llama3 config's model.attention.n_kv_heads=2000")


def test_slm_params_names_the_kv_heads_in_one_line(cache, capsys):
    from slm.cli.params import run

    with pytest.raises(SystemExit) as exit_:
        run(["model=llama3", "model.param_budget=4e5", "model.n_layers=4", "model.attention.head_dim=16", "model.width_step=16"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("slm-params: error: model.param_budget=")
    assert "model.attention.n_kv_heads=4" in err and "model.attention.n_kv_heads=3 fits" in err


# ========================================================== slm-generate: what it can do with unknown characters
def test_generate_names_unknown_characters_and_can_drop_them(tmp_path, capsys):
    from slm.cli.generate import run
    from tests.test_cli_verbs import _fails, _run_dir

    run_dir = _run_dir(tmp_path / "run")
    err = _fails(run, [str(run_dir), "café ☃."], capsys, "the prompt has 2 characters outside the char vocabulary",
                 "'é', '☃'", "pass --unknown drop", prog="slm-generate")
    assert "tokenizer.unk" not in err  # a training setting: no use to generate
    dropped = run([str(run_dir), "café ☃.", "-t", "0", "-n", "8", "--unknown", "drop"])
    out = capsys.readouterr()
    assert dropped == run([str(run_dir), "caf .", "-t", "0", "-n", "8"])
    assert "slm-generate: note: dropped the characters outside the vocabulary: 'é', '☃'" in out.err
    _fails(run, [str(run_dir), "x", "--unknown", "keep"], capsys, "--unknown", "'keep'", prog="slm-generate")


def test_generate_drops_unknown_words_of_a_word_tokenizer(tmp_path, capsys):
    from slm.cli.generate import run
    from slm.data.tokenizers import WordTokenizer
    from tests.test_cli_verbs import _fails, _run_dir

    words = WordTokenizer(["All:", "Speak,", "speak.", "\n"], unk=False, eot=False)
    run_dir = _run_dir(tmp_path / "words", tok=words)
    _fails(run, [str(run_dir), "All: shout speak."], capsys, "1 word outside the word vocabulary", "'shout'",
           prog="slm-generate")
    dropped = run([str(run_dir), "All: shout speak.", "-t", "0", "-n", "4", "--unknown", "drop"])
    assert dropped == run([str(run_dir), "All:  speak.", "-t", "0", "-n", "4"])  # the prompt without the word
    assert "dropped the word outside the vocabulary: 'shout'" in capsys.readouterr().err
