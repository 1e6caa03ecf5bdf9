"""Titans' neural memory and the mac mixer: the chunked update against a token-by-token reference whose
gradients come from autograd, a float64 gradcheck of the whole layer, caching, config and counts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from slm.components import memory
from slm.data.tokenizers import CharTokenizer
from slm.eval.lm import SLMLM
from slm.eval.offline_tasks import mc_documents, speeches
from slm.components.position import RoPE
from slm.components.titans import MemoryAsContext
from slm.model.cache import KVCache, static_cache_ok
from slm.model.config import ConfigError, ModelConfig
from slm.model.counting import breakdown, count
from slm.model.generate import Decoder, generate
from slm.model.transformer import SequenceContext, Transformer
from slm.model.weights import save_model
from slm.runs.record import update_record
from slm.settings import nested


def mlp(weights, x):
    """The memory MLP as the paper writes it, per memory head: SiLU between layers, each W / sqrt(d_in)."""
    for i, w in enumerate(weights):
        x = (F.silu(x) if i else x) @ w / w.shape[0] ** 0.5
    return x


def token_by_token(weights, momentum, k, v, theta, eta, alpha, chunk, budget=None, max_norm=None):
    """The recurrence one token at a time, for one row and head; the gradient of token t by autograd at the
    weights of its chunk's start (chunk 1: at M_{t-1}, the plain recurrence), clipped to max_norm; the steps
    of a chunk scaled down to sum to `budget` at most."""
    weights = [w.clone() for w in weights]
    momentum = [s.clone() for s in momentum]
    for t in range(k.shape[0]):
        if t % chunk == 0:
            anchor = [w.detach().clone().requires_grad_(True) for w in weights]
            total = float(theta[t:t + chunk].sum())
        loss = (mlp(anchor, k[t]) - v[t]).pow(2).sum()
        grads = torch.autograd.grad(loss, anchor)
        if max_norm is not None:
            norm = sum(float(g.pow(2).sum()) for g in grads) ** 0.5
            grads = [g * min(1.0, max_norm / norm) for g in grads]
        step = theta[t] * (min(1.0, budget / total) if budget is not None else 1.0)
        momentum = [eta[t] * s - step * g for s, g in zip(momentum, grads)]
        weights = [(1 - alpha[t]) * w + s for w, s in zip(weights, momentum)]
    return weights, momentum


def random_memory(B=2, H=2, N=12, d=5, hidden=7, depth=2, dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    shapes = memory.layer_shapes(SimpleNamespace(d_model=d, memory=SimpleNamespace(heads=1, hidden=hidden, depth=depth)))
    weights = [torch.randn(B, H, i, o, generator=g, dtype=dtype) for i, o in shapes]
    momentum = [0.1 * torch.randn(B, H, i, o, generator=g, dtype=dtype) for i, o in shapes]
    k = F.normalize(torch.randn(B, H, N, d, generator=g, dtype=dtype), dim=-1) * d**0.5
    v = torch.randn(B, H, N, d, generator=g, dtype=dtype)
    theta = 0.3 * torch.rand(B, H, N, generator=g, dtype=dtype)
    eta = torch.rand(B, H, N, generator=g, dtype=dtype)
    alpha = 0.2 * torch.rand(B, H, N, generator=g, dtype=dtype)
    return weights, momentum, k, v, theta, eta, alpha


@pytest.mark.parametrize("chunk, depth, budget, max_norm", [(1, 2, None, None), (4, 2, None, None),
                                                             (12, 2, None, None), (5, 3, None, None),
                                                             (3, 1, None, None), (4, 2, 0.5, 3.0), (1, 2, 0.2, 3.0)])
def test_chunked_update_equals_token_by_token_reference(chunk, depth, budget, max_norm):
    weights, momentum, k, v, theta, eta, alpha = random_memory(depth=depth)
    got_w, got_s = memory.learn(weights, momentum, k, v, theta, eta.log(), (1 - alpha).log(), chunk, budget,
                                max_norm)
    for b in range(2):
        for h in range(2):
            ref_w, ref_s = token_by_token([w[b, h] for w in weights], [s[b, h] for s in momentum], k[b, h], v[b, h],
                                          theta[b, h], eta[b, h], alpha[b, h], chunk, budget, max_norm)
            for got, ref in zip(got_w + got_s, ref_w + ref_s):
                torch.testing.assert_close(got[b, h], ref, rtol=1e-10, atol=1e-10)


def test_chunk_size_changes_the_gradients_taken():
    """Chunking is an approximation: gradients at the chunk's first weights, not the latest."""
    weights, momentum, k, v, theta, eta, alpha = random_memory()
    one = memory.learn(weights, momentum, k, v, theta, eta.log(), (1 - alpha).log(), 1)[0]
    whole = memory.learn(weights, momentum, k, v, theta, eta.log(), (1 - alpha).log(), 12)[0]
    assert (one[0] - whole[0]).abs().max() > 1e-3


def test_strong_decay_over_a_long_chunk_stays_finite():
    weights, momentum, k, v, theta, eta, alpha = random_memory(N=512, B=1, H=1)
    w, s = memory.learn(weights, momentum, k, v, theta, torch.full_like(eta, 1e-4).log(),
                        torch.full_like(alpha, 1e-6).log(), 512)
    assert all(torch.isfinite(t).all() for t in w + s)


def tiny_cfg(**kw) -> ModelConfig:
    """A tiny model with a mac layer; `memory=dict(...)` changes fields of model.memory, the rest model fields."""
    base = dict(n_layers=2, d_model=8, attention=dict(n_heads=2, n_kv_heads=1), vocab_size=11, context_length=16)
    memory = dict(layers=[0], segment=3, heads=2, hidden=3, persistent_tokens=2)
    return ModelConfig(**nested({**base, **kw, "memory": {**memory, **kw.get("memory", {})}}))


def test_gradcheck_of_the_whole_memory_layer():
    """d(output)/d(input and every parameter) by autograd through the memory's hand-written gradients,
    against finite differences, in float64."""
    cfg = tiny_cfg()  # no qk-norm: RMSNorm computes in float32 by design
    layer = MemoryAsContext(cfg).double()
    names = [n for n, _ in layer.named_parameters()]
    params = [p.detach().clone().requires_grad_(True) for _, p in layer.named_parameters()]
    x = torch.randn(1, 7, cfg.d_model, dtype=torch.float64, requires_grad=True)  # 3 segments, the last partial
    seq = SequenceContext(cfg, RoPE.from_config(cfg), torch.arange(7), torch.float64)

    def run(x, *params):
        return torch.func.functional_call(layer, dict(zip(names, params)), (x, seq))

    # fast_mode: v^T J u for random u, v against the same product by finite differences (PyTorch's cheaper check)
    assert torch.autograd.gradcheck(run, (x, *params), eps=1e-6, atol=1e-5, rtol=1e-4, fast_mode=True)


def test_memory_carries_information_across_segments_and_nothing_leaks_backward():
    cfg = tiny_cfg(n_layers=1, context_length=12)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    idx = torch.randint(0, 11, (1, 12))
    changed = idx.clone()
    changed[0, 1] = (idx[0, 1] + 1) % 11  # a token of the first segment
    a, b = model(idx), model(changed)
    assert torch.equal(a[0, 0], b[0, 0])  # causal: position 0 does not see position 1
    assert (a[0, 3:] - b[0, 3:]).abs().max() > 0  # later segments see it, through the memory only
    late = changed.clone()
    late[0, 10] = (idx[0, 10] + 1) % 11
    assert torch.equal(model(late)[0, :10], b[0, :10])


@pytest.mark.parametrize("activation, conv", [("none", 0), ("silu", 0), ("silu", 3), ("none", 1)])
def test_cache_prefill_then_steps_and_padded_rows_match_the_whole_sequence(activation, conv):
    cfg = tiny_cfg(n_layers=3, memory=dict(layers=[0, 2], chunk=1, qkv_activation=activation, qkv_conv=conv),
                   d_model=16, context_length=24)
    model = Transformer(cfg).eval()
    idx = torch.randint(0, 11, (2, 20))
    with torch.no_grad():
        full = model(idx)
        cache = KVCache(cfg, 2, 24)
        steps = [model(idx[:, :4], cache)] + [model(idx[:, t:t + 1], cache) for t in range(4, 20)]
        torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)
        cache = KVCache(cfg, 2, 24)  # rows at different positions, then together again, then copied
        first = model(torch.stack([idx[0, :7], idx[1, :7]]), cache, torch.tensor([7, 2]))
        torch.testing.assert_close(first[0], full[0, :7], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(first[1, :2], full[1, :2], rtol=1e-5, atol=1e-5)
        second = model(torch.stack([idx[0, 7:12], idx[1, 2:7]]), cache)
        torch.testing.assert_close(second, torch.stack([full[0, 7:12], full[1, 2:7]]), rtol=1e-5, atol=1e-5)
        copy = cache.select(torch.tensor([1, 1]))
        third = model(idx[1:, 7:10].repeat(2, 1), copy)
        torch.testing.assert_close(third, full[1:, 7:10].repeat(2, 1, 1), rtol=1e-5, atol=1e-5)


def test_generation_runs_on_the_eager_cache_only():
    cfg = tiny_cfg(context_length=24)
    model = Transformer(cfg).eval()
    assert not static_cache_ok(cfg) and static_cache_ok(ModelConfig(attention=dict(n_heads=2)))
    with pytest.raises(ValueError, match="eager KV cache"):
        KVCache(cfg, 1, 8, static=True)
    prompts = [[1, 2, 3, 4, 5], [6, 7]]
    out = generate(model, prompts, 9)
    for p, o in zip(prompts, out):  # greedy batch decoding = one row at a time = argmax of whole forwards
        ids = list(p)
        for _ in range(9):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
        assert o == ids[len(p):]
    assert Decoder(model).cuda_graph is False


def test_counts_breakdown_and_the_preset():
    for kw in (dict(), {"block.bias": True, "memory": dict(depth=3, heads=1, hidden=5)}, dict(memory=dict(depth=1)),
               dict(memory=dict(qkv_conv=4)),
               dict(layer_types=["attn", "conv"], memory=dict(layers=[1]), canon=dict(set="AC"))):
        cfg = tiny_cfg(**kw)
        assert count(cfg).params_total == Transformer(cfg).num_params() == sum(breakdown(cfg).values())
    cfg = tiny_cfg(n_layers=3, layer_types=["conv"], memory=dict(layers=[2]))
    assert cfg.layer_types == ["conv", "conv", "mac"] and ModelConfig(**cfg.to_dict()) == cfg


@pytest.mark.parametrize("kw, match", [
    (dict(memory=dict(layers=[2])), "memory.layers"),
    (dict(memory=dict(layers=[0, 0])), "memory.layers"),
    (dict(memory=dict(segment=None)), "memory.segment"),
    (dict(memory=dict(layers=[], segment=3)), "no mac layer"),
    (dict(memory=dict(chunk=2)), "memory.chunk"),
    (dict(memory=dict(heads=3)), "memory.heads"),
    ({"attention.causal": False}, "causal"),
    (dict(canon=dict(set="B")), "Canon B"),
    (dict(memory=dict(lr=0)), "memory.lr"),
    (dict(memory=dict(segment=17)), "context_length"),
])
def test_bad_memory_settings_name_the_field(kw, match):
    with pytest.raises(ConfigError, match=match):
        tiny_cfg(**kw)


def test_lm_eval_scores_match_the_whole_sequence_forward(tmp_path):
    """The `slm` lm-eval model on a mac model: prefix sharing (contexts prefilled once into a padded cache,
    rows copied per continuation) scores what one whole-sequence forward does."""
    from lm_eval.api.instance import Instance

    text = "\n\n".join("\n".join(s) for s in speeches())
    tok = CharTokenizer(CharTokenizer.select(CharTokenizer.fit_counts([text]), None), unk=False, eot=False)
    cfg = tiny_cfg(d_model=32, vocab_size=tok.vocab_size, context_length=64, memory=dict(segment=8, chunk=4))
    model = Transformer(cfg)
    save_model(model, tmp_path / "model")
    tok.save(tmp_path / "model")
    update_record(tmp_path, status="completed", eval={"val_nll": 4.0, "val_ppl": 54.6})
    lm = SLMLM(pretrained=str(tmp_path), batch_size=8, device="cpu")
    docs = mc_documents()[:3]
    args = [(d["context"], c) for d in docs for c in d["choices"]]
    requests = [Instance("loglikelihood", {}, a, i) for i, a in enumerate(args)]
    shared = lm.loglikelihood(requests, disable_tqdm=True)
    for (context, cont), (score, _) in zip(args, shared):
        ctx_ids, cont_ids = lm._encode_pair(context, cont)
        ids = (ctx_ids + cont_ids)[-65:]
        with torch.no_grad():
            logp = lm.model(torch.tensor([ids[:-1]])).log_softmax(-1)[0]
        ref = float(sum(logp[t - 1, ids[t]] for t in range(len(ids) - len(cont_ids), len(ids))))
        assert score == pytest.approx(ref, abs=1e-4)


@pytest.mark.slow
def test_the_memory_carries_key_value_pairs_past_attentions_reach():
    """bench/titans_recall.py's check at its defaults, seed 0 (~15 min on 2 threads): 4 pairs shown in the first
    segment of 128 positions and asked in the last; the memory model (block 0 a mac layer) learns them, the
    local-attention model of equal parameters, which cannot see back that far, stays at chance (1/16)."""
    from bench.titans_recall import Task, configs, train

    torch.set_num_threads(2)
    task = Task(length=128, segment=32, pairs=4)
    models = configs(task, width=64, lr=0.5, chunk=None, depth=2)
    memory = train(models["memory"], task, steps=3000, batch=32, lr=3e-3, seed=0)
    local = train(models["local"], task, steps=3000, batch=32, lr=3e-3, seed=0)
    assert abs(memory["params"] - local["params"]) < 0.005 * local["params"]
    assert memory["accuracy"] > 0.9, memory
    assert local["accuracy"] < 0.1, local  # chance is 0.0625


def test_the_silu_option_applies_silu_to_the_memory_projections():
    """qkv_activation=silu reads the memory at rms(silu(x W_Q)) (arXiv 2501.00663 Sec. 4.4): the read equals
    memory.read of that query written out here; none reads at rms(x W_Q)."""
    from slm.components.titans import MemoryAsContext

    torch.manual_seed(0)
    x = torch.randn(2, 5, 8)
    for activation, act in (("none", lambda t: t), ("silu", torch.nn.functional.silu)):
        layer = MemoryAsContext(tiny_cfg(memory=dict(qkv_activation=activation)))
        carry = layer._fresh(2, x)
        q = act(layer.to_q(x)).view(2, 5, 2, 4).transpose(1, 2)
        q = q / q.pow(2).mean(-1, keepdim=True).add(layer.eps).sqrt()
        expected = memory.read(carry.weights, q).transpose(1, 2).reshape(2, 5, 8)
        with torch.no_grad():
            torch.testing.assert_close(layer._read(carry, x)[0], expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ConfigError, match="model.memory.qkv_activation='gelu' is invalid: choose one of: none, silu"):
        tiny_cfg(memory=dict(qkv_activation="gelu"))


def test_the_qkv_convolution_is_causal_over_the_sequence_and_across_segments():
    """memory.qkv_conv=K: the memory's query at token t is sum_j w_j * (x W_Q)_{t-j} over j < K (zeros before the
    start), written out here from the layer's weights over the whole sequence, across a segment end; and a token
    changes no earlier output."""
    from slm.components.titans import MemoryAsContext

    torch.manual_seed(0)
    layer = MemoryAsContext(tiny_cfg(memory=dict(qkv_conv=3, segment=3)))
    x = torch.randn(2, 7, 8)
    carry = layer._fresh(2, x)
    with torch.no_grad():
        first, tails = layer._read(carry, x[:, :4])
        carry.tails = tails
        second, _ = layer._read(carry, x[:, 4:])
        proj = layer.to_q(x)  # (2, 7, 8)
        w = layer.qkv_conv[0].weight[:, 0, :]  # (8, 3)
        padded = torch.cat([torch.zeros(2, 2, 8), proj], dim=1)
        q = torch.stack([sum(padded[:, t + j] * w[:, j] for j in range(3)) for t in range(7)], dim=1)
        q = q.view(2, 7, 2, 4).transpose(1, 2)
        q = q / q.pow(2).mean(-1, keepdim=True).add(layer.eps).sqrt()
        expected = memory.read(carry.weights, q).transpose(1, 2).reshape(2, 7, 8)
        torch.testing.assert_close(torch.cat([first, second], dim=1), expected, rtol=1e-5, atol=1e-6)
    model = Transformer(tiny_cfg(memory=dict(qkv_conv=3), context_length=16)).eval()
    idx = torch.randint(0, 11, (1, 12))
    changed = idx.clone()
    changed[0, 8] = (idx[0, 8] + 1) % 11
    with torch.no_grad():
        assert torch.equal(model(idx)[0, :8], model(changed)[0, :8])


def test_the_study_count_leaves_no_room_for_the_papers_convolutions():
    """titans_mac is the study's 67.76M without the q/k/v convolutions; each width k adds 3 x 384 x k per mac
    layer (4 of them), and already k = 2 rounds to 67.77M: why memory.qkv_conv defaults to 0."""
    from slm.model import config_from_spec
    from tests.conftest import compose_model_node

    counts = {k: count(config_from_spec(compose_model_node("model=titans_mac", f"model.memory.qkv_conv={k}")))
              .params_total for k in (0, 2, 4)}
    assert counts[0] == 67_757_964 and round(counts[0] / 1e6, 2) == 67.76
    assert all(counts[k] == counts[0] + 3 * 384 * k * 4 for k in (2, 4)) and round(counts[2] / 1e6, 2) == 67.77
