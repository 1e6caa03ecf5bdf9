"""Parallel decoding for masked diffusion models (model.attention.causal=false with a mask token).

    ids = diffusion_generate(model, [prompt], gen_length=128, block_length=32, steps=32)   # 4 tokens a step
    sampler = DiffusionSampler(model, block_length=32, threshold=0.9)
    ids = sampler.generate(prompts, 128, seed=0); sampler.last_timing

The prompt is followed by gen_length mask tokens, filled in left-to-right blocks of block_length positions
(LLaDA's semi-autoregressive sampling, Nie et al. 2025), the `steps` denoising steps shared evenly between
the blocks. Each step predicts every masked position of the current block (the mask token itself is never
predicted: SUBS) and commits some of the predictions; the rest stay masked for the next step:
  - low-confidence remasking (LLaDA, `threshold=None`): the block's masks are spread evenly over its steps
    and each step commits that many, the most confident first;
  - confidence threshold (Fast-dLLM, Dhara's `threshold`): every prediction whose probability reaches the
    threshold, and at least the most confident one; the block takes as many steps as it needs.
temperature 0 predicts the argmax; > 0 draws by Gumbel-max from logits / temperature (confidence is the
model's probability of the drawn token). The output never contains the mask token.

What is cached. A bidirectional model (dllm) lets every position see the whole canvas, masked tail
included, so committed tokens' states change as the tail fills in: nothing can be cached exactly, and by
default (`cache="none"`) each step runs prompt + canvas (one forward per step, as LLaDA). Fast-dLLM's
approximate caches (Wu et al. 2025) run the whole sequence once at the start of each block (that step is
exact) and keep its keys and values (`KVCache(bidirectional=True)`) for the block's later steps:
  - `cache="prefix"`: a step runs the current block and every position after it, attending to the cached
    prefix (prompt + committed blocks);
  - `cache="dual"`: a step runs the current block only, attending to the cached prefix and the cached
    suffix (the masked positions after the block).
The cached states are those of the block's first step: the block's commits since then are not in them
(refreshed at the next block). Attention-only models (layer_types attn, no Canon layers); a model with a
short convolution, a sliding window or Canon layers is refused. A block-causal model (`attention.block`,
e.g. a converted Dhara after its compact-block decay) sees only its own and earlier blocks: committed blocks
go into a KV cache once (one forward each), exactly, and a step runs only the current block against the
cache (`KVCache.peek`). Its decode blocks are then its attention blocks, aligned to absolute positions as in
training (the first may hold the prompt's tail), and `block_length` is ignored.

Rows of a bidirectional model decode together, one forward per step for the batch (prompts of different
lengths are padded on the left, so every row's canvas sits in the same columns; padding is masked); each
row commits by its own confidences and stops at its own stop token. A block-causal model's rows decode one
after another.
"""

from __future__ import annotations

import time
from typing import Iterable

import torch

from slm.model.cache import KVCache, bidirectional_cache_refusal
from slm.model.transformer import Transformer
from slm.sampler_settings import check_sampler


def is_diffusion(model_cfg) -> bool:
    """A masked diffusion model: bidirectional (or block-causal) with a mask token."""
    return not model_cfg.attention.causal and model_cfg.embedding.mask_token_id is not None


def split_evenly(total: int, parts: int) -> list[int]:
    """total split into `parts` near-equal non-negative counts, the larger ones first (LLaDA's schedule)."""
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


def cache_refusal(cfg, cache: str) -> str | None:
    """Why the model of `cfg` cannot use the sampler cache `cache` (one line starting `cache=<cache>`), or None: a
    block-causal model caches its committed blocks exactly; a bidirectional cache holds attention layers only."""
    if cache == "none":
        return None
    if cfg.attention.block is not None:
        return (f"cache={cache!r} is for fully bidirectional models; this one is block-causal "
                f"(attention.block={cfg.attention.block}) and caches its committed blocks exactly: use cache='none'")
    why = bidirectional_cache_refusal(cfg)
    return f"cache={cache!r}: {why}; use cache='none'" if why else None


class DiffusionSampler:
    """Masked-diffusion generation for one model and one set of sampler settings (see the module doc)."""

    def __init__(self, model: Transformer, block_length: int = 32, steps: int | None = None,
                 threshold: float | None = None, temperature: float = 0.0, cache: str = "none"):
        cfg = model.cfg
        if not is_diffusion(cfg):
            raise ValueError("diffusion sampling needs a masked diffusion model (model.attention.causal=false and a "
                             f"mask token); {cfg.family} is causal={cfg.attention.causal}, "
                             f"mask_token_id={cfg.embedding.mask_token_id}")
        check_sampler(block_length, steps, threshold, cache)
        refusal = cache_refusal(cfg, cache)
        if refusal:
            raise ValueError(refusal)
        self.model = model.eval()
        self.mask_id = cfg.embedding.mask_token_id
        self.block = cfg.attention.block  # None: bidirectional
        self.block_length = self.block or block_length
        self.steps, self.threshold, self.temperature, self.cache = steps, threshold, temperature, cache
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.last_timing: dict = {}

    def settings(self, gen_length: int) -> dict:
        """The sampler settings as recorded with a throughput measurement."""
        return {"gen_length": gen_length, "block_length": self.block_length,
                "steps": self.steps or gen_length, "threshold": self.threshold, "temperature": self.temperature,
                "remasking": "threshold" if self.threshold is not None else "low_confidence",
                "cache": "committed_blocks" if self.block else self.cache}

    # ------------------------------------------------------------------ one step's choice
    def _commit(self, logits: torch.Tensor, canvas: torch.Tensor, count: int | None, live: torch.Tensor,
                generator: torch.Generator | None) -> int:
        """logits (B, n, V) for the positions of `canvas` (B, n) (a view, updated in place): in each live row
        (live (B,) bool), fill `count` of its masks (None: by threshold) with their predictions, most
        confident first. Returns the number filled in all."""
        masked = (canvas == self.mask_id) & live[:, None]
        logits = logits.float()
        logits[..., self.mask_id] = float("-inf")  # SUBS: never predict the mask
        probs = logits.softmax(dim=-1)
        if self.temperature > 0:
            u = torch.rand(logits.shape, device=logits.device, generator=generator).clamp_(1e-20, 1.0)
            pred = (logits / self.temperature - (-u.log()).log()).argmax(dim=-1)  # Gumbel-max
        else:
            pred = logits.argmax(dim=-1)
        conf = probs.gather(-1, pred[..., None]).squeeze(-1).masked_fill(~masked, -1.0)  # (B, n)
        if count is None:
            chosen = (conf >= self.threshold) & masked
            best = conf.argmax(dim=-1, keepdim=True)  # at least one per step in a row that has a mask
            chosen |= torch.zeros_like(masked).scatter_(1, best, True) & masked
        else:
            top = conf.topk(min(count, conf.shape[1]), dim=-1).indices
            chosen = torch.zeros_like(masked).scatter_(1, top, True) & masked
        canvas[chosen] = pred[chosen]
        return int(chosen.sum())

    def _fill(self, run, canvas: torch.Tensor, live: torch.Tensor, steps: int, generator, clock: dict) -> int:
        """Denoise the masks of `canvas` (B, n) in `steps` steps (the live rows'); run(step) -> logits
        (B, n, V) of the canvas. Returns the forwards used."""
        n = int(((canvas == self.mask_id) & live[:, None]).sum(dim=1).max())  # the same in every live row
        counts = [None] * n if self.threshold is not None else [c for c in split_evenly(n, min(steps, n)) if c]
        used = 0
        for count in counts:
            if not ((canvas == self.mask_id) & live[:, None]).any():
                break
            filled = self._commit(run(used), canvas, count, live, generator)
            used += 1
            if "first" not in clock:
                clock.update(first=time.perf_counter(), first_tokens=filled)
        return used

    # ------------------------------------------------------------------ generation
    @torch.no_grad()
    def generate(self, prompts: list[list[int]], gen_length: int, seed: int | None = None,
                 stop_tokens: Iterable[int] = ()) -> list[list[int]]:
        """gen_length new token ids per prompt (fewer if a block holds a stop token: the tokens before it).
        Timing of the call in `last_timing`: ttft_s (to the first committed tokens: first_tokens of them),
        decode_s (the rest), new_tokens, forwards (model calls: one per step for the whole batch of a
        bidirectional model)."""
        ctx = self.model.cfg.context_length
        if not prompts:
            raise ValueError("no prompts to continue")
        for p in prompts:
            if not p:
                raise ValueError("every prompt needs at least one token")
            if len(p) + gen_length > ctx:
                raise ValueError(f"prompt of {len(p)} tokens + gen_length={gen_length} exceeds "
                                 f"context_length={ctx}")
        generator = torch.Generator(device=self.device).manual_seed(seed) if seed is not None else None
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        stops = set(stop_tokens)
        sync()
        started = time.perf_counter()
        clock: dict = {}
        if self.block:
            outs, forwards = [], 0
            for prompt in prompts:
                ids, used = self._block_causal(prompt, gen_length, generator, clock, stops)
                outs.append(ids)
                forwards += used
        else:
            outs, forwards = self._bidirectional(prompts, gen_length, generator, clock, stops)
        sync()
        finished = time.perf_counter()
        first = clock.get("first", finished)
        self.last_timing = {"ttft_s": first - started, "decode_s": finished - first,
                            "new_tokens": sum(map(len, outs)), "first_tokens": clock.get("first_tokens", 0),
                            "forwards": forwards}
        return outs

    def _blocks(self, start: int, end: int, aligned: bool) -> list[tuple[int, int]]:
        """[lo, hi) decode blocks covering positions start..end-1: every block_length from `start`, or on
        multiples of block_length (a block-causal model's attention blocks) when `aligned`."""
        L, out, lo = self.block_length, [], start
        while lo < end:
            hi = min(((lo // L) + 1) * L if aligned else lo + L, end)
            out.append((lo, hi))
            lo = hi
        return out

    def _steps_per_block(self, blocks: list, gen_length: int) -> list[int]:
        return [max(1, s) for s in split_evenly(self.steps or gen_length, len(blocks))]

    def _bidirectional(self, prompts, gen_length, generator, clock, stops) -> tuple[list[list[int]], int]:
        """A bidirectional model, all rows at once: each step runs the whole canvas (cache none), or the first
        step of a block does and fills the cache, the others run the block (dual) or the block and the
        positions after it (prefix) against it."""
        B, P = len(prompts), max(map(len, prompts))
        N = P + gen_length
        x = torch.full((B, N), self.mask_id, dtype=torch.long, device=self.device)
        x[:, :P] = 0  # left padding (masked out of attention)
        for b, prompt in enumerate(prompts):
            x[b, P - len(prompt):P] = torch.tensor(prompt, device=self.device)
        pads = torch.tensor([P - len(p) for p in prompts], device=self.device)
        ragged = bool(pads.any())
        cache = None
        if self.cache != "none" or ragged:
            cache = KVCache(self.model.cfg, B, N, self.device, self.dtype, bidirectional=True)
        live = torch.ones(B, dtype=torch.bool, device=self.device)  # rows still decoding (no stop token yet)
        blocks = self._blocks(P, N, aligned=False)
        forwards = 0
        for (lo, hi), steps in zip(blocks, self._steps_per_block(blocks, gen_length)):
            def run(step, lo=lo, hi=hi):
                if step == 0 or self.cache == "none":  # the whole sequence (and a fresh cache)
                    if cache is None:
                        h = self.model.hidden(x)
                    else:
                        cache.reset()
                        if ragged:
                            cache.pad_left(pads)
                        h = self.model.hidden(x, cache)
                    return self.model.head(h[:, lo:hi])  # (B, hi - lo, V)
                with cache.peek(at=lo):  # the block (dual), or the block and all after it (prefix)
                    h = self.model.hidden(x[:, lo:hi if self.cache == "dual" else N], cache)
                return self.model.head(h[:, :hi - lo])
            forwards += self._fill(run, x[:, lo:hi], live, steps, generator, clock)
            if stops:
                for b in live.nonzero().flatten().tolist():
                    if stops & set(x[b, lo:hi].tolist()):
                        live[b] = False
                if not live.any():
                    break
        return [_until_stop(row, self.mask_id, stops) for row in x[:, P:].tolist()], forwards

    def _block_causal(self, prompt, gen_length, generator, clock, stops) -> tuple[list[int], int]:
        """A block-causal model: committed blocks in a KV cache, a step runs the current block only."""
        P = len(prompt)
        cache = KVCache(self.model.cfg, 1, P + gen_length, self.device, self.dtype)
        x = torch.full((1, P + gen_length), self.mask_id, dtype=torch.long, device=self.device)
        x[0, :P] = torch.tensor(prompt, device=self.device)
        done = (P // self.block) * self.block  # the prompt's complete attention blocks go in at once
        forwards = 0
        if done:
            self.model.hidden(x[:, :done], cache)
            forwards += 1
        live = torch.ones(1, dtype=torch.bool, device=self.device)
        blocks = self._blocks(done, P + gen_length, aligned=True)  # the first holds the prompt's tail
        for b, ((lo, hi), steps) in enumerate(zip(blocks, self._steps_per_block(blocks, gen_length))):
            def run(step, lo=lo, hi=hi):
                with cache.peek():
                    return self.model.head(self.model.hidden(x[:, lo:hi], cache))  # (1, hi - lo, V)
            forwards += self._fill(run, x[:, lo:hi], live, steps, generator, clock)
            if stops & set(x[0, max(lo, P):hi].tolist()):
                break
            if b + 1 < len(blocks):
                self.model.hidden(x[:, lo:hi], cache)  # keep the clean block
                forwards += 1
        return _until_stop(x[0, P:].tolist(), self.mask_id, stops), forwards


def _until_stop(ids: list[int], mask_id: int, stops: set[int]) -> list[int]:
    """The generated ids before the first stop token, and before the first still-masked position (blocks
    after a stop are never filled)."""
    for i, t in enumerate(ids):
        if t in stops or t == mask_id:
            return ids[:i]
    return ids


def diffusion_generate(model: Transformer, prompts: list[list[int]], gen_length: int, block_length: int = 32,
                       steps: int | None = None, threshold: float | None = None, temperature: float = 0.0,
                       seed: int | None = None, stop_tokens: Iterable[int] = (),
                       cache: str = "none") -> list[list[int]]:
    """One-off masked-diffusion generation (see DiffusionSampler): gen_length new ids per prompt."""
    sampler = DiffusionSampler(model, block_length, steps, threshold, temperature, cache)
    return sampler.generate(prompts, gen_length, seed=seed, stop_tokens=stop_tokens)
