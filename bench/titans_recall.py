"""Synthetic recall: does Titans' memory carry key -> value pairs past the attention's reach?

Each sequence of `--length` tokens shows `--pairs` key-value pairs (key token, then its value token) in its
first segment, then filler tokens, then, in its last segment, the same keys again in a new order, each
followed by its value. Only those last values are scored (cross-entropy and accuracy): to predict one, a
model must recall a pair shown `--length` - 2 x `--segment` or more positions earlier.

Two models of equal size (within 0.5%) are trained on the same batches:
    memory   block 0 a mac layer (segment `--segment`), block 1 sliding-window attention of the same window
    local    both blocks sliding-window attention of window `--segment`; the MLP widened to match parameters
both with Canon A (`--canon`: a short causal convolution before each mixer, so that a token's input holds
its predecessor, the key of a value token).
Neither attention can see from the last segment back to the first (two layers of window W reach 2W back),
so the local model is at chance (1 / values) and whatever the memory model gains above it, its memory carried.

    python bench/titans_recall.py [--steps 3000] [--seeds 0 1] [--threads 2] [--device cuda]

Prints, per seed and model, held-out recall accuracy and loss on 1024 fresh sequences; writes
bench/out/titans_recall.json. The defaults (4 pairs in sequences of 128, segments of 32) take about 15
minutes per memory model on one CPU thread; on a GPU, a few minutes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from slm.model import ModelConfig, Transformer, count

OUT = Path(__file__).parent / "out" / "titans_recall.json"


class Task:
    """Token ids: keys [0, K), values [K, K + V), filler [K + V, K + V + FILLER)."""

    def __init__(self, length: int, segment: int, pairs: int, keys: int = 16, values: int = 16, filler: int = 32):
        if 2 * pairs > segment:
            raise SystemExit(f"--pairs={pairs}: 2 x pairs must fit in one segment of {segment}")
        if length < 3 * segment:
            raise SystemExit(f"--length={length}: needs at least 3 segments of {segment} (first, gap, last)")
        self.length, self.segment, self.pairs = length, segment, pairs
        self.keys, self.values, self.filler = keys, values, filler
        self.vocab = keys + values + filler

    def batch(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids (n, length), scored positions (n, pairs)): position p predicts ids[p + 1], a recalled value."""
        P, K, V = self.pairs, self.keys, self.values
        ids = K + V + torch.randint(0, self.filler, (n, self.length), generator=generator)
        keys = torch.stack([torch.randperm(K, generator=generator)[:P] for _ in range(n)])  # (n, P)
        values = K + torch.randint(0, V, (n, P), generator=generator)
        ids[:, 0:2 * P:2], ids[:, 1:2 * P:2] = keys, values
        order = torch.stack([torch.randperm(P, generator=generator) for _ in range(n)])
        start = self.length - self.segment  # the last segment
        ids[:, start:start + 2 * P:2] = keys.gather(1, order)
        ids[:, start + 1:start + 2 * P:2] = values.gather(1, order)
        return ids, torch.arange(start, start + 2 * P, 2).expand(n, P)


def configs(task: Task, width: int, canon: str = "A", **memory_settings) -> dict[str, ModelConfig]:
    """The memory model (memory_settings: model.memory fields lr, chunk, depth, ...) and the local model."""
    shape = dict(n_layers=2, d_model=width, attention=dict(head_dim=16, sliding_window=task.segment),
                 vocab_size=task.vocab, context_length=task.length, parametrization=dict(init="normal"),
                 canon=dict(set=canon))
    memory = ModelConfig(**shape, layer_types=["attn", "local_attn"],
                         memory=dict(layers=[0], segment=task.segment, persistent_tokens=4, **memory_settings))
    target = count(memory).params_total
    local = min((ModelConfig(**shape, layer_types=["local_attn"], mlp=dict(d_ff=f)) for f in range(8, 16 * width, 8)),
                key=lambda c: abs(count(c).params_total - target))
    return {"memory": memory, "local": local}


def loss_on(model, ids, scored) -> tuple[torch.Tensor, torch.Tensor]:
    logits = model(ids[:, :-1])  # (n, T - 1, V)
    picked = logits.gather(1, scored[..., None].expand(-1, -1, logits.shape[-1]))  # (n, P, V)
    target = ids.gather(1, scored + 1)
    return F.cross_entropy(picked.flatten(0, 1), target.flatten()), (picked.argmax(-1) == target).float().mean()


def train(cfg: ModelConfig, task: Task, steps: int, batch: int, lr: float, seed: int, device: str = "cpu",
          log_every: int = 0) -> dict:
    torch.manual_seed(seed)
    model = Transformer(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    data = torch.Generator().manual_seed(1000 + seed)  # the same batches for both models of a seed
    started, curve = time.perf_counter(), []
    for step in range(steps):
        ids, scored = (t.to(device) for t in task.batch(batch, data))
        for group in opt.param_groups:  # linear warmup over 5%, then constant
            group["lr"] = lr * min(1.0, (step + 1) / max(1, steps // 20))
        loss, _ = loss_on(model, ids, scored)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if log_every and (step + 1) % log_every == 0:
            curve.append(round(float(loss.detach()), 3))
            print(f"  step {step + 1} train loss {curve[-1]}", flush=True)
    seconds = time.perf_counter() - started
    model.eval()
    with torch.no_grad():
        held_out = torch.Generator().manual_seed(99)
        results = [loss_on(model, *(t.to(device) for t in task.batch(256, held_out))) for _ in range(4)]
    return {"params": count(cfg).params_total, "train_s": round(seconds, 1), "curve": curve,
            "loss": round(statistics.mean(float(r[0]) for r in results), 4),
            "accuracy": round(statistics.mean(float(r[1]) for r in results), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--segment", type=int, default=32)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--canon", default="A", help="Canon positions of both models ('' for none)")
    parser.add_argument("--memory-lr", type=float, default=0.5, help="the memory model's memory.lr")
    parser.add_argument("--memory-chunk", type=int, default=None, help="its memory.chunk (default: the segment)")
    parser.add_argument("--memory-depth", type=int, default=2, help="its memory.depth")
    parser.add_argument("--models", nargs="+", default=["memory", "local"], choices=["memory", "local"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--log-every", type=int, default=0, help="print the training loss every N steps")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    task = Task(args.length, args.segment, args.pairs)
    cfgs = configs(task, args.width, args.canon, lr=args.memory_lr, chunk=args.memory_chunk,
                   depth=args.memory_depth)
    cfgs = {name: cfgs[name] for name in args.models}
    runs = []
    for seed in args.seeds:
        for name, cfg in cfgs.items():
            result = {"model": name, "seed": seed, **train(cfg, task, args.steps, args.batch, args.lr, seed,
                                                           args.device, args.log_every)}
            runs.append(result)
            print(json.dumps(result), flush=True)
    summary = {}
    for name in cfgs:
        acc = [r["accuracy"] for r in runs if r["model"] == name]
        summary[name] = {"accuracy_median": statistics.median(acc), "accuracy_min": min(acc), "accuracy_max": max(acc),
                         "params": count(cfgs[name]).params_total}
    summary["chance"] = round(1 / task.values, 4)
    print(json.dumps(summary))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": {**vars(args), "out": str(args.out)}, "runs": runs, "summary": summary},
                                   indent=1) + "\n")


if __name__ == "__main__":
    main()
