"""Benchmark: the chunked linear + cross-entropy (train.loss.impl=chunked) against the plain path (the whole float32
logits, then F.cross_entropy) on a CPU, at vocab 50304: peak memory and step time.

Three cases, 8 x 256 = 2048 tokens each:
    head d256, head d512   forward + backward of the head and the loss alone: hidden states (2048, d) and a
                           tied head (50304, d), the head's own gradients
    step d256              a whole training step of a 4-layer model of width 256 (causal_lm objective, AdamW;
                           the embedding is tied to the head)
Each measurement runs in its own process (python bench/loss_step.py --worker CASE IMPL), so its peak resident
memory (ru_maxrss) is its own: the figure is that peak less the resident memory after setup (the model, the
batch, and for a step the optimizer's state, made by one untimed step). A worker times `--steps` steps after
one warm-up and reports their median. The processes alternate in pairs (plain, chunked, plain, chunked, ...)
on a fixed number of threads; per case the ratio chunked / plain of each pair is reported as the median with
its min-max, for time and for memory. One JSON file with every figure is written to --out.

With --compile the step cases run as train.compile runs them (the model, and the objective's forward + head +
loss as one compiled function); the head cases stay eager.

    python bench/loss_step.py [--pairs 3] [--threads 1] [--chunk 256] [--cases head_d256,head_d512,step_d256]
                              [--compile]
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
CASES = {"head_d256": ("head", 256), "head_d512": ("head", 512), "step_d256": ("step", 256)}
IMPLS = ("plain", "chunked")


def rss_mb() -> float:
    """Resident memory of this process now (MB)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def worker(case: str, impl: str, steps: int, threads: int, chunk: int, compiled: bool = False) -> dict:
    """Seconds per step (median of `steps`) and peak memory above setup (MB) of one case with one impl."""
    import torch

    from slm.model import ModelConfig, Transformer
    from slm.objectives import OBJECTIVES
    from slm.objectives.linear_ce import LossSettings, linear_cross_entropy
    from slm.training.config import TrainConfig
    from slm.training.optim import build_optimizer

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    kind, d = CASES[case]
    gen = torch.Generator().manual_seed(0)
    if kind == "head":
        h = torch.randn(BATCH * CONTEXT, d, generator=gen).requires_grad_()
        weight = (torch.randn(VOCAB, d, generator=gen) * 0.02).requires_grad_()
        targets = torch.randint(0, VOCAB, (BATCH * CONTEXT,), generator=gen)

        def run() -> None:
            h.grad = weight.grad = None
            linear_cross_entropy(h, weight, targets, impl=impl, chunk=chunk).backward()
    else:
        model = Transformer(ModelConfig(n_layers=4, d_model=d, head_dim=32, vocab_size=VOCAB, context_length=CONTEXT,
                                        init="normal"))
        optimizer = build_optimizer(model, TrainConfig())
        objective = OBJECTIVES.get("causal_lm")(LossSettings(impl=impl, chunk_tokens=chunk))
        forward = model
        if compiled:  # as train.compile does (LanguageModelModule.configure_model)
            forward = torch.compile(model)
            objective.compile()
        batch = torch.randint(0, VOCAB, (BATCH, CONTEXT + 1), generator=gen)

        def run() -> None:
            optimizer.zero_grad(set_to_none=True)
            loss = objective.terms(forward, batch)["loss"]
            loss.backward()
            optimizer.step()
            loss.item()

        run()  # the optimizer's state: part of the setup
        optimizer.zero_grad(set_to_none=True)
    base = rss_mb()
    run()  # warm-up
    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux
    return {"seconds": statistics.median(seconds), "peak_above_setup_mb": peak - base, "peak_mb": peak}


def spawn(case: str, impl: str, args) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", case, impl, "--steps", str(args.steps),
                          "--threads", str(args.threads), "--chunk", str(args.chunk)]
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
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    parser.add_argument("--compile", action="store_true", help="step cases: torch.compile the model and the loss "
                        "(train.compile; the first, untimed step compiles)")
    parser.add_argument("--out", default="bench/out/loss_step.json")
    parser.add_argument("--worker", nargs=2, metavar=("CASE", "IMPL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.chunk is None:
        from slm.objectives.linear_ce import LossSettings

        args.chunk = LossSettings().chunk_tokens
    if args.worker:
        print(json.dumps(worker(*args.worker, args.steps, args.threads, args.chunk, args.compile)))
        return
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in CASES]
    if bad:
        raise SystemExit(f"loss_step: --cases has {bad[0]!r}: choose from {', '.join(CASES)}")
    print(f"loss step  vocab {VOCAB}, {BATCH} x {CONTEXT} tokens, {args.threads} thread(s), chunk {args.chunk} rows, "
          f"{args.pairs} (plain, chunked) process pairs per case, median of {args.steps} steps each"
          + (", steps compiled" if args.compile else ""))
    result = {"vocab": VOCAB, "tokens": BATCH * CONTEXT, "threads": args.threads, "chunk_tokens": args.chunk,
              "pairs": args.pairs, "steps": args.steps, "compile": args.compile, "cases": {}}
    for case in cases:
        runs = {impl: [] for impl in IMPLS}
        for _ in range(args.pairs):
            for impl in IMPLS:
                runs[impl].append(spawn(case, impl, args))
        pairs = list(zip(runs["plain"], runs["chunked"]))
        time_ratio = [c["seconds"] / p["seconds"] for p, c in pairs]
        mem_ratio = [c["peak_above_setup_mb"] / p["peak_above_setup_mb"] for p, c in pairs]
        result["cases"][case] = {"runs": runs, "time_chunked_over_plain": spread(time_ratio),
                                 "memory_chunked_over_plain": spread(mem_ratio)}
        med = {impl: {k: statistics.median(r[k] for r in runs[impl]) for k in runs[impl][0]} for impl in IMPLS}
        t, m = spread(time_ratio), spread(mem_ratio)
        print(f"  {case:10s} time plain {med['plain']['seconds'] * 1e3:6.0f} ms  chunked "
              f"{med['chunked']['seconds'] * 1e3:6.0f} ms  ratio {t['median']:.2f} ({t['min']:.2f}-{t['max']:.2f})   "
              f"peak above setup plain {med['plain']['peak_above_setup_mb']:5.0f} MB  chunked "
              f"{med['chunked']['peak_above_setup_mb']:5.0f} MB  ratio {m['median']:.2f} "
              f"({m['min']:.2f}-{m['max']:.2f})")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
