"""KV cache and generation (slm.model.cache, slm.model.generate): decoding with the cache must give the
logits of the whole-sequence forward for every architecture variant, in eager and static (CUDA-graph
ready) mode, for padded batches of different lengths and for rows copied out of a prefilled cache."""

from __future__ import annotations

import pytest
import torch

from slm.model import ModelConfig, Transformer
from slm.model.cache import KVCache
from slm.model.generate import Decoder, generate, sample
from slm.settings import nested

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

V, CTX, TOL = 97, 48, 1e-5

VARIANTS = {"llama_gqa": {"attention.n_kv_heads": 2},
            "gpt2_learned_layernorm_bias": {"position.kind": "learned", "norm.kind": "layernorm", "mlp.kind": "gelu",
                                            "block.bias": True},
            "nope": {"position.kind": "none"},
            "sliding_window_local_theta": {"attention.sliding_window": 5,
                                           "layer_types": ["local_attn", "local_attn", "attn"],
                                           "position.rope_theta_local": 100.0},
            "layer_repeat": {"block.repeat": 2, "attention.n_kv_heads": 1},
            "softcaps_window": {"attention.logit_softcap": 3.0, "embedding.logit_softcap": 5.0,
                                "attention.sliding_window": 4, "layer_types": ["local_attn", "attn"]},
            "canon_abcd": {"canon": dict(set="ABCD"), "mlp.kind": "gelu"},
            "canon_ac_kernel1": dict(canon=dict(set="AC", kernel=1)),
            "canon_bd_repeat_gated": {"canon": dict(set="BD", kernel=3), "block.repeat": 2},
            "gemma_sandwich_qknorm": {"norm.kind": "rmsnorm_gemma", "norm.placement": "sandwich",
                                      "attention.qk_norm": True, "mlp.kind": "geglu", "embedding.scale": True,
                                      "attention.sliding_window": 6, "layer_types": ["local_attn", "attn"]},
            "post_norm_partial_rotary": {"norm.placement": "post", "position.rotary_fraction": 0.5},
            "lfm2_conv_attn": {"layer_types": ["conv", "conv", "attn"], "attention.qk_norm": True,
                               "attention.n_kv_heads": 2},
            "conv_only_bias_kernel4_canon": {"layer_types": ["conv"], "conv.kernel": 4, "block.bias": True,
                                             "canon": dict(set="AC"), "position.kind": "learned",
                                             "norm.kind": "layernorm", "mlp.kind": "gelu"},
            "conv_kernel1_local_repeat": {"layer_types": ["conv", "local_attn"], "conv.kernel": 1,
                                          "attention.sliding_window": 5, "block.repeat": 2},
            "moe_dense_mix": dict(mlp_types=["dense", "moe"], moe=dict(n_experts=4, top_k=2, expert_d_ff=32, shared_expert_d_ff=16))}



def _model(**change) -> Transformer:
    model = Transformer(ModelConfig(**nested({"n_layers": 3, "d_model": 64, "attention.n_heads": 4, "vocab_size": V,
                                              "context_length": CTX, **change})))
    with torch.no_grad():  # random norm weights and canon kernels, so nothing is an identity by accident
        for p in model.parameters():
            if p.ndim == 1:
                p.normal_(1.0, 0.3)
    return model.eval()


@pytest.mark.parametrize("static", [False, True], ids=["eager", "static"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_cached_decode_matches_full_forward(variant, static):
    model = _model(**VARIANTS[variant])
    idx = torch.randint(0, V, (2, 40))
    with torch.no_grad():
        full = model(idx)
        cache = KVCache(model.cfg, batch=2, capacity=CTX, static=static)
        chunks = [model(idx[:, :7], cache), model(idx[:, 7:20], cache)]  # prefill, then a chunk
        chunks += [model(idx[:, t:t + 1], cache) for t in range(20, 40)]  # one token at a time
    assert (torch.cat(chunks, dim=1) - full).abs().max().item() < TOL


@pytest.mark.parametrize("variant", ["llama_gqa", "gpt2_learned_layernorm_bias", "sliding_window_local_theta",
                                     "canon_abcd", "softcaps_window", "lfm2_conv_attn", "conv_only_bias_kernel4_canon",
                                     "moe_dense_mix"])
def test_padded_rows_keep_their_own_positions(variant):
    """Prompts of different lengths right-padded into one prefill, then one token per row: each row
    sees exactly its own sequence (padding takes no position and is never attended to)."""
    model = _model(**VARIANTS[variant])
    idx = torch.randint(0, V, (3, 40))
    lens = torch.tensor([9, 25, 1])
    with torch.no_grad():
        full = model(idx)
        cache = KVCache(model.cfg, batch=3, capacity=CTX + 8)
        padded = idx[:, :25].clone()
        padded[torch.arange(25)[None, :] >= lens[:, None]] = 0
        out = model(padded, cache, lens)
        worst = max((out[b, :n] - full[b, :n]).abs().max().item() for b, n in enumerate(lens.tolist()))
        for step in range(10):
            tokens = idx[torch.arange(3), lens + step][:, None]
            out = model(tokens, cache)
            worst = max(worst, (out[:, 0] - full[torch.arange(3), lens + step]).abs().max().item())
    assert worst < TOL


@pytest.mark.parametrize("variant", ["canon_bd_repeat_gated", "lfm2_conv_attn"])
def test_rows_selected_from_a_prefilled_cache_continue_independently(variant):
    """One context prefilled once, copied into a row per continuation (prefix sharing in slm.eval.lm)."""
    model = _model(**VARIANTS[variant])
    ctx, conts = torch.randint(0, V, (1, 12)), torch.randint(0, V, (3, 6))
    with torch.no_grad():
        cache = KVCache(model.cfg, batch=1, capacity=20)
        model(ctx, cache)
        rows = cache.select(torch.tensor([0, 0, 0]))
        out = model(conts, rows)
        full = model(torch.cat([ctx.expand(3, -1), conts], dim=1))[:, 12:]
    assert (out - full).abs().max().item() < TOL


@pytest.mark.parametrize("variant", ["llama_gqa", "gpt2_learned_layernorm_bias", "canon_abcd",
                                     "sliding_window_local_theta", "lfm2_conv_attn", "moe_dense_mix"])
def test_greedy_generation_equals_argmax_of_full_forward(variant):
    model = _model(**VARIANTS[variant])
    prompts = [torch.randint(0, V, (n,)).tolist() for n in (5, 11)]
    out = generate(model, prompts, max_new_tokens=12)
    with torch.no_grad():
        for prompt, new in zip(prompts, out):
            seq = list(prompt)
            for _ in range(12):
                seq.append(int(model(torch.tensor([seq]))[0, -1].argmax()))
            assert new == seq[len(prompt):]


def test_stops_sampling_and_context_limit():
    model = _model()
    prompt = torch.randint(0, V, (6,)).tolist()
    greedy = generate(model, [prompt], 10)[0]
    # a stop token ends the row before it (not returned); a stop callback after the token it accepts
    assert generate(model, [prompt], 10, stop_tokens={greedy[3]})[0] == greedy[:greedy.index(greedy[3])]
    assert generate(model, [prompt], 10, stop=lambda row, ids: len(ids) == 4)[0] == greedy[:4]
    # sampling: reproducible with a seed, and every draw respects top_k
    a = generate(model, [prompt], 10, temperature=1.0, top_k=3, seed=1)[0]
    assert a == generate(model, [prompt], 10, temperature=1.0, top_k=3, seed=1)[0]
    logits = torch.randn(4, V)
    allowed = logits.topk(3).indices
    for seed in range(5):
        drawn = sample(logits, 1.0, top_k=3, generator=torch.Generator().manual_seed(seed))
        assert all(d in allowed[r] for r, d in enumerate(drawn.tolist()))
    # a row stops when its sequence fills the context: CTX - len(prompt) + 1 new tokens at most
    long = torch.randint(0, V, (CTX - 3,)).tolist()
    assert len(generate(model, [long], 50)[0]) == 4
    # a reused decoder gives the same tokens twice
    dec = Decoder(model, batch_size=2)
    assert dec.generate([prompt, prompt[:3]], 8) == dec.generate([prompt, prompt[:3]], 8)


@pytest.mark.parametrize("variant", ["llama_gqa", "lfm2_conv_attn", "canon_abcd", "moe_dense_mix"])
def test_chained_greedy_decoding_gives_the_step_by_step_tokens(variant):
    """Decoder(chain=True): greedy steps chained on the device (CUDA-graph ready; eager here), read back every
    CHAIN_CHECK steps, give the step-by-step loop's tokens: ragged rows, a padding row, stop tokens."""
    from slm.model import generate as gen

    model = _model(**VARIANTS[variant])
    prompts = [torch.randint(0, V, (n,)).tolist() for n in (5, 11, 7)]
    plain, chained = Decoder(model, batch_size=4, chain=False), Decoder(model, batch_size=4, chain=True)
    assert chained.chain and not plain.chain
    ref = plain.generate(prompts, 20)
    assert chained.generate(prompts, 20) == ref
    stop = {ref[1][4], ref[0][9]}
    assert chained.generate(prompts, 20, stop_tokens=stop) == plain.generate(prompts, 20, stop_tokens=stop)
    one = Decoder(model, batch_size=1, chain=True)
    assert one.generate(prompts[:1], 20) == ref[:1]
    old = gen.CHAIN_CHECK
    try:  # every row stops early: the chain ends at the next check, not after all 40 steps
        gen.CHAIN_CHECK = 4
        early = {ref[0][1], ref[1][1], ref[2][1]}
        assert chained.generate(prompts, 20, stop_tokens=early) == plain.generate(prompts, 20, stop_tokens=early)
        assert int(chained._count) <= 8
    finally:
        gen.CHAIN_CHECK = old
    # sampling or a stop callback take the step-by-step loop
    assert chained.generate(prompts, 6, stop=lambda row, ids: len(ids) == 3) == [r[:3] for r in ref]


def test_cache_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="causal"):
        KVCache(ModelConfig(n_layers=1, d_model=32, attention=dict(n_heads=2, causal=False)), batch=1, capacity=8)
    model = _model()
    cache = KVCache(model.cfg, batch=1, capacity=8)
    with pytest.raises(ValueError, match="full"):
        model(torch.zeros(1, 9, dtype=torch.long), cache)


@pytest.mark.slow  # torch.compile takes 20-60 s per variant
@pytest.mark.parametrize("variant", ["canon_abcd", "sliding_window_local_theta", "gpt2_learned_layernorm_bias",
                                     "lfm2_conv_attn", "moe_dense_mix"])
def test_compiled_decode_step_matches_full_forward(variant):
    """The torch.compile'd static step (Decoder(compile=True)), fed the sequence one token at a time."""
    model = _model(**VARIANTS[variant])
    seq = torch.randint(0, V, (1, 30))
    decoder = Decoder(model, batch_size=1, capacity=CTX, compile=True)
    with torch.no_grad():
        full = model(seq)[0]
        model.hidden(seq[:, :10], decoder.cache)
        worst = max((decoder.step(seq[:, t:t + 1], torch.ones(1, dtype=torch.long))[0] - full[t]).abs().max().item()
                    for t in range(10, 30))
    assert worst < TOL


@pytest.mark.slow  # torch.compile: ~30 s
def test_chained_greedy_decoding_on_the_static_compiled_step():
    """The static cache (as under a CUDA graph) with the compiled step: the chain's tokens equal the loop's."""
    model = _model(**VARIANTS["llama_gqa"])
    prompts = [torch.randint(0, V, (n,)).tolist() for n in (5, 9)]
    ref = Decoder(model, batch_size=3, chain=False).generate(prompts, 16)
    chained = Decoder(model, batch_size=3, compile=True, chain=True)
    assert chained.cache.static and chained.generate(prompts, 16) == ref
