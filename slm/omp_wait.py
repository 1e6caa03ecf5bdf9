"""How long slm's CPU threads spin before they sleep: briefly, unless the user chose.

PyTorch's CPU threads on Linux are libgomp's. When neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, a
libgomp thread that has finished its share of a parallel region spins 300,000 times (about 3 ms) before it
sleeps. A small model's training step or scoring batch is thousands of short parallel regions with a little
Python between them, so at OMP_NUM_THREADS=2 a waiting thread spins nearly all the time. On an idle machine
that costs nothing; as soon as anything else runs (another job, a test suite), the spinning takes the core
that the thread doing the work needs.

slm's commands set GOMP_SPINCOUNT=1000 (SPIN_COUNT, about 10 microseconds): a waiting thread still catches the
next region of the same operation, and sleeps through the Python between operations. Measured with
bench/job_overhead.py on 2 cores (two short default-study jobs in one process, 2 threads, paired medians):
libgomp's default took 1.02 times (0.97-1.04) as long on an idle machine and 1.35 times (1.24-1.41) beside one
busy process; never spinning (OMP_WAIT_POLICY=PASSIVE) took 0.94 times as long beside it, but 1.11 when idle.
The threads and the split of the work are the same, so every number computed is bit for bit the same
(tests/test_omp_wait.py).

libgomp reads its settings once, when torch loads it, so `prefer_short_spin` must run before torch is
imported: slm's command-line package calls it on import (slm/cli/__init__.py), and child processes
(slm-workers' copies, Lightning's) inherit it. A setting of the user's (OMP_WAIT_POLICY or GOMP_SPINCOUNT;
`GOMP_SPINCOUNT=300000` is libgomp's own default) is kept. Other OpenMP runtimes ignore GOMP_SPINCOUNT.
A run records the settings it trained under (result.json: environment.omp_wait). Standard library only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

SPIN_COUNT = "1000"
"""GOMP_SPINCOUNT for slm's commands: libgomp's busy-wait iterations before a waiting thread sleeps."""
USER_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
"""Environment variables that choose how libgomp's threads wait; slm sets none when one of them is set."""


def prefer_short_spin(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set GOMP_SPINCOUNT=SPIN_COUNT in `environ` (os.environ) unless a wait setting (USER_SETTINGS) is there
    already, or torch is already imported (libgomp has read its settings: too late to mean anything).
    Returns whether it set it."""
    environ = os.environ if environ is None else environ
    if any(environ.get(name) for name in USER_SETTINGS) or "torch" in sys.modules:
        return False
    environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    return True


def wait_settings(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """The wait settings (USER_SETTINGS) set in `environ` (os.environ), for the run record's environment:
    {"GOMP_SPINCOUNT": "1000"} under slm's commands; {} means libgomp's defaults."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in USER_SETTINGS if environ.get(name)}
