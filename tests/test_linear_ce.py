"""The chunked linear + cross-entropy (slm.objectives.linear_ce, train.loss) against the plain path: the model's
own head (Transformer.head: readout multiplier, lm_head, soft-cap) on whole float32 logits, then
F.cross_entropy or masked diffusion's log-softmax. Loss, gradients and validation sums agree to float rounding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from slm.model import ModelConfig, Transformer, WindowLinear
from slm.objectives import OBJECTIVES
from slm.objectives.linear_ce import (PLAIN_BELOW_BYTES, ChunkedPath, LossSettings, LossSettingsError, PlainPath,
                                      choose_path, liger_installed, linear_cross_entropy)
from slm.objectives.mdlm import masked_log_probs
from slm.settings import nested
from slm.training.config import TrainConfig, TrainConfigError

TINY = {"n_layers": 2, "d_model": 32, "attention.n_heads": 4, "vocab_size": 61, "context_length": 16}
HEADS = {  # every head Transformer.head can be: tied or not, bias, soft-cap, μP's readout multiplier
    "tied": {},
    "untied_bias_softcap": {"embedding.tie": False, "embedding.head_bias": True, "embedding.logit_softcap": 3.0},
    "mup_readout_softcap": {"parametrization.kind": "mup", "parametrization.base_width": 8,
                            "embedding.logit_softcap": 5.0},
}


def close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-5) -> bool:
    """Equal to float32 rounding: every element within rtol of the larger one's scale."""
    a, b = a.detach(), b.detach()
    return bool((a - b).abs().max() <= rtol * max(float(b.abs().max()), 1e-6))


def head_grads(model: Transformer, h: torch.Tensor, loss: torch.Tensor) -> list[torch.Tensor]:
    params = [h, model.lm_head.weight] + ([model.lm_head.bias] if model.lm_head.bias is not None else [])
    return list(torch.autograd.grad(loss, params))


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("chunk", [7, 64, 1000])  # several chunks with a short last one, one chunk
def test_loss_and_gradients_equal_the_plain_head(head, chunk):
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**nested({**TINY, **HEADS[head]})))
    if model.lm_head.bias is not None:
        torch.nn.init.normal_(model.lm_head.bias)
    assert (model.readout_scale is not None) == (head == "mup_readout_softcap")
    h = torch.randn(3, 43, 32, requires_grad=True)  # 129 rows
    targets = torch.randint(0, 61, (3, 43))
    targets[:, ::5] = -100  # not scored
    plain = F.cross_entropy(model.head(h).float().flatten(0, 1), targets.flatten())
    path = choose_path(LossSettings(impl="chunked", chunk_tokens=chunk), model, h.device)
    chunked = path(model, h, targets)
    assert path.name == "chunked" and close(chunked, plain)
    for got, want in zip(head_grads(model, h, chunked), head_grads(model, h, plain)):
        assert close(got, want)


def test_a_tied_head_adds_its_gradient_to_the_embeddings():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**nested(TINY)))
    assert model.lm_head.weight is model.tok_emb.weight
    tokens = torch.randint(0, 61, (2, 17))
    grads = {}
    for impl in ("plain", "chunked"):
        model.zero_grad()
        OBJECTIVES.get("causal_lm")(LossSettings(impl=impl, chunk_tokens=5)).terms(model, tokens)["loss"].backward()
        grads[impl] = model.tok_emb.weight.grad.clone()
    assert close(grads["chunked"], grads["plain"])


def test_sum_with_row_weights_and_an_excluded_token_is_the_masked_log_softmax():
    """Masked diffusion's form: -log p(target) with the mask token's logit at -inf, weighted per row, summed."""
    torch.manual_seed(0)
    h, weight = torch.randn(50, 16, requires_grad=True), torch.randn(29, 16, requires_grad=True)
    targets, weights = torch.randint(0, 28, (50,)), torch.rand(50) + 0.5
    scored = torch.rand(50) < 0.5
    logp = masked_log_probs(h @ weight.t(), 28).gather(-1, targets[:, None]).squeeze(-1)
    plain = torch.where(scored, -logp * weights, torch.zeros_like(logp)).sum()
    chunked = linear_cross_entropy(h, weight, torch.where(scored, targets, -100), row_weights=weights, exclude=28,
                                   reduction="sum", chunk=8)
    assert close(chunked, plain)
    for got, want in zip(torch.autograd.grad(chunked, [h, weight]), torch.autograd.grad(plain, [h, weight])):
        assert close(got, want)
    with torch.no_grad():  # validation: no gradient is made, the same sum
        assert close(linear_cross_entropy(h, weight, torch.where(scored, targets, -100), row_weights=weights,
                                          exclude=28, reduction="sum", chunk=8), plain)


def _step(objective: str, impl: str, cfg: ModelConfig, tokens: torch.Tensor):
    """One SGD step of `objective` with train.loss.impl=impl: (loss, gradients, weights after the step). (Adam's
    first step is lr x sign(gradient): a gradient that is 0 up to rounding could go either way.)"""
    torch.manual_seed(0)
    model = Transformer(cfg)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    loss = OBJECTIVES.get(objective)(LossSettings(impl=impl, chunk_tokens=24)).terms(model, tokens, seed=3)["loss"]
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    opt.step()
    return loss.detach(), grads, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("objective, extra", [
    ("causal_lm", {"embedding.logit_softcap": 4.0}),
    ("causal_lm", dict(mlp_types=["dense", "moe"], moe=dict(n_experts=4, top_k=2, expert_d_ff=16))),  # with its aux loss
    ("mdlm", {"attention.causal": False, "embedding.mask_token_id": 60}),
    ("last_token", {"embedding.tie": False, "embedding.head_bias": True}),
])
def test_a_training_step_chunked_equals_plain(objective, extra):
    cfg = ModelConfig(**nested({**TINY, **extra}))
    tokens = torch.randint(0, 60, (4, 17))
    loss_p, grads_p, after_p = _step(objective, "plain", cfg, tokens)
    loss_c, grads_c, after_c = _step(objective, "chunked", cfg, tokens)
    assert close(loss_c, loss_p)
    assert all(close(c, p, 1e-4) for c, p in zip(grads_c, grads_p))
    assert all(close(c, p, 1e-4) for c, p in zip(after_c, after_p))


def test_under_bf16_autocast_equal_to_bfloat16_rounding():
    """train.precision=bf16-mixed: both paths multiply in bfloat16 and take the softmax in float32."""
    cfg = ModelConfig(**nested({**TINY, "embedding.tie": False, "embedding.head_bias": True,
                                "embedding.logit_softcap": 3.0}))
    tokens = torch.randint(0, 60, (4, 17))
    out = {}
    for impl in ("plain", "chunked"):
        torch.manual_seed(0)
        model = Transformer(cfg)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = OBJECTIVES.get("causal_lm")(LossSettings(impl=impl, chunk_tokens=24)).terms(model, tokens)["loss"]
        loss.backward()
        out[impl] = (loss, [p.grad for p in model.parameters()])
    assert out["chunked"][0].dtype == torch.float32 and close(out["chunked"][0], out["plain"][0], 1e-3)
    assert all(close(c, p, 2e-2) for c, p in zip(out["chunked"][1], out["plain"][1]))


@pytest.mark.parametrize("objective, extra", [("causal_lm", {}), ("mdlm", {"attention.causal": False,
                                                                           "embedding.mask_token_id": 60}),
                                              ("last_token", {})])
def test_validation_sums_equal(objective, extra):
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**nested({**TINY, **extra}))).eval()
    tokens = torch.randint(0, 60, (4, 17))
    with torch.no_grad():
        plain = OBJECTIVES.get(objective)(LossSettings(impl="plain")).nll(model, tokens, seed=1)
        chunked = OBJECTIVES.get(objective)(LossSettings(impl="chunked", chunk_tokens=10)).nll(model, tokens, seed=1)
    assert plain[1] == chunked[1] and close(chunked[0], plain[0])


def test_head_false_gives_the_hidden_states_the_logits_come_from():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**nested({**TINY, "mlp_types": ["dense", "moe"],
                                              "moe": dict(n_experts=4, top_k=2, expert_d_ff=16)})))
    idx = torch.randint(0, 61, (2, 9))
    logits, aux = model(idx, return_aux=True)
    h, aux_h = model(idx, return_aux=True, head=False)
    assert h.shape == (2, 9, 32) and torch.equal(h, model.hidden(idx)) and torch.equal(model.head(h), logits)
    assert aux_h.keys() == aux.keys() and all(torch.equal(aux_h[k], aux[k]) for k in aux)


def test_only_transformers_head_is_fused_and_auto_is_chunked_on_a_cpu_where_the_logits_are_large():
    cpu = torch.device("cpu")
    window = WindowLinear(ModelConfig(**nested({"kind": "linear", **TINY, "n_layers": 1})))
    assert type(choose_path(LossSettings(impl="chunked"), window, cpu)) is PlainPath  # its head is not Transformer's
    auto = choose_path(LossSettings(), Transformer(ModelConfig(**nested(TINY))), cpu)
    assert type(auto) is ChunkedPath and auto.plain_below == PLAIN_BELOW_BYTES
    large = PLAIN_BELOW_BYTES // (4 * 61) + 1  # rows of a 61-token head whose float32 logits reach the threshold
    assert auto.ran(large, 61) == "chunked" and auto.ran(large - 1, 61) == "plain"
    assert type(choose_path(None, Transformer(ModelConfig(**nested(TINY))), cpu)) is PlainPath  # an objective without settings
    tokens = torch.randint(0, 61, (3, 17))  # a window model trains on the plain path whatever train.loss says
    terms = OBJECTIVES.get("last_token")(LossSettings(impl="chunked")).terms(window, tokens)
    assert torch.isfinite(terms["loss"])


@pytest.mark.parametrize("loss, key, value", [
    ({"impl": "fused"}, "train.loss.impl", "fused"),
    ({"chunk_tokens": 0}, "train.loss.chunk_tokens", 0),
    ({"chunk_tokens": "big"}, "train.loss.chunk_tokens", "big"),
    ({"chunk": 512}, "train.loss.chunk", None),
    ("chunked", "train.loss", "chunked"),
])
def test_bad_settings_are_one_line(loss, key, value):
    with pytest.raises(TrainConfigError) as err:
        TrainConfig(loss=loss)
    assert (err.value.key, err.value.value) == (key, value) and "\n" not in str(err.value)


@pytest.mark.skipif(liger_installed(), reason="liger_kernel is installed here")
def test_liger_without_the_package_is_refused():
    with pytest.raises(LossSettingsError) as err:
        TrainConfig(loss={"impl": "liger"})
    assert (err.value.key, err.value.value) == ("train.loss.impl", "liger") and "pip install liger-kernel" in str(err.value)


def test_settings_reach_the_objective():
    from slm.training.module import LanguageModelModule

    cfg = TrainConfig(loss={"impl": "plain", "chunk_tokens": 32}, length={"steps": 2})
    module = LanguageModelModule(ModelConfig(**nested(TINY)), cfg, max_steps=2, tokens_per_step=64)
    assert module.objective.loss_settings == LossSettings(impl="plain", chunk_tokens=32)
    assert cfg.to_dict()["loss"] == {"impl": "plain", "chunk_tokens": 32}
    compiled = LanguageModelModule(ModelConfig(**nested(TINY)), TrainConfig(compile=True, length={"steps": 2}), max_steps=2,
                                   tokens_per_step=64)
    compiled.configure_model()  # train.compile: the model, and the objective's forward + head + loss with it
    assert compiled._forward is not compiled.model
    assert compiled.objective._score._torchdynamo_orig_callable == compiled.objective.__class__._score.__get__(
        compiled.objective)


@pytest.mark.slow  # torch.compile: ~30-60 s on a CPU
def test_the_compiled_loss_equals_the_eager_one():
    """train.compile: the objective's forward + head + chunked loss compiled as one function (no graph break)."""
    import torch._dynamo.utils

    torch.manual_seed(0)
    model = Transformer(ModelConfig(**nested({**TINY, "embedding.logit_softcap": 3.0})))
    tokens = torch.randint(0, 61, (4, 17))
    eager = OBJECTIVES.get("causal_lm")(LossSettings(impl="chunked", chunk_tokens=24))
    loss = eager.terms(model, tokens)["loss"]
    want = torch.autograd.grad(loss, list(model.parameters()))
    compiled = OBJECTIVES.get("causal_lm")(LossSettings(impl="chunked", chunk_tokens=24))
    compiled.compile()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    loss_c = compiled.terms(torch.compile(model), tokens)["loss"]
    got = torch.autograd.grad(loss_c, list(model.parameters()))
    assert not torch._dynamo.utils.counters["graph_break"]
    assert close(loss_c, loss) and all(close(g, w, 1e-4) for g, w in zip(got, want))
