"""Parametrizations (model.parametrization.kind): sp is untouched, mup and completep equal sp at the base shape and
scale exactly as μP (Yang et al. 2022, Table 3 / microsoft/mup's MuReadout + MuAdam) and CompleteP (Dey et al.
2025, its reference implementation in EleutherAI/nanoGPT-mup) say away from it; models they do not cover are
refused in one line."""

from __future__ import annotations

import math

import pytest
import torch

from slm.cli.config import compose_config
from slm.components.parametrization import ParametrizationSettings, Role, roles, scheme_of
from slm.model import ModelConfig, build_model
from slm.model.budget import config_from_spec
from slm.settings import nested
from slm.training.config import TrainConfig
from slm.training.optim import param_groups

PRESETS = ["llama3", "gpt2", "llama3_canon", "lfm2", "moe"]


def preset(name: str, **fields) -> ModelConfig:
    """A preset, shrunk: 2 blocks (lfm2: 3, one conv-conv-attn unit) of width 64 (4 heads of 16), a small
    vocabulary and context."""
    from omegaconf import OmegaConf

    node = OmegaConf.to_container(compose_config([f"model={name}"]).model, resolve=True)
    node = nested({**node, "n_layers": 3 if name == "lfm2" else 2, "d_model": 64, "attention.head_dim": 16,
                   "attention.n_kv_heads": None, "vocab_size": 96, "context_length": 32})
    if name == "moe":
        node["moe"].update(n_experts=4, expert_d_ff=32)
    for key, value in nested(fields).items():  # a group (or a dotted field) changes the fields it names
        node[key] = {**node[key], **value} if isinstance(value, dict) and isinstance(node.get(key), dict) else value
    return config_from_spec(node)


def logits(cfg: ModelConfig, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    model = build_model(cfg).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return model(idx)


@pytest.mark.parametrize("name", PRESETS)
@pytest.mark.parametrize("scheme", ["mup", "completep"])
def test_at_the_base_shape_the_initial_forward_is_sp(name, scheme):
    """Width = base width (and depth = base depth): every multiplier is 1, so the logits are bit-identical."""
    sp = preset(name)
    other = preset(name, parametrization=dict(kind=scheme, base_width=64, base_depth=sp.n_layers))
    assert torch.equal(logits(sp), logits(other))


@pytest.mark.parametrize("name", PRESETS)
def test_mup_away_from_the_base_width(name):
    """Width 4x the base: hidden matrices drawn at std x 1/2 (the same draws), everything else as sp, and the
    head reads h / 4."""
    sp, mup = preset(name), preset(name, parametrization=dict(kind="mup", base_width=16))
    torch.manual_seed(0)
    a = build_model(sp)
    torch.manual_seed(0)
    b = build_model(mup)
    for (name_a, p, role), (name_b, q, _) in zip(roles(a), roles(b)):
        assert name_a == name_b
        if role.kind == "hidden":
            torch.testing.assert_close(q, p * 0.5, rtol=0, atol=0)
        else:
            assert torch.equal(p, q), name_a
    h = torch.randn(3, 64)
    torch.testing.assert_close(b.head(h), a.head(h / 4))


def test_roles_follow_where_a_parameter_sits():
    cfg = preset("llama3_canon", embedding=dict(tie=False))
    model = build_model(cfg)
    kinds = {name: role for name, _, role in roles(model)}
    assert kinds["tok_emb.weight"] == Role("embedding", False)
    assert kinds["lm_head.weight"] == Role("readout", False)
    assert kinds["blocks.0.attn.qkv.weight"] == Role("hidden", True)
    assert kinds["blocks.1.mlp.fc_out.weight"] == Role("hidden", True)
    assert kinds["blocks.0.canon_a.conv.weight"] == Role("vector", True)  # depthwise: one input per channel
    assert kinds["blocks.0.attn_norm.weight"] == Role("vector", True)
    assert kinds["norm.weight"] == Role("vector", False)
    moe = {name: role.kind for name, _, role in roles(build_model(preset("moe")))}
    assert moe["blocks.0.mlp.w_in"] == moe["blocks.0.mlp.w_out"] == moe["blocks.0.mlp.router.weight"] == "hidden"
    gpt2 = {name: role.kind for name, _, role in roles(build_model(preset("gpt2")))}
    assert gpt2["position.weight"] == "embedding" and gpt2["blocks.0.attn.qkv.bias"] == "vector"


def _lrs(model, train: TrainConfig) -> dict:
    """{parameter name: (lr, weight decay, eps)} from the optimizer's groups."""
    names = {id(p): n for n, p, _ in roles(model)}
    out = {}
    for group in param_groups(model, train):
        for p in group["params"]:
            out[names[id(p)]] = (group.get("lr", train.lr), group["weight_decay"], group.get("eps", train.optim.adamw.eps))
    return out


def test_mup_scales_the_hidden_adam_learning_rate_only():
    model = build_model(preset("gpt2", parametrization=dict(kind="mup", base_width=16)))
    train = TrainConfig(lr=1e-2, optim={"adamw": {"weight_decay": 0.1, "eps": 1e-8}})
    lrs = _lrs(model, train)
    assert lrs["blocks.0.attn.qkv.weight"] == (pytest.approx(1e-2 / 4), 0.1, 1e-8)
    assert lrs["blocks.0.attn.qkv.bias"] == (1e-2, 0.0, 1e-8)
    assert lrs["tok_emb.weight"] == (1e-2, 0.0, 1e-8) and lrs["position.weight"] == (1e-2, 0.0, 1e-8)
    assert lrs["blocks.0.attn_norm.weight"] == (1e-2, 0.0, 1e-8)


@pytest.mark.parametrize("scheme, rule, multiplier", [
    ("mup", None, 1.0), ("mup", "with_lr", 1.0), ("mup", "width_independent", 4.0),
    ("completep", None, 4.0), ("completep", "with_lr", 1.0)])
def test_the_hidden_decay_rule_is_a_setting(scheme, rule, multiplier):
    """mup's default leaves AdamW's decay of hidden matrices x1, so lr x decay falls as 1/m (nanoGPT-mup, microsoft/mup's
    MuAdamW(decoupled_wd=True)); width_independent multiplies it by m (microsoft/mup's default, CompleteP's)."""
    mup = {"base_width": 16, **({"decay": rule} if rule else {})}
    model = build_model(preset("gpt2", parametrization={"kind": scheme, **mup}))
    lr, decay, _ = _lrs(model, TrainConfig(lr=1e-2, optim={"adamw": {"weight_decay": 0.1, "eps": 1e-8}}))["blocks.0.attn.qkv.weight"]
    assert decay == pytest.approx(0.1 * multiplier) and lr * decay == pytest.approx(1e-2 / 4 * 0.1 * multiplier)
    assert scheme_of(model.cfg).describe()["hidden_weight_decay_multiplier"] == multiplier


def test_completep_follows_its_reference_implementation():
    """Width 64 from 16 (m = 4), 8 blocks from 2 (r = 4), alpha 1 and 0.5: residual branches x r^-alpha, hidden lr
    x r^(alpha-1) / m and decay x m, in-block vectors' lr x r^(alpha-1), every eps x r^-alpha / m (nanoGPT-mup,
    branch completep, configure_optimizers)."""
    for alpha in (1.0, 0.5):
        cfg = preset("llama3", n_layers=8,
                     parametrization=dict(kind="completep", base_width=16, base_depth=2, depth_alpha=alpha))
        model = build_model(cfg)
        m, r = 4.0, 4.0
        assert model.blocks[0].branch_scale == pytest.approx(r**-alpha)
        lrs = _lrs(model, TrainConfig(lr=1e-2, optim={"adamw": {"weight_decay": 0.1, "eps": 1e-8}}))
        eps = 1e-8 / m * r**-alpha
        assert lrs["blocks.3.mlp.fc_in.weight"] == (pytest.approx(1e-2 / m * r ** (alpha - 1)), pytest.approx(0.1 * m),
                                                    pytest.approx(eps))
        assert lrs["blocks.3.mlp_norm.weight"] == (pytest.approx(1e-2 * r ** (alpha - 1)), 0.0, pytest.approx(eps))
        assert lrs["tok_emb.weight"] == (1e-2, 0.0, pytest.approx(eps))
        assert lrs["norm.weight"] == (1e-2, 0.0, pytest.approx(eps))


def test_completep_branch_multiplier_acts_on_the_forward():
    """With every block's output projections zeroed except block 0's attention, the residual stream after the
    blocks is h0 + r^-alpha * attn(h0): the branch multiplier is applied once, before the add."""
    cfg = preset("llama3", n_layers=4, parametrization=dict(kind="completep", base_width=64, base_depth=1))
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    idx = torch.randint(0, cfg.vocab_size, (1, 8))
    with torch.no_grad():
        for i, block in enumerate(model.blocks):
            block.mlp.fc_out.weight.zero_()
            if i:
                block.attn.proj.weight.zero_()
        h0 = model.tok_emb(idx)
        block = model.blocks[0]
        expected = h0 + 0.25 * block.attn(block.attn_norm(h0), _context(model, idx))
        out = h0  # the residual stream through the blocks (before the final norm)
        for b in model.blocks:
            out = b(out, _context(model, idx))
        torch.testing.assert_close(out, expected)


def _context(model, idx):
    from slm.model.transformer import SequenceContext

    return SequenceContext(model.cfg, model.position, torch.arange(idx.shape[1]), torch.float32)


def test_mup_attention_scale_is_one_over_head_dim_from_its_base():
    base = preset("llama3", parametrization=dict(kind="mup", base_width=64, base_head_dim=16))
    wide = preset("llama3", attention=dict(head_dim=64),
                  parametrization=dict(kind="mup", base_width=64, base_head_dim=16))
    assert build_model(base).blocks[0].attn.scale == pytest.approx(16**-0.5)  # SP's at the base head_dim
    assert build_model(wide).blocks[0].attn.scale == pytest.approx(math.sqrt(16) / 64)  # 1 / head_dim beyond it
    sp_wide = preset("llama3", attention=dict(head_dim=64))
    assert build_model(sp_wide).blocks[0].attn.scale == pytest.approx(64**-0.5)


def test_gpt2_residual_init_under_completep_keeps_the_base_depth():
    """GPT-2's residual projections start at std / sqrt(2 depth) under sp; completep fixes that depth at
    base_depth (CompleteP: init variance independent of depth), so deeper models start the same per block."""
    assert scheme_of(preset("gpt2", n_layers=8)).init_depth() == 8
    assert scheme_of(preset("gpt2", n_layers=8, parametrization=dict(kind="completep", base_width=64))).init_depth() == 2


@pytest.mark.parametrize("fields, message", [
    ({"model": "ladder_transformer", "parametrization.kind": "mup"}, "model.parametrization.init=torch_mha: PyTorch's fan-in init"),
    ({"model": "titans_mac", "parametrization.kind": "mup"}, "not defined for mac layers"),
    ({"model": "ladder_linear", "parametrization.kind": "mup"}, "not defined for model.kind=linear"),
    ({"model": "gpt2", "parametrization.kind": "completep", "norm.placement": "post"}, "model.norm.placement=post"),
    ({"model": "llama3", "parametrization.kind": "mvp"}, "model.parametrization.kind='mvp' is invalid: one of: sp, mup, completep"),
    ({"model": "llama3", "parametrization.kind": "mup", "parametrization.base_width": 0}, "model.parametrization.base_width=0 is invalid"),
    ({"model": "llama3", "parametrization.kind": "mup", "parametrization.width": 64}, "model.parametrization has unknown key 'width'"),
    ({"model": "llama3", "parametrization.kind": "completep", "parametrization.depth_alpha": 1.5}, "model.parametrization.depth_alpha=1.5"),
])
def test_what_a_scheme_does_not_cover_is_refused_in_one_line(fields, message):
    from omegaconf import OmegaConf

    fields = dict(fields)
    node = OmegaConf.to_container(compose_config([f"model={fields.pop('model')}"]).model, resolve=True)
    node = nested({**node, "vocab_size": 96, **fields})
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        config_from_spec(node)
    assert "\n" not in str(err.value)


def test_settings_round_trip_through_a_stored_config():
    cfg = preset("llama3",
                 parametrization=dict(kind="completep", base_width=32, base_depth=4, depth_alpha=0.5))
    again = ModelConfig.from_dict(cfg.to_dict())
    assert again == cfg and again.parametrization == ParametrizationSettings(
        kind="completep", init="normal", base_width=32, base_depth=4, depth_alpha=0.5)
    assert ModelConfig.from_dict({k: v for k, v in cfg.to_dict().items() if k != "parametrization"}) \
        .parametrization.kind == "sp"  # a config.json from before parametrizations


FAMILIES_70M = ["gpt2", "llama3", "qwen3", "gemma3", "llama3_canon", "mobilellm", "lfm2", "moe", "dllm", "dllm_canon",
                "dllm_recursive", "titans_mac"]  # every family sweeps/families_70m.yaml builds


@pytest.mark.parametrize("name", FAMILIES_70M)
@pytest.mark.parametrize("scheme", ["mup", "completep"])
def test_every_family_of_the_study_trains_or_is_refused_in_one_line(name, scheme):
    """At twice the base width and three times the base depth: one training step gives a finite loss and
    gradients, or the config is refused with one line saying why (Titans' memory has no μP rule)."""
    fields = {"parametrization.kind": scheme, "parametrization.base_width": 32, "parametrization.base_depth": 2,
              "n_layers": 6}
    if name == "gemma3":
        fields["attention.sliding_window"] = 8
    if name == "titans_mac":
        fields.update(n_layers=22, memory={"layers": [0, 7, 14, 21], "segment": 16, "depth": 2, "persistent_tokens": 32})
        with pytest.raises(ValueError, match="not defined for mac layers") as err:
            preset(name, **fields)
        assert "\n" not in str(err.value)
        return
    cfg = preset(name, **fields)
    torch.manual_seed(0)
    model = build_model(cfg)
    idx = torch.randint(0, cfg.vocab_size - 1, (2, 17))
    logits = model(idx[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    if scheme == "completep":
        assert model.blocks[0].branch_scale == pytest.approx(2 / cfg.depth)


def test_gemmas_embedding_multiplier_is_anchored_at_the_base_width():
    """scale_embeddings multiplies by sqrt(d_model) under sp; under mup by sqrt(base_width), so the first block's
    input does not grow with width (the coordinate check found it growing as width^0.5 before)."""
    shape = {"attention.sliding_window": 8, "n_layers": 6}
    sp, mup = preset("gemma3", **shape), preset("gemma3", **nested({**shape, "parametrization.kind": "mup",
                                                                    "parametrization.base_width": 16}))
    assert scheme_of(sp).embedding_scale(8.0) == 8.0 and scheme_of(mup).embedding_scale(8.0) == pytest.approx(4.0)
