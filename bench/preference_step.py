"""Benchmark: a preference (DPO) training step against an SFT step on the same pairs, on a CPU: step time and peak
memory (issue 50: a DPO step with precomputed reference log-probs should cost <= 2.2x an SFT step on the same pairs).

The pairs are the function-calling task's (slm.toolcall: train items, the gold call chosen, one controlled
corruption of it rejected, corruptions.MODES), tokenized with a character tokenizer fitted on them (the eot id is the
start token and the pad id, as slm-train's records runs use it), in slm.data.records' batches: --batch pairs a step,
2b right-padded rows (the b chosen completions, then the b rejected ones). Each step takes the next --batch pairs, so
the padded length varies from step to step as in training; every process sees the same batches. Three modes, each a
whole training step (slm.training.step.train_step with the objective of a TrainConfig, AdamW):

    sft         train.objective=sft on the batch's 2b rows (the chosen and the rejected completions as SFT rows:
                two sequences per pair), the completion tokens scored, the prompt context
    dpo_cached  train.objective=preference, loss [dpo], the reference's log-probs precomputed (the batch's `ref`,
                as train.preference.reference=cached gives them): computed once in setup, before the first step,
                from the starting weights
    dpo_frozen  the same with train.preference.reference=frozen: a frozen copy of the starting model
                (objective.reference) scores every batch without grad

The cases (--cases), each a llama3 block (RMSNorm, RoPE, SwiGLU, GQA, tied embedding) of 4 layers, context 256:
char_d128 and char_d256 (the toolcall student's shape: width 128 or 256, the character vocabulary) and v50304_d256
(width 256 with GPT-2's 50304-id vocabulary, the same character ids: the head's cost is set by the vocabulary's size,
not by which ids occur).

Each measurement runs in its own process (python bench/preference_step.py --worker CASE MODE), so its peak resident
memory is its own: the figure is its peak during the steps (VmHWM, reset when setup is over) less the resident
memory after setup (the model, the pairs, the optimizer's state made by one untimed step, and the frozen copy in
dpo_frozen, whose size is reported apart; glibc's freed heap handed back first). A worker times --steps steps after
one warm-up and reports their median. The processes alternate in triples (sft, dpo_cached, dpo_frozen, sft, ...) on
a fixed number of threads; per case the ratios dpo_cached / sft and dpo_frozen / sft of each triple are reported as
the median with their min-max, for time and for memory. One JSON file with every figure is written to --out.

    python bench/preference_step.py [--cases char_d256,v50304_d256] [--triples 3] [--steps 3] [--threads 1] [--batch 8]
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

CASES = {"char_d128": (128, None), "char_d256": (256, None), "v50304_d256": (256, 50304)}
"""name: (width, vocabulary size; None: the character tokenizer's)."""
DEFAULT_CASES = ("char_d256", "v50304_d256")
MODES = ("sft", "dpo_cached", "dpo_frozen")
LAYERS, CONTEXT, BATCH, SEED = 4, 256, 8, 0


def rss_mb() -> float:
    """Resident memory of this process now (MB)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def settled_rss_mb() -> float:
    """Resident memory once setup is over: glibc's free heap memory handed back to the system (malloc_trim), so
    memory freed in setup is not counted as setup, and the peak (VmHWM) reset to it (Linux's clear_refs), so the
    peak read after the steps is theirs, not setup's."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to hand back
        pass
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return rss_mb()


def peak_rss_mb() -> float:
    """The peak resident memory (VmHWM, MB) since settled_rss_mb reset it."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def toolcall_pairs(n: int, seed: int = SEED):
    """(EncodedRecords of n toolcall preference pairs, the character tokenizer): gold call chosen, a corruption
    rejected."""
    import numpy as np

    from slm.data.records import EncodedRecords
    from slm.data.tokenizers import CharTokenizer
    from slm.toolcall.corruptions import MODES as CORRUPTIONS
    from slm.toolcall.files import pair_records
    from slm.toolcall.items import generate

    records, items = [], 0
    while len(records) < n:  # an item no corruption applies to has no pair
        items += n
        records = pair_records(generate("train", seed, items), CORRUPTIONS, seed)[0][:n]
    texts = [r[k] for r in records for k in ("prompt", "chosen", "rejected")]
    tokenizer = CharTokenizer(sorted(set("".join(texts))), unk=False, eot=True)
    encode = lambda text: list(tokenizer.encode(text))  # noqa: E731
    prompts = [[tokenizer.eot_id] + encode(r["prompt"]) for r in records]
    completions = [[encode(r["chosen"]), encode(r["rejected"])] for r in records]
    return EncodedRecords("preference", Path("<slm.toolcall train pairs>"), prompts, completions,
                          np.arange(len(records))), tokenizer


def build(case: str, vocab: int):
    """The case's model (seeded) and its config."""
    import torch

    from slm.model import ModelConfig, Transformer
    from slm.settings import nested

    width, big = CASES[case]
    torch.manual_seed(SEED)
    cfg = ModelConfig(**nested({"family": "llama3", "n_layers": LAYERS, "d_model": width, "vocab_size": big or vocab,
                                "context_length": CONTEXT, "attention.head_dim": 32,
                                "attention.n_kv_heads": width // 64, "mlp.kind": "swiglu", "position.kind": "rope",
                                "norm.kind": "rmsnorm", "parametrization.init": "normal"}))
    return Transformer(cfg)


def batches(batch: int, count: int) -> tuple[list[dict], int]:
    """(`count` step batches of `batch` pairs (ids and scored), the character vocabulary's size)."""
    pairs, tokenizer = toolcall_pairs(batch * count)
    out = []
    for step in range(count):
        full = pairs.batch(range(step * batch, (step + 1) * batch), tokenizer.eot_id, CONTEXT)
        out.append({"ids": full["ids"], "scored": full["scored"]})
    return out, tokenizer.vocab_size


def worker(case: str, mode: str, steps: int, threads: int, batch: int = BATCH) -> dict:
    """Seconds per step (median of `steps`), peak memory above setup (MB) and the first step's loss of one mode."""
    import torch

    from slm.objectives.completion_logprobs import sequence_logprobs
    from slm.objectives.preference_settings import PreferenceSettings
    from slm.training.config import TrainConfig
    from slm.training.optim import build_optimizer
    from slm.training.step import objective_for, train_step

    torch.set_num_threads(threads)
    data, vocab = batches(batch, steps + 2)  # a setup step, a warm-up, the timed steps
    model = build(case, vocab)
    cfg = TrainConfig(objective="sft" if mode == "sft" else "preference", batch_size=batch,
                      preference=PreferenceSettings(loss=["dpo"], reference="frozen" if mode == "dpo_frozen" else
                                                    "cached"))
    objective = objective_for(cfg)
    reference_mb = 0.0
    if mode == "dpo_cached":  # the cache's log-probs: the starting weights' (the policy's before its first step)
        with torch.no_grad():
            for b in data:
                b["ref"] = sequence_logprobs(model, b["ids"], b["scored"])[0].float()
    elif mode == "dpo_frozen":  # as slm.runs.reference.reference_model makes it
        before = rss_mb()
        objective.reference = copy.deepcopy(model).eval().requires_grad_(False)
        reference_mb = rss_mb() - before
    optimizer = build_optimizer(model, cfg)
    losses = []

    def run(b: dict) -> None:
        losses.append(train_step(objective, model, b, optimizer, grad_clip=cfg.grad_clip).item())

    run(data[0])  # the optimizer's state: part of the setup
    base = settled_rss_mb()
    run(data[1])  # warm-up
    seconds = []
    for b in data[2:]:
        start = time.perf_counter()
        run(b)
        seconds.append(time.perf_counter() - start)
    peak = peak_rss_mb()
    rows = [tuple(b["ids"].shape) for b in data[2:]]
    return {"seconds": statistics.median(seconds), "peak_above_setup_mb": peak - base, "peak_mb": peak,
            "setup_mb": base, "reference_mb": reference_mb, "first_loss": losses[0], "vocab": model.cfg.vocab_size,
            "params": sum(p.numel() for p in model.parameters()), "batch_shapes": rows,
            "scored_tokens": [int(b["scored"].sum()) for b in data[2:]]}


def spawn(case: str, mode: str, args) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", case, mode, "--steps", str(args.steps),
                          "--threads", str(args.threads), "--batch", str(args.batch)],
                         capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"preference_step worker {case} {mode} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summary(runs: dict[str, list[dict]]) -> dict:
    """Per mode other than sft: its time and memory ratios to sft, triple by triple."""
    out = {}
    for mode in MODES[1:]:
        pairs = list(zip(runs["sft"], runs[mode]))
        out[mode] = {"time_over_sft": spread([m["seconds"] / s["seconds"] for s, m in pairs]),
                     "memory_over_sft": spread([m["peak_above_setup_mb"] / max(s["peak_above_setup_mb"], 1e-3)
                                                for s, m in pairs])}
    return out


def fmt(s: dict) -> str:
    return f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})"


def report(case: str, runs: dict[str, list[dict]], ratios: dict) -> None:
    med = {mode: {k: statistics.median(r[k] for r in runs[mode]) for k in ("seconds", "peak_above_setup_mb",
                                                                           "reference_mb")} for mode in MODES}
    first = runs["sft"][0]
    print(f"  {case}: {first['params'] / 1e6:.2f}M parameters, vocab {first['vocab']}, batches (rows x length) "
          f"{', '.join('x'.join(map(str, s)) for s in first['batch_shapes'])}")
    for mode in MODES:
        m = med[mode]
        line = (f"    {mode:10s} {m['seconds'] * 1e3:7.1f} ms  peak above setup {m['peak_above_setup_mb']:6.0f} MB")
        if mode != "sft":
            line += (f"   time / sft {fmt(ratios[mode]['time_over_sft'])}   memory / sft "
                     f"{fmt(ratios[mode]['memory_over_sft'])}")
        if mode == "dpo_frozen":
            line += f"   frozen copy {m['reference_mb']:.0f} MB (in setup)"
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    parser.add_argument("--triples", type=int, default=3, help="(sft, dpo_cached, dpo_frozen) process triples per case")
    parser.add_argument("--steps", type=int, default=3,
                        help="timed steps per process (after a setup step and a warm-up)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=BATCH, help=f"pairs per step (2x rows; default {BATCH})")
    parser.add_argument("--out", default="bench/out/preference_step.json")
    parser.add_argument("--worker", nargs=2, metavar=("CASE", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker, args.steps, args.threads, args.batch)))
        return
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in CASES]
    if bad:
        raise SystemExit(f"preference_step: --cases has {bad[0]!r}: choose from {', '.join(CASES)}")
    print(f"preference step  toolcall pairs, {args.batch} pairs ({2 * args.batch} rows) a step, {args.threads} "
          f"thread(s), {args.triples} (sft, dpo_cached, dpo_frozen) process triples per case, median of {args.steps} "
          "steps each")
    result = {"pairs_per_step": args.batch, "threads": args.threads, "triples": args.triples, "steps": args.steps,
              "layers": LAYERS, "context": CONTEXT, "cases": {}}
    for case in cases:
        runs = {mode: [] for mode in MODES}
        for _ in range(args.triples):
            for mode in MODES:
                runs[mode].append(spawn(case, mode, args))
        ratios = summary(runs)
        result["cases"][case] = {"runs": runs, **ratios}
        report(case, runs, ratios)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
