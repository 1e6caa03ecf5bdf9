"""The masked-diffusion sampler: block order, no mask in the output, commit rules, the block-causal cache,
and a tiny trained model that continues its pattern."""

import pytest
import torch

from slm.model import ModelConfig, Transformer
from slm.model.diffusion import DiffusionSampler, diffusion_generate, split_evenly
from slm.objectives.mdlm import MDLM
from slm.settings import nested

MASK = 7
TINY = {"n_layers": 2, "d_model": 32, "attention.n_heads": 4, "vocab_size": 8, "context_length": 32,
        "attention.causal": False, "embedding.mask_token_id": MASK}


def test_split_evenly():
    assert split_evenly(10, 4) == [3, 3, 2, 2] and split_evenly(3, 3) == [1, 1, 1] and split_evenly(2, 4) == [1, 1, 0, 0]


def test_blocks_fill_left_to_right_and_the_mask_never_comes_out():
    model = Transformer(ModelConfig(**nested(TINY))).eval()
    model.lm_head.weight.data[MASK] += 10.0  # the mask would be every argmax if it could be predicted
    canvases = []
    hidden = model.hidden
    model.hidden = lambda x, *a: canvases.append(x[0].clone()) or hidden(x, *a)
    prompt = [1, 2, 3]
    out = diffusion_generate(model, [prompt], gen_length=12, block_length=4, steps=6)[0]
    assert len(out) == 12 and MASK not in out
    assert len(canvases) == 6  # 3 blocks of 2 steps: one forward each
    for step, x in enumerate(canvases):
        block = step // 2  # positions before the current block are all filled, those after all masked
        lo, hi = 3 + 4 * block, 7 + 4 * block
        assert MASK not in x[:lo].tolist() and set(x[hi:].tolist()) <= {MASK}
        assert (x[lo:hi] == MASK).sum() == (4 if step % 2 == 0 else 2)  # 2 tokens committed a step


def test_threshold_commits_everything_confident():
    model = Transformer(ModelConfig(**nested(TINY))).eval()
    sure = DiffusionSampler(model, block_length=4, threshold=1e-9)
    sure.generate([[1, 2]], 12)
    assert sure.last_timing["forwards"] == 3  # one step per block
    unsure = DiffusionSampler(model, block_length=4, threshold=1.0)
    unsure.generate([[1, 2]], 12)
    assert unsure.last_timing["forwards"] == 12  # one token per step


def test_block_causal_cache_gives_the_uncached_tokens():
    """A block-causal model: committed blocks cached, the current block run against the cache, equals
    running the whole canvas each step (the attention mask makes later blocks invisible)."""
    cfg = ModelConfig(**nested({**{**TINY, "vocab_size": 50, "context_length": 48, "embedding.mask_token_id": 49},
                                "attention.block": 4, "canon": dict(set="AC")}))
    model = Transformer(cfg).eval()
    prompt = torch.randint(0, 49, (8,)).tolist()  # two whole blocks
    cached = DiffusionSampler(model, steps=12)
    full = DiffusionSampler(model, block_length=4, steps=12)
    full.block = None  # force the whole-canvas path
    a = cached.generate([prompt], 12)
    b = full.generate([prompt], 12)
    assert a == b and cached.last_timing["forwards"] == 1 + 12 + 2  # prefill, 12 steps, 2 blocks kept
    # a prompt ending inside a block: that block's first positions are the prompt's tail
    assert len(cached.generate([prompt[:6]], 10)[0]) == 10


def test_bad_settings_fail_clearly():
    causal = Transformer(ModelConfig(n_layers=1, d_model=16, attention=dict(n_heads=2), vocab_size=8,
                                     context_length=16))
    with pytest.raises(ValueError, match="masked diffusion model"):
        DiffusionSampler(causal)
    model = Transformer(ModelConfig(**nested(TINY)))
    with pytest.raises(ValueError, match="threshold=1.5"):
        DiffusionSampler(model, threshold=1.5)
    with pytest.raises(ValueError, match="exceeds context_length"):
        diffusion_generate(model, [[1] * 30], 8)


def test_a_trained_model_continues_its_pattern(one_thread):
    """Sequences count up mod 7 from a random start; after 300 MDLM steps the sampler continues a prompt."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**nested({**TINY, "parametrization.init": "normal"})))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    objective = MDLM()
    for step in range(300):
        start = torch.randint(0, 7, (32, 1))
        tokens = (start + torch.arange(33)) % 7  # (B, T + 1): the objective drops the last
        loss = objective.loss(model, tokens, seed=step)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    out = diffusion_generate(model, [[4, 5, 6, 0]], gen_length=16, block_length=8, steps=8)[0]
    assert out == [(1 + i) % 7 for i in range(16)]


def test_decode_speed_of_a_diffusion_model_records_its_sampler():
    from slm.eval.throughput import measure_decode

    model = Transformer(ModelConfig(**nested(TINY)))
    stats = measure_decode(model, prompt_tokens=8, new_tokens=64, repeats=1, diffusion={"block_length": 8})
    assert stats["decoder"] == "masked_diffusion" and stats["new_tokens"] == 24  # 8 + 24 fill the context of 32
    assert stats["sampler"]["steps"] == 6 and stats["sampler"]["block_length"] == 8 and stats["sampler"]["forwards"] == 6
    assert stats["decode_tokens_per_s"] > 0 and stats["generate_tokens_per_s"] > 0 and stats["kv_cache_bytes"] == 0
    with pytest.raises(ValueError, match="unknown"):
        measure_decode(model, 8, 8, repeats=1, diffusion={"blocks": 8})
    ar = measure_decode(Transformer(ModelConfig(**nested({**TINY, "attention.causal": True}))), 8, 8, repeats=1)
    assert ar["decoder"] == "autoregressive" and ar["generate_tokens_per_s"] > 0
