"""Fast-dLLM's prefix and dual caches for a fully bidirectional model (slm.model.diffusion, cache=prefix|dual;
slm.model.cache, KVCache(bidirectional=True)): exact where they must be, approximate otherwise, batched rows
with ragged prompts, and the refusals."""

import pytest
import torch

from slm.model import ModelConfig, Transformer
from slm.model.cache import KVCache
from slm.model.diffusion import DiffusionSampler
from slm.settings import nested

MASK = 49
CFG = {"n_layers": 2, "d_model": 32, "attention.n_heads": 4, "attention.n_kv_heads": 2, "vocab_size": 50,
       "context_length": 64, "attention.causal": False, "embedding.mask_token_id": MASK,
       "parametrization.init": "normal"}


def _model(**over) -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(**nested({**CFG, **over}))).eval()


def _prompts(*lengths: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(1)
    return [torch.randint(0, MASK, (n,), generator=gen).tolist() for n in lengths]


def _plain(model: Transformer, x: torch.Tensor) -> torch.Tensor:
    """Logits of the whole-sequence forward without a cache (past _record's wrappers)."""
    with torch.no_grad():
        return Transformer.head(model, Transformer.hidden(model, x))


def _record(model: Transformer) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(input ids, logits) of every sampler step: model.hidden's input beside model.head's output."""
    calls, inputs = [], []
    hidden, head = model.hidden, model.head
    model.hidden = lambda x, *a: inputs.append(x.clone()) or hidden(x, *a)
    model.head = lambda h: calls.append((inputs[-1], head(h))) or calls[-1][1].clone()  # the sampler edits its copy
    return calls


@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_each_block_starts_with_the_exact_logits(cache):
    """A block's first step runs the whole sequence: its logits equal the plain whole-sequence forward's on the
    same canvas, bit for bit; the block's later steps run the block (dual) or the block and the rest (prefix)."""
    model = _model(n_layers=3)
    prompt, N = _prompts(6)[0], 6 + 24
    calls = _record(model)
    DiffusionSampler(model, block_length=8, steps=12, cache=cache).generate([prompt], 24)
    assert len(calls) == 12  # 3 blocks of 4 steps
    for step, (x, logits) in enumerate(calls):
        lo = 6 + 8 * (step // 4)
        if step % 4 == 0:
            assert x.shape == (1, N)
            exact = _plain(model, x)[:, lo:lo + 8]
            assert torch.equal(logits, exact)
        else:
            assert x.shape == (1, 8 if cache == "dual" else N - lo)


def test_the_whole_generation_as_one_block_starts_exactly():
    """block_length = gen_length: the first step is one forward of prompt + all masks, cache or not."""
    prompt = _prompts(5)[0]
    firsts = []
    for cache in ("none", "prefix", "dual"):
        model = _model()
        calls = _record(model)
        DiffusionSampler(model, block_length=16, steps=4, cache=cache).generate([prompt], 16)
        firsts.append(calls[0][1])
    assert torch.equal(firsts[0], firsts[1]) and torch.equal(firsts[0], firsts[2])


@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_cache_agrees_with_the_exact_sampler_where_it_must(cache):
    """Two cases where nothing cached can be stale: one step per block (every step is a block start), and a
    one-layer model (a position's key and value depend on its own token only, and the prefix and the masked
    suffix do not change within a block). Threshold and sampled commits too; batched ragged prompts."""
    prompts = _prompts(7, 3, 11)
    multi = _model(n_layers=3)
    exact = DiffusionSampler(multi, block_length=8, steps=3).generate(prompts, 24, seed=0)
    assert DiffusionSampler(multi, block_length=8, steps=3, cache=cache).generate(prompts, 24, seed=0) == exact
    one = _model(n_layers=1)
    for kw in (dict(steps=24), dict(threshold=0.05), dict(steps=12, temperature=1.0)):
        exact = DiffusionSampler(one, block_length=8, **kw).generate(prompts, 24, seed=0)
        cached = DiffusionSampler(one, block_length=8, cache=cache, **kw)
        assert cached.generate(prompts, 24, seed=0) == exact, kw
        assert cached.settings(24)["cache"] == cache


@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_a_deeper_model_is_approximate_but_decodes(cache):
    """With two layers and several steps a block, a step after the block's first sees stale keys: its logits
    differ from the plain forward's on the same canvas; the output is still complete and mask-free."""
    model = _model()
    prompt = _prompts(6)[0]
    calls = _record(model)
    out = DiffusionSampler(model, block_length=8, steps=12, cache=cache).generate([prompt], 24)[0]
    assert len(out) == 24 and MASK not in out
    x, logits = calls[1]  # the first block's second step
    full = torch.cat([torch.tensor([prompt]), torch.full((1, 24), MASK)], dim=1)
    full[:, 6:6 + x.shape[1]] = x
    exact = _plain(model, full)[:, 6:14]
    assert not torch.allclose(logits, exact, atol=1e-6)


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_rows_decode_together_as_they_would_alone(cache):
    """Ragged prompts padded on the left: each row of the batch gives the tokens it gives alone, and a stop
    token ends its own row only (the rows are independent)."""
    model = _model()
    prompts = _prompts(9, 2, 5, 9)
    sampler = DiffusionSampler(model, block_length=6, steps=12, cache=cache)
    batch = sampler.generate(prompts, 18)
    assert sampler.last_timing["forwards"] == 12  # one forward a step for the whole batch
    assert batch == [sampler.generate([p], 18)[0] for p in prompts]
    stop = batch[1][4]  # a token in row 1's first block
    stopped = sampler.generate(prompts, 18, stop_tokens={stop})
    assert stopped == [row[:row.index(stop)] if stop in row else row for row in batch]
    assert stopped[1] == batch[1][:batch[1].index(stop)]


def test_bidirectional_cache_pads_and_reruns_in_place():
    """KVCache(bidirectional=True): a left-padded row gives the logits it gives alone, and a chunk rerun at its
    slots (peek(at=...)) over an unchanged sequence gives the whole forward's logits there; nothing kept."""
    model = _model()
    a, b = _prompts(10, 6)
    x = torch.zeros(2, 10, dtype=torch.long)
    x[0], x[1, 4:] = torch.tensor(a), torch.tensor(b)
    cache = KVCache(model.cfg, 2, 10, bidirectional=True)
    cache.pad_left(torch.tensor([0, 4]))
    with torch.no_grad():
        both = model(x, cache)
        alone = model(torch.tensor([b]))
        assert torch.allclose(both[1, 4:], alone[0], atol=1e-5) and torch.allclose(both[0], model(x[:1])[0], atol=1e-5)
        with cache.peek(at=5):
            again = model(x[:, 5:8], cache)
    assert torch.allclose(again, both[:, 5:8], atol=1e-5)
    assert cache.filled == 10 and cache.next_pos.tolist() == [10, 6] and cache._tail == 0


def test_bad_cache_settings_fail_in_one_line():
    model = _model()
    with pytest.raises(ValueError, match="sampler.cache='full' is invalid: one of: none, prefix, dual"):
        DiffusionSampler(model, cache="full")
    block_causal = _model(attention=dict(block=4))
    with pytest.raises(ValueError, match="block-causal"):
        DiffusionSampler(block_causal, cache="dual")
    assert DiffusionSampler(block_causal).settings(8)["cache"] == "committed_blocks"
    with pytest.raises(ValueError, match=r"cache='prefix': .*layer_types \['conv'\]"):
        DiffusionSampler(_model(layer_types=["conv", "attn"]), cache="prefix")
    with pytest.raises(ValueError, match="Canon layers AC"):
        DiffusionSampler(_model(canon=dict(set="AC")), cache="dual")
    with pytest.raises(ValueError, match="fully bidirectional"):
        KVCache(_model(attention=dict(causal=True), embedding=dict(mask_token_id=None)).cfg, 1, 8, bidirectional=True)
    with pytest.raises(ValueError, match="causal or block-causal"):
        KVCache(model.cfg, 1, 8)  # a bidirectional model caches only when asked
    for err in (lambda: DiffusionSampler(model).generate([], 8), lambda: DiffusionSampler(model).generate([[]], 8)):
        with pytest.raises(ValueError):
            err()


def test_decode_speed_records_the_cache():
    from slm.eval.throughput import measure_decode

    model = _model()
    stats = measure_decode(model, prompt_tokens=8, new_tokens=16, repeats=1,
                           diffusion={"block_length": 8, "cache": "dual"})
    assert stats["sampler"]["cache"] == "dual" and stats["sampler"]["forwards"] == 4 and stats["kv_cache_bytes"] > 0
    assert measure_decode(model, 8, 16, repeats=1)["sampler"]["cache"] == "none"
