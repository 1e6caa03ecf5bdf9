"""Benchmark: the chunked linear + cross-entropy (train.loss.impl=chunked) against the plain path (the whole float32
logits, then F.cross_entropy) on a CPU: peak memory and step time, at vocab 50304 (--vocab: any), and where the
two cross (auto's PLAIN_BELOW_BYTES: --vocab 65,512,2048,8192).

The cases, --batch x --context tokens each (default 8 x 256 = 2048):
    head d256, head d512   forward + backward of the head and the loss alone: hidden states (tokens, d) and a
                           tied head (vocab, d), the head's own gradients (slm.objectives.linear_ce's plain
                           cross_entropy against its chunked linear_cross_entropy, the two computations of the paths)
    step d256              a whole training step of a 4-layer model of width 256 (causal_lm objective, AdamW;
                           the embedding is tied to the head): slm.training.step.train_step, slm-train's step
    step debug             the same at the default (debug) model's shape: 2 layers of width 64
With several --vocab values each vocabulary is measured in turn, its float32 logits (tokens x vocab x 4 bytes)
printed beside its ratios. Each measurement runs in its own process (python bench/loss_step.py --worker CASE
IMPL), so its peak resident memory (ru_maxrss) is its own: the figure is that peak less the resident memory after
setup (the model, the batch, and for a step the optimizer's state, made by one untimed step). A worker times
`--steps` steps after one warm-up and reports their median. The processes alternate in pairs (plain, chunked,
plain, chunked, ...) on a fixed number of threads; per case the ratio chunked / plain of each pair is reported as
the median with its min-max, for time and for memory. One JSON file with every figure is written to --out.

With --compile the step cases run as train.compile runs them (the model, and the objective's forward + head +
loss as one compiled function); the head cases stay eager.

    python bench/loss_step.py [--pairs 3] [--threads 1] [--chunk 256] [--cases head_d256,head_d512,step_d256]
                              [--compile] [--vocab 50304] [--batch 8] [--context 256]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

VOCAB, BATCH, CONTEXT = 50304, 8, 256
CASES = {"head_d256": ("head", 256, 0), "head_d512": ("head", 512, 0), "step_d256": ("step", 256, 4),
         "step_debug": ("step", 64, 2)}
"""name: (kind, width, layers)."""
DEFAULT_CASES = ("head_d256", "head_d512", "step_d256")
IMPLS = ("plain", "chunked")


def rss_mb() -> float:
    """Resident memory of this process now (MB)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def worker(case: str, impl: str, steps: int, threads: int, chunk: int, compiled: bool = False, vocab: int = VOCAB,
           batch: int = BATCH, context: int = CONTEXT) -> dict:
    """Seconds per step (median of `steps`) and peak memory above setup (MB) of one case with one impl."""
    import torch

    from slm.model import ModelConfig, Transformer
    from slm.objectives.linear_ce import LossSettings, cross_entropy, linear_cross_entropy
    from slm.training.config import TrainConfig
    from slm.training.optim import build_optimizer
    from slm.training.step import objective_for, train_step

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    kind, d, layers = CASES[case]
    gen = torch.Generator().manual_seed(0)
    if kind == "head":
        h = torch.randn(batch * context, d, generator=gen).requires_grad_()
        weight = (torch.randn(vocab, d, generator=gen) * 0.02).requires_grad_()
        targets = torch.randint(0, vocab, (batch * context,), generator=gen)
        loss = {"plain": lambda: cross_entropy(torch.nn.functional.linear(h, weight), targets),
                "chunked": lambda: linear_cross_entropy(h, weight, targets, chunk=chunk)}[impl]

        def run() -> None:
            h.grad = weight.grad = None
            loss().backward()
    else:
        model = Transformer(ModelConfig(n_layers=layers, d_model=d, attention={"head_dim": 16 if d < 128 else 32},
                                        vocab_size=vocab, context_length=context, parametrization={"init": "normal"}))
        train_cfg = TrainConfig(loss=LossSettings(impl=impl, chunk_tokens=chunk))
        optimizer = build_optimizer(model, train_cfg)
        objective = objective_for(train_cfg)
        forward = model
        if compiled:  # as train.compile does (LanguageModelModule.configure_model)
            forward = torch.compile(model)
            objective.compile()
        tokens = torch.randint(0, vocab, (batch, context + 1), generator=gen)

        def run() -> None:
            train_step(objective, forward, tokens, optimizer, grad_clip=train_cfg.grad_clip).item()

        run()  # the optimizer's state: part of the setup
    base = rss_mb()
    run()  # warm-up
    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux
    return {"seconds": statistics.median(seconds), "peak_above_setup_mb": peak - base, "peak_mb": peak}


def spawn(case: str, impl: str, vocab: int, args) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", case, impl, "--steps", str(args.steps),
                          "--threads", str(args.threads), "--chunk", str(args.chunk), "--vocab", str(vocab),
                          "--batch", str(args.batch), "--context", str(args.context)]
                         + (["--compile"] if args.compile else []),
                         capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"loss_step worker {case} {impl} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3, help="(plain, chunked) process pairs per case")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per process (after one warm-up)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--chunk", type=int, default=None, help="train.loss.chunk_tokens (default: the setting's)")
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    parser.add_argument("--compile", action="store_true", help="step cases: torch.compile the model and the loss "
                        "(train.compile; the first, untimed step compiles)")
    parser.add_argument("--vocab", default=str(VOCAB), help=f"vocabulary sizes, comma-separated (default {VOCAB})")
    parser.add_argument("--batch", type=int, default=BATCH, help=f"sequences per step (default {BATCH})")
    parser.add_argument("--context", type=int, default=CONTEXT, help=f"tokens per sequence (default {CONTEXT})")
    parser.add_argument("--out", default="bench/out/loss_step.json")
    parser.add_argument("--worker", nargs=2, metavar=("CASE", "IMPL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.chunk is None:
        from slm.objectives.linear_ce import LossSettings

        args.chunk = LossSettings().chunk_tokens
    vocabs = [int(v) for v in args.vocab.split(",") if v.strip()]
    if args.worker:
        print(json.dumps(worker(*args.worker, args.steps, args.threads, args.chunk, args.compile, vocabs[0],
                                args.batch, args.context)))
        return
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in CASES]
    if bad:
        raise SystemExit(f"loss_step: --cases has {bad[0]!r}: choose from {', '.join(CASES)}")
    tokens = args.batch * args.context
    print(f"loss step  vocab {args.vocab}, {args.batch} x {args.context} tokens, {args.threads} thread(s), chunk "
          f"{args.chunk} rows, {args.pairs} (plain, chunked) process pairs per case, median of {args.steps} steps each"
          + (", steps compiled" if args.compile else ""))
    result = {"vocab": vocabs, "tokens": tokens, "threads": args.threads, "chunk_tokens": args.chunk,
              "pairs": args.pairs, "steps": args.steps, "compile": args.compile, "cases": {}}
    for vocab in vocabs:
        for case in cases:
            runs = {impl: [] for impl in IMPLS}
            for _ in range(args.pairs):
                for impl in IMPLS:
                    runs[impl].append(spawn(case, impl, vocab, args))
            pairs = list(zip(runs["plain"], runs["chunked"]))
            time_ratio = [c["seconds"] / p["seconds"] for p, c in pairs]
            mem_ratio = [c["peak_above_setup_mb"] / max(p["peak_above_setup_mb"], 1e-3) for p, c in pairs]
            logits_mb = tokens * vocab * 4 / 2**20
            key = case if len(vocabs) == 1 else f"{case}@{vocab}"
            result["cases"][key] = {"case": case, "vocab": vocab, "logits_mb": logits_mb, "runs": runs,
                                    "time_chunked_over_plain": spread(time_ratio),
                                    "memory_chunked_over_plain": spread(mem_ratio)}
            med = {impl: {k: statistics.median(r[k] for r in runs[impl]) for k in runs[impl][0]} for impl in IMPLS}
            t, m = spread(time_ratio), spread(mem_ratio)
            print(f"  {case:10s} vocab {vocab:6d} logits {logits_mb:6.1f} MB  time plain "
                  f"{med['plain']['seconds'] * 1e3:6.1f} ms  chunked {med['chunked']['seconds'] * 1e3:6.1f} ms  ratio "
                  f"{t['median']:.2f} ({t['min']:.2f}-{t['max']:.2f})   peak above setup plain "
                  f"{med['plain']['peak_above_setup_mb']:5.0f} MB  chunked "
                  f"{med['chunked']['peak_above_setup_mb']:5.0f} MB  ratio {m['median']:.2f} ({m['min']:.2f}-{m['max']:.2f})", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
