"""Benchmark: slm-train's training throughput against a bare PyTorch loop, in one process.

Both train the same model (same init, optimizer groups, schedule, clipping) on the same batches from
the same DataModule, for the same number of steps, with the same step: the objective of the run's settings
(train.objective with train.loss, so the same loss path) and slm.training.step's train_step, whose loss is
LanguageModelModule.training_step's (slm.training.step.step_loss); each is timed from its first batch to its
last optimizer step (set-up, validation and the final save excluded). The bare loop reads nothing back from
the model between steps (no .item(): nanoGPT's and torchtitan's habit between log lines). Runs alternate in
pairs (bare, slm, bare, slm, ...) at a fixed thread count, and each size reports the median of the per-pair
ratios with their min-max. Goal: slm / bare >= 0.95 (the trainer's overhead under 5%) at both sizes:
`debug` (the default model, ~20-50 ms steps on a CPU core, where per-step costs show most) and `small`
(4 layers, d_model 128, context 256).

Also reported: the data loader's share of a step (goal < 2%), and tokenizer throughput per core.

    python bench/train_overhead.py [--repeats 5] [--steps 60] [--threads 1] [--sizes debug small]
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
from slm.training.config import TrainConfig
from slm.training.optim import build_optimizer
from slm.training.step import objective_for, train_step

COMMON = ["train.batch_size=16", "train.validation.interval=0", "train.validation.batches=1", "train.logging.progress_bar=false",
          "train.checkpoint.interval=100000", "train.logging.interval=10", "eval=none", "train.parallel.accelerator=cpu"]
SIZES = {
    "debug": ["model=debug"],
    "small": ["model=llama3", "model.n_layers=4", "model.d_model=128", "model.attention.head_dim=32",
              "model.attention.n_kv_heads=2", "model.context_length=256"],
}


def config(size: str, steps: int) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(compose_config(SIZES[size] + COMMON + [f"train.length.steps={steps}"]), resolve=True)


def bare_loop(cfg: dict, steps: int, losses: list | None = None) -> float:
    """Seconds for `steps` optimizer steps of a plain loop (same pieces as LanguageModelModule); `losses`: a list
    that gets each step's loss, read back after the timed loop."""
    train = TrainConfig.from_node(cfg["train"])
    prepared = prepare(cfg["data"], cfg["tokenizer"])
    model_cfg = config_from_spec({**cfg["model"], "vocab_size": prepared.vocab_size})
    torch.manual_seed(train.seed)
    model = Transformer(model_cfg)
    objective = objective_for(train)  # train.loss too: the loss path slm-train takes
    optimizer = build_optimizer(model, train)
    schedule = train.schedule.build(steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    dm = SLMDataModule(prepared, train.batch_size, model_cfg.context_length, train.seed, train.validation.batches)
    batches = iter(dm.train_dataloader())
    start = time.perf_counter()
    kept = []
    for step in range(steps):
        kept.append(train_step(objective, model, next(batches), optimizer, seed=train.seed, step=step,
                               scheduler=scheduler, grad_clip=train.grad_clip))
    seconds = time.perf_counter() - start
    if losses is not None:
        losses.extend(torch.stack(kept).tolist())
    return seconds


def slm_train(cfg: dict, steps: int) -> float:
    """Seconds of training (ThroughputMonitor: first batch to last step, validation excluded) of the
    same job slm-train runs."""
    from slm.runs.job import train_run

    with tempfile.TemporaryDirectory() as tmp:
        record = train_run(cfg, tmp)
    return record["training"]["train_seconds"]


def loader_share(cfg: dict, steps: int, step_seconds: float) -> float:
    train = TrainConfig.from_node(cfg["train"])
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


def measure(size: str, steps: int, repeats: int) -> dict:
    """Bare and slm-train seconds in alternating pairs, and the per-pair ratios (slm throughput / bare)."""
    cfg = config(size, steps)
    bare_loop(cfg, 5)  # warm caches (shards, allocator) before timing anything
    slm_train(config(size, 5), 5)
    bare, slm = [], []
    for _ in range(repeats):
        bare.append(bare_loop(cfg, steps))
        slm.append(slm_train(cfg, steps))
    ratios = [b / s for b, s in zip(bare, slm)]
    tokens = steps * cfg["train"]["batch_size"] * cfg["model"]["context_length"]
    return {"setup": " ".join(SIZES[size] + COMMON), "steps": steps, "repeats": repeats,
            "bare_seconds": bare, "slm_seconds": slm, "step_ms_bare": 1000 * statistics.median(bare) / steps,
            "bare_tokens_per_s": tokens / statistics.median(bare), "slm_tokens_per_s": tokens / statistics.median(slm),
            "ratio_slm_over_bare": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "loader_share_of_step": loader_share(cfg, steps, statistics.median(bare) / steps)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--out", default="bench/out/train_overhead.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    result = {"threads": args.threads, "sizes": {}}
    for size in args.sizes:
        r = result["sizes"][size] = measure(size, args.steps, args.repeats)
        print(f"training  {size:5s} ({r['step_ms_bare']:.0f} ms steps)  bare {r['bare_tokens_per_s']:,.0f} tok/s   "
              f"slm-train {r['slm_tokens_per_s']:,.0f} tok/s   ratio {r['ratio_slm_over_bare']:.3f} "
              f"({r['ratio_min']:.3f}-{r['ratio_max']:.3f} over {args.repeats} pairs; goal >= 0.95)", flush=True)
        print(f"data      {size:5s} loader time per step = {r['loader_share_of_step']:.2%} of a bare step  (goal < 2%)")
    result["tokenizer_tokens_per_s_per_core"] = tokenizer_rates()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for kind, rate in result["tokenizer_tokens_per_s_per_core"].items():
        print(f"tokenize  {kind:5s} {rate:,.0f} tokens/s on one core")


if __name__ == "__main__":
    main()
