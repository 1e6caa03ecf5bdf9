"""Scoring masked diffusion models through lm-eval (slm.eval.lm_diffusion): the Monte Carlo conditional ELBO
against direct forwards (exact for one token, the brute-force expectation for a few), its seeding, the
rolling windows, the model_args, generate_until's cuts, and the offline suite end to end with the
estimator in the record. A tiny char-level bidirectional checkpoint with a mask token, on CPU."""

from __future__ import annotations

import itertools
import json
import logging
import math
import sys
import types

import pytest
import torch
from lm_eval.api.instance import Instance

from slm.cli.eval import main as slm_eval
from slm.data.tokenizers import CharTokenizer
from slm.eval.lm import SLMLM
from slm.eval.lm_diffusion import ESTIMATOR, conditional_elbo, mask_plan
from slm.eval.offline_tasks import mc_documents, ppl_documents, speeches
from slm.model import ModelConfig, Transformer
from slm.model.weights import save_model
from slm.runs.record import load_record, update_record

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

CTX = 64


def _tokenizer(eot: bool) -> CharTokenizer:
    text = "\n\n".join("\n".join(s) for s in speeches())
    return CharTokenizer(CharTokenizer.select(CharTokenizer.fit_counts([text]), None), unk=False, eot=eot)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished diffusion run: model/ with a bidirectional model (weights drawn wide, so that its
    predictions depend on the context and on which tokens are masked) and the char tokenizer with <eot>
    and <mask>."""
    run = tmp_path_factory.mktemp("dllm")
    tok = _tokenizer(eot=True).reserve_mask()
    torch.manual_seed(0)
    model = Transformer(ModelConfig(n_layers=2, d_model=32, attention=dict(n_heads=4, causal=False),
                                    vocab_size=tok.vocab_size, context_length=CTX,
                                    embedding=dict(mask_token_id=tok.mask_id)))
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim > 1:
                p.normal_(0.0, 0.3)
    save_model(model, run / "model")
    tok.save(run / "model")
    update_record(run, status="completed", eval={"val_nll": 4.0, "val_nll_kind": "nelbo"})
    return run


@pytest.fixture(scope="module")
def lm(run_dir):
    return SLMLM(pretrained=str(run_dir), batch_size=8, device="cpu", mc_num=16)


def _requests(kind: str, args: list[tuple]) -> list[Instance]:
    return [Instance(kind, {}, a, i) for i, a in enumerate(args)]


def _subs_logp(lm: SLMLM, rows: list[list[int]]) -> torch.Tensor:
    """SUBS log-probabilities (R, T, V) of one direct forward of equal-length rows: the mask token's logit
    set to -inf before the log-softmax."""
    with torch.no_grad():
        logits = lm.model(torch.tensor(rows)).float()
    logits[..., lm.cfg.embedding.mask_token_id] = -math.inf
    return logits.log_softmax(-1)


def test_a_one_token_continuation_is_scored_exactly(lm):
    docs = mc_documents()[:3]
    args = [(d["context"].rstrip(), d["choices"][0][1:2]) for d in docs]  # one letter
    args += [("ROMEO:\n" * 20 + "HENR", "Y"), ("", "H")]  # truncated from the left; empty context: the prefix token
    got = lm.loglikelihood(_requests("loglikelihood", args), disable_tqdm=True)
    mask = lm.cfg.embedding.mask_token_id
    for (context, cont), (score, greedy) in zip(args, got):
        ctx_ids, cont_ids = lm._encode_pair(context, cont) if context else ([lm.prefix_token_id], lm.tok_encode(cont))
        assert len(cont_ids) == 1
        ids = (ctx_ids + cont_ids)[-CTX:]
        logp = _subs_logp(lm, [ids[:-1] + [mask]])[0, -1]
        assert score == pytest.approx(float(logp[ids[-1]]), abs=1e-5)
        assert greedy == (int(logp.argmax()) == ids[-1])
    assert len({round(s, 3) for s, _ in got}) == len(got)  # the model does depend on its context


def _brute_force(lm: SLMLM, ctx: list[int], cont: list[int]) -> float:
    """E_l E_S [(n/l) sum_{i in S} log p(x_i | x with S masked)], l uniform on 1..n, S every l-subset."""
    n, mask = len(cont), lm.cfg.embedding.mask_token_id
    subsets = [S for l in range(1, n + 1) for S in itertools.combinations(range(n), l)]
    rows = [ctx + [mask if i in S else t for i, t in enumerate(cont)] for S in subsets]
    logp = _subs_logp(lm, rows)
    total = 0.0
    for r, S in enumerate(subsets):
        l = len(S)
        term = sum(float(logp[r, len(ctx) + i, cont[i]]) for i in S) * n / l
        total += term / (n * math.comb(n, l))  # P(l) = 1/n, P(S | l) = 1 / C(n, l)
    return total


def test_a_multi_token_estimate_converges_to_the_brute_force_expectation(lm):
    ctx, cont = lm.tok_encode("KING RICHARD III:\nNow is the"), lm.tok_encode(" winter")
    exact = _brute_force(lm, ctx, cont)  # 2^7 - 1 = 127 masked sequences

    def errors(mc_num: int) -> list[float]:
        return [conditional_elbo(lm.model, [(ctx, cont)], mc_num, seed, lambda T: 1024)[0][0] - exact
                for seed in range(12)]

    err = {m: errors(m) for m in (7, 56, 448)}
    rmse = {m: math.sqrt(sum(e * e for e in err[m]) / len(err[m])) for m in err}
    assert rmse[7] > 2 * rmse[56] > 4 * rmse[448]  # about 1/sqrt(mc_num): 8x the samples, about 2.8x less error
    assert rmse[448] < 0.012 * abs(exact) and rmse[7] > 0.02 * abs(exact)  # and one estimate is random
    assert abs(sum(err[448]) / 12) < 0.005 * abs(exact)  # unbiased: the mean of 12 is closer still


def test_mask_plans_stratify_the_masked_counts():
    g = torch.Generator().manual_seed(0)
    masked, weights = mask_plan(5, 20, g)
    counts = masked.sum(1)
    assert torch.equal(counts.sort().values, torch.arange(1, 6).repeat_interleave(4))  # each l four times
    assert torch.allclose(weights, 5 / counts.double())
    masked, _ = mask_plan(100, 8, g)
    assert masked.sum(1).tolist() == sorted(masked.sum(1).tolist()) and masked.sum(1).max() <= 100
    assert len({tuple(m.nonzero().flatten().tolist()) for m in mask_plan(6, 64, g)[0]}) > 20  # random sets


def test_scores_are_seeded_per_request_not_per_batch(run_dir, lm):
    docs = mc_documents()[3:6]
    args = [(d["context"], c) for d in docs for c in d["choices"]]
    first = lm.loglikelihood(_requests("loglikelihood", args), disable_tqdm=True)
    again = lm.loglikelihood(_requests("loglikelihood", args), disable_tqdm=True)
    backwards = lm.loglikelihood(_requests("loglikelihood", args[::-1]), disable_tqdm=True)[::-1]
    alone = lm.loglikelihood(_requests("loglikelihood", args[4:5]), disable_tqdm=True)
    assert first == again
    for a, b in zip(first, backwards):
        assert a[0] == pytest.approx(b[0], abs=1e-5) and a[1] == b[1]
    assert alone[0][0] == pytest.approx(first[4][0], abs=1e-5)
    other = SLMLM(pretrained=str(run_dir), batch_size=8, device="cpu", mc_num=16, seed=7)
    reseeded = other.loglikelihood(_requests("loglikelihood", args), disable_tqdm=True)
    assert all(abs(a[0] - b[0]) > 1e-4 for a, b in zip(first, reseeded))  # multi-token continuations: another draw


def test_rolling_sums_the_bounds_of_the_windows(lm):
    text = ppl_documents()[0]["text"][:150]  # three windows of 64, 64 and 22 tokens
    ids, p = lm.tok_encode(text), lm.prefix_token_id
    windows = [([], ids[:64]), ([], ids[64:128]), (ids[86:128], ids[128:150])]  # contexts cut to fit 64 tokens
    s = lm.diffusion
    expected = sum(score for score, _ in conditional_elbo(lm.model, windows, s.mc_num, s.seed, lambda T: 64))
    short = "Hark!"
    got = lm.loglikelihood_rolling(_requests("loglikelihood_rolling", [(text,), (short,)]), disable_tqdm=True)
    assert got[0] == pytest.approx(expected, rel=1e-6)
    single = conditional_elbo(lm.model, [([p], lm.tok_encode(short))], s.mc_num, s.seed, lambda T: 64)[0][0]
    assert got[1] == pytest.approx(single, rel=1e-6)
    assert lm.loglikelihood(_requests("loglikelihood", [("", short)]), disable_tqdm=True)[0][0] == pytest.approx(got[1])
    assert -got[0] / len(ids) == pytest.approx(math.log(lm.tok.vocab_size - 1), rel=0.5)  # a plausible NELBO


def test_model_args_are_checked_and_ignored_by_autoregressive_models(run_dir, tmp_path, caplog):
    for bad, message in [({"mc_num": 0}, "^model_args.mc_num=0 is invalid: must be an integer > 0$"),
                         ({"mc_num": "many"}, "^model_args.mc_num='many' is invalid: expected an integer$"),
                         ({"mc_num": 2.5}, "mc_num=2.5"), ({"mc_batch": -1}, "mc_batch=-1"),
                         ({"seed": "x"}, "^model_args.seed='x' is invalid: expected an integer$"),
                         ({"diffusion_threshold": 2}, r"^model_args.diffusion_threshold=2 is invalid: must be a number "
                                                      r"in \(0, 1\]")]:
        with pytest.raises(ValueError, match=message):
            SLMLM(pretrained=str(run_dir), device="cpu", **bad)
    lm = SLMLM(pretrained=str(run_dir), device="cpu", mc_num="32", mc_batch=5, diffusion_steps="None")
    assert lm.estimator == {"kind": ESTIMATOR, "mc_num": 32, "seed": 1234}
    assert (lm.diffusion.mc_batch, lm.diffusion.diffusion_steps, lm.diffusion.diffusion_block_length) == (5, None, 32)

    tok = _tokenizer(eot=False)
    ar = Transformer(ModelConfig(n_layers=1, d_model=32, attention=dict(n_heads=4), vocab_size=tok.vocab_size,
                                 context_length=CTX))
    save_model(ar, tmp_path / "ar")
    tok.save(tmp_path / "ar")
    with caplog.at_level(logging.INFO, logger="slm.eval.lm_diffusion"):
        ar_lm = SLMLM(pretrained=str(tmp_path / "ar"), device="cpu", mc_num=64, seed=3)
    assert ar_lm.diffusion is None and ar_lm.estimator == {"kind": "exact"}
    assert caplog.text.count("mc_num, seed ignored: diffusion model_args do not apply to an autoregressive") == 1
    req = _requests("loglikelihood", [("ROMEO:", " hi")])
    with torch.no_grad():
        ids = ar_lm.tok_encode("ROMEO: hi")
        direct = ar_lm.model(torch.tensor([ids[:-1]])).log_softmax(-1)[0]
    assert ar_lm.loglikelihood(req, disable_tqdm=True)[0][0] == pytest.approx(
        float(sum(direct[t - 1, ids[t]] for t in range(len(ids) - 3, len(ids)))), abs=1e-5)

    bidirectional = Transformer(ModelConfig(n_layers=1, d_model=32, attention=dict(n_heads=4, causal=False),
                                            vocab_size=tok.vocab_size, context_length=CTX))
    save_model(bidirectional, tmp_path / "bi")
    tok.save(tmp_path / "bi")
    with pytest.raises(ValueError, match="without mask_token_id"):
        SLMLM(pretrained=str(tmp_path / "bi"), device="cpu")


def test_generate_until_cuts_at_eot_and_stop_strings(lm, monkeypatch):
    """With a stand-in for slm.model.diffusion.diffusion_generate: the prompts and settings it gets, and
    the cuts of its output."""
    calls = []
    tail = lm.tok_encode("Hello there. Bye") + [lm.tok.eot_id] + lm.tok_encode("after the end")

    def fake(model, prompts, gen_length, block_length=32, steps=None, threshold=None, temperature=0.0, seed=None,
             stop_tokens=()):
        calls.append({"prompts": prompts, "gen_length": gen_length, "block_length": block_length, "steps": steps,
                      "threshold": threshold, "temperature": temperature, "seed": seed, "stop_tokens": stop_tokens})
        return [(tail * gen_length)[:gen_length] for _ in prompts]

    monkeypatch.setitem(sys.modules, "slm.model.diffusion", types.SimpleNamespace(diffusion_generate=fake))
    context = "KING RICHARD III:\n" * 5  # 90 characters
    got = lm.generate_until(_requests("generate_until", [
        (context, {"until": ["."], "max_gen_toks": 24}), (context, {"until": [], "max_gen_toks": 24}),
        ("A", {"until": ["e"], "max_gen_toks": 100, "do_sample": True, "temperature": 0.7}),
        ("B", {"until": [], "max_gen_toks": 8})]), disable_tqdm=True)
    assert got == ["Hello there", "Hello there. Bye", "H", "Hello th"]
    by_len = {c["gen_length"]: c for c in calls}  # one call per gen_kwargs
    assert len(calls) == 4 and set(by_len) == {24, 32, 8}  # max_gen_toks 100 > 64: half the context for each
    assert by_len[24]["prompts"] == [lm.tok_encode(context)[-40:]]  # the last 64 - 24 tokens
    assert by_len[32]["prompts"] == [lm.tok_encode("A")]
    assert [by_len[n]["block_length"] for n in (24, 32, 8)] == [24, 32, 8]
    assert by_len[32]["temperature"] == 0.7 and by_len[24]["temperature"] == 0.0
    assert all((c["steps"], c["threshold"], c["seed"], c["stop_tokens"]) == (None, None, 1234, (lm.tok.eot_id,))
               for c in calls)


def test_generate_until_with_the_sampler(lm):
    sampler = pytest.importorskip("slm.model.diffusion", reason="the masked-diffusion sampler (slm/model/diffusion.py)")
    prompt = lm.tok_encode("ROMEO:\n")
    ids = sampler.diffusion_generate(lm.model, [prompt], 12, block_length=12, seed=1234,
                                     stop_tokens=(lm.tok.eot_id,))[0]
    got = lm.generate_until(_requests("generate_until", [("ROMEO:\n", {"until": [], "max_gen_toks": 12}),
                                                         ("ROMEO:\n", {"until": [], "max_gen_toks": 12})]),
                            disable_tqdm=True)
    assert got == [lm.tok_decode(ids)] * 2 and 0 < len(got[0]) <= 12 and "<mask>" not in got[0]


def test_offline_suite_records_the_estimator(run_dir):
    slm_eval([str(run_dir), "--tasks", "offline", "--limit", "3", "--batch_size", "8", "--no_throughput",
              "--device", "cpu", "--model_args", "mc_num=8", "mc_batch=64"])
    lm_eval = load_record(run_dir)["eval"]["lm_eval"]
    estimator = {"kind": ESTIMATOR, "mc_num": 8, "seed": 1234}
    assert lm_eval["estimator"] == estimator
    assert all(lm_eval["details"][t]["estimator"] == estimator for t in ("slm_shakespeare_bpb", "slm_shakespeare_mc"))
    assert lm_eval["details"]["slm_shakespeare_mc"]["samples"] == 3
    assert 0 < lm_eval["scores"]["slm_shakespeare_bpb"] < 20 and 0 <= lm_eval["scores"]["slm_shakespeare_mc"] <= 1
    results = json.loads((run_dir / lm_eval["results_file"]).read_text())
    assert results["config"]["estimator"] == estimator and results["config"]["model_args"]["mc_num"] == 8
