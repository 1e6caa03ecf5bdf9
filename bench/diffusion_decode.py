"""Benchmark: batch-1 generation of one shape decoded autoregressively and by masked diffusion, in one process.

The same weights (the study's LLaMA3 70M shape by default) run three ways:
  ar        causal, KV cache, one token per forward (slm.model.generate.Decoder)
  dllm      bidirectional, the whole canvas each step (slm.model.diffusion, no cache possible)
  dhara     block-causal (attention_block = block_length), committed blocks cached, a step runs its block
Each generates `--new` tokens after a `--prompt`-token random prompt; the diffusion runs take `--steps`
denoising steps in all (default new/4: four tokens a step, low-confidence remasking). The runs alternate
(ar, dllm, dhara per round) and the ratio diffusion / ar of end-to-end tokens/s is taken per round; the
median and min-max over `--rounds` are printed. The study (arXiv 2512.20877) reports Dhara-70M at 3.8x the
throughput of its AR model (on a GPU): the reference to read these ratios against. Weights are random:
the speed of a step does not depend on them, but a threshold sampler's would (it is not timed here).

    python bench/diffusion_decode.py --threads 1
    python bench/diffusion_decode.py --layers 4 --width 128 --rounds 5     # a quick look
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from slm.model import ModelConfig, Transformer
from slm.model.diffusion import DiffusionSampler
from slm.model.generate import Decoder

MASK = 50257  # the padded GPT-2 vocabulary's first spare row, as the dllm preset


def build(args, **kind) -> Transformer:
    torch.manual_seed(0)  # same weights for every kind
    cfg = ModelConfig(family="llama3", n_layers=args.layers, d_model=args.width, n_heads=8, n_kv_heads=4,
                      vocab_size=50304, context_length=args.context, init="normal", **kind)
    return Transformer(cfg).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=None, help="denoising steps in all (default new/4)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default="bench/out/diffusion_decode.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    steps = args.steps or max(1, args.new // 4)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, MASK, (args.prompt,), generator=gen).tolist()

    ar = Decoder(build(args), batch_size=1, capacity=args.prompt + args.new)
    dllm = DiffusionSampler(build(args, causal=False, mask_token_id=MASK), args.block_length, steps)
    dhara = DiffusionSampler(build(args, causal=False, mask_token_id=MASK, attention_block=args.block_length),
                             args.block_length, steps)
    runs = {"ar": lambda: ar.generate([prompt], args.new), "dllm": lambda: dllm.generate([prompt], args.new),
            "dhara": lambda: dhara.generate([prompt], args.new)}
    for run in runs.values():  # warm-up
        run()
    rates = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            out = run()
            rates[name].append(len(out[0]) / (time.perf_counter() - start))
    summary = {}
    for name in ("dllm", "dhara"):
        ratios = [d / a for d, a in zip(rates[name], rates["ar"])]
        summary[name] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    result = {"shape": {"n_layers": args.layers, "d_model": args.width, "context_length": args.context},
              "prompt_tokens": args.prompt, "new_tokens": args.new, "block_length": args.block_length,
              "steps": steps, "threads": args.threads, "rounds": args.rounds, "device": "cpu",
              "tokens_per_s": rates, "ratio_over_ar": summary, "study_reference_ratio": 3.8}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"diffusion decode  {args.layers}x{args.width}, prompt {args.prompt}, {args.new} new tokens, {steps} steps "
          f"in blocks of {args.block_length}, {args.threads} thread(s), {args.rounds} rounds")
    print("                  " + "   ".join(f"{n} {statistics.median(r):.0f} tok/s" for n, r in rates.items()))
    for name, r in summary.items():
        print(f"                  {name}/ar median {r['median']:.2f}x (min {r['min']:.2f}, max {r['max']:.2f})  "
              f"(study: Dhara 3.8x on GPU)")


if __name__ == "__main__":
    main()
