"""FlexAttention (slm.components.flex) against SDPA and against attention written out: the same outputs for causal
and bidirectional attention, sliding windows, block-causal blocks, documents, GQA and soft-capping; the rule
that picks the backend per device, and the report of what ran."""

from __future__ import annotations

import pytest
import torch

from slm.components.attention import MultiHeadAttention
from slm.components.flex import (Masking, attention_backends, backends_used, choose, document_ids, set_backend,
                                 use_backend)
from slm.model import ModelConfig
from slm.model.transformer import Transformer
from slm.settings import nested

TINY = {"n_layers": 2, "d_model": 32, "attention.n_heads": 4, "vocab_size": 61, "context_length": 160}

CASES = {  # name: (config fields, documents in the batch)
    "causal": (dict(), False),
    "bidirectional": ({"attention.causal": False}, False),
    "window": ({"attention.sliding_window": 8, "layer_types": ["local_attn", "attn"]}, False),
    "window_bidirectional": ({"attention.causal": False, "attention.sliding_window": 8,
                              "layer_types": ["local_attn", "attn"]}, False),
    "block": ({"attention.causal": False, "attention.block": 16}, False),
    "documents": ({"embedding.document_end_id": 3}, True),
    "documents_window_gqa": ({"attention.sliding_window": 8, "layer_types": ["local_attn", "attn"],
                              "attention.n_kv_heads": 2, "embedding.document_end_id": 3}, True),
    "documents_block": ({"attention.causal": False, "attention.block": 16, "embedding.document_end_id": 3}, True),
    "softcap_gqa": ({"attention.logit_softcap": 2.0, "attention.n_kv_heads": 1, "attention.scale": 2.0}, False),
    "softcap_window_documents": ({"attention.logit_softcap": 2.0, "attention.sliding_window": 8,
                                  "attention.scale": 2.0, "layer_types": ["local_attn", "attn"],
                                  "embedding.document_end_id": 3}, True),
}


@pytest.fixture(autouse=True)
def _fresh_report():
    backends_used(reset=True)


def _ids(T: int = 150, documents: bool = False) -> torch.Tensor:
    idx = torch.randint(4, 61, (2, T))
    if documents:  # ends at different places in the two rows, one right at the start, one at the end
        idx[0, [0, 40, 41, 100]] = 3
        idx[1, [70, T - 1]] = 3
    return idx


def _allowed(T: int, causal: bool, window, block, docs) -> torch.Tensor:
    """(B or 1, 1, T, T) True where query i may see key j, from the definitions, position by position."""
    B = 1 if docs is None else docs.shape[0]
    out = torch.zeros(B, 1, T, T, dtype=torch.bool)
    for b in range(B):
        for i in range(T):
            for j in range(T):
                ok = (j <= i) if causal else True
                ok &= window is None or abs(i - j) < window
                ok &= block is None or j // block <= i // block
                ok &= docs is None or bool(docs[b, i] == docs[b, j])
                out[b, 0, i, j] = ok
    return out


def _reference(q, k, v, allowed, scale, softcap):
    """Softmax attention written out: scores, soft-cap, mask, softmax, weighted sum (float64)."""
    groups = q.shape[1] // k.shape[1]
    q, k, v = q.double(), k.double().repeat_interleave(groups, 1), v.double().repeat_interleave(groups, 1)
    s = q @ k.transpose(-2, -1) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    return (s.masked_fill(~allowed, float("-inf")).softmax(-1) @ v).float()


def test_document_ids_end_at_and_include_the_end_token():
    idx = torch.tensor([[5, 3, 5, 5, 3, 3, 5], [3, 5, 5, 5, 5, 5, 3]])
    assert document_ids(idx, 3).tolist() == [[0, 0, 1, 1, 1, 2, 3], [0, 1, 1, 1, 1, 1, 1]]


@pytest.mark.parametrize("causal,window,block,documents,kv_heads,softcap", [
    (True, None, None, False, 4, None),
    (False, None, None, False, 4, None),
    (True, 5, None, False, 2, None),
    (False, 5, None, False, 4, None),
    (False, None, 4, False, 1, None),
    (True, None, None, True, 2, None),
    (True, 5, None, True, 4, 1.5),
    (False, None, 4, True, 2, 1.5),
    (False, 5, None, True, 4, None),
])
def test_attend_equals_attention_written_out_on_both_backends(causal, window, block, documents, kv_heads,
                                                              softcap):
    T, H, hd = 24, 4, 8
    cfg = ModelConfig(**nested({**TINY, "attention.causal": causal, "attention.n_kv_heads": kv_heads,
                                "attention.logit_softcap": softcap}))
    attn = MultiHeadAttention(cfg).eval()
    q = 2 * torch.randn(2, H, T, hd)
    k, v = 2 * torch.randn(2, kv_heads, T, hd), torch.randn(2, kv_heads, T, hd)
    docs = None
    if documents:
        idx = _ids(T)
        idx[0, [6, 7]] = idx[1, 15] = 3
        docs = document_ids(idx, 3)
    masking = Masking(T, causal, window, block, docs, torch.device("cpu"))
    want = _reference(q, k, v, _allowed(T, causal, window, block, docs), attn.scale, softcap)
    for backend in ("sdpa", "flex_eager"):
        with use_backend(backend), torch.no_grad():
            got = attn.attend(q, k, v, masking, causal=False).view(2, T, H, hd).transpose(1, 2)
        assert torch.allclose(got, want, atol=2e-5, rtol=1e-5), (backend, (got - want).abs().max())


def test_dense_masks_are_the_definitions():
    idx = _ids(20)
    idx[0, [0, 7]] = idx[1, 12] = 3
    docs = document_ids(idx, 3)
    for causal, window, block, d in [(True, 6, None, None), (False, 6, None, docs), (False, None, 3, docs),
                                     (True, None, None, docs), (False, None, None, docs)]:
        m = Masking(20, causal, window, block, d, torch.device("cpu"))
        dense = m.dense()
        assert dense is not None
        assert torch.equal(dense.expand(docs.shape[0], 1, 20, 20), _allowed(20, causal, window, block, d).expand(
            docs.shape[0], 1, 20, 20))
    assert Masking(20, True, None, None, None, torch.device("cpu")).dense() is None  # SDPA's is_causal
    assert Masking(20, True, 20, None, None, torch.device("cpu")).plain  # a window >= T masks nothing


@pytest.mark.parametrize("case", list(CASES))
def test_model_logits_are_the_same_with_flex(case):
    fields, documents = CASES[case]
    model = Transformer(ModelConfig(**nested({**TINY, **fields}))).eval()
    idx = _ids(150, documents)
    with torch.no_grad():
        want = model(idx)
        with use_backend("flex_eager"):
            got = model(idx)
    ran = backends_used(reset=True)
    assert set(ran.values()) == {"flex_eager"} and len(ran) == len(set(model.cfg.layer_types))
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()
    if documents:  # and the documents matter: without them the logits move
        off = Transformer(ModelConfig(**nested({**TINY, **fields, "embedding.document_end_id": None}))).eval()
        off.load_state_dict(model.state_dict())
        with torch.no_grad():
            assert not torch.allclose(off(idx), want, atol=1e-3)


def test_block_curriculum_size_per_call_goes_through_flex():
    model = Transformer(ModelConfig(**nested({**TINY, "attention.causal": False}))).eval()
    idx = _ids(150)
    with torch.no_grad():
        want = model(idx, attention_block=32)
        with use_backend("flex_eager"):
            got = model(idx, attention_block=32)
    assert backends_used(reset=True) == {"bidirectional+block": "flex_eager"}
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)


def test_the_rule_per_device_and_its_override():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")  # a device object needs no GPU
    window = Masking(64, True, 8, None, None, cpu)
    plain = Masking(64, True, None, None, None, cpu)
    short = Masking(40, True, 8, None, None, cpu, full_context=False)
    assert choose(window, cpu, False, 0.0) == "sdpa" and choose(plain, cpu, True, 0.0) == "sdpa"
    assert choose(window, cuda, False, 0.0) == "flex" and choose(plain, cuda, True, 0.0) == "flex"  # softcap
    assert choose(plain, cuda, False, 0.0) == "sdpa"  # the fused causal kernel
    assert choose(short, cuda, False, 0.0) == "sdpa"  # a scoring request's length: no compile per length
    assert choose(window, cuda, False, 0.1) == "sdpa"  # attention dropout: flex has none
    with use_backend("flex_eager"):
        assert choose(plain, cpu, False, 0.0) == "flex_eager"
    assert choose(plain, cpu, False, 0.0) == "sdpa"
    with pytest.raises(ValueError, match="attention backend 'triton' is invalid: choose one of: auto, sdpa, flex"):
        set_backend("triton")
    cfg = ModelConfig(**nested({**TINY, "attention.sliding_window": 8, "layer_types": ["local_attn", "attn"],
                                "embedding.document_end_id": 3}))
    assert attention_backends(cfg, "cuda") == {"causal+window+document": "flex", "causal+document": "flex"}
    assert attention_backends(cfg, "cpu") == {"causal+window+document": "sdpa", "causal+document": "sdpa"}
    assert attention_backends(ModelConfig(**nested(TINY)), "cuda") == {"causal": "sdpa"}


def test_training_on_cpu_takes_sdpa_with_documents_and_gradients_flow():
    model = Transformer(ModelConfig(**nested({**TINY, "attention.sliding_window": 8,
                                              "layer_types": ["local_attn", "attn"], "embedding.document_end_id": 3}))).train()
    idx = _ids(150, True)
    model(idx).logsumexp(-1).mean().backward()
    assert backends_used(reset=True) == {"causal+window+document": "sdpa", "causal+document": "sdpa"}
    assert all(p.grad is not None and p.grad.isfinite().all() for p in model.parameters())


@pytest.mark.slow
def test_compiled_flex_equals_sdpa():
    """torch.compile(flex_attention) on the CPU (forward only: flex has no CPU backward): one compile."""
    fields, _ = CASES["softcap_window_documents"]
    model = Transformer(ModelConfig(**nested({**TINY, **fields, "attention.n_kv_heads": 2}))).eval()
    idx = _ids(150, True)
    with torch.no_grad():
        want = model(idx)
        with use_backend("flex"):
            got = model(idx)
    assert backends_used(reset=True) == {"causal+window+document+softcap": "flex", "causal+document+softcap": "flex"}
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()
