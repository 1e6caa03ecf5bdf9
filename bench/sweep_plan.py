"""Benchmark: planning a sweep at cluster scale. A dry run's time against its number of jobs, and a Slurm array's
preparation, each before and after.

Every measurement is one fresh `slm-train -m model=debug model.n_layers=range(1,21) train.seed=range(0,S)` process
(20 x S jobs), timed from its start:

  dry run  with hydra.sweeper.dry_run=true, to its exit: composing every job, the job table with parameter counts,
           tokens and GPU-hours. before: each job composed by Hydra in full (SLM_COMPOSE_IN_FULL=1: compose.compose_job,
           the defaults tree re-read and re-merged per job, the path slm took until compose.Composer); after:
           compose.Composer. (The plan's other parts are today's in both.)
  slurm    with a Slurm launcher and a stand-in `sbatch` on PATH (it notes when it is called and answers as sbatch
           does), to that call: composing, sweep.json, each job's checks, submitit's pickle of every job. Nothing is
           submitted or trained; the process is stopped once sbatch has been called. before: hydra-submitit-launcher's
           own launcher (hydra/launcher=submitit_slurm: the launcher and Hydra's state pickled into every job, as slm's
           did); after: slm's (hydra/launcher=slurm: pickled once per array).

Before and after alternate (A B, B A, ...) on --threads threads. The before runs take ~0.1-0.5 s a job, so they run
at 20 and --before-jobs jobs only. Printed: median (min-max) seconds per size and variant; per variant the line
through the medians (seconds = start-up + per job x jobs, least squares), the ratio of the per-job slopes, and the
10,000-job time of each (measured for after; for before extrapolated on its line, and said so).

    python bench/sweep_plan.py [--repeats 3] [--sizes 100 1000 10000] [--before-jobs 100] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hydra_plugins.slm_sweeps.compose import FULL_ENV

ROOT = Path(__file__).resolve().parents[1]
RUN = "import sys; from slm.cli.train import main; sys.argv[0] = 'slm-train'; main()"
SBATCH = """#!/bin/sh
python3 -c "import time; print(time.time())" > "$SLM_BENCH_SBATCH_MARK"
echo "Submitted batch job 4242"
"""


def sweep_args(jobs: int) -> list[str]:
    if jobs % 20:
        raise SystemExit(f"bench/sweep_plan.py: --sizes {jobs}: a multiple of 20 (20 depths x seeds)")
    return ["-m", "model=debug", "model.n_layers=range(1,21)", f"train.seed=range(0,{jobs // 20})"]


def env_for(work: Path, threads: int) -> dict:
    return {**os.environ, "SLM_RUNS": str(work / "runs"), "OMP_NUM_THREADS": str(threads),
            "PATH": f"{work / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "SLM_BENCH_SBATCH_MARK": str(work / "sbatch.mark"), "PYTHONPATH": str(ROOT)}


def dry_run(work: Path, jobs: int, before: bool, threads: int) -> float:
    began = time.perf_counter()
    env = {**env_for(work, threads), **({FULL_ENV: "1"} if before else {})}
    out = subprocess.run([sys.executable, "-c", RUN, *sweep_args(jobs), "hydra.sweeper.dry_run=true"], cwd=work,
                         env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if out.returncode != 0 or f": {jobs} jobs into" not in out.stdout.splitlines()[0]:
        raise SystemExit(f"bench/sweep_plan.py: the dry run failed: {out.stderr[-1500:]}")
    return seconds


def slurm(work: Path, jobs: int, before: bool, threads: int, limit: float = 3600) -> float:
    """Seconds from the process's start to its sbatch call (the array prepared); the process is then stopped."""
    mark = work / "sbatch.mark"
    mark.unlink(missing_ok=True)
    subprocess.run(["rm", "-rf", str(work / "runs")], check=True)
    launcher = "hydra/launcher=submitit_slurm" if before else "hydra/launcher=slurm"
    began = time.time()
    proc = subprocess.Popen([sys.executable, "-c", RUN, *sweep_args(jobs), launcher], cwd=work,
                            env=env_for(work, threads), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        while not (mark.exists() and mark.read_text().strip()):
            if proc.poll() is not None:
                raise SystemExit(f"bench/sweep_plan.py: the Slurm sweep ended before sbatch: "
                                 f"{proc.stderr.read().decode()[-1500:]}")
            if time.time() - began > limit:
                raise SystemExit("bench/sweep_plan.py: sbatch was not called within the limit")
            time.sleep(0.05)
        return float(mark.read_text()) - began
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def fit_line(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (xs, ys)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def fmt(s: dict) -> str:
    return f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each size and variant")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000], help="jobs per sweep (x20)")
    parser.add_argument("--before-jobs", type=int, default=100, help="jobs of the before runs (x20)")
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of each process")
    parser.add_argument("--parts", nargs="+", default=["dry_run", "slurm"], choices=["dry_run", "slurm"])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "sweep_plan.json")
    args = parser.parse_args()
    measure = {"dry_run": dry_run, "slurm": slurm}
    results: dict = {"load_before": os.getloadavg(), "cpus": os.cpu_count(), "threads": args.threads}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "bin").mkdir()
        (work / "bin" / "sbatch").write_text(SBATCH)
        (work / "bin" / "sbatch").chmod(0o755)
        for part in args.parts:
            runs: dict[str, list[float]] = {}
            for r in range(args.repeats):  # before and after alternate, the order turning each round
                order = [True, False] if r % 2 == 0 else [False, True]
                for before in order:
                    sizes = [20, args.before_jobs] if before else args.sizes
                    for jobs in sizes:
                        name = f"{'before' if before else 'after'} {jobs}"
                        runs.setdefault(name, []).append(measure[part](work, jobs, before, args.threads))
                        print(f"  {part} {name}: {runs[name][-1]:.2f} s", file=sys.stderr, flush=True)
            results[part] = {name: summary(v) for name, v in runs.items()}
    results["load_after"] = os.getloadavg()
    print(f"sweep planning: median (min-max) seconds of {args.repeats} runs, 2 x {args.threads} threads; load "
          f"{results['load_before'][0]:.1f} before, {results['load_after'][0]:.1f} after")
    for part in args.parts:
        lines = {}
        for variant in ("before", "after"):
            sizes = [20, args.before_jobs] if variant == "before" else args.sizes
            for jobs in sizes:
                print(f"{part}: {variant:6s} {jobs:6d} jobs {fmt(results[part][f'{variant} {jobs}'])} s")
            lines[variant] = fit_line(sizes, [results[part][f"{variant} {n}"]["median"] for n in sizes])
            start, per_job = lines[variant]
            at = "measured" if variant == "after" and 10000 in sizes else "on this line"
            print(f"{part}: {variant:6s} start-up {start:.1f} s + {per_job * 1e3:.2f} ms a job; 10,000 jobs "
                  f"{start + per_job * 1e4:.0f} s ({at})")
        results[part]["lines"] = lines
        print(f"{part}: after/before seconds a job: {lines['after'][1] / lines['before'][1]:.4f} "
              f"(x{lines['before'][1] / lines['after'][1]:.1f} faster)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
