"""`make dpo` shrunk (docs/dpo.md): the study's own Makefile target and sweep files at tiny sizes, one family, one seed,
the preference arms after SFT (DPO at two betas, DPO+SFT, IPO) and on-policy DPO. Each child starts from its parent's
run (train.init_from by interpolation of the job key), every run is scored per item on the task, analysis.dpo writes
the answer, and the target started again trains nothing. The teacher is skipped by its pairs being there (the
corruption pairs stand in for the teacher's and the student's own: an untrained model has no correct sample);
slm-pairs itself is tested in tests/test_toolcall_run.py. About 40 s on a lightly loaded 2-core machine (9 slm-train
processes' start-up, most of it)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slm.cli.toolcall import run as toolcall

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
SIZES = ["DPO_TRAIN=40", "DPO_CORPUS=400", "DPO_PRE_STEPS=2", "DPO_SFT_STEPS=2", "DPO_ARM_STEPS=2", "DPO_EVAL_LIMIT=2"]


def make_dpo(study: Path, *more: str) -> subprocess.CompletedProcess:
    """`make dpo` into `study` with this interpreter's scripts (install not remade)."""
    args = ["make", "-s", "-o", "install", "dpo", f"BIN={Path(sys.executable).parent}", f"DPO_DIR={study}",
            "DPO_SEEDS=1", "DPO_FAMILIES=gpt2", "DPO_JOBS=1", "DPO_ARMS=dpo_arms dpo_onpolicy", *SIZES, *more]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.slow  # ~40 s on one core: make test-slow runs it (make test stays under ~10 min on 2 cores)
def test_make_dpo_shrunk_chains_scores_reports_and_resumes(tmp_path):
    study = tmp_path / "study"
    toolcall([str(study / "data"), "--train", "40", "--corpus", "400", "--seed", "0"])  # what make dpo would write
    shutil.copy(study / "data" / "pairs_corrupt.jsonl", study / "teacher_pairs.jsonl")
    shutil.copy(study / "data" / "sft_train.jsonl", study / "teacher_pairs.correct.jsonl")
    (study / "onpolicy").mkdir()  # the student's own pairs: an untrained one has none either
    shutil.copy(study / "data" / "pairs_corrupt.jsonl", study / "onpolicy" / "model=gpt2,train.seed=0.jsonl")
    out = make_dpo(study)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    runs = study / "runs"
    assert not (runs / "dpo_teacher_pre").exists()  # the pairs are there: no teacher
    pre = runs / "dpo_pre" / "model=gpt2"
    sft = runs / "dpo_sft" / "model=gpt2,train.seed=0"
    children = sorted(p.parent for p in (runs / "dpo_arms").glob("*/result.json"))
    assert len(children) == 4
    children += sorted(p.parent for p in (runs / "dpo_onpolicy").glob("*/result.json"))
    assert len(children) == 5
    for run, parent in [(sft, pre)] + [(child, sft) for child in children]:
        record = json.loads((run / "result.json").read_text())
        assert record["status"] == "completed", run
        assert Path(record["training"]["init_from"]["path"]).resolve() == parent.resolve(), run
        assert set(record["eval"]["lm_eval"]["scores"]) == {"slm_toolcall", "slm_toolcall_templates",
                                                           "slm_toolcall_long", "slm_toolcall_combos"}
    answer = json.loads((study / "dpo.json").read_text())
    assert answer["families"] == ["gpt2"]
    assert answer["arms"] == ["sft", "dpo b=0.1", "dpo b=0.5", "dpo+sft b=0.1", "ipo b=0.1", "on-policy dpo b=0.1"]
    cell = answer["cells"]["gpt2|dpo b=0.1|slm_toolcall|exact_match"]
    assert cell["runs"] == 1 and cell["items"] == 2 and len(cell["vs_sft"]["seeds"]) == 1
    assert "gpt2: " in answer["verdicts"]["gpt2"] and "| gpt2 | ipo b=0.1 | 1 | " in (study / "dpo.md").read_text()
    again = make_dpo(study)  # everything there: nothing is trained again
    assert again.returncode == 0, again.stderr[-3000:]
    assert "slm-train: run " not in again.stdout + again.stderr
    other = make_dpo(study, "DPO_ARM_STEPS=3")  # other sizes in the same directory: one line, exit 2
    assert other.returncode == 2 and "holds a study at other sizes" in other.stderr
    # make's own "make: ***" line (make[1] under `make test`) aside, the refusal is one line
    assert len([line for line in other.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", line)]) == 1


def test_arms_are_named_from_run_group_and_preference_loss():
    from analysis.dpo import arm_name

    assert arm_name("dpo_control", {}) == "sft_control" and arm_name("dpo_rft", {}) == "rft"
    assert arm_name("dpo_arms", {"train": {"preference": {"loss": ["dpo", "sft"], "beta": 0.1}}}) == "dpo+sft b=0.1"


def test_best_lr_keeps_each_family_and_arm_at_its_lowest_mean_validation_nll():
    from analysis.dpo import best_lr

    def run(family, lr, seed, nll):
        return {"family": family, "arm": "dpo b=0.1", "lr": lr, "seed": seed, "selection_nll": nll}

    runs = [run("gpt2", 1e-4, 0, 0.5), run("gpt2", 1e-4, 1, 0.9), run("gpt2", 5e-4, 0, 0.6), run("gpt2", 5e-4, 1, 0.6),
            run("llama3", 1e-4, 0, None), run("llama3", 5e-4, 0, 0.4)]
    kept = best_lr(runs)
    assert sorted((r["family"], r["lr"], r["seed"]) for r in kept) == [("gpt2", 5e-4, 0), ("gpt2", 5e-4, 1),
                                                                        ("llama3", 5e-4, 0)]
