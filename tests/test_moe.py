"""The mixture-of-experts feed-forward: routing against a per-token reference, dropless dispatch, the
auxiliary losses through the objective, config errors, and the per-expert load in a run record."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from slm.model import ConfigError, ModelConfig, Transformer
from slm.objectives import OBJECTIVES
from slm.settings import nested

TINY = {"n_layers": 3, "d_model": 32, "attention.n_heads": 4, "attention.n_kv_heads": 2, "vocab_size": 61,
        "context_length": 32}
MOE = dict(mlp_types=["dense", "moe"], moe=dict(n_experts=5, top_k=2, expert_d_ff=24))


def _reference(moe, x: torch.Tensor) -> torch.Tensor:
    """The layer written token by token from its definition: softmax router, top-k, weighted expert sum."""
    out = torch.zeros_like(x)
    for n, token in enumerate(x):
        probs = (moe.router.weight @ token).softmax(-1)
        weights, experts = probs.topk(moe.top_k)
        if moe.norm_topk_prob:
            weights = weights / weights.sum()
        for w, e in zip(weights, experts):
            gate, up = (moe.w_in[e] @ token).chunk(2)
            out[n] += w * (moe.w_out[e] @ (F.silu(gate) * up))
    if moe.shared is not None:
        out += moe.shared(x)
    return out


def _with_moe(**change) -> dict:
    """MOE with some of its model.moe fields changed."""
    return {**MOE, "moe": {**MOE["moe"], **change}}


@pytest.mark.parametrize("change", [dict(), dict(norm_topk_prob=False, shared_expert_d_ff=16, top_k=3),
                                    dict(top_k=1, n_experts=1)])
def test_routing_matches_the_per_token_definition(change):
    model = Transformer(ModelConfig(**nested({**TINY, **_with_moe(**change)})))
    moe = model.blocks[1].mlp
    x = torch.randn(2, 7, 32)
    with torch.no_grad():
        assert torch.allclose(moe(x), _reference(moe, x.reshape(-1, 32)).view(2, 7, 32), atol=1e-5)


def test_dispatch_is_dropless_and_counts_every_pair():
    """Unbalanced routing (one expert favoured by a biased router) still computes every (token, expert) pair."""
    model = Transformer(ModelConfig(**nested({**TINY, **MOE})))
    moe = model.blocks[1].mlp
    with torch.no_grad():
        moe.router.weight[0] += 5.0  # expert 0 wins for most tokens
    seq = type("Seq", (), {"cache": None, "record": lambda self, kind, stats: setattr(self, "stats", stats)})()
    x = torch.randn(3, 11, 32)
    with torch.no_grad():
        assert torch.allclose(moe(x, seq), _reference(moe, x.reshape(-1, 32)).view(3, 11, 32), atol=1e-5)
    counts, _, tokens, _ = seq.stats
    assert tokens == 33 and counts.sum() == 33 * 2 and counts[0] > counts[1:].max()


def test_auxiliary_losses_reach_the_training_loss():
    cfg = ModelConfig(**nested({**TINY, **_with_moe(aux_coef=0.05, z_coef=0.01)}))
    model = Transformer(cfg)
    tokens = torch.randint(0, 61, (2, 17))
    terms = OBJECTIVES.get("causal_lm")().terms(model, tokens)
    logits = model(tokens[:, :-1])
    lm = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    assert terms["lm_loss"].item() == pytest.approx(lm.item(), rel=1e-6)
    expected = lm + 0.05 * terms["moe_balance"] + 0.01 * terms["moe_z"]
    assert terms["loss"].item() == pytest.approx(expected.item(), rel=1e-6)
    assert terms["moe_load"].shape == (1, 5) and terms["moe_load"].sum().item() == pytest.approx(1.0)
    terms["loss"].backward()
    assert model.blocks[1].mlp.router.weight.grad.abs().sum() > 0
    # switched off, the loss is the LM loss alone; a dense model has no auxiliary terms
    off = OBJECTIVES.get("causal_lm")().terms(Transformer(ModelConfig(**nested({**TINY, **_with_moe(aux_coef=0.0)}))), tokens)
    assert off["loss"].item() == off["lm_loss"].item() and "moe_balance_loss" not in off
    dense = OBJECTIVES.get("causal_lm")().terms(Transformer(ModelConfig(**nested(TINY))), tokens)
    assert set(dense) == {"loss", "lm_loss"}


def test_balancing_loss_is_top_k_when_routing_is_uniform():
    """E * sum_i f_i P_i with f_i = k / E and P_i = 1 / E gives k (Switch Transformer's minimum, times k)."""
    from slm.components.moe import MoE

    cfg = ModelConfig(**nested({**TINY, **MOE}))
    stats = [(torch.full((5,), 2.0 * 10 / 5), torch.full((5,), 10 / 5), 10, torch.tensor(3.0))] * 2
    aux = MoE.reduce_aux(cfg, stats)
    assert aux["moe_balance"].item() == pytest.approx(2.0) and aux["moe_z"].item() == pytest.approx(0.3)
    assert torch.allclose(aux["moe_load"], torch.full((2, 5), 0.2))


@pytest.mark.parametrize("bad, message", [
    (dict(moe=dict(n_experts=0)), r"model.moe.n_experts=0 is invalid: model.mlp_types \['dense', 'moe'\] has moe "),
    (dict(moe=dict(top_k=6)), r"model.moe.top_k=6 is invalid: must be an integer in 1..n_experts=5"),
    (dict(moe=dict(top_k=0)), r"model.moe.top_k=0 is invalid"),
    (dict(moe=dict(aux_scope="global")), r"model.moe.aux_scope='global' is invalid: choose one of: layer, pooled"),
    (dict(moe=dict(aux_coef=-1.0)), r"model.moe.aux_coef=-1.0 is invalid: must be a number >= 0"),
    (dict(moe=dict(aux_coef="x")), r"model.moe.aux_coef='x' is invalid: expected a finite number"),
    (dict(moe=dict(experts=4)), r"model.moe has unknown key 'experts' \(did you mean n_experts\?\)"),
    ({"block.bias": True}, r"model.block.bias=True is invalid: moe layers have no biases"),
    (dict(canon=dict(set="D")), r"model.canon.set='D' is invalid: Canon D sits inside a dense MLP"),
    (dict(mlp_types=["dense"]), r"model.moe.n_experts=5 is invalid: model.mlp_types has no moe layer to use it"),
    (dict(moe=dict(shared_expert_d_ff=-4)), r"model.moe.shared_expert_d_ff=-4 is invalid"),
])
def test_bad_moe_configs_name_field_and_value(bad, message):
    """The line names the dotted key and the value; what is allowed may be reworded (only `key=value is invalid` is
    checked)."""
    with pytest.raises(ConfigError, match=message.split(" is invalid: ")[0] + (" is invalid" if " is invalid: " in
                                                                                message else "")):
        ModelConfig(**nested({**TINY,
                              **{**_with_moe(**bad.get("moe", {})), **{k: v for k, v in bad.items() if k != "moe"}}}))
