"""Completion log-probs of a causal model (slm.objectives.completion_logprobs) and the cached reference log-probs
(slm.objectives.reference_cache): padded batch sums against each sequence alone, the prompt not scored, refusals,
the cache's key, hits, recomputation and atomic write, and the Pairs feeding dpo."""

from __future__ import annotations

import json
import os

import pytest
import torch

from slm.data.errors import DataError
from slm.data.preference_records import PreferenceRecord
from slm.model import ModelConfig, Transformer
from slm.model.weights import load_model, save_model
from slm.objectives.base import ObjectiveError
from slm.objectives.completion_logprobs import completion_logprobs, preference_pairs
from slm.objectives.preference import dpo
from slm.objectives.reference_cache import cache_key, cache_path, reference_logprobs
from slm.settings import nested

TINY = {"n_layers": 2, "d_model": 32, "attention.n_heads": 4, "vocab_size": 50, "context_length": 32}
FAMILIES = {
    "llama_like": {"attention.n_kv_heads": 2},  # RoPE, rmsnorm, swiglu (the defaults)
    "gpt2_like": {"position.kind": "learned", "norm.kind": "layernorm", "mlp.kind": "gelu", "block.bias": True},
}
PAD = 0


def tiny(seed: int = 0, **fields) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(ModelConfig(**nested({**TINY, **fields}))).eval()


def alone(model: Transformer, prompt: list[int], completion: list[int]) -> float:
    """Σ log p(completion token | everything before it), from one unpadded forward of this sequence alone, token
    by token."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logp = model(ids)[0].double().log_softmax(-1)  # (T, V)
    return sum(float(logp[len(prompt) + i - 1, t]) for i, t in enumerate(completion))


def chars(text: str) -> list[int]:
    """A stand-in tokenizer: one token per character, ids 2..49 (0 is padding, 1 the start token)."""
    return [2 + ord(c) % 48 for c in text]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_padded_batch_sums_equal_each_sequence_alone(family):
    model = tiny(**FAMILIES[family])
    g = torch.Generator().manual_seed(1)
    shapes = [(1, 1), (5, 3), (2, 9), (12, 7), (3, 1)]
    prompts = [torch.randint(1, 50, (p,), generator=g).tolist() for p, _ in shapes]
    completions = [torch.randint(1, 50, (c,), generator=g).tolist() for _, c in shapes]
    with torch.no_grad():
        sums, counts = completion_logprobs(model, prompts, completions, PAD)
    assert sums.shape == counts.shape == (len(shapes),)
    assert counts.tolist() == [c for _, c in shapes]
    expected = torch.tensor([alone(model, p, c) for p, c in zip(prompts, completions)], dtype=torch.float64)
    assert torch.allclose(sums.double(), expected, atol=1e-5, rtol=0), (sums, expected)


def test_prompt_tokens_are_context_not_scored():
    model = tiny()
    prompt, completion = [4, 9, 13, 21], [7]
    with torch.no_grad():
        (one,), (count,) = completion_logprobs(model, [prompt], [completion], PAD)
        logits = model(torch.tensor([prompt]))[0, -1].double().log_softmax(-1)
        changed = prompt[:-1] + [22]
        (other,), (other_count,) = completion_logprobs(model, [changed], [completion], PAD)
        logits_changed = model(torch.tensor([changed]))[0, -1].double().log_softmax(-1)
    assert count == other_count == 1  # a completion of one token sums one token
    assert float(one) == pytest.approx(float(logits[7]), abs=1e-6)
    # a changed prompt token moves the sum only through what it conditions: the same one-token term, new context
    assert float(other) == pytest.approx(float(logits_changed[7]), abs=1e-6) and float(other) != float(one)
    # chain rule: log p(prompt + completion) − log p(prompt) = the completion's sum
    whole = alone(model, prompt[:1], prompt[1:] + completion) - alone(model, prompt[:1], prompt[1:])
    assert float(one) == pytest.approx(whole, abs=1e-5)


def test_too_long_and_bidirectional_models_are_refused_in_one_line():
    model = tiny()
    with torch.no_grad():
        completion_logprobs(model, [[1] * 20], [[2] * 13], PAD)  # the context + 1, as a training window: fine
        with pytest.raises(DataError) as err:
            completion_logprobs(model, [[1] * 3, [1] * 20], [[2], [2] * 14], PAD)
    assert str(err.value) == ("sequence 1: prompt + completion is 34 tokens (20 + 14), longer than the model's "
                              "context_length 32 + 1 (sequences are not truncated)")
    with pytest.raises(DataError, match="^sequence 0: prompt \\+ completion is an empty prompt"):
        completion_logprobs(model, [[]], [[3]], PAD)
    with pytest.raises(ObjectiveError) as err:
        completion_logprobs(tiny(**{"attention.causal": False}), [[1]], [[2]], PAD)
    assert "\n" not in str(err.value) and "model.attention.causal=false" in str(err.value)
    assert "masked-diffusion" in str(err.value)


RECORDS = [PreferenceRecord("add 1 2", '{"fn":"add"}', '{"fn"'), PreferenceRecord("sub 9", "[9]", "nine"),
           PreferenceRecord("q", "a longer answer", "b")]


def write_records(path, records=RECORDS):
    path.write_text("".join(json.dumps(r.__dict__) + "\n" for r in records))
    return path


class Counting:
    """A loader that counts loads and forwards."""

    def __init__(self):
        self.loads = self.forwards = 0

    def __call__(self, directory, device):
        self.loads += 1
        model = load_model(directory, device)
        forward = model.forward

        def counted(*args, **kwargs):
            self.forwards += 1
            return forward(*args, **kwargs)

        model.forward = counted
        return model


@pytest.fixture
def setup(tmp_path):
    ref = save_model(tiny(seed=3), tmp_path / "ref")
    return tmp_path, write_records(tmp_path / "pairs.jsonl"), ref


def cached(records, ref, cache, load, **kw):
    return reference_logprobs(records, ref, tokenize=chars, tokenizer_id="chars-v1", pad_id=PAD, cache_dir=cache,
                              bos=1, batch_size=4, load=load, **kw)


def test_reference_logprobs_are_cached_and_a_hit_loads_no_model(setup):
    tmp, records, ref = setup
    first = Counting()
    out = cached(records, ref, tmp / "cache", first)
    assert first.loads == 1 and first.forwards == 2  # 6 rows, 4 per forward
    model = load_model(ref)
    with torch.no_grad():
        direct = preference_pairs(model, RECORDS, chars, PAD, bos=1)
    assert torch.equal(out.chosen, direct.chosen) and torch.equal(out.rejected, direct.rejected)
    again = Counting()
    hit = cached(records, ref, tmp / "cache", again)
    assert again.loads == again.forwards == 0
    assert torch.equal(hit.chosen, out.chosen) and torch.equal(hit.rejected, out.rejected)
    key = cache_key(records, "chars-v1", ref, 1)
    assert list((tmp / "cache").iterdir()) == [cache_path(tmp / "cache", key)]


def test_the_key_names_the_records_the_tokenizer_and_the_checkpoint(setup):
    tmp, records, ref = setup
    key = cache_key(records, "chars-v1", ref, 1)
    assert key == cache_key(records, "chars-v1", tmp / "ref", 1)
    other_records = write_records(tmp / "other.jsonl", RECORDS[:2])
    other_ref = save_model(tiny(seed=4), tmp / "ref2")
    keys = {key, cache_key(other_records, "chars-v1", ref, 1), cache_key(records, "chars-v2", ref, 1),
            cache_key(records, "chars-v1", other_ref, 1), cache_key(records, "chars-v1", ref, None)}
    assert len(keys) == 5
    counting = Counting()
    cached(records, ref, tmp / "cache", counting)
    cached(records, other_ref, tmp / "cache", counting)
    assert counting.loads == 2 and len(list((tmp / "cache").iterdir())) == 2


@pytest.mark.parametrize("damage, note", [
    (lambda text: text[: len(text) // 2], "unreadable (JSONDecodeError)"),
    (lambda text: text.replace('"count": 3', '"count": 2'), "holds 2 records, the file has 3"),
    (lambda text: "\x00\xff", "unreadable"),
])
def test_a_damaged_cache_file_is_recomputed_with_one_note(setup, capsys, damage, note):
    tmp, records, ref = setup
    good = cached(records, ref, tmp / "cache", Counting())
    path = next((tmp / "cache").iterdir())
    path.write_text(damage(path.read_text()))
    capsys.readouterr()
    counting = Counting()
    again = cached(records, ref, tmp / "cache", counting)
    err = capsys.readouterr().err
    assert counting.loads == 1 and torch.equal(again.chosen, good.chosen)
    assert err.count("\n") == 1 and f"note: {path}: {note}" in err and "recomputing" in err
    assert cached(records, ref, tmp / "cache", Counting()).chosen.equal(good.chosen)  # repaired


def test_a_failed_write_leaves_no_file(setup, monkeypatch):
    tmp, records, ref = setup

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left on device while caching reference log-probs in"):
        cached(records, ref, tmp / "cache", Counting())
    assert list((tmp / "cache").iterdir()) == []


def test_pairs_feed_dpo_and_its_gradient_reaches_the_model(setup):
    tmp, records, ref = setup
    reference = cached(records, ref, tmp / "cache", Counting())
    policy = load_model(ref).train()
    pairs = preference_pairs(policy, RECORDS, chars, PAD, bos=1, reference=reference.batch(torch.arange(3)))
    assert pairs.chosen.shape == pairs.rejected.shape == (3,)
    assert pairs.chosen_tokens.tolist() == [len(chars(r.chosen)) for r in RECORDS]
    # the policy starts at the reference: Δ = 0 (dropout is off), so DPO's loss is log 2
    loss = dpo(pairs, beta=0.1).loss.mean()
    assert torch.isfinite(loss) and float(loss.detach()) == pytest.approx(0.6931472, abs=1e-5)
    loss.backward()
    grads = [p.grad for p in policy.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert policy.tok_emb.weight.grad.abs().sum() > 0
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.blocks[0].parameters())


def test_a_large_head_in_checkpointed_chunks_gives_the_same_sums_and_gradients(monkeypatch):
    import slm.objectives.linear_ce as linear_ce
    from slm.objectives.completion_logprobs import HEAD_CHUNK_ROWS, sequence_logprobs

    model = tiny(**{"vocab_size": 8192, "d_model": 16, "context_length": 64}).train()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 8192, (10, 65), generator=gen)
    scored = torch.ones(10, 64, dtype=torch.bool)
    scored[:, :5] = False  # a prompt of 5 tokens
    assert scored.sum() * 8192 * 4 > linear_ce.PLAIN_BELOW_BYTES and scored.sum() > 2 * HEAD_CHUNK_ROWS

    def run():
        model.zero_grad()
        sums, counts = sequence_logprobs(model, ids, scored)
        (sums * torch.linspace(-1, 1, 10)).sum().backward()
        return sums.detach(), [p.grad.clone() for p in model.parameters()]

    chunked, grads = run()
    monkeypatch.setattr(linear_ce, "PLAIN_BELOW_BYTES", 1 << 40)  # the whole (S, V) logits at once
    whole, whole_grads = run()
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-4)
    for a, b in zip(grads, whole_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
