"""Benchmark: how the analysis scales with the number of records: slm-collect, slm-report and the claims judgement
on synthetic run groups of 100, 1,000 and 10,000 records.

The records are the 135 shipped ones of `make claims` (docs/claims/runs/claims_cpu), copied as often as needed,
each copy with new seeds (copy c trains seed s as s + 3c: its folder name, config.train.seed and sweep.json's
jobs and lr multipliers say so), the first N kept; one run group per size in a temporary directory. Per size,
in rounds (collect, report, claims; --repeats rounds), each step is a fresh process on --threads threads
(OMP_NUM_THREADS), started in the repository root (so the working tree's analysis/ is timed), that imports what the
command imports, then runs the command's entry point:

  collect   slm-collect <group> -o table.parquet
  report    slm-report table.parquet -o report --score val_nll     (as `make claims`: figures, report.md, .html)
  claims    slm-claims table.parquet                                (analysis.claims.judge and seeds_summary)

Reported per step and size: the seconds after imports as the median with its min-max, the process's wall time
(imports included), and the growth of the median per 10x records (1 = flat, 10 = linear). One JSON file is
written to --out.

    python bench/analysis_scale.py [--sizes 100 1000 10000] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "docs" / "claims" / "runs" / "claims_cpu"
GROUP = "claims_cpu"
SEEDS = 3  # seeds per point in the shipped records: copy c shifts each by SEEDS * c
STEPS = ("collect", "report", "claims")
# Run in a fresh interpreter: import what the command imports, then time its entry point (argv after the step).
DRIVER = """
import importlib, json, sys, time
step = sys.argv[1]
start = time.perf_counter()
import analysis.cli as cli
for module in {"collect": ["analysis.collect"], "claims": ["analysis.claims"],
               "report": ["analysis.report", "analysis.plots", "analysis.decide_report"]}[step]:
    importlib.import_module(module)
imported = time.perf_counter()
getattr(cli, step + "_main")(sys.argv[2:])
sys.stdout.flush()
print("BENCH " + json.dumps({"import": imported - start, "work": time.perf_counter() - imported}))
"""


def reseeded(name: str, shift: int) -> str:
    """A job name with its train.seed=<s> moved by `shift`."""
    head, sep, seed = name.rpartition("train.seed=")
    if not sep:
        raise SystemExit(f"bench/analysis_scale.py: {name}: no train.seed= in the job name")
    return f"{head}{sep}{int(seed) + shift}"


def make_group(n: int, dest: Path) -> Path:
    """A run group of the first n records of the shipped claims runs copied with new seeds (module docstring)."""
    sweep = json.loads((SHIPPED / "sweep.json").read_text())
    names = sorted(p.name for p in SHIPPED.iterdir() if (p / "result.json").is_file())
    records = {name: json.loads((SHIPPED / name / "result.json").read_text()) for name in names}
    group = dest / GROUP
    group.mkdir(parents=True)
    jobs, multipliers = {}, {}
    for i in range(n):
        copy, k = divmod(i, len(names))
        name = names[k]
        shift = SEEDS * copy
        new = reseeded(name, shift)
        record = records[name]
        record["config"]["train"]["seed"] = int(new.rpartition("=")[2])
        (group / new).mkdir()
        (group / new / "result.json").write_text(json.dumps(record))
        jobs[new] = [reseeded(o, shift) if o.startswith("train.seed=") else o for o in sweep["jobs"][name]]
        multipliers[new] = sweep["lr_multipliers"][name]
    (group / "sweep.json").write_text(json.dumps({"jobs": jobs, "lr_multipliers": multipliers}))
    return group


def run(step: str, argv: list[str], env: dict) -> dict:
    """{wall, import, work} seconds of one fresh process running `step`."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", DRIVER, step, *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True)
    wall = time.perf_counter() - start
    line = next((x for x in proc.stdout.splitlines() if x.startswith("BENCH ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"bench/analysis_scale.py: {step} {' '.join(argv)} exited {proc.returncode}:\n"
                         f"{(proc.stdout + proc.stderr)[-2000:]}")
    return {"wall": wall, **json.loads(line[len("BENCH "):])}


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def bench_size(n: int, repeats: int, env: dict) -> dict:
    """{step: {work: summary, wall: summary}} for a group of n records."""
    with tempfile.TemporaryDirectory(prefix="slm-analysis-scale-") as tmp:
        tmp = Path(tmp)
        group = make_group(n, tmp / "runs")
        table = tmp / "table.parquet"
        argv = {"collect": [str(group), "-o", str(table)],
                "report": [str(table), "-o", str(tmp / "report"), "--score", "val_nll"],
                "claims": [str(table)]}
        times: dict[str, list[dict]] = {step: [] for step in STEPS}
        for _ in range(repeats):
            for step in STEPS:
                times[step].append(run(step, argv[step], env))
    return {step: {key: summary([t[key] for t in ts]) for key in ("work", "wall", "import")}
            for step, ts in times.items()}


def growth(result: dict, step: str, small: int, large: int) -> float:
    """The median's growth per 10x records between two sizes (1: flat, 10: linear)."""
    ratio = result[large][step]["work"]["median"] / result[small][step]["work"]["median"]
    return ratio ** (1 / math.log10(large / small))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000], help="records per group")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per size")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="bench/out/analysis_scale.json")
    args = parser.parse_args()
    threads = str(args.threads)
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads,
           "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    sizes = sorted(args.sizes)
    print(f"analysis scale  {args.repeats} rounds, {args.threads} thread(s), {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.2f}; seconds after imports, median (min-max); wall: the process, imports included")
    result = {}
    for n in sizes:
        result[n] = bench_size(n, args.repeats, env)
        for step in STEPS:
            work, wall = result[n][step]["work"], result[n][step]["wall"]
            print(f"  {n:>6} records  {step:8s} {work['median']:7.2f} s ({work['min']:.2f}-{work['max']:.2f})   "
                  f"wall {wall['median']:6.2f} s")
    pairs = list(zip(sizes[:-1], sizes[1:]))
    rates = {step: {f"{a}->{b}": growth(result, step, a, b) for a, b in pairs} for step in STEPS}
    for step in STEPS:
        if pairs:
            print(f"  growth per 10x records, {step:8s} " + ", ".join(f"{k}: x{v:.2f}" for k, v in rates[step].items()))
    out = {"threads": args.threads, "repeats": args.repeats, "cpu_count": os.cpu_count(),
           "load_average": os.getloadavg(), "score": "val_nll", "seconds": result, "growth_per_10x": rates}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
