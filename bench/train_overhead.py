"""Benchmark: slm-train's training throughput against a bare PyTorch loop, in one process.

Both train the same model (same init, optimizer groups, schedule, clipping) on the same batches from
the same DataModule, for the same number of steps; each is timed from its first batch to its last
optimizer step (set-up, validation and the final save excluded). Runs alternate (bare, slm, bare, slm, …)
and the ratio of medians is reported. Goal: slm / bare >= 0.95 (Lightning's overhead under 5%).

Also reported: the data loader's share of a step (goal < 2%), and tokenizer throughput per core.

    python bench/train_overhead.py [--repeats 3] [--steps 60]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from slm.cli.config import compose_config
from slm.data import SLMDataModule, prepare
from slm.model import Transformer, config_from_spec
from slm.objectives import OBJECTIVES
from slm.training.config import TrainConfig
from slm.training.optim import build_optimizer
from slm.training.schedules import SCHEDULES

OVERRIDES = ["model=llama3", "model.n_layers=4", "model.d_model=128", "model.head_dim=32", "model.n_kv_heads=2",
             "model.context_length=256", "train.batch_size=16", "train.val_interval=0", "train.val_batches=1",
             "train.progress_bar=false", "train.ckpt_interval=100000", "train.log_interval=10"]


def config(steps: int) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(compose_config(OVERRIDES + [f"train.steps={steps}"]), resolve=True)


def bare_loop(cfg: dict, steps: int) -> float:
    """Seconds for `steps` optimizer steps of a plain loop (same pieces as LanguageModelModule)."""
    train = TrainConfig(**cfg["train"])
    prepared = prepare(cfg["data"], cfg["tokenizer"])
    model_cfg = config_from_spec({**cfg["model"], "vocab_size": prepared.vocab_size})
    torch.manual_seed(train.seed)
    model = Transformer(model_cfg)
    objective = OBJECTIVES.get(train.objective)()
    optimizer = build_optimizer(model, train)
    schedule = SCHEDULES.get(train.schedule)(steps, train.warmup(steps), train.min_lr_ratio, train.decay_fraction)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    dm = SLMDataModule(prepared, train.batch_size, model_cfg.context_length, train.seed, train.val_batches)
    batches = iter(dm.train_dataloader())
    start = time.perf_counter()
    for _ in range(steps):
        batch = next(batches)
        loss = objective.loss(model, batch)
        loss.item()  # slm-train reads the loss every step too (divergence check)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
        optimizer.step()
        scheduler.step()
    return time.perf_counter() - start


def slm_train(cfg: dict, steps: int) -> float:
    """Seconds of training (ThroughputMonitor: first batch to last step, validation excluded) of the
    same job slm-train runs."""
    from slm.runs.job import train_run

    with tempfile.TemporaryDirectory() as tmp:
        record = train_run(cfg, tmp)
    return record["training"]["train_seconds"]


def loader_share(cfg: dict, steps: int, step_seconds: float) -> float:
    train = TrainConfig(**cfg["train"])
    prepared = prepare(cfg["data"], cfg["tokenizer"])
    dm = SLMDataModule(prepared, train.batch_size, cfg["model"]["context_length"], train.seed, 1)
    batches = iter(dm.train_dataloader())
    start = time.perf_counter()
    for _ in range(steps):
        next(batches)
    return (time.perf_counter() - start) / steps / step_seconds


def tokenizer_rates() -> dict[str, float]:
    """Tokens per second on one core: gpt2 on WikiText-2 prose, char on Tiny Shakespeare."""
    from importlib.resources import files

    from slm.data.tokenizers import CharTokenizer, GPT2Tokenizer

    torch.set_num_threads(1)
    shakespeare = (files("slm.data") / "corpora" / "tiny_shakespeare" / "train.txt").read_text()
    wiki_path = Path(__file__).resolve().parents[1] / "tests" / "data" / "wikitext2_valid_excerpt.txt"
    rates = {}
    cases = (("gpt2", GPT2Tokenizer(), wiki_path.read_text() * 20),
             ("char", CharTokenizer(sorted(set(shakespeare)), unk=False, eot=False), shakespeare))
    for kind, tok, text in cases:
        start = time.perf_counter()
        n = len(tok.encode(text))
        rates[kind] = n / (time.perf_counter() - start)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--out", default="bench/out/train_overhead.json")
    args = parser.parse_args()
    cfg = config(args.steps)
    bare_loop(cfg, 5)  # warm caches (shards, allocator) before timing anything
    bare, slm = [], []
    for _ in range(args.repeats):
        bare.append(bare_loop(cfg, args.steps))
        slm.append(slm_train(cfg, args.steps))
    tokens = args.steps * cfg["train"]["batch_size"] * cfg["model"]["context_length"]
    bare_rate, slm_rate = tokens / statistics.median(bare), tokens / statistics.median(slm)
    share = loader_share(cfg, args.steps, statistics.median(bare) / args.steps)
    result = {
        "setup": " ".join(OVERRIDES), "steps": args.steps, "repeats": args.repeats, "threads": torch.get_num_threads(),
        "bare_tokens_per_s": bare_rate, "slm_tokens_per_s": slm_rate, "ratio_slm_over_bare": slm_rate / bare_rate,
        "bare_seconds": bare, "slm_seconds": slm, "loader_share_of_step": share, "tokenizer_tokens_per_s_per_core": tokenizer_rates(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"training  bare loop {bare_rate:,.0f} tok/s   slm-train {slm_rate:,.0f} tok/s   "
          f"ratio {slm_rate / bare_rate:.3f}  (goal >= 0.95)")
    print(f"data      loader time per step = {share:.2%} of a bare step  (goal < 2%)")
    for kind, rate in result["tokenizer_tokens_per_s_per_core"].items():
        print(f"tokenize  {kind:5s} {rate:,.0f} tokens/s on one core")


if __name__ == "__main__":
    main()
