"""Optimizers (train.optimizer): adamw unchanged, muon = torch.optim.Muon on the hidden matrices + AdamW on the rest,
lion = the paper's update (Chen et al. 2023, Algorithm 2); each resumes exactly after SIGKILL; bad settings are one
line."""

from __future__ import annotations

import copy

import pytest
import torch

from slm.components.parametrization import roles
from slm.model import ModelConfig, build_model
from slm.settings import nested
from slm.training.config import TrainConfig, TrainConfigError
from slm.training.optim import build_optimizer
from tests.test_train_cli import FAST, _steps, assert_same_run, kill_at_step, record, run_dir, slm_train

TINY = {"n_layers": 2, "d_model": 32, "attention.head_dim": 8, "vocab_size": 50, "context_length": 16,
        "block.bias": True}


def _loss(model, idx):
    logits = model(idx[:, :-1])
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())


def _steps_of(model, optimizer, n=3):
    for step in range(n):
        idx = torch.randint(0, 50, (4, 17), generator=torch.Generator().manual_seed(step))
        optimizer.zero_grad()
        _loss(model, idx).backward()
        optimizer.step()


def test_muon_is_torch_muon_on_the_hidden_matrices_and_adamw_on_the_rest():
    torch.manual_seed(0)
    model = build_model(ModelConfig(**nested(TINY)))
    peer = copy.deepcopy(model)
    cfg = TrainConfig(optimizer="muon", lr=3e-3, optim={"adamw": {"weight_decay": 0.1}, "muon": {"lr": 0.05, "momentum": 0.9}})
    ours = build_optimizer(model, cfg)
    names = {id(p): n for n, p, _ in roles(model)}
    muon_params = {names[id(p)] for g in ours.optimizers[0].param_groups for p in g["params"]}
    assert muon_params == {n for n, p, r in roles(model) if r.kind == "hidden"}  # every 2-D hidden matrix
    assert "tok_emb.weight" not in muon_params and not any("bias" in n or "norm" in n for n in muon_params)
    # the peer: the same split built by hand from torch's own optimizers
    by_name = dict(peer.named_parameters())
    matrices = [by_name[n] for n in names.values() if n in muon_params]
    decayed = [by_name[n] for n in names.values() if n not in muon_params and by_name[n].ndim >= 2
               and n != "tok_emb.weight"]
    rest = [by_name[n] for n in names.values() if n not in muon_params and by_name[n].ndim < 2
            or n == "tok_emb.weight"]
    peers = [torch.optim.Muon(matrices, lr=0.05, weight_decay=0.1, momentum=0.9, adjust_lr_fn="original"),
             torch.optim.AdamW([{"params": decayed, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                               lr=3e-3, betas=(0.9, 0.95), eps=1e-8)]
    _steps_of(model, ours)

    class Both:
        def zero_grad(self):
            for o in peers:
                o.zero_grad()

        def step(self):
            for o in peers:
                o.step()

    _steps_of(peer, Both())
    for (n, p), q in zip(model.named_parameters(), peer.parameters()):
        assert torch.equal(p, q), n
    # its state round-trips through a checkpoint
    again = build_optimizer(model, cfg)
    again.load_state_dict(copy.deepcopy(ours.state_dict()))
    assert again.state_dict()["optimizers"][0]["state"].keys() == ours.state_dict()["optimizers"][0]["state"].keys()


def test_lion_is_the_papers_update():
    torch.manual_seed(0)
    model = build_model(ModelConfig(**nested(TINY)))
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    cfg = TrainConfig(optimizer="lion", lr=1e-3, optim={"adamw": {"weight_decay": 0.5}, "lion": {"betas": [0.8, 0.95]}})
    optimizer = build_optimizer(model, cfg)
    grads, momentum = [], {n: torch.zeros_like(p) for n, p in start.items()}
    expected = dict(start)
    for step in range(3):
        idx = torch.randint(0, 50, (4, 17), generator=torch.Generator().manual_seed(step))
        optimizer.zero_grad()
        _loss(model, idx).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        optimizer.step()
        for n, g in grads.items():  # Algorithm 2: decoupled decay on matrices only (slm's groups), then the sign
            decay = 0.5 if start[n].ndim >= 2 and n != "tok_emb.weight" else 0.0
            update = torch.sign(0.8 * momentum[n] + 0.2 * g)
            expected[n] = expected[n] * (1 - 1e-3 * decay) - 1e-3 * update
            momentum[n] = 0.95 * momentum[n] + 0.05 * g
    for n, p in model.named_parameters():
        torch.testing.assert_close(p, expected[n], rtol=0, atol=1e-7, msg=n)


@pytest.mark.parametrize("fields, key, value", [
    (dict(optimizer="adam"), "train.optimizer", "adam"),
    (dict(optim={"muon": {"lr": -1.0}}), "train.optim.muon.lr", -1.0),
    (dict(optim={"muon": {"momentum": 1.0}}), "train.optim.muon.momentum", 1.0),
    (dict(optim={"muon": {"adjust_lr": "spectral"}}), "train.optim.muon.adjust_lr", "spectral"),
    (dict(optim={"muon": {"learning_rate": 0.1}}), "train.optim.muon.learning_rate", None),
    (dict(optim={"adam": {"lr": 0.1}}), "train.optim.adam", None),
    (dict(optim={"lion": {"betas": [0.9]}}), "train.optim.lion.betas", [0.9]),
    (dict(betas=[0.9, 1.5]), "train.optim.adamw.betas", [0.9, 1.5]),  # the old flat spelling, named as today's
])
def test_bad_optimizer_settings_are_one_line(fields, key, value):
    with pytest.raises(TrainConfigError) as err:
        TrainConfig.from_node(fields)
    assert "\n" not in str(err.value) and (err.value.key, err.value.value) == (key, value)


@pytest.mark.parametrize("setup", [
    ["train.optimizer=muon", "model.parametrization.kind=completep", "model.parametrization.base_width=32"],
    pytest.param(["train.optimizer=lion", "train.lr=3e-4", "model.parametrization.kind=mup", "model.parametrization.base_width=16"],
                 marks=pytest.mark.slow),  # ~25 s each; make test keeps the Combined (Muon + AdamW) one
])
def test_resume_after_sigkill_is_exact_for_each_optimizer(tmp_path, setup):
    args = [*FAST, "model.n_layers=2", "model.context_length=32", "train.batch_size=8", "train.length.steps=20",
            "train.checkpoint.interval=5", "train.validation.interval=10", *setup]
    ref_dir, cut_dir = tmp_path / "ref", tmp_path / "cut"
    done = slm_train(ref_dir, *args)
    assert done.returncode == 0, done.stderr[-2000:]
    cut = kill_at_step(cut_dir, args, 7)
    assert record(cut)["status"] == "running" and 7 <= _steps(cut) < 20
    out = slm_train(cut_dir, *args)
    assert out.returncode == 0, out.stderr[-2000:]
    assert record(cut)["training"]["resumed_from"] == "checkpoints/last.ckpt"
    assert_same_run(run_dir(ref_dir), cut)
    r = record(run_dir(ref_dir))
    assert r["config"]["train"]["optimizer"] == setup[0].split("=")[1]
    assert r["model"]["parametrization"]["kind"] == setup[-2].split("=")[1] and r["model"]["scaling"]["width_multiplier"] > 0


@pytest.mark.parametrize("name", ["llama3", "gpt2", "llama3_canon", "lfm2", "moe"])
@pytest.mark.parametrize("optimizer", ["muon", "lion"])
def test_each_optimizer_steps_every_preset_under_each_parametrization(name, optimizer):
    """Two steps lower nothing to NaN and move every parameter that got a gradient, under sp, mup and completep
    (Muon: stacked experts and depthwise convolutions go to AdamW, since torch's Muon takes 2-D matrices only)."""
    from tests.test_parametrization import preset

    for scheme in ("sp", "mup", "completep"):
        cfg = preset(name, parametrization=dict(kind=scheme, base_width=32, base_depth=1))
        torch.manual_seed(0)
        model = build_model(cfg)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        optimizer_ = build_optimizer(model, TrainConfig(optimizer=optimizer, lr=1e-3))
        for step in range(2):
            idx = torch.randint(0, cfg.vocab_size, (2, 17), generator=torch.Generator().manual_seed(step))
            optimizer_.zero_grad()
            logits = model(idx[:, :-1])
            torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten()).backward()
            optimizer_.step()
        for n, p in model.named_parameters():
            assert torch.isfinite(p).all(), (scheme, n)
            assert not torch.equal(p, before[n]), (scheme, n)
