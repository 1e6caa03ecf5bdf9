"""Benchmark: masked attention on the CPU, SDPA with a dense mask against FlexAttention (compiled and eager).

One attention layer's call (`MultiHeadAttention.attend`, GQA) of a whole-sequence forward, with the mask of a
sliding window, of block-causal blocks (bidirectional), and of packed documents (causal), built for every call
as the model builds it (`slm.components.flex.Masking`: the dense mask per forward; the flex block mask cached
per shape, except a document mask, which is built per forward). Forward only, no gradient: FlexAttention has
no backward on the CPU, so training there always takes SDPA. Calls alternate in pairs (sdpa, flex, sdpa, flex,
...) on a fixed number of threads; each kind reports the ratio flex / sdpa per pair as the median with its
min-max, and the fused causal SDPA call (no mask) as a reference. Compiled flex needs a C++ compiler (skipped
without one); its compile time per kind is printed too.

    python bench/attention_masks.py [--pairs 15] [--threads 1] [--batch 4] [--length 256]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

import torch

from slm.components.attention import MultiHeadAttention
from slm.components.flex import Masking, document_ids, use_backend
from slm.model import ModelConfig

HEADS, KV_HEADS, HEAD_DIM, WINDOW, BLOCK, END = 8, 2, 32, 64, 64, 3


def kinds(batch: int, T: int) -> dict:
    """name: (causal, window, block, documents)"""
    gen = torch.Generator().manual_seed(1)
    idx = torch.randint(4, 100, (batch, T), generator=gen)
    idx[torch.rand(batch, T, generator=gen) < 4 / T] = END  # about four documents per row
    return {"causal": (True, None, None, None), "window": (True, WINDOW, None, None),
            "block": (False, None, BLOCK, None), "document": (True, None, None, document_ids(idx, END))}


def timed(attn, q, k, v, T: int, spec, backend: str) -> float:
    causal, window, block, docs = spec
    start = time.perf_counter()
    with use_backend(backend), torch.no_grad():
        masking = Masking(T, causal, window, block, docs, q.device)
        attn.attend(q, k, v, masking, causal=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=15, help="timed (sdpa, flex) pairs per kind")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=256, help="sequence length T")
    parser.add_argument("--out", default="bench/out/attention_masks.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    T = args.length
    cfg = ModelConfig(n_layers=1, d_model=HEADS * HEAD_DIM, attention=dict(n_heads=HEADS, n_kv_heads=KV_HEADS),
                      vocab_size=128, context_length=T)
    attn = MultiHeadAttention(cfg).eval()
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(args.batch, HEADS, T, HEAD_DIM, generator=gen)
    k, v = (torch.randn(args.batch, KV_HEADS, T, HEAD_DIM, generator=gen) for _ in range(2))
    compiler = shutil.which("g++") or shutil.which("c++") or shutil.which("cc")
    flexes = ["flex", "flex_eager"] if compiler else ["flex_eager"]
    result = {"batch": args.batch, "length": T, "heads": HEADS, "kv_heads": KV_HEADS, "head_dim": HEAD_DIM,
              "window": WINDOW, "block": BLOCK, "threads": args.threads, "pairs": args.pairs,
              "torch": torch.__version__, "compiler": compiler, "kinds": {}}
    print(f"masked attention, forward only: batch {args.batch}, T {T}, {HEADS} heads ({KV_HEADS} kv) x {HEAD_DIM}, "
          f"window {WINDOW}, block {BLOCK}, {args.threads} thread(s), {args.pairs} pairs"
          + ("" if compiler else "; no C++ compiler: compiled flex skipped"))
    for name, spec in kinds(args.batch, T).items():
        entry = result["kinds"][name] = {}
        for flex in flexes:
            start = time.perf_counter()
            timed(attn, q, k, v, T, spec, flex)  # compile (flex) or first call
            first = time.perf_counter() - start
            for _ in range(2):  # warm-up
                timed(attn, q, k, v, T, spec, "sdpa"), timed(attn, q, k, v, T, spec, flex)
            sdpa, other = [], []
            for _ in range(args.pairs):
                sdpa.append(timed(attn, q, k, v, T, spec, "sdpa"))
                other.append(timed(attn, q, k, v, T, spec, flex))
            ratios = [f / s for s, f in zip(sdpa, other)]
            entry[flex] = {"sdpa_seconds": sdpa, "flex_seconds": other, "first_call_seconds": first,
                           "ratio_flex_over_sdpa": {"median": statistics.median(ratios), "min": min(ratios),
                                                    "max": max(ratios)}}
            r = entry[flex]["ratio_flex_over_sdpa"]
            what = "fused causal, no mask" if spec[1:] == (None, None, None) else "dense mask"
            print(f"  {name:9s} sdpa ({what}) {statistics.median(sdpa) * 1e3:7.2f} ms   {flex:10s} "
                  f"{statistics.median(other) * 1e3:7.2f} ms   ratio {flex}/sdpa median {r['median']:.2f} "
                  f"(min {r['min']:.2f}, max {r['max']:.2f})   first {flex} call {first:.1f} s")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
