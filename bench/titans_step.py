"""Benchmark: forward + backward of one Titans memory-as-context layer against plain attention of the same width.

The memory layer's forward+backward cost per token against plain attention of the same width, as a ratio,
measured at the mixer level, one layer and no model around it: `mac`
(slm.components.titans.MemoryAsContext: segment attention over persistent tokens, memory reads and the
segment, and the neural memory learning each segment) against `attn` (MultiHeadAttention, causal over the
whole context), both built from one ModelConfig (by default the 70M shape's width: d_model 384, head_dim 48,
4 KV heads; context 1024, memory_segment 128, 32 persistent tokens, memory depth 2).

A step is a forward of x (batch, T, d_model) with requires_grad, then the backward of y.square().mean()
(gradients of the layer's parameters and of x); no optimizer. Each step gets a fresh SequenceContext, so
both layers build their RoPE tables inside the timed step. Steps alternate in pairs (attn, mac, attn, mac,
...) on the same input, on a fixed number of threads, after warm-up pairs; the ratio mac / attn of each
pair's step time is reported as the median with its min-max, with tokens/s of each (batch * T over the
median step time). The same is measured a second time with memory_chunk 16 (the memory's gradients taken
every 16 tokens within a segment: 8 sequential chunk updates per segment instead of 1), to show what
smaller chunks cost. One JSON file with every step time is written to --out.

    python bench/titans_step.py [--pairs 11] [--threads 1] [--batch 2] [--small-chunk 16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from slm.components.attention import MultiHeadAttention
from slm.components.position import RoPE
from slm.components.titans import MemoryAsContext
from slm.model import ModelConfig
from slm.model.transformer import SequenceContext

MEMORY = dict(layers=[0], segment=128, persistent_tokens=32, depth=2)
SHAPE = dict(d_model=384, attention=dict(head_dim=48, n_kv_heads=4), context_length=1024)


def step(layer: torch.nn.Module, cfg: ModelConfig, rope: RoPE, x: torch.Tensor) -> float:
    """Seconds for one forward + backward of `layer` on a fresh leaf copy of x."""
    layer.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    seq = SequenceContext(cfg, rope, torch.arange(x.shape[1]), torch.float32)
    start = time.perf_counter()
    layer(x, seq).square().mean().backward()
    return time.perf_counter() - start


def measure(chunk: int | None, args) -> dict:
    """Alternating (attn, mac) pairs at one memory_chunk (None: the whole segment)."""
    cfg = ModelConfig(**SHAPE, memory={**MEMORY, "chunk": chunk})
    rope = RoPE.from_config(cfg)
    torch.manual_seed(0)
    layers = {"attn": MultiHeadAttention(cfg), "mac": MemoryAsContext(cfg)}
    gen = torch.Generator().manual_seed(0)
    batch = lambda: torch.randn(args.batch, cfg.context_length, cfg.d_model, generator=gen)  # noqa: E731
    for _ in range(args.warmup):  # allocator, kernels
        x = batch()
        for layer in layers.values():
            step(layer, cfg, rope, x)
    seconds = {name: [] for name in layers}
    for _ in range(args.pairs):
        x = batch()
        for name, layer in layers.items():
            seconds[name].append(step(layer, cfg, rope, x))
    ratios = [m / a for a, m in zip(seconds["attn"], seconds["mac"])]
    tokens = args.batch * cfg.context_length
    return {"memory_chunk": cfg.memory.chunk, "memory_segment": cfg.memory.segment,
            "params": {"attn": MultiHeadAttention.num_params(cfg), "mac": MemoryAsContext.num_params(cfg)},
            "step_seconds": seconds,
            "tokens_per_second": {name: tokens / statistics.median(s) for name, s in seconds.items()},
            "ratio_mac_over_attn": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=11, help="timed (attn, mac) step pairs per setting")
    parser.add_argument("--warmup", type=int, default=2, help="untimed pairs before them")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=2, help="sequences of context_length tokens per step")
    parser.add_argument("--small-chunk", type=int, default=16, help="memory_chunk of the second setting")
    parser.add_argument("--out", default="bench/out/titans_step.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    settings = [measure(None, args), measure(args.small_chunk, args)]
    result = {"shape": SHAPE, "batch_tokens": args.batch * SHAPE["context_length"], "threads": args.threads,
              "pairs": args.pairs, "warmup": args.warmup, "settings": settings}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    first = settings[0]
    print(f"titans step  mac ({first['params']['mac']:,} parameters) vs attn ({first['params']['attn']:,}), "
          f"forward + backward of one layer, d_model {SHAPE['d_model']}, segment {MEMORY['segment']}, "
          f"{MEMORY['persistent_tokens']} persistent tokens, {args.threads} thread(s), "
          f"{result['batch_tokens']} tokens/step")
    for s in settings:
        r, tps = s["ratio_mac_over_attn"], s["tokens_per_second"]
        print(f"             chunk {s['memory_chunk']:>3}: attn {statistics.median(s['step_seconds']['attn']) * 1e3:.0f} ms "
              f"({tps['attn']:,.0f} tok/s)   mac {statistics.median(s['step_seconds']['mac']) * 1e3:.0f} ms "
              f"({tps['mac']:,.0f} tok/s)   ratio mac/attn median {r['median']:.2f} "
              f"(min {r['min']:.2f}, max {r['max']:.2f}; {args.pairs} pairs)")


if __name__ == "__main__":
    main()
