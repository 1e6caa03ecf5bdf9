"""Benchmark: a mixture-of-experts training step against a dense model with the same active parameters.

Both are the llama3 block at the same width and depth, trained with the causal-LM objective and the default
train.loss on the same random batches, by slm-train's step (slm.training.step.train_step: forward, backward,
clipping, AdamW step). The MoE model's MLPs are `experts` SwiGLU experts of
hidden size f with top_k routed per token; the dense model's MLP has hidden size top_k * f, so a token
meets the same expert weights (the MoE adds its router: d * experts per layer). Steps alternate in pairs
(dense, moe, dense, moe, ...) on a fixed number of threads; the ratio moe / dense of each pair's step time
is reported as the median with its min-max. Goal: within ~2x of the dense step on CPU.

    python bench/moe_step.py [--pairs 15] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from slm.model import ModelConfig, Transformer, count
from slm.training.config import TrainConfig
from slm.training.optim import build_optimizer
from slm.training.step import objective_for, train_step

SHAPE = dict(n_layers=4, d_model=256, attention=dict(head_dim=32, n_kv_heads=4), vocab_size=512, context_length=256,
             parametrization=dict(init="normal"))


def models(experts: int, top_k: int, expert_d_ff: int) -> dict[str, ModelConfig]:
    return {"dense": ModelConfig(**SHAPE, mlp=dict(d_ff=top_k * expert_d_ff)),
            "moe": ModelConfig(**SHAPE, mlp_types=["moe"],
                                   moe=dict(n_experts=experts, top_k=top_k, expert_d_ff=expert_d_ff))}


class Trainer:
    """One model, its optimizer and a step function on a batch."""

    def __init__(self, cfg: ModelConfig):
        torch.manual_seed(0)
        self.model = Transformer(cfg)
        self.train_cfg = TrainConfig(objective="causal_lm")
        self.optimizer = build_optimizer(self.model, self.train_cfg)
        self.objective = objective_for(self.train_cfg)

    def step(self, batch: torch.Tensor) -> float:
        start = time.perf_counter()
        train_step(self.objective, self.model, batch, self.optimizer, grad_clip=self.train_cfg.grad_clip).item()
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=15, help="timed (dense, moe) step pairs")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=8, help="sequences of context_length tokens per step")
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--expert-d-ff", type=int, default=384)
    parser.add_argument("--out", default="bench/out/moe_step.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfgs = models(args.experts, args.top_k, args.expert_d_ff)
    trainers = {name: Trainer(cfg) for name, cfg in cfgs.items()}
    gen = torch.Generator().manual_seed(0)
    batch = lambda: torch.randint(0, SHAPE["vocab_size"], (args.batch, SHAPE["context_length"] + 1), generator=gen)  # noqa: E731
    for _ in range(3):  # warm-up: allocator, kernels
        for trainer in trainers.values():
            trainer.step(batch())
    seconds = {name: [] for name in trainers}
    for _ in range(args.pairs):
        b = batch()
        for name, trainer in trainers.items():
            seconds[name].append(trainer.step(b))
    ratios = [m / d for d, m in zip(seconds["dense"], seconds["moe"])]
    counts = {name: count(cfg) for name, cfg in cfgs.items()}
    result = {
        "shape": SHAPE, "experts": args.experts, "top_k": args.top_k, "expert_d_ff": args.expert_d_ff,
        "dense_d_ff": args.top_k * args.expert_d_ff, "batch_tokens": args.batch * SHAPE["context_length"],
        "threads": args.threads, "pairs": args.pairs,
        "params": {name: {"total": c.params_total, "active": c.params_active} for name, c in counts.items()},
        "step_seconds": seconds, "ratio_moe_over_dense": {"median": statistics.median(ratios), "min": min(ratios),
                                                         "max": max(ratios)},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    r = result["ratio_moe_over_dense"]
    print(f"moe step  {args.experts} experts top-{args.top_k} (hidden {args.expert_d_ff}) vs dense SwiGLU "
          f"{args.top_k * args.expert_d_ff}, {counts['moe'].params_active:,} vs {counts['dense'].params_active:,} active "
          f"parameters, {args.threads} thread(s), {result['batch_tokens']} tokens/step")
    print(f"          dense {statistics.median(seconds['dense']) * 1e3:.0f} ms   moe "
          f"{statistics.median(seconds['moe']) * 1e3:.0f} ms   ratio moe/dense median {r['median']:.2f} "
          f"(min {r['min']:.2f}, max {r['max']:.2f}; {args.pairs} pairs)  (goal <= ~2)")


if __name__ == "__main__":
    main()
