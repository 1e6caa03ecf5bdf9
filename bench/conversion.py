"""Benchmark: does an AR model converted to masked diffusion reach a validation NELBO in fewer tokens than the
same diffusion model trained from scratch? The Dhara study (sweeps/dhara_conversion*.yaml) at CPU size.

Three `slm-train` runs on the embedded Tiny Shakespeare, character level, a small llama3_canon shape:

  ar         llama3_canon, causal LM, --ar-steps steps (tokenizer.mask=true: the vocabulary gets the mask
             token's row, so the diffusion model has the same shapes; the AR run never sees that id)
  converted  dhara (the same network, bidirectional, causal Canon), MDLM, --steps steps from the ar run's weights
             (train.init_from) with the block curriculum: the attention block grows 1 -> context over the
             first --warmup of the steps, then full attention (plain MDLM; no decay phase, so the last
             validations of both runs measure the same thing)
  scratch    dhara, MDLM, --steps steps from random init

The two diffusion runs share the seed, batches, learning rate and schedule, and validate every --val-every
steps on the same fixed batches with the same masks (the NELBO, an upper bound on the NLL). The converted
run's validations during the warm-up use the block it was training with (a block-causal NELBO). Printed: both
curves (tokens -> NELBO) and the diffusion tokens each run needs to reach the threshold (default: the scratch
run's final NELBO), plus the AR tokens the conversion started from (--scratch-steps gives the scratch run
more steps, e.g. those of both stages together). Written: bench/out/conversion.json.
Runs are kept under bench/out/conversion/runs (keyed by their overrides, so the same command again reuses
them; --fresh trains them again).

    python bench/conversion.py [--ar-steps 300] [--steps 150] [--scratch-steps 450] [--threshold 2.6]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
SHAPE = ["model.n_layers=4", "model.d_model=128", "model.attention.head_dim=32", "model.attention.n_kv_heads=2",
         "model.context_length=128"]
COMMON = ["eval=none", "train.logging.progress_bar=false", "train.batch_size=16", "train.validation.batches=8",
          "train.logging.interval=10", "train.checkpoint.interval=1000"]


def train(runs: Path, group: str, overrides: list[str], threads: int) -> Path:
    env = {**os.environ, "SLM_RUNS": str(runs), "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "slm.cli.train", f"run_group={group}", *overrides]
    started = time.time()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"bench/conversion.py: {group} failed (exit {out.returncode}): {out.stderr.strip().splitlines()[-1:]}")
    done = [line for line in out.stdout.splitlines() if line.startswith("slm-train: completed: ")]
    if not done:
        sys.exit(f"bench/conversion.py: {group} did not complete: {out.stdout.strip().splitlines()[-1:]}")
    run_dir = Path(done[-1].removeprefix("slm-train: completed: "))
    print(f"  {group:10s} {time.time() - started:6.1f} s  {run_dir}")
    return run_dir


def curve(run_dir: Path) -> list[tuple[int, float]]:
    """[(tokens trained, validation NELBO)] from the run's CSV log (Lightning logs a validation at step s
    after s + 1 optimizer steps)."""
    record = json.loads((run_dir / "result.json").read_text())
    per_step = record["training"]["tokens_per_step"]
    rows = csv.DictReader((run_dir / "logs" / "csv" / "metrics.csv").open())
    return [((int(r["step"]) + 1) * per_step, float(r["val/nll"])) for r in rows if r.get("val/nll")]


def tokens_to_reach(points: list[tuple[int, float]], threshold: float) -> int | None:
    return next((tokens for tokens, nelbo in points if nelbo <= threshold), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ar-steps", type=int, default=300, help="optimizer steps of the AR run (2,048 tokens each)")
    parser.add_argument("--steps", type=int, default=150, help="optimizer steps of each diffusion run")
    parser.add_argument("--scratch-steps", type=int, default=None,
                        help="steps of the scratch run (default: --steps; --ar-steps + --steps gives it the tokens of "
                             "both stages of the conversion)")
    parser.add_argument("--val-every", type=int, default=15, help="validate the diffusion runs every this many steps")
    parser.add_argument("--warmup", type=float, default=0.1, help="the curriculum's warmup_fraction")
    parser.add_argument("--lr", type=float, default=1e-3, help="peak lr of both diffusion runs (the AR run: 1e-3)")
    parser.add_argument("--threshold", type=float, default=None,
                        help="NELBO to reach (default: the scratch run's final NELBO)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per run")
    parser.add_argument("--fresh", action="store_true", help="train the runs again (delete bench/out/conversion)")
    args = parser.parse_args()
    for name in ("ar_steps", "steps", "scratch_steps", "val_every", "threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}={getattr(args, name)} is invalid: must be >= 1")
    if not 0 <= args.warmup < 1:
        parser.error(f"--warmup={args.warmup} is invalid: must be in [0, 1)")

    root = OUT / "conversion"
    if args.fresh and root.exists():
        shutil.rmtree(root)
    runs = root / "runs"
    print(f"bench/conversion.py: AR {args.ar_steps} steps, then {args.steps} diffusion steps converted and from "
          f"scratch ({args.threads} threads per run)")
    ar = train(runs, "ar", ["model=llama3_canon", *SHAPE, *COMMON, "tokenizer.mask=true",
                            f"train.length.steps={args.ar_steps}", "train.validation.interval=0"], args.threads)
    diffusion = ["model=dhara", *SHAPE, *COMMON, "train.objective=mdlm", f"train.validation.interval={args.val_every}",
                 f"train.lr={args.lr}"]
    converted = train(runs, "converted", [*diffusion, f"train.length.steps={args.steps}", f"train.init_from='{ar}'",
                                          f"+train.block_curriculum.warmup_fraction={args.warmup}"], args.threads)
    scratch_steps = args.scratch_steps or args.steps
    scratch = train(runs, "scratch", [*diffusion, f"train.length.steps={scratch_steps}"], args.threads)

    ar_record = json.loads((ar / "result.json").read_text())
    curves = {"converted": curve(converted), "scratch": curve(scratch)}
    threshold = args.threshold if args.threshold is not None else curves["scratch"][-1][1]
    blocks = json.loads((converted / "result.json").read_text())["training"]["attention_blocks"]
    print(f"\nAR run: {ar_record['training']['tokens']:,} tokens, validation NLL {ar_record['eval']['val_nll']:.4f} "
          f"nats/char (exact)")
    print(f"curriculum of the converted run ([first step, block]): {blocks}")
    print(f"\n{'tokens':>9s} {'converted':>10s} {'scratch':>10s}   validation NELBO, nats/char (upper bound)")
    table = {name: dict(points) for name, points in curves.items()}
    for tokens in sorted(set(table["converted"]) | set(table["scratch"])):
        cells = [f"{table[name][tokens]:10.4f}" if tokens in table[name] else f"{'':10s}" for name in table]
        print(f"{tokens:9,d} {' '.join(cells)}")
    reach = {name: tokens_to_reach(points, threshold) for name, points in curves.items()}
    print(f"\ntokens to reach NELBO <= {threshold:.4f}:")
    for name, tokens in reach.items():
        print(f"  {name:10s} {'not reached' if tokens is None else f'{tokens:,}'}")
    if reach["converted"] and reach["scratch"]:
        print(f"  converted / scratch: {reach['converted'] / reach['scratch']:.2f} of the diffusion tokens "
              f"(plus {ar_record['training']['tokens']:,} AR tokens before)")
    summary = {"args": vars(args), "threshold": threshold, "tokens_to_reach": reach, "curves": curves,
               "ar": {"tokens": ar_record["training"]["tokens"], "val_nll": ar_record["eval"]["val_nll"]},
               "attention_blocks": blocks,
               "runs": {"ar": str(ar), "converted": str(converted), "scratch": str(scratch)}}
    path = OUT / "conversion.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    os.replace(tmp, path)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
