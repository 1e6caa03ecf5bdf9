"""Masked diffusion (MDLM): times, corruption, the SUBS loss and its expectation, the validation bound, the
mask token, and the objective/model checks."""

from __future__ import annotations

import math

import pytest
import torch

from slm.model import ModelConfig, Transformer
from slm.objectives import OBJECTIVES, ObjectiveError
from slm.objectives.mdlm import EPS, corrupt, masked_log_probs, sample_times
from slm.settings import nested

V = 20
CFG = {"n_layers": 2, "d_model": 32, "attention.n_heads": 4, "vocab_size": V, "context_length": 32,
       "attention.causal": False, "embedding.mask_token_id": V - 1}


def test_times_are_stratified_over_the_batch():
    t = sample_times(8, "cpu", torch.Generator().manual_seed(0))
    strata = ((t - EPS) / (1 - EPS) * 8).floor()
    assert torch.equal(strata, torch.arange(8.0)) and t.min() >= EPS and t.max() < 1


def test_corruption_masks_at_rate_one_minus_eps_times_t():
    x0 = torch.randint(0, V - 1, (4, 20000))
    t = torch.tensor([0.1, 0.4, 0.7, 0.99])
    xt, masked = corrupt(x0, t, V - 1, torch.Generator().manual_seed(0))
    assert torch.equal(xt[masked], torch.full_like(xt[masked], V - 1)) and torch.equal(xt[~masked], x0[~masked])
    assert torch.allclose(masked.float().mean(1), (1 - EPS) * t, atol=0.01)


def test_subs_never_predicts_the_mask_token():
    logp = masked_log_probs(torch.randn(2, 3, V), V - 1)
    assert torch.all(logp[..., V - 1] == float("-inf")) and torch.allclose(logp.exp().sum(-1), torch.ones(2, 3))


def test_loss_is_the_nelbo_of_a_uniform_model():
    """A model with all logits equal predicts uniformly over the V - 1 real tokens: each masked token costs
    log(V - 1) and E[#masked / t] = (1 - eps) T, so the NELBO per token is (1 - eps) log(V - 1)."""
    model = Transformer(ModelConfig(**nested(CFG)))
    with torch.no_grad():
        model.lm_head.weight.zero_()  # tied: the embedding is zero too, every logit is 0
    tokens = torch.randint(0, V - 1, (256, 33))
    sums = [OBJECTIVES.get("mdlm")().nll(model, tokens, seed=seed) for seed in range(8)]
    assert all(n == 256 * 32 for _, n in sums)
    estimate = sum(total.item() for total, _ in sums) / (8 * 256 * 32)  # 1/t weights: a noisy estimator
    assert estimate == pytest.approx((1 - EPS) * math.log(V - 1), rel=0.04)


def test_visible_tokens_cost_nothing_and_validation_is_seeded():
    model = Transformer(ModelConfig(**nested(CFG)))
    tokens = torch.randint(0, V - 1, (4, 33))
    mdlm = OBJECTIVES.get("mdlm")()
    a, b = mdlm.nll(model, tokens, seed=3), mdlm.nll(model, tokens, seed=3)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], mdlm.nll(model, tokens, seed=4)[0])
    terms = mdlm.terms(model, tokens)
    assert set(terms) == {"loss", "lm_loss"} and terms["loss"].requires_grad
    terms["loss"].backward()
    assert model.tok_emb.weight.grad[V - 1].abs().sum() > 0  # the mask token's embedding is learned


def test_objectives_refuse_the_wrong_model():
    bidirectional = ModelConfig(**nested(CFG))
    with pytest.raises(ObjectiveError, match="train.objective=causal_lm needs a causal model, but model.attention.causal=false"):
        OBJECTIVES.get("causal_lm")().check(bidirectional)
    with pytest.raises(ObjectiveError, match="train.objective=mdlm needs a bidirectional model"):
        OBJECTIVES.get("mdlm")().check(ModelConfig(**nested({**CFG, "attention.causal": True})))
    with pytest.raises(ObjectiveError, match="needs model.embedding.mask_token_id"):
        OBJECTIVES.get("mdlm")().check(ModelConfig(**nested({**CFG, "embedding.mask_token_id": None})))
    assert OBJECTIVES.get("mdlm").nll_kind == "nelbo" and OBJECTIVES.get("causal_lm").nll_kind == "nll"


def test_tokenizers_reserve_a_mask_token(tmp_path):
    from slm.data.tokenizers import CharTokenizer, GPT2Tokenizer, load_tokenizer

    char = CharTokenizer(list("abc"), unk=False, eot=True)
    before = char.fingerprint()
    char.reserve_mask()
    assert (char.mask_id, char.vocab_size, char.eot_id) == (4, 5, 3) and char.fingerprint() == before
    assert char.decode([0, 4, 1]) == "a<mask>b" and char.encode("ab") == [0, 1]
    char.save(tmp_path / "c")
    assert load_tokenizer(tmp_path / "c").mask_id == 4
    gpt2 = GPT2Tokenizer().reserve_mask()
    assert (gpt2.mask_id, gpt2.vocab_size) == (50257, 50258)
    assert gpt2.decode(gpt2.encode("Hello") + [50257] + gpt2.encode(" world")) == "Hello<mask> world"


def test_dllm_has_llama3s_count_with_the_padded_gpt2_vocabulary(tmp_path):
    """The mask token takes a spare row of 50257 -> 50304: dllm has exactly llama3's 71,246,208 parameters."""
    import re
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "slm.cli.train", "-m", "model=dllm", "train.objective=mdlm",
                          "tokenizer=gpt2", "tokenizer.pad_vocab_multiple=64", "hydra.sweeper.dry_run=true",
                          f"hydra.sweep.dir={tmp_path}"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert re.search(r"^\S+\s+32\s+384\s+71,246,208", out.stdout, re.M), out.stdout
