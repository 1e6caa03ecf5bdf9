"""The loss chosen once (slm.objectives.linear_ce.choose_path, Objective.loss_path): one path object per model and
device from `train.loss`, which every objective calls without asking which it is; auto's chunked path computes small
logits as plain does (PLAIN_BELOW_BYTES) with plain's result; the record names the path that ran; and the training
step is one function (slm.training.step) that slm-train and the benchmarks share."""

from __future__ import annotations

import ast
import inspect

import pytest
import torch

import slm.objectives.base as objectives_base
from slm.model import ModelConfig, Transformer, WindowLinear
from slm.objectives import OBJECTIVES
from slm.objectives import causal_lm, last_token, mdlm
from slm.objectives import linear_ce
from slm.objectives.linear_ce import (PLAIN_BELOW_BYTES, ChunkedPath, LigerPath, LossSettings, PlainPath,
                                      choose_path)
from slm.settings import nested
from tests.test_linear_ce import TINY, close

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def tiny() -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(**nested(TINY)))


@pytest.mark.parametrize("impl, device, liger, want, plain_below, note", [
    ("plain", CPU, False, PlainPath, None, None),
    ("chunked", CPU, False, ChunkedPath, 0, None),
    ("auto", CPU, False, ChunkedPath, PLAIN_BELOW_BYTES, None),
    ("auto", CUDA, False, ChunkedPath, PLAIN_BELOW_BYTES, "liger_kernel not installed"),
    ("auto", CUDA, True, LigerPath, PLAIN_BELOW_BYTES, None),
    ("liger", CUDA, True, LigerPath, PLAIN_BELOW_BYTES, None),
    ("liger", CPU, True, ChunkedPath, PLAIN_BELOW_BYTES, None),  # Liger's kernel runs on CUDA only: as auto
    ("chunked", CUDA, True, ChunkedPath, 0, None),
])
def test_the_path_is_chosen_from_the_settings_and_the_device(monkeypatch, impl, device, liger, want, plain_below,
                                                             note):
    monkeypatch.setattr(linear_ce, "liger_installed", lambda: liger)
    path = choose_path(LossSettings(impl=impl, chunk_tokens=64), tiny(), device)
    assert type(path) is want
    if plain_below is not None:
        assert path.chunk_tokens == 64 and path.plain_below == plain_below and path.note == note


def test_without_settings_or_transformers_head_the_path_is_plain():
    window = WindowLinear(ModelConfig(**nested({"kind": "linear", **TINY, "n_layers": 1})))
    assert type(choose_path(LossSettings(impl="chunked"), window, CPU)) is PlainPath
    assert type(choose_path(None, tiny(), CPU)) is PlainPath  # coordcheck's objective: hooks see the logits


def test_the_path_is_chosen_once_per_model_and_device(monkeypatch):
    calls = []
    real = objectives_base.choose_path
    monkeypatch.setattr(objectives_base, "choose_path", lambda *a: calls.append(a) or real(*a))
    objective = OBJECTIVES.get("causal_lm")(LossSettings())
    model = tiny()
    tokens = torch.randint(0, 61, (2, 17))
    for _ in range(3):
        objective.terms(model, tokens)
        with torch.no_grad():
            objective.nll(model, tokens)
    assert len(calls) == 1 and objective.loss_path(model, CPU) is objective.loss_path(model, "cpu")


@pytest.mark.parametrize("module", [causal_lm, last_token, mdlm])
def test_no_objective_asks_which_path_it_has(module):
    """No string of IMPLS in the code (docstrings aside), no name or attribute about the impl or the settings."""
    tree = ast.parse(inspect.getsource(module))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in docstrings:
            assert node.value not in linear_ce.IMPLS, (module.__name__, node.value)
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        assert "impl" not in name and "loss_settings" not in name and "isinstance" != name, (module.__name__, name)


@pytest.mark.parametrize("objective, extra", [
    ("causal_lm", {"embedding.logit_softcap": 4.0}),
    ("causal_lm", dict(mlp_types=["dense", "moe"], moe=dict(n_experts=4, top_k=2, expert_d_ff=16))),
    ("mdlm", {"attention.causal": False, "embedding.mask_token_id": 60}),
    ("last_token", {"embedding.tie": False, "embedding.head_bias": True}),
    ("causal_lm", {"parametrization.kind": "mup", "parametrization.base_width": 8}),
])
def test_auto_on_small_logits_equals_plain(objective, extra):
    """auto at a 61-token vocabulary computes as plain does (the chunked path's plain_below): the same loss and
    gradients to float rounding, and the same validation sums."""
    cfg = ModelConfig(**nested({**TINY, **extra}))
    tokens = torch.randint(0, 60, (4, 17))
    out = {}
    for impl in ("plain", "auto"):
        torch.manual_seed(0)
        model = Transformer(cfg)
        obj = OBJECTIVES.get(objective)(LossSettings(impl=impl))
        loss = obj.terms(model, tokens, seed=3)["loss"]
        grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
        with torch.no_grad():
            nll = obj.nll(model, tokens, seed=1)
        out[impl] = loss, grads, nll, obj.loss_impl(model, CPU, tuple(tokens.shape))
    assert out["plain"][3] == "plain" and out["auto"][3] == "plain"
    assert close(out["auto"][0], out["plain"][0])
    assert all((a is None and p is None) or close(a, p, 1e-4) for a, p in zip(out["auto"][1], out["plain"][1]))
    assert out["auto"][2][1] == out["plain"][2][1] and close(out["auto"][2][0], out["plain"][2][0])


def test_the_record_names_the_path_the_training_batch_takes(monkeypatch):
    """Objective.loss_impl (bench/gpu.py's `loss_impl`): the rows the loss scores (every position; last_token one a
    window) times the head's rows, against PLAIN_BELOW_BYTES; Liger's notes as before."""
    study = ModelConfig(n_layers=2, d_model=64, attention=dict(head_dim=16), vocab_size=65, context_length=128)
    big = ModelConfig(n_layers=1, d_model=16, attention=dict(head_dim=16), vocab_size=50304, context_length=256)
    auto = LossSettings()
    causal = OBJECTIVES.get("causal_lm")(auto)
    assert causal.loss_impl(Transformer(study), CPU, (32, 129)) == "plain"  # the default study: 1 MB of logits
    assert causal.loss_impl(Transformer(big), CPU, (8, 257)) == "chunked"  # 412 MB
    assert OBJECTIVES.get("last_token")(auto).loss_impl(Transformer(big), CPU, (8, 257)) == "plain"  # 8 rows
    assert OBJECTIVES.get("causal_lm")(LossSettings(impl="chunked")).loss_impl(Transformer(study), CPU,
                                                                                (32, 129)) == "chunked"
    assert OBJECTIVES.get("causal_lm")(LossSettings(impl="plain")).loss_impl(Transformer(big), CPU,
                                                                              (8, 257)) == "plain"
    assert OBJECTIVES.get("causal_lm")(auto).loss_impl(Transformer(big), CUDA, (8, 257)) == \
        "chunked (liger_kernel not installed)"
    monkeypatch.setattr(linear_ce, "liger_installed", lambda: True)
    diffusion = ModelConfig(n_layers=1, d_model=16, attention=dict(head_dim=16, causal=False), vocab_size=50304,
                            context_length=256, embedding=dict(mask_token_id=50303))
    assert OBJECTIVES.get("causal_lm")(auto).loss_impl(Transformer(big), CUDA, (8, 257)) == "liger"
    assert OBJECTIVES.get("mdlm")(auto).loss_impl(Transformer(diffusion), CUDA, (8, 257)) == \
        "chunked (mdlm's row weights: not liger)"


def test_the_chunked_path_takes_over_at_the_threshold():
    """Just below PLAIN_BELOW_BYTES of float32 logits auto computes as plain does; from there on, chunk by chunk (a
    64-row head: rows x 64 x 4 bytes)."""
    path = choose_path(LossSettings(), tiny(), CPU)
    rows = PLAIN_BELOW_BYTES // (64 * 4)
    assert path.ran(rows - 1, 64) == "plain" and path.ran(rows, 64) == "chunked"


def test_the_module_and_the_benches_share_the_step():
    """LanguageModelModule.training_step and the benchmarks' bare loops compute the step's loss with one function
    (slm.training.step.step_loss), and build the objective with the run's train.loss (objective_for)."""
    import bench.gpu
    import bench.loss_step
    import bench.moe_step
    import bench.train_overhead
    import slm.training.module as module
    from slm.training import step

    assert module.step_loss is step.step_loss and module.step_seed is step.step_seed
    assert "step_loss(" in inspect.getsource(module.LanguageModelModule.training_step)
    assert "objective.terms" not in inspect.getsource(module.LanguageModelModule.training_step)
    for bench in (bench.gpu, bench.loss_step, bench.moe_step, bench.train_overhead):
        source = inspect.getsource(bench)
        assert "train_step(" in source and ".backward()" not in source.replace("loss().backward()", ""), bench
        # the objective of the run's settings, train.loss included: objective_for, or the module's own
        assert "objective_for(" in source or "LanguageModelModule(" in source, bench


def test_a_bare_step_is_slm_trains_step(tmp_path, monkeypatch):
    """bench/train_overhead.py's bare loop (slm.training.step.train_step on the run's objective, optimizer, schedule
    and batches) gives the losses slm-train logs for the same job, step by step."""
    import io
    import json

    from omegaconf import OmegaConf

    from bench.train_overhead import bare_loop
    from slm.cli.config import compose_config
    from tests.test_train_talks import train_here

    overrides = ["model=debug", "eval=none", "train.logging.progress_bar=false", "train.validation.batches=1",
                 "train.logging.print_interval=0", "train.length.steps=4", "train.batch_size=4", "train.logging.interval=1",
                 "train.validation.interval=4", "train.checkpoint.interval=4", "train.parallel.accelerator=cpu"]
    record, run = train_here(tmp_path, overrides, io.StringIO())
    assert record["status"] == "completed"
    logged = [json.loads(line)["loss"] for line in (run / "train_log.jsonl").read_text().splitlines()]
    cfg = OmegaConf.to_container(compose_config(overrides), resolve=True)
    monkeypatch.setenv("SLM_CACHE", str(tmp_path.parent / "slm-cache"))  # train_here's
    losses: list[float] = []
    bare_loop(cfg, 4, losses=losses)
    assert losses == logged
