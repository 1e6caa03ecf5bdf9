"""The Makefile's commands say what they do: `make sweep ARGS=...` hands Hydra overrides to the default study and
reports the run group they name, and the help's run count is the sweep's."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def make_n(*args: str) -> str:
    """The commands `make -n sweep ...` would run (nothing runs)."""
    out = subprocess.run(["make", "-n", "sweep", *args], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(ROOT)})
    assert out.returncode == 0, out.stderr
    return out.stdout[out.stdout.index("slm-train -m sweep=cpu_default"):]


def test_make_sweep_passes_args_and_reports_their_run_group():
    plain = make_n()
    assert "slm-train -m sweep=cpu_default ;" in plain and "slm-collect runs/cpu_default -o" in plain
    shrunk = make_n('ARGS=train.length.steps=20 run_group=cpu_quick')
    assert "slm-train -m sweep=cpu_default train.length.steps=20 run_group=cpu_quick;" in shrunk
    assert "slm-collect runs/cpu_quick -o runs/cpu_quick/results.parquet" in shrunk
    assert "slm-report runs/cpu_quick/results.parquet -o runs/cpu_quick/report" in shrunk
    assert "(train.length.steps=20 run_group=cpu_quick)" in shrunk  # the report's title says what was changed


def test_the_help_counts_the_default_studys_jobs():
    sweep = yaml.safe_load((ROOT / "sweeps" / "cpu_default.yaml").read_text())["hydra"]["sweeper"]
    crossed = [str(values).count(",") + 1 for values in (sweep.get("params") or {}).values()]
    jobs = len(sweep.get("points") or [[]]) * math.prod(crossed)
    text = (ROOT / "Makefile").read_text()
    assert re.search(rf"make sweep +the default study \({jobs} runs\)", text)
    assert f"the cpu_default sweep ({jobs} runs," in text
    assert "again, it trains nothing" not in text.split("help:")[1].split("\n\n")[0]
