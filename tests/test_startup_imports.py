"""slm-train's start-up stays lean (bench/startup.py times it).

`import slm.cli.train`, composing the default config and the default eval suite's preflight (eval=offline:
the tasks shipped in slm/eval/tasks) import none of the packages below: lm-eval (with pandas and datasets,
1.5-2 s on two cores) loads when the evaluation runs, after training, and torch, transformers and matplotlib
only when training starts. Each check runs in a fresh interpreter: this one has imported them all.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from slm.eval.run import preflight, shipped_tasks
from slm.settings import SettingsError

NOT_AT_START = ["lm_eval", "datasets", "pandas", "torch", "transformers", "matplotlib", "analysis"]


def loaded_after(code: str) -> list[str]:
    """Which of NOT_AT_START a fresh interpreter has imported after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {NOT_AT_START!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_compose_and_default_preflight_load_nothing_heavy():
    code = ("import slm.cli.train\n"
            "from omegaconf import OmegaConf\n"
            "from slm.cli.config import compose_config\n"
            "from slm.eval.run import preflight\n"
            "cfg = OmegaConf.to_container(compose_config([]), resolve=True)\n"
            "assert cfg['eval']['name'] == 'offline', cfg['eval']\n"
            "preflight(cfg['eval'])")
    assert loaded_after(code) == []


def test_preflight_loads_tasks_through_lm_eval_when_not_only_shipped_ones():
    """A task directory of the user's (include_path) may hold anything: its tasks are loaded before training."""
    code = ("from slm.eval import TASKS_DIR\n"
            "from slm.eval.run import preflight\n"
            "preflight({'tasks': ['slm_shakespeare_bpb'], 'include_path': [str(TASKS_DIR)], 'throughput': False})")
    assert "lm_eval" in loaded_after(code)


def test_shipped_tasks_and_bad_fields():
    assert shipped_tasks() == {"slm_shakespeare_bpb", "slm_shakespeare_mc", "slm_offline", "slm_toolcall",
                               "slm_toolcall_templates", "slm_toolcall_long", "slm_toolcall_combos", "slm_toolcall_all"}
    with pytest.raises(SettingsError, match="^eval has unknown key 'no_such_field'"):
        preflight({"tasks": ["slm_shakespeare_bpb"], "no_such_field": 1})
