"""Benchmark: where a default-study job's time goes besides training, and libgomp's default spin-wait (before)
against the short spin slm's commands set (after, slm/omp_wait.py), on an idle and on a loaded machine.

Each run is one fresh `slm-train -m sweep=cpu_default` process (Hydra's basic launcher: the jobs of a sweep run
one after another in that process, as `make sweep` runs them), with the default study's settings, a shorter
training (--tokens) and its points named by --points; the offline suite scores each job after training, in the
same process. Inside, the phases are timed by wrapping the functions that run them:

  start-up      process start to the first job (imports, Hydra's compose and sweep)    once per process
  set-up        slm.runs.job.prepare: config checks, data (cached shards), eval preflight
  train         the optimizer steps (the record's training.train_seconds)
  fit-other     the rest of Lightning's fit: its set-up, the final validation, checkpoints
  save-record   model save, record writes, the job's other work
  eval-prepare  the evaluation less scoring and throughput: lm-eval's import (first job), tasks, model load,
                results and per-document files
  score         lm_eval.simple_evaluate (the forward passes, lm-eval's bookkeeping), less env-info
  env-info      lm-eval's environment report (12 subprocesses: pip, lscpu, ...; slm.eval.env_info keeps it
                for the process, so only a process's first job pays it)
  throughput    the batch-1 decode-speed measurement
  between/exit  Hydra between jobs; after the last job to the process's exit
overhead = everything but `train`. The variants run in rounds under each load, each once a round, the order
turning (A B, B A, ...); --load N starts N single-thread busy loops (another job, a test suite) beside the job
for that condition. Reported: each phase's median (min-max) seconds per variant and load, the paired ratios of
each variant to `after` (whole process, overhead), and whether every job's scores (val_nll, each task's headline
score) were the same in every run. The environment report's reuse has no switch: it shows as the env-info of a
process's later jobs (--points with two or more). One JSON file is written to --out.

    python bench/job_overhead.py [--repeats 3] [--threads 2] [--load 0 1] [--tokens 5e4] [--points gpt2-2 llama3-4]
    python bench/job_overhead.py --tokens 1e6 --points gpt2-2 dllm-4 --load 0 --repeats 1   # full-size jobs
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

from slm.omp_wait import USER_SETTINGS as WAIT_SETTINGS

ROOT = Path(__file__).resolve().parents[1]
POINTS = {  # the default study's points (sweeps/cpu_default.yaml) by a short name
    "gpt2-2": ["model=gpt2", "model.n_layers=2"],
    "llama3-4": ["model=llama3", "model.attention.n_kv_heads=2", "model.n_layers=4"],
    "canon-8": ["model=llama3_canon", "model.attention.n_kv_heads=2", "model.n_layers=8"],
    "lfm2-4": ["model=lfm2", "model.attention.n_kv_heads=2", "model.n_layers=4"],
    "dllm-4": ["model=dllm", "model.attention.n_kv_heads=2", "model.n_layers=4", "train.objective=mdlm"],
}
VARIANTS = {  # name -> environment; the after variant leaves the wait to slm (slm.omp_wait: GOMP_SPINCOUNT=1000)
    "before": {"GOMP_SPINCOUNT": "300000"},  # libgomp's own default when OMP_WAIT_POLICY is unset
    "after": {},
}
PHASES = ["start-up", "set-up", "train", "fit-other", "save-record", "eval-prepare", "score", "env-info",
          "throughput", "between", "exit"]
# (module, attribute, name): the functions the probe times, wrapped in the slm-train process
TIMED = [("slm.runs.job", "train_run", "job"), ("slm.runs.job", "prepare", "setup"),
         ("lightning.pytorch.trainer.trainer", "Trainer.fit", "fit"), ("slm.runs.job", "evaluate", "eval"),
         ("slm.eval.throughput", "measure_decode", "throughput")]
TIMED_IN_EVAL = [("lm_eval", "simple_evaluate", "score"), ("lm_eval.evaluator", "add_env_info", "env_info")]
"""Wrapped when the first evaluation starts, so that lm-eval's import stays in that job's evaluation."""
# Runs as the slm-train process: slm's CLI package first (it sets the threads' spin before torch loads), then
# the wrappers, then slm-train's main; the stamps (time.time()) go to $SLM_BENCH_STAMPS at exit.
PROBE = f"""
import atexit, functools, importlib, json, os, sys, time
import slm.cli.train as cli
stamps, jobs, dirs, late = [], [0], [], [False]
def timed(module, attr, name):
    owner = importlib.import_module(module)
    *path, last = attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    fn = getattr(owner, last)
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if name == "job":
            jobs[0] += 1
            dirs.append(str(args[1] if len(args) > 1 else kwargs["run_dir"]))
        start = time.time()
        if name == "eval" and not late[0]:
            late[0] = True
            for item in {TIMED_IN_EVAL!r}:
                timed(*item)
        try:
            return fn(*args, **kwargs)
        finally:
            stamps.append((name, jobs[0] - 1, start, time.time()))
    setattr(owner, last, wrapper)
for module, attr, name in {TIMED!r}:
    timed(module, attr, name)
def dump():
    with open(os.environ["SLM_BENCH_STAMPS"], "w") as f:
        json.dump({{"stamps": stamps, "dirs": dirs, "end": time.time(),
                   "wait": {{k: os.environ.get(k) for k in {WAIT_SETTINGS!r}}}}}, f)
atexit.register(dump)
sys.argv = ["slm-train", *sys.argv[1:]]
cli.main()
"""


def sweep_args(points: list[str], tokens: float) -> list[str]:
    listed = ",".join("[" + ",".join(f'"{o}"' for o in POINTS[p]) + "]" for p in points)
    return ["-m", "sweep=cpu_default", f"train.length.tokens={tokens:g}", f"hydra.sweeper.points=[{listed}]"]


def phases_of(stamps: dict, spawned: float, records: list[dict]) -> list[dict]:
    """Per job: {phase: seconds} from the probe's stamps (see the module docstring)."""
    by_job: dict[int, dict[str, tuple[float, float]]] = {}
    for name, job, start, end in stamps["stamps"]:
        by_job.setdefault(job, {})[name] = (start, end)
    out, previous_end = [], spawned
    for job in sorted(by_job):
        s = by_job[job]
        span = lambda name: s[name][1] - s[name][0] if name in s else 0.0  # noqa: E731
        train = records[job]["training"]["train_seconds"]
        inner = {"set-up": span("setup"), "train": train, "fit-other": span("fit") - train,
                 "save-record": span("job") - span("setup") - span("fit") - span("eval"),
                 "eval-prepare": span("eval") - span("score") - span("throughput"),
                 "score": span("score") - span("env_info"), "env-info": span("env_info"),
                 "throughput": span("throughput")}
        gap = s["job"][0] - previous_end
        row = {"start-up": gap if job == 0 else 0.0, "between": 0.0 if job == 0 else gap, **inner, "exit": 0.0}
        previous_end = s["job"][1]
        out.append(row)
    out[-1]["exit"] = stamps["end"] - previous_end
    return out


def run_once(points: list[str], tokens: float, env: dict) -> dict:
    """One slm-train process: wall seconds, per-job phases, each job's scores, the wait settings it ran with."""
    with tempfile.TemporaryDirectory() as tmp:
        stamps_file = Path(tmp) / "stamps.json"
        runs = Path(tmp) / "runs"
        cmd = [sys.executable, "-c", PROBE, *sweep_args(points, tokens)]
        spawned = time.time()
        done = subprocess.run(cmd, cwd=ROOT, env={**env, "SLM_RUNS": str(runs), "SLM_BENCH_STAMPS": str(stamps_file)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wall = time.time() - spawned
        if done.returncode != 0 or not stamps_file.exists():
            raise SystemExit(f"bench/job_overhead.py: slm-train exited {done.returncode}:\n{done.stdout[-3000:]}")
        stamps = json.loads(stamps_file.read_text())
        records = [json.loads((ROOT / d / "result.json").read_text()) for d in stamps["dirs"]]
    bad = [r.get("error") or r.get("eval", {}).get("lm_eval_error") for r in records
           if r["status"] != "completed" or r.get("eval", {}).get("lm_eval_error")]
    if bad or len(records) != len(points):
        raise SystemExit(f"bench/job_overhead.py: a job did not complete: {bad or len(records)}")
    scores = [{"val_nll": r["eval"]["val_nll"], **r["eval"]["lm_eval"]["scores"]} for r in records]
    return {"wall": wall, "jobs": phases_of(stamps, spawned, records), "scores": scores, "wait": stamps["wait"]}


def busy_loops(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def fmt(s: dict) -> str:
    return f"{s['median']:6.2f} ({s['min']:.2f}-{s['max']:.2f})"


def variant(text: str) -> tuple[str, dict]:
    """--variant NAME=VAR=VALUE[,VAR=VALUE...] -> (NAME, {VAR: VALUE})."""
    name, sep, assignments = text.partition("=")
    pairs = [a.partition("=") for a in assignments.split(",") if a]
    if not name or not sep or any(not k or not eq for k, eq, _ in pairs):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VAR=VALUE[,VAR=VALUE...]")
    return name, {k: v for k, _, v in pairs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds per load (each variant once a round)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs first (page cache, shard cache)")
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS (make sweep: SWEEP_THREADS=2)")
    parser.add_argument("--load", type=int, nargs="+", default=[0, 1],
                        help="busy single-thread processes beside the job, one condition each")
    parser.add_argument("--tokens", type=float, default=5e4, help="training tokens per job (the study: 1e6)")
    parser.add_argument("--points", nargs="+", default=["gpt2-2", "llama3-4"], choices=list(POINTS),
                        help="the study's points, one job each, in one process")
    parser.add_argument("--variant", type=variant, action="append", default=[],
                        help="another variant to compare, e.g. spin10k=GOMP_SPINCOUNT=10000")
    parser.add_argument("--out", default="bench/out/job_overhead.json")
    args = parser.parse_args()
    threads = str(args.threads)
    base = {k: v for k, v in os.environ.items() if k not in WAIT_SETTINGS}
    base.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, PYTHONUNBUFFERED="1")
    base.pop("HYDRA_FULL_ERROR", None)
    variants = {**VARIANTS, **dict(args.variant)}
    envs = {name: {**base, **extra} for name, extra in variants.items()}
    for _ in range(args.warmup):
        run_once(args.points, args.tokens, envs["after"])
    result = {"points": args.points, "tokens": args.tokens, "threads": args.threads, "repeats": args.repeats,
              "cpu_count": os.cpu_count(), "variants": variants, "conditions": {}}
    all_scores = []
    for load in args.load:
        loops = busy_loops(load)
        runs: dict[str, list[dict]] = {name: [] for name in envs}
        try:
            for i in range(args.repeats):  # the order turns each round: no variant always first after a pause
                order = list(envs)[i % len(envs):] + list(envs)[:i % len(envs)]
                for name in order if i % 2 == 0 else order[::-1]:
                    runs[name].append(run_once(args.points, args.tokens, envs[name]))
        finally:
            for p in loops:
                p.kill()
                p.wait()
        all_scores += [r["scores"] for rs in runs.values() for r in rs]
        overhead = {name: [r["wall"] - sum(j["train"] for j in r["jobs"]) for r in rs] for name, rs in runs.items()}
        ratios = {name: {"wall": summary([x["wall"] / a["wall"] for x, a in zip(runs[name], runs["after"])]),
                         "overhead": summary([x / a for x, a in zip(overhead[name], overhead["after"])])}
                  for name in envs if name != "after"}
        cond = {"wait_settings": {name: rs[0]["wait"] for name, rs in runs.items()},
                "wall_seconds": {name: summary([r["wall"] for r in rs]) for name, rs in runs.items()},
                "overhead_seconds": {name: summary(v) for name, v in overhead.items()},
                "ratio_to_after": ratios,
                "phases": {name: [{ph: summary([r["jobs"][j][ph] for r in rs]) for ph in PHASES}
                                  for j in range(len(args.points))] for name, rs in runs.items()},
                "raw": runs}
        result["conditions"][f"load {load}"] = cond
        print(f"job overhead  {', '.join(args.points)}, {args.tokens:g} tokens each, {args.threads} threads, "
              f"{load} busy process(es) beside it; {args.repeats} rounds; median (min-max) seconds")
        for name in envs:
            waits = ", ".join(f"{k}={v}" for k, v in cond["wait_settings"][name].items() if v) or "libgomp default"
            print(f"  {name} ({waits}): whole process {fmt(cond['wall_seconds'][name])}, "
                  f"overhead {fmt(cond['overhead_seconds'][name])}")
            for j, point in enumerate(args.points):
                row = cond["phases"][name][j]
                print(f"    job {j + 1} {point:9s} " + "  ".join(f"{ph} {row[ph]['median']:.2f}" for ph in PHASES
                                                              if row[ph]["max"] > 0.005 or ph == "env-info"))
        for name, r in ratios.items():
            print(f"  {name}/after, paired: whole process x{r['wall']['median']:.2f} ({r['wall']['min']:.2f}-"
                  f"{r['wall']['max']:.2f}), overhead x{r['overhead']['median']:.2f} ({r['overhead']['min']:.2f}-"
                  f"{r['overhead']['max']:.2f})", flush=True)
    same = all(s == all_scores[0] for s in all_scores)
    result["scores_identical"] = same
    result["scores"] = all_scores[0]
    print(f"  scores (val_nll and headline scores of every job) identical in all {len(all_scores)} runs: "
          f"{'yes' if same else 'NO'}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
