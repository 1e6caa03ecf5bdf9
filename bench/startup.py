"""Benchmark: slm-train's start-up (imports, Hydra, Lightning, the eval preflight) against `python -c "import torch"`.

Each phase is a fresh process, timed from its start to its exit (and, for the two training runs, to the
line slm-train prints when training starts, Lightning's on_train_start: the start-up proper):

  torch        python -c "import torch"                         the floor: any PyTorch program pays it
  import       python -c "import slm.cli.train"                 slm-train's own imports (Hydra; no torch)
  compose      slm-train --cfg job                              + Hydra composing the config; trains nothing
  run_none     slm-train train.length.steps=1 ... eval=none            a 1-step run end to end: torch, Lightning (with
                                                                the torchmetrics it imports), data, model, one
                                                                step, validation, the final save
  run_offline  slm-train train.length.steps=1 ... (eval=offline)       the default eval suite: its preflight before
                                                                training; timed to the first step only (the
                                                                scoring after training is not start-up)

The phases run in rounds (torch, import, compose, run_none, run_offline, torch, ...), --repeats rounds after
--warmup untimed ones, on --threads threads (OMP_NUM_THREADS), each run in a fresh $SLM_RUNS under a
temporary directory. Reported: each phase's wall time as the median with its min-max, and the ratio to the
same round's `import torch` (median, min-max). Last, one untimed run of the default command lists which
heavy optional packages are imported by the time training starts. One JSON file is written to --out.

    python bench/startup.py [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP_LINE = "slm-train: training on"  # slm.training.progress.StartLine, Lightning's on_train_start
ONE_STEP = ["train.length.steps=1", "train.validation.interval=0", "train.validation.batches=1"]
HEAVY = ["lm_eval", "datasets", "pandas", "pyarrow", "analysis", "transformers", "matplotlib", "scipy",
         "tensorboard", "wandb", "torchmetrics", "lightning", "torch"]
# Run inside the interpreter for the module list: slm-train's main, reporting sys.modules at the first step.
PROBE = f"""
import sys
heavy, line = {HEAVY!r}, {STEP_LINE!r}
class Tee:
    def __init__(self, f):
        self.f, self.done = f, False
    def write(self, text):
        if not self.done and line in text:
            self.done = True
            sys.__stderr__.write("MODULES " + " ".join(m for m in heavy if m in sys.modules) + "\\n")
        return self.f.write(text)
    def __getattr__(self, name):
        return getattr(self.f, name)
sys.stdout, sys.stderr = Tee(sys.stdout), Tee(sys.stderr)
sys.argv = ["slm-train", *sys.argv[1:]]
from slm.cli.train import main
main()
"""


def slm_train() -> list[str]:
    script = Path(sys.executable).with_name("slm-train")
    return [str(script)] if script.exists() else [sys.executable, "-m", "slm.cli.train"]


def phases() -> dict[str, list[str]]:
    return {"torch": [sys.executable, "-c", "import torch"],
            "import": [sys.executable, "-c", "import slm.cli.train"],
            "compose": [*slm_train(), "--cfg", "job"],
            "run_none": [*slm_train(), *ONE_STEP, "eval=none"],
            # eval.limit / throughput off shorten the scoring after training; the preflight is the default's
            "run_offline": [*slm_train(), *ONE_STEP, "eval.limit=4", "eval.throughput.enabled=false"]}


def timed(cmd: list[str], env: dict) -> tuple[float, float | None, str]:
    """(seconds to exit, seconds to the training-start line or None, output) of one fresh process."""
    with tempfile.TemporaryDirectory() as runs:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env={**env, "SLM_RUNS": runs}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        first, lines = None, []
        for line in proc.stdout:
            if first is None and STEP_LINE in line:
                first = time.perf_counter() - start
            lines.append(line)
        proc.wait()
        total = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"bench/startup.py: {' '.join(cmd)} exited {proc.returncode}:\n{''.join(lines[-20:])}")
    return total, first, "".join(lines)


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (each runs every phase once)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first (page cache, .pyc files)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="bench/out/startup.json")
    args = parser.parse_args()
    threads = str(args.threads)
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "PYTHONUNBUFFERED": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    cmds = phases()
    seconds: dict[str, list[float]] = {name: [] for name in cmds}
    first_step: dict[str, list[float]] = {name: [] for name in cmds if name.startswith("run_")}
    for round_ in range(args.warmup + args.repeats):
        for name, cmd in cmds.items():
            total, first, out = timed(cmd, env)
            if name in first_step and first is None:
                raise SystemExit(f"bench/startup.py: {name}: no {STEP_LINE!r} line in its output:\n{out[-2000:]}")
            if round_ >= args.warmup:
                seconds[name].append(total)
                if name in first_step:
                    first_step[name].append(first)
    walls = {name: summary(v) for name, v in seconds.items()}
    firsts = {name: summary(v) for name, v in first_step.items()}
    ratio = lambda values: summary([v / t for v, t in zip(values, seconds["torch"])])  # noqa: E731
    ratios = {name: ratio(v) for name, v in seconds.items() if name != "torch"}
    ratios.update({f"{name}_first_step": ratio(v) for name, v in first_step.items()})
    _, _, probe = timed([sys.executable, "-c", PROBE, *ONE_STEP, "eval.limit=4", "eval.throughput.enabled=false"],
                        env)
    loaded = next((line.split()[1:] for line in probe.splitlines() if line.startswith("MODULES")), None)
    result = {
        "commands": {name: " ".join(Path(c).name if i == 0 else c for i, c in enumerate(cmd))
                     for name, cmd in cmds.items()},
        "threads": args.threads, "repeats": args.repeats, "warmup": args.warmup, "cpu_count": os.cpu_count(),
        "wall_seconds": walls, "first_step_seconds": firsts, "ratio_to_import_torch": ratios,
        "imported_at_first_step": {"loaded": loaded, "not_loaded": [m for m in HEAVY if m not in (loaded or [])]},
        "raw": {"wall_seconds": seconds, "first_step_seconds": first_step},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"start-up  {args.repeats} rounds, {args.threads} thread(s), {os.cpu_count()} cores; median (min-max) seconds, "
          f"x python -c 'import torch'")
    rows = [(name, walls[name], ratios.get(name)) for name in cmds]
    rows += [(f"{name} to 1st step", firsts[name], ratios[f"{name}_first_step"]) for name in first_step]
    for label, s, r in rows:
        against = f"   x{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})" if r else ""
        print(f"  {label:24s} {s['median']:6.2f} s ({s['min']:.2f}-{s['max']:.2f}){against}")
    print(f"  imported when training starts (default eval suite): {', '.join(loaded or ['?'])}")


if __name__ == "__main__":
    main()
