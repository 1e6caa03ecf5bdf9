"""Autoregressive decoding with the static KV cache: greedy or sampled, stop tokens, stop callbacks.

    ids = generate(model, [[5, 17, 3]], max_new_tokens=32)                 # greedy, batch of one prompt
    dec = Decoder(model, batch_size=1)                                      # reusable cache (and CUDA graph)
    ids = dec.generate(prompts, 64, temperature=0.8, top_p=0.95, seed=0, stop_tokens={eot})

A batch of prompts of different lengths is right-padded into one prefill (`KVCache` keeps each row's
own positions), then every step feeds one token per row. A row stops at a stop token (not returned), when
`stop(row, ids)` says so, after `max_new_tokens`, or when its sequence fills the model's context.

On CUDA the one-token step is captured once in a CUDA graph (static cache shapes) and replayed, which
removes the per-kernel launch cost that dominates batch-1 decoding of small models; `compile=True`
also runs the step through `torch.compile` before capture.

Greedy decoding without a `stop` callback runs as a chain (`chain`, on by default with the CUDA graph): the
argmax, the write of the token into the output buffer and into the next step's input are part of the
captured step, so the host replays steps without reading anything back; it looks at the tokens only every
CHAIN_CHECK steps (to end early once every row has met a stop token) and at the end, where each row is cut at
its first stop token. The tokens are those of the step-by-step loop (tested on CPU, where the chain runs
eagerly); rows that met a stop token keep being fed until the check, which costs steps, not tokens.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

import torch

from slm.model.cache import KVCache, static_cache_ok
from slm.model.transformer import Transformer

CHAIN_CHECK = 32
"""Chained greedy decoding reads the tokens back every this many steps (to stop once every row is done)."""


def sample(logits: torch.Tensor, temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """Next token per row from logits (B, V): argmax when temperature is 0, else a draw from the
    temperature-scaled distribution restricted to the top_k tokens and the top_p probability mass."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None and 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and 0 < top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        drop = probs.cumsum(dim=-1) - probs >= top_p  # keep the smallest prefix that reaches top_p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    probs = logits.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


class Decoder:
    """Generation for batches of up to `batch_size` prompts with one preallocated cache of `capacity` slots
    (default: the model's context). `cuda_graph` (default: on for CUDA unless a mixer needs an eager cache,
    as Titans' mac does) replays the captured step."""

    def __init__(self, model: Transformer, batch_size: int = 1, capacity: int | None = None,
                 cuda_graph: bool | None = None, compile: bool = False, chain: bool | None = None):
        self.model = model.eval()
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.batch_size = batch_size
        self.capacity = capacity or model.cfg.context_length
        if cuda_graph is None:  # on by default on CUDA, where every mixer can run on a static cache
            cuda_graph = self.device.type == "cuda" and static_cache_ok(model.cfg)
        self.cuda_graph = cuda_graph
        if self.cuda_graph and self.device.type != "cuda":
            raise ValueError("cuda_graph=True needs the model on a CUDA device")
        static = self.cuda_graph or compile  # fixed shapes: one graph for every step
        self.cache = KVCache(model.cfg, batch_size, self.capacity, self.device, self.dtype, static=static)
        self.compiled = compile
        self._step = torch.compile(self._eager_step, dynamic=False) if compile else self._eager_step
        self._graph = None
        self.chain = self.cuda_graph if chain is None else chain  # greedy steps without a read-back (module doc)
        self._chain_graph = None
        self.last_timing: dict = {}

    # ------------------------------------------------------------------ one-token step
    def _eager_step(self, tokens: torch.Tensor, active: torch.Tensor | None) -> torch.Tensor:
        """tokens (B, 1), active (B,) 1/0 or None (all) -> next-token logits (B, V) in float32."""
        return self.model(tokens, self.cache, active)[:, -1].float()

    def capture(self) -> None:
        """Record the step in a CUDA graph (after warm-up runs on a side stream), then empty the cache.
        `generate` does this before its first prefill; call it yourself before driving `step` directly."""
        self._buffers()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.no_grad():
            for _ in range(3):
                self._step(self._tokens, self._active)
        torch.cuda.current_stream().wait_stream(stream)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph), torch.no_grad():
            self._logits = self._step(self._tokens, self._active)
        self.cache.reset()

    def _chain_step(self) -> None:
        """One greedy step on the chain's buffers: the next token of every row from _tokens, written to
        _out[:, _count] and into _tokens for the step after; _count += 1. Device work only."""
        logits = self._step(self._tokens, self._active if self.cache.static or not self._all_active else None)
        nxt = logits.argmax(dim=-1)  # (B,)
        self._out.index_copy_(1, self._count, nxt[:, None])
        self._count += 1
        self._tokens.copy_(nxt[:, None])

    def _buffers(self) -> None:
        """The fixed input and output tensors the captured steps read and write (made once: a graph holds their
        addresses)."""
        if getattr(self, "_tokens", None) is not None:
            return
        B = self.batch_size
        self._tokens = torch.zeros(B, 1, dtype=torch.long, device=self.device)
        self._active = torch.ones(B, dtype=torch.long, device=self.device)
        self._out = torch.zeros(B, self.capacity + 1, dtype=torch.long, device=self.device)
        self._count = torch.zeros(1, dtype=torch.long, device=self.device)
        self._all_active = True

    def _capture_chain(self) -> None:
        """Record _chain_step in a CUDA graph (warm-up on a side stream first), then empty the cache."""
        self._buffers()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.no_grad():
            for _ in range(3):
                self._chain_step()
        torch.cuda.current_stream().wait_stream(stream)
        self._chain_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._chain_graph), torch.no_grad():
            self._chain_step()
        self.cache.reset()

    def _run_chain(self, first: torch.Tensor, active: torch.Tensor, steps: int, stop_tokens: set) -> torch.Tensor:
        """`steps` chained greedy steps after `first` (B,); the tokens (B, steps), read back every CHAIN_CHECK
        steps only to end early once every row has a stop token."""
        self._tokens.copy_(first[:, None])
        self._active.copy_(active)
        self._all_active = bool(active.all())  # an eager cache takes None for "every row" (as step-by-step)
        self._count.zero_()
        stops = torch.tensor(sorted(stop_tokens), dtype=torch.long, device=self.device) if stop_tokens else None
        done = 0
        while done < steps:
            for _ in range(min(CHAIN_CHECK, steps - done)):
                self._chain_graph.replay() if self._chain_graph is not None else self._chain_step()
                done += 1
            if stops is not None and done < steps:
                hit = torch.isin(torch.cat([first[:, None], self._out[:, :done]], dim=1), stops).any(dim=1)
                if bool(hit[active.bool()].all()):  # one read-back per CHAIN_CHECK steps
                    break
        return self._out[:, :done]

    def step(self, tokens: torch.Tensor, active: torch.Tensor | None) -> torch.Tensor:
        """Feed one token per row (B, 1); rows with active 0 take it as padding (None: all active).
        -> logits (B, V)."""
        if not self.cuda_graph:
            return self._step(tokens, active)
        if self._graph is None:
            raise RuntimeError("Decoder.step with cuda_graph: call capture() before the prefill")
        self._tokens.copy_(tokens)
        self._active.copy_(active) if active is not None else self._active.fill_(1)
        self._graph.replay()
        return self._logits

    # ------------------------------------------------------------------ generation
    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None, stop_tokens: Iterable[int] = (),
                 stop: Callable[[int, list[int]], bool] | None = None, seed: int | None = None) -> list[list[int]]:
        """New tokens for each prompt (stop tokens not included). Timing of the call is left in
        `last_timing`: ttft_s (prefill + first token), decode_s (the rest), new_tokens (all rows)."""
        B, ctx = len(prompts), self.model.cfg.context_length
        if not 0 < B <= self.batch_size:
            raise ValueError(f"{B} prompts for a decoder of batch_size {self.batch_size}")
        lens = [len(p) for p in prompts]
        if min(lens) < 1:
            raise ValueError("every prompt needs at least one token")
        if max(lens) > ctx:
            raise ValueError(f"prompt of {max(lens)} tokens exceeds context_length={ctx}")
        # row b can be fed ctx - lens[b] more tokens, so it can produce one more than that
        budget = [min(max_new_tokens, ctx - n + 1) for n in lens]
        if max(lens) + max(budget) - 1 > self.capacity:
            raise ValueError(f"prompt + new tokens need {max(lens) + max(budget) - 1} cache slots; "
                             f"capacity is {self.capacity}")
        stop_tokens = set(stop_tokens)
        generator = None
        if seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(seed)

        chained = self.chain and temperature <= 0 and stop is None and all(n == max_new_tokens for n in budget)
        if chained and self.cuda_graph and self._chain_graph is None:
            self._capture_chain()  # before the prefill: capturing runs (and then clears) the cache
        elif chained:
            self._buffers()
        if self.cuda_graph and self._graph is None and not chained:
            self.capture()  # before the prefill: capturing runs (and then clears) the cache
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        sync()
        started = time.perf_counter()
        self.cache.reset()
        idx = torch.zeros(self.batch_size, max(lens), dtype=torch.long)
        for b, p in enumerate(prompts):
            idx[b, :len(p)] = torch.tensor(p)
        lengths = torch.tensor(lens + [0] * (self.batch_size - B))
        ragged = len(set(lens)) > 1 or B < self.batch_size
        h = self.model.hidden(idx.to(self.device), self.cache, lengths.to(self.device) if ragged else None)
        last = h[torch.arange(self.batch_size, device=self.device), (lengths - 1).clamp(min=0).to(self.device)]
        logits = self.model.head(last).float()  # (batch_size, V)

        out: list[list[int]] = [[] for _ in range(B)]
        done = [budget[b] <= 0 for b in range(B)]
        first_token_at = None
        if chained:
            first = logits.argmax(dim=-1)  # (batch_size,)
            chosen = first.tolist()  # the first token is out: time to first token
            first_token_at = time.perf_counter()
            flags = torch.tensor([1 if b < B else 0 for b in range(self.batch_size)], device=self.device)
            rest = self._run_chain(first, flags, max_new_tokens - 1, stop_tokens).tolist()
            for b in range(B):
                for token in [chosen[b], *rest[b]][:max_new_tokens]:
                    if token in stop_tokens:
                        break
                    out[b].append(token)
            sync()
            finished = time.perf_counter()
            self.last_timing = {"ttft_s": first_token_at - started, "decode_s": finished - first_token_at,
                                "new_tokens": sum(len(o) for o in out)}
            return out
        while True:
            tokens = sample(logits, temperature, top_k, top_p, generator)  # (batch_size,)
            chosen = tokens.tolist()
            if first_token_at is None:
                first_token_at = time.perf_counter()
            for b in range(B):
                if done[b]:
                    continue
                if chosen[b] in stop_tokens:
                    done[b] = True
                    continue
                out[b].append(chosen[b])
                if len(out[b]) >= budget[b] or (stop is not None and stop(b, out[b])):
                    done[b] = True
            if all(done):
                break
            flags = [0 if b >= B or done[b] else 1 for b in range(self.batch_size)]
            active = None if all(flags) and not self.cache.static else torch.tensor(flags, device=self.device)
            logits = self.step(tokens[:, None], active)
        sync()
        finished = time.perf_counter()
        self.last_timing = {"ttft_s": first_token_at - started, "decode_s": finished - first_token_at,
                            "new_tokens": sum(len(o) for o in out)}
        return out


def generate(model: Transformer, prompts: list[list[int]], max_new_tokens: int, **kwargs) -> list[list[int]]:
    """One-off generation: a Decoder sized for these prompts (see Decoder.generate for the options)."""
    capacity = max(len(p) for p in prompts) + max(max_new_tokens, 1) - 1  # slots are shared by the rows
    return Decoder(model, batch_size=len(prompts), capacity=capacity).generate(prompts, max_new_tokens, **kwargs)
