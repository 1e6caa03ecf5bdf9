"""A static, preallocated KV cache for `Transformer`: prefill once, then extend a token at a time.

    cache = KVCache(model.cfg, batch=B, capacity=S)      # buffers for S slots per row, allocated once
    logits = model(prompt, cache)                        # (B, T, V); fills slots 0..T-1
    logits = model(next_token[:, None], cache)           # (B, 1, V); attends over every cached slot

Every block *application* has its own slot (`layers[a]` for the a-th entry of `cfg.block_schedule()`: with
block.repeat = k, block i runs k times on different inputs, so each run caches its own state) holding its mixer's state (`state`,
made by the mixer's `new_state`: keys/values (B, KV, S, hd) for attention, the last kernel - 1 inputs for
a short convolution) and the inputs that Canon layers still need (their last kernel - 1 inputs).

Slots fill left to right, the same slots for every row. Each row records the true position of every
slot in `pos` (-1: empty or padding), so rows of different lengths share one cache: `lengths` in
`begin` marks the tail of a row's chunk as padding, which takes no position and which no query attends
to. Attention masks are built from `pos` (causal, sliding window), so RoPE and learned positions see
each row's own positions however the rows are padded.

`static=True` keeps every shape fixed (queries attend over all S slots, masked) and reads the fill level
from a tensor, so a one-token step can be captured in a CUDA graph (`slm.model.generate`).

A block-causal model (`attention.block`, block diffusion) caches too: a query sees every cached key of its
own block and the blocks before, and `peek()` runs a chunk without keeping it (slm.model.diffusion).

A fully bidirectional model caches only when asked (`bidirectional=True`, Fast-dLLM's approximate prefix and
dual caches in slm.model.diffusion): a query sees every kept slot, before and after it. `pad_left` aligns rows
of different lengths at their ends, and `peek(at=slot)` reruns a chunk in place, the slots after it still
visible. The cached keys are exact only for the forward that wrote them; the caller decides when to refresh.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from slm.components import MIXERS
from slm.components.flex import attention_mask
from slm.components.canon import CausalConvCanon, conv_continue
from slm.model.config import ModelConfig


def static_cache_ok(cfg: ModelConfig) -> bool:
    """Whether every mixer of `cfg` can run on a static cache (CUDA-graph or compiled decoding)."""
    return all(MIXERS.get(kind).static_cache for kind in set(cfg.layer_types))


def bidirectional_cache_refusal(cfg: ModelConfig) -> str | None:
    """Why a bidirectional cache cannot hold `cfg`'s state (None: it can): it keeps the keys and values of
    global attention layers only; a short convolution, a sliding window or a Canon layer would need the
    inputs on both sides of a rerun chunk."""
    other = sorted(set(cfg.layer_types) - {"attn"})
    if other or cfg.canon.set:
        parts = [f"layer_types {other}"] if other else []
        parts += [f"Canon layers {cfg.canon.set}"] if cfg.canon.set else []
        return ("a bidirectional cache keeps attention keys and values only (layer_types attn); this model has "
                + " and ".join(parts))
    return None


class KVCache:
    """Mixer states (keys and values, conv inputs) and Canon inputs of every block application, for `batch`
    rows and `capacity` slots."""

    def __init__(self, cfg: ModelConfig, batch: int, capacity: int, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, static: bool = False, bidirectional: bool = False):
        full = not cfg.attention.causal and cfg.attention.block is None  # every query sees every position
        if full and not bidirectional:
            raise ValueError("a KV cache needs a causal or block-causal model (model.attention.causal=false "
                             "without model.attention.block attends to every future token)")
        if bidirectional and not full:
            raise ValueError("KVCache(bidirectional=True) is for a fully bidirectional model "
                             "(model.attention.causal=false, no model.attention.block); this one has "
                             f"causal={cfg.attention.causal}, block={cfg.attention.block}")
        if bidirectional and static:
            raise ValueError("a bidirectional KV cache is eager only (static=False)")
        if bidirectional and bidirectional_cache_refusal(cfg):
            raise ValueError(bidirectional_cache_refusal(cfg))
        if capacity < 1 or batch < 1:
            raise ValueError(f"KV cache needs batch >= 1 and capacity >= 1, got batch={batch}, capacity={capacity}")
        self.cfg, self.batch, self.capacity, self.static = cfg, batch, capacity, static
        self.device, self.dtype = torch.device(device), dtype
        self.layers = [LayerCache(self, MIXERS.get(cfg.layer_type(block)).new_state(cfg, self))
                       for block in cfg.block_schedule()]  # one slot per block application
        self.pos = torch.full((batch, capacity), -1, dtype=torch.long, device=device)  # true position per slot
        self.next_pos = torch.zeros(batch, dtype=torch.long, device=device)  # next true position per row
        self.length = torch.zeros(1, dtype=torch.long, device=device)  # slots filled (static mode)
        self.filled = 0  # slots filled (Python int: eager mode)
        self._longest = 0  # upper bound of next_pos (eager mode)
        self.ragged = False  # some chunk had padding: masks must consult `pos`
        # state of the chunk being processed, set by begin()
        self.slots: torch.Tensor | None = None  # (T,) slot of each new token
        self.lengths: torch.Tensor | None = None  # (B,) real tokens per row in this chunk, None: all T
        self.visible = 0  # slots attention reads: filled after this chunk (eager) or capacity (static)
        self._chunk: tuple = ()  # (T, true positions (B, T), start slot or None) of the chunk, for mask()
        self.block = None if cfg.attention.causal else cfg.attention.block  # block-causal: a query sees its whole block
        self.peeking = False  # inside peek(): chunks are attended to but not kept
        self.bidirectional = bidirectional  # a query sees every kept slot, before and after it
        self._tail = 0  # inside peek(at=...): slots below this stay visible after the chunk

    # ------------------------------------------------------------------ per chunk
    def begin(self, T: int, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Claim T slots for a chunk of tokens; return its positions (B, T) (padding clamped to 0, for the
        embeddings). `mask(window)` then gives the chunk's attention masks.

        lengths (B,): row b's first lengths[b] tokens are real, the rest padding (0 is allowed). Called by
        `Transformer.hidden` once per forward, before any block. In static mode it reads and writes
        tensors only, so a captured or compiled step replays it faithfully."""
        arange = torch.arange(T, device=self.device)
        pos = self.next_pos[:, None] + arange  # (B, T) true positions, -1 for padding
        if lengths is not None:
            lengths = lengths.to(device=self.device, dtype=torch.long)
            pos = pos.masked_fill(arange >= lengths[:, None], -1)
        self.next_pos += T if lengths is None else lengths
        start = None
        if self.static:
            slots = self.length + arange  # (T,)
            self.pos.index_copy_(1, slots, pos)
            self.length += T
            self.visible = self.capacity
        else:
            start = self.filled
            if start + T > self.capacity:
                raise ValueError(f"KV cache is full: {start} + {T} tokens > capacity {self.capacity}")
            slots = arange + start
            self.pos[:, start:start + T] = pos
            self.filled = self.visible = start + T
            if self._tail:
                self.visible = max(self.visible, self._tail)
            self.ragged |= lengths is not None
            self._longest += T  # an upper bound of next_pos: the exact check costs a sync, so only when needed
            if self._longest > self.cfg.context_length and int(self.next_pos.max()) > self.cfg.context_length:
                raise ValueError(f"sequence length {int(self.next_pos.max())} exceeds "
                                 f"context_length={self.cfg.context_length}")
        self.slots, self.lengths = slots, lengths
        self._chunk = (T, pos, start)
        return pos.clamp(min=0)

    def mask(self, window: int | None) -> torch.Tensor | None:
        """(B, 1, T, S) bool for the current chunk, True where a query may attend to a slot, keys limited to
        the last `window` positions (None: all). Eager and unpadded, two cases need none: the first chunk
        (causal, exactly as the whole-sequence forward) and one new token (every slot; `KVState.write`
        leaves out the slots beyond a sliding window)."""
        T, qpos, start = self._chunk
        slots = self.slots
        if self.bidirectional:
            return self._bidirectional_mask(window, qpos)
        if not self.static and not self.ragged and self.block is None:
            if start == 0:
                return attention_mask(T, True, window, self.device)
            if T == 1:
                return None
        kpos = self.pos[:, :self.visible]  # (B, S)
        if self.block is None:
            mask = (kpos[:, None, :] >= 0) & (kpos[:, None, :] <= qpos[:, :, None])  # (B, T, S)
        else:  # block-causal: every key of the query's block and the blocks before
            mask = (kpos[:, None, :] >= 0) & (kpos[:, None, :] // self.block <= qpos[:, :, None] // self.block)
        if window is not None:
            mask &= qpos[:, :, None] - kpos[:, None, :] < window
        # a padding query sees only its own slot: its output is unused, but must not be NaN
        mask |= torch.arange(self.visible, device=self.device)[None, None, :] == slots[None, :, None]
        return mask[:, None]

    def _bidirectional_mask(self, window: int | None, qpos: torch.Tensor) -> torch.Tensor | None:
        """A bidirectional cache's mask: every kept slot (within `window` positions either side); None when
        every visible slot is a real token and there is no window."""
        if not self.ragged and window is None:
            return None
        kpos = self.pos[:, :self.visible]  # (B, S)
        mask = (kpos >= 0)[:, None, :].expand(-1, qpos.shape[1], -1)  # (B, T, S)
        if window is not None:
            mask = mask & ((qpos[:, :, None] - kpos[:, None, :]).abs() < window)
        # a padding query sees only its own slot: its output is unused, but must not be NaN
        mask = mask | (torch.arange(self.visible, device=self.device)[None, None, :] == self.slots[None, :, None])
        return mask[:, None]

    def pad_left(self, pads: torch.Tensor) -> None:
        """Row b's first pads[b] tokens of the next chunk are padding (no position; no query attends to them):
        a bidirectional cache aligns rows of different lengths at their ends. An empty cache only."""
        if not self.bidirectional or self.filled:
            raise ValueError("KVCache.pad_left needs an empty bidirectional cache")
        self.next_pos -= pads.to(device=self.device, dtype=torch.long)  # pads take positions < 0
        self.ragged = True

    @contextmanager
    def peek(self, at: int | None = None):
        """Forwards inside attend to the cached sequence and to themselves, but leave the cache as it was:
        a block-diffusion sampler runs its partly masked block again and again, and keeps it only once it is
        clean. Eager (non-static) mode only; the chunk's slots are reused by the next chunk.

        at (a bidirectional cache): the chunk goes to slots at, at + 1, ... (overwriting their keys and
        values, at the positions those slots hold) and the filled slots after it stay visible: a step of
        Fast-dLLM's dual cache reruns its block between the cached prefix and suffix."""
        if self.static:
            raise ValueError("KVCache.peek needs an eager (non-static) cache")
        if at is not None and not (self.bidirectional and 0 <= at < self.filled):
            raise ValueError(f"KVCache.peek(at={at}) needs a bidirectional cache with slot {at} filled "
                             f"({self.filled} are)")
        kept = (self.filled, self.next_pos.clone(), self._longest, self.ragged)
        self.peeking = True
        if at is not None:
            self._tail, self.filled = self.filled, at
            self.next_pos.copy_(self.pos[:, at])
        try:
            yield self
        finally:
            self.peeking = False
            self.filled, next_pos, self._longest, self.ragged = kept
            self.next_pos.copy_(next_pos)
            if at is None:
                self.pos[:, self.filled:] = -1
            self._tail = 0

    # ------------------------------------------------------------------ whole cache
    def reset(self) -> None:
        """Empty every row (buffers are kept; stale entries are masked by `pos`)."""
        self.pos.fill_(-1)
        self.next_pos.zero_()
        self.length.zero_()
        self.filled = self._longest = self._tail = 0
        self.ragged = False
        for layer in self.layers:
            if layer.state is not None:
                layer.state.reset()
            for state in layer.canon_states.values():
                state.zero_()

    def select(self, rows: torch.Tensor) -> "KVCache":
        """A new cache whose row j is a copy of row rows[j] of this one (e.g. one context, many continuations)."""
        rows = rows.to(self.device)
        out = KVCache.__new__(KVCache)
        out.__dict__.update(self.__dict__)
        out.batch = len(rows)
        out.layers = [LayerCache(out, None if layer.state is None else layer.state.select(out, rows),
                                 {key: s.index_select(0, rows) for key, s in layer.canon_states.items()})
                      for layer in self.layers]
        out.pos, out.next_pos = self.pos.index_select(0, rows), self.next_pos.index_select(0, rows)
        out.length = self.length.clone()
        return out

    def nbytes(self) -> int:
        """Memory held by the buffers."""
        tensors = [self.pos, self.next_pos]
        for layer in self.layers:
            tensors += [*(layer.state.tensors() if layer.state is not None else ()), *layer.canon_states.values()]
        return sum(t.numel() * t.element_size() for t in tensors)


class LayerCache:
    """One block application's slot: its mixer's `state` (None if the mixer keeps nothing) and the Canon
    layers' past inputs."""

    def __init__(self, cache: KVCache, state, canon_states: dict | None = None):
        self.cache, self.state = cache, state
        self.canon_states: dict[str, torch.Tensor] = canon_states or {}  # "A".."D" -> (B, kernel - 1, C)

    def canon(self, where: str, canon: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """canon(x) for x (B, T, C) continuing the cached sequence, for the Canon layer at position `where`
        (A-D): the causal convolution also sees the kernel - 1 inputs before x (zeros at the start), which
        are then updated to the last real ones."""
        if not isinstance(canon, CausalConvCanon) or not canon.causal:
            raise NotImplementedError(f"KV cache: Canon kind {type(canon).__name__} has no cached form")
        B, T, C = x.shape
        state = self.canon_states.get(where)
        if state is None:  # first chunk (eager): allocate
            state = self.canon_states[where] = x.new_zeros(B, canon.kernel - 1, C)
        return x + conv_continue(state, x, canon.conv.weight[:, 0, :], self.cache.lengths, self.cache.peeking)
