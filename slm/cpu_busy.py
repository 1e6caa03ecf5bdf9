"""How busy the machine's CPUs were with other work while something was measured.

    with OtherWork() as other:
        ...                      # the measurement
    other.cores                  # cores' worth of CPU time other processes used, on average; None if unknown

Linux only: the machine's busy CPU time (/proc/stat: every state but idle and iowait) over the window, less
this process's own CPU time (its threads, os.times), divided by the wall time. 0 on an otherwise idle
machine; 1.0 when another process kept one core busy throughout. Elsewhere (no /proc/stat) it is None:
unknown, never guessed.
"""

from __future__ import annotations

import os
import time

BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
"""user, nice, system, irq, softirq, steal in /proc/stat's `cpu` line (idle and iowait are not busy)."""


STAT = "/proc/stat"


def busy_seconds(stat: str = STAT) -> float | None:
    """CPU seconds the whole machine has spent busy since boot, or None where /proc/stat is not readable."""
    try:
        with open(stat) as f:
            fields = f.readline().split()
        if fields[0] != "cpu":
            return None
        return sum(int(fields[1 + i]) for i in BUSY_FIELDS if 1 + i < len(fields)) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def host_cpus(stat: str = STAT) -> int:
    """The CPUs /proc/stat counts (the whole machine's, which may be more than this process may use)."""
    try:
        with open(stat) as f:
            return sum(line.startswith("cpu") and line[3:4].isdigit() for line in f) or (os.cpu_count() or 1)
    except OSError:
        return os.cpu_count() or 1


def own_seconds() -> float:
    """CPU seconds this process (all its threads) has used."""
    t = os.times()
    return t.user + t.system


class OtherWork:
    """A context manager measuring the CPU time other processes used during its block (module docstring)."""

    def __init__(self, stat: str = STAT) -> None:
        self.stat = stat
        self.cores: float | None = None
        self.host = host_cpus(stat)  # the most cores anything can keep busy here
        self.cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

    def __enter__(self) -> OtherWork:
        self._start = (busy_seconds(self.stat), own_seconds(), time.perf_counter())
        return self

    def __exit__(self, *exc) -> None:
        busy, own, wall = busy_seconds(self.stat), own_seconds(), time.perf_counter()
        busy0, own0, wall0 = self._start
        if busy is None or busy0 is None or wall <= wall0:
            return
        # /proc/stat and os.times count in clock ticks (10 ms): over a short block the difference can overshoot,
        # so it is held to what the machine's CPUs can do
        other = max(0.0, (busy - busy0) - (own - own0)) / (wall - wall0)
        self.cores = round(min(other, self.host), 2)

    def as_dict(self) -> dict:
        """The fields a record keeps: other_cores_busy (None: unknown) and cpus (this process may use)."""
        return {"other_cores_busy": self.cores, "cpus": self.cpus}
