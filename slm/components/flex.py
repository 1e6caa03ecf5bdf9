"""Masked attention of a whole-sequence forward, through SDPA or FlexAttention, and the rule that picks one.

`Masking` says which keys each query may see: causal or bidirectional, a sliding window, block-causal blocks
(`attention.block`) and documents (ids (B, T) from `document_ids`: packed documents attend only within
themselves). It gives that mask in the two forms the backends take: `dense()`, a boolean tensor for
`scaled_dot_product_attention` (None where SDPA's fused causal or full attention suffices), and
`block_mask()`, a FlexAttention BlockMask (static ones are cached per shape; a document mask is built once
per forward, shared by the layers).

Backends (`choose`), per attention call:
    sdpa        scaled_dot_product_attention with the dense mask, or is_causal without one (the soft-capped
                path: explicit scores, slm.components.attention)
    flex        torch.compile(flex_attention) with the block mask; soft-capping as its score_mod
    flex_eager  flex_attention uncompiled: a reference that materialises the scores (slow)
Rule: on CUDA, `flex` for every masked or soft-capped attention over the model's full context (the shape of
every training and validation window: compiled once per batch shape, `dynamic=False`) and SDPA's fused
kernels for plain causal or full attention; `sdpa` for other lengths (scoring requests of any length: a
compile per length would cost more than it saves, and the CPU's flex kernel fails to build with dynamic
shapes in torch 2.13) and on any other device. Measured on CPU (torch 2.13, one thread, bench/attention_masks.py,
GQA 8/2 heads of 32): flex has no backward there, so training cannot use it; eager flex is 6-13x slower than
SDPA with a dense mask; compiled flex's forward over SDPA's is 1.0 (window 64), 1.5 (block 64) and 2.1
(documents, the block mask built per forward) at T = 256, and 0.33, 0.74 and 0.65 at T = 1024, after 4-13 s
of compiling per shape; and inside a compiled model (train.compile) inductor's CPU flex kernel fails to lower.
So the CPU keeps SDPA, which also keeps every preset's CPU logits bit-identical.
Dropout on the attention probabilities always takes `sdpa` (flex has none). `use_backend(name)` overrides
the rule for every whole-sequence attention (tests, benchmarks); `backends_used()` reports the backend each
attention kind actually ran with (eager calls), `attention_backends(cfg, device)` the one it would.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager

import torch

BACKENDS = ("auto", "sdpa", "flex", "flex_eager")

_override = "auto"
_used: dict[str, str] = {}
_static_masks: dict[tuple, object] = {}  # (device, T, causal, window, block) -> BlockMask
_STATIC_MASKS_KEPT = 64


def document_ids(idx: torch.Tensor, end_id: int) -> torch.Tensor:
    """Token ids (B, T) -> document index per position (B, T): a document ends at, and includes, `end_id` (as it
    stands in the model's input: an end id that masked diffusion replaced by the mask token splits nothing)."""
    ends = (idx == end_id).to(torch.int32)
    return ends.cumsum(1, dtype=torch.int32) - ends


def attention_mask(T: int, causal: bool, window: int | None, device: torch.device,
                   block: int | None = None) -> torch.Tensor | None:
    """Boolean (T, T) mask, True where query i may attend to key j; None when plain causal (or, for a
    bidirectional model, full) attention suffices.

    A window W lets each query see W keys including itself (j > i - W), as transformers does. A block B
    (block-causal, for bidirectional models) lets query i see keys j with j // B <= i // B.
    """
    blocked = block is not None and block < T and not causal
    if (window is None or window >= T) and not blocked:
        return None
    i = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    mask = (i - j).abs() < (window if window is not None else T)
    if causal:
        mask &= j <= i
    if blocked:
        mask &= j // block <= i // block
    return mask


class Masking:
    """Which keys each query of a whole-sequence forward of length T may see (True: may attend)."""

    def __init__(self, T: int, causal: bool, window: int | None, block: int | None,
                 documents: torch.Tensor | None, device: torch.device, full_context: bool = True):
        self.T, self.causal, self.device, self.documents = T, causal, torch.device(device), documents
        self.full_context = full_context  # T is the model's context length (the training shape)
        self._window, self._block = window, block  # as given: dense() passes them to attention_mask unchanged
        self.window = window if window is not None and window < T else None  # a window >= T masks nothing
        self.block = block if block is not None and block < T and not causal else None  # block-causal
        self._dense = self._flex = None
        self._dense_made = False

    @property
    def kind(self) -> str:
        """E.g. causal, bidirectional+block, causal+window+document."""
        parts = ["causal" if self.causal else "bidirectional"]
        parts += [name for name, on in (("window", self.window), ("block", self.block),
                                        ("document", self.documents)) if on is not None]
        return "+".join(parts)

    @property
    def plain(self) -> bool:
        """No mask beyond causal (or none at all): SDPA's fused kernels apply."""
        return self.window is None and self.block is None and self.documents is None

    def dense(self) -> torch.Tensor | None:
        """Boolean (T, T), or (B, 1, T, T) with documents; None when plain (is_causal or full attention)."""
        if not self._dense_made:
            mask = attention_mask(self.T, self.causal, self._window, self.device, self._block)
            if self.documents is not None:
                same = (self.documents[:, :, None] == self.documents[:, None, :])[:, None]  # (B, 1, T, T)
                if mask is None and self.causal:
                    mask = torch.ones(self.T, self.T, dtype=torch.bool, device=self.device).tril()
                mask = same if mask is None else same & mask
            self._dense, self._dense_made = mask, True
        return self._dense

    def mask_mod(self):
        """FlexAttention's mask_mod(b, h, q, kv) -> bool, or None when every key is visible."""
        causal, window, block, docs = self.causal, self.window, self.block, self.documents
        if not causal and window is None and block is None and docs is None:
            return None

        def mod(b, h, q, kv):
            ok = kv <= q if causal else (q >= 0) & (kv >= 0)  # the latter: all true, of the right shape
            if window is not None:
                ok = ok & ((q - kv).abs() < window)
            if block is not None:
                ok = ok & (kv // block <= q // block)
            if docs is not None:
                ok = ok & (docs[b, q] == docs[b, kv])
            return ok

        return mod

    def block_mask(self):
        """The FlexAttention BlockMask (None: no mask at all)."""
        if self._flex is None:
            self._flex = _block_mask(self)
        return None if self._flex is False else self._flex


def _block_mask(m: Masking):
    from torch.nn.attention.flex_attention import create_block_mask

    mod = m.mask_mod()
    if mod is None:
        return False
    if m.documents is not None:
        return create_block_mask(mod, m.documents.shape[0], None, m.T, m.T, device=m.device)
    key = (str(m.device), m.T, m.causal, m.window, m.block)
    if torch.compiler.is_compiling():  # inside a compiled model: built in its graph, not cached
        return create_block_mask(mod, None, None, m.T, m.T, device=m.device)
    if key not in _static_masks:
        if len(_static_masks) >= _STATIC_MASKS_KEPT:
            _static_masks.pop(next(iter(_static_masks)))
        _static_masks[key] = create_block_mask(mod, None, None, m.T, m.T, device=m.device)
    return _static_masks[key]


# ---------------------------------------------------------------------------------------------- the rule
def choose(masking: Masking, device: torch.device, softcap: bool, dropout: float) -> str:
    """The backend for one attention call (see the module docstring): sdpa, flex or flex_eager."""
    if dropout > 0:
        return "sdpa"
    if _override != "auto":
        return _override
    if torch.device(device).type == "cuda" and (not masking.plain or softcap) and masking.full_context:
        return "flex"
    return "sdpa"


def set_backend(name: str) -> None:
    """Override the rule for every whole-sequence attention: auto (the rule), sdpa, flex or flex_eager."""
    global _override
    if name not in BACKENDS:
        raise ValueError(f"attention backend {name!r} is invalid: choose one of: {', '.join(BACKENDS)}")
    _override = name


@contextmanager
def use_backend(name: str):
    """`set_backend(name)` inside the block, the previous choice after it."""
    before = _override
    set_backend(name)
    try:
        yield
    finally:
        set_backend(before)


def record(kind: str, backend: str) -> None:
    """Note that attention of `kind` ran on `backend` (eager calls only: nothing is traced into a graph)."""
    if not torch.compiler.is_compiling():
        _used[kind] = backend


def backends_used(reset: bool = False) -> dict[str, str]:
    """{attention kind: backend} of the attention calls since the last reset (e.g. {'causal+window': 'flex'})."""
    out = dict(_used)
    if reset:
        _used.clear()
    return out


def attention_kind(masking: Masking, softcap: bool) -> str:
    return masking.kind + ("+softcap" if softcap else "")


def attention_backends(cfg, device: torch.device | str, training: bool = False) -> dict[str, str]:
    """{attention kind: backend} a whole-sequence forward of `cfg` at full context runs on `device` (the rule and
    any override applied), for the attention layers (attn, local_attn) of its layer_types."""
    out = {}
    dropout = cfg.block.dropout if training and "attention" in cfg.block.dropout_at else 0.0
    docs = None if cfg.embedding.document_end_id is None else torch.zeros(1, 1, dtype=torch.int32)
    for layer in sorted(set(cfg.layer_types)):
        if layer not in ("attn", "local_attn"):
            continue
        window = cfg.attention.sliding_window if layer == "local_attn" else None
        block = None if cfg.attention.causal else cfg.attention.block
        m = Masking(cfg.context_length, cfg.attention.causal, window, block, docs, torch.device(device))
        softcap = cfg.attention.logit_softcap is not None
        out[attention_kind(m, softcap)] = choose(m, torch.device(device), softcap, dropout)
    return out


# ---------------------------------------------------------------------------------------------- the call
_compiled = None
_softcap_mods: dict = {}  # cap -> score_mod: one function per cap, so a compiled kernel is reused


def _compiled_flex():
    global _compiled
    if _compiled is None:
        from torch.nn.attention.flex_attention import flex_attention

        _compiled = torch.compile(flex_attention, dynamic=False)
    return _compiled


def _softcap_mod(cap: float):
    if cap not in _softcap_mods:
        def mod(score, b, h, q, kv):
            return cap * torch.tanh(score / cap)

        _softcap_mods[cap] = mod
    return _softcap_mods[cap]


def flex_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, masking: Masking, scale: float,
                softcap: float | None, compiled: bool = True) -> torch.Tensor:
    """FlexAttention of queries (B, H, T, hd) over keys and values (B, KV, T, hd) -> (B, H, T, hd); the scores
    are q.k * scale, then cap * tanh(s / cap) if soft-capped, then masked. Inside a compiled model the
    uncompiled function is called: the model's compile builds its kernel."""
    from torch.nn.attention.flex_attention import flex_attention

    kwargs = dict(block_mask=masking.block_mask(), scale=scale, enable_gqa=q.shape[1] != k.shape[1])
    if softcap is not None:
        kwargs["score_mod"] = _softcap_mod(float(softcap))
    if torch.compiler.is_compiling():
        return flex_attention(q, k, v, **kwargs)
    if compiled:
        return _compiled_flex()(q, k, v, **kwargs)
    with warnings.catch_warnings():  # "called without torch.compile()": the uncompiled reference is meant
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
        return flex_attention(q, k, v, **kwargs)
