"""Settings that moved into nested groups (model.moe / memory / canon) keep working in their old flat spelling:
stored configs load, old command lines compose (with a note), and job keys stay, so run directories made before
the move are found and resumed. tests/data/flat_settings_run holds a run that the code before the move trained
for 6 of 12 steps and was then SIGKILLed (flat `model.n_experts`, `model.canon_set` in its config and key)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from slm.model.config import ConfigError, ModelConfig
from slm.renames import COLUMN_GROUPS, MODEL_MOVED, key_spelling, upgrade_model_fields, upgrade_override
from tests.test_train_cli import FAST, record, run_dir, slm_train as _slm_train

OLD_RUN = "tests/data/flat_settings_run"
OLD_ARGS = ["model.mlp_types=[moe]", "model.n_experts=4", "model.expert_d_ff=32", "model.canon_set=A",
            "train.steps=12", "train.ckpt_interval=4", "train.val_interval=6", "train.seed=3"]
NEW_ARGS = ["model.mlp_types=[moe]", "model.moe.n_experts=4", "model.moe.expert_d_ff=32", "model.canon.set=A",
            "train.steps=12", "train.ckpt_interval=4", "train.val_interval=6", "train.seed=3"]
RUN_ARGS = [a for a in FAST if a != "train.logging.interval=5"] + ["train.log_interval=1"]


def slm_train(root, *args):
    """slm-train on 2 threads, as the fixture was trained (a thread count changes float sums)."""
    import os
    from unittest import mock

    with mock.patch.dict(os.environ, {"OMP_NUM_THREADS": "2"}):
        return _slm_train(root, *args)


def test_every_moved_field_reads_into_its_group():
    flat = {"n_layers": 2, "d_model": 32, "n_heads": 2, "mlp_types": ["moe"], "n_experts": 4, "top_k": 1,
            "expert_d_ff": 16, "moe_aux_coef": 0.02, "moe_aux_scope": "pooled", "moe_z_coef": 0.001,
            "shared_expert_d_ff": 8, "norm_topk_prob": False, "canon": "conv", "canon_set": "AC",
            "canon_kernel": 3, "canon_b_after_qk_norm": True}
    cfg = ModelConfig.from_dict(flat)
    assert (cfg.moe.n_experts, cfg.moe.top_k, cfg.moe.expert_d_ff, cfg.moe.aux_coef, cfg.moe.aux_scope,
            cfg.moe.z_coef, cfg.moe.shared_expert_d_ff, cfg.moe.norm_topk_prob) == (4, 1, 16, 0.02, "pooled", 0.001,
                                                                                   8, False)
    assert (cfg.canon.kind, cfg.canon.set, cfg.canon.kernel, cfg.canon.b_after_qk_norm) == ("conv", "AC", 3, True)
    memory = ModelConfig.from_dict({"n_layers": 2, "d_model": 32, "n_heads": 2, "context_length": 16,
                                    "memory_layers": [1], "memory_segment": 8, "memory_chunk": 4, "memory_depth": 1,
                                    "memory_hidden": 8, "memory_heads": 2, "persistent_tokens": 2, "memory_lr": 0.3})
    assert (memory.memory.layers, memory.memory.segment, memory.memory.chunk, memory.memory.depth,
            memory.memory.hidden, memory.memory.heads, memory.memory.persistent_tokens, memory.memory.lr) == \
        ([1], 8, 4, 1, 8, 2, 2, 0.3)
    assert memory.layer_types == ["attn", "mac"]
    # every moved field is covered above, or by tests/test_model_groups_upgrade.py for the groups made from flat
    # fields (a new entry in MODEL_MOVED needs a case in one of them)
    assert {old for old, (group, _) in MODEL_MOVED.items() if group not in COLUMN_GROUPS} == \
        set(flat) - {"n_layers", "d_model", "n_heads", "mlp_types"} | {
        "memory_layers", "memory_segment", "memory_chunk", "memory_depth", "memory_hidden", "memory_heads",
        "persistent_tokens", "memory_lr"}
    # the group itself and the new spelling pass through; both spellings of one setting must agree
    assert upgrade_model_fields({"canon": {"kind": "conv", "set": "A"}}) == {"canon": {"kind": "conv", "set": "A"}}
    assert upgrade_model_fields({"canon_set": "A", "canon": {"set": "A"}}) == {"canon": {"set": "A"}}
    with pytest.raises(ConfigError, match="model.canon_set='A' and model.canon.set='C' are one setting"):
        ModelConfig.from_dict({"n_layers": 2, "d_model": 32, "n_heads": 2, "canon_set": "A", "canon": {"set": "C"}})


@pytest.mark.parametrize("old, new", [
    ("model.n_experts=8", "model.moe.n_experts=8"),
    ("+model.memory_lr=0.1", "+model.memory.lr=0.1"),
    ("model.canon=conv_centered", "model.canon.kind=conv_centered"),
    ("model.canon_set=AC", "model.canon.set=AC"),
    ("model.moe_aux_scope=pooled,layer", "model.moe.aux_scope=pooled,layer"),
])
def test_old_command_line_spellings_are_rewritten_and_keyed_as_before(old, new):
    line, note = upgrade_override(old)
    assert line == new and note and new in note
    assert key_spelling(new.split("=")[0]) == old.split("=")[0]
    assert upgrade_override(new) == (new, None) and upgrade_override("model.d_model=64") == ("model.d_model=64", None)
    assert upgrade_override("model.canon={kind: conv}") == ("model.canon={kind: conv}", None)


def test_slm_params_takes_an_old_spelling_with_a_note():
    out = subprocess.run([sys.executable, "-m", "slm.cli.params", "model=moe", "model.n_experts=8", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["moe"]["n_experts"] == 8
    assert "slm-params: note: model.n_experts is now spelt model.moe.n_experts" in out.stderr


def test_a_run_directory_made_before_the_move_is_found_and_resumed_exactly(tmp_path):
    """The old run (flat spellings, killed at step 6 with a step-4 checkpoint) resumes under the new spelling in
    its own directory, and ends with the weights of an uninterrupted run of the new code: bit-exact on the machine
    that made the fixture, within float rounding on one whose CPU kernels differ (its first 4 steps ran there)."""
    old_log = (Path(OLD_RUN) / "t").glob("*/train_log.jsonl")
    cut = tmp_path / "cut"
    shutil.copytree(OLD_RUN, cut / "runs")
    old_dir = run_dir(cut)
    assert "model.n_experts=4" in old_dir.name and record(old_dir)["status"] == "running"
    out = slm_train(cut, *RUN_ARGS, *NEW_ARGS)
    assert out.returncode == 0, out.stderr[-2000:]
    assert run_dir(cut) == old_dir  # found again: no second directory
    r = record(old_dir)
    assert r["status"] == "completed" and r["training"]["resumed_from"] == "checkpoints/last.ckpt"
    assert r["config"]["model"]["moe"]["n_experts"] == 4 and "n_experts" not in r["config"]["model"]
    ref = tmp_path / "ref"
    assert slm_train(ref, *RUN_ARGS, *NEW_ARGS).returncode == 0
    a = load_file(run_dir(ref) / "model" / "model.safetensors")
    b = load_file(old_dir / "model" / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-5)
    steps = [json.loads(line)["step"] for line in (old_dir / "train_log.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 13))  # the old run's rows up to its checkpoint, then the resumed ones
    (old,) = old_log
    kept = old.read_text().splitlines()[:4]
    assert (old_dir / "train_log.jsonl").read_text().splitlines()[:4] == kept
    # and the old spelling names the same directory: the job is complete, nothing runs
    again = slm_train(cut, *RUN_ARGS, *OLD_ARGS)
    assert again.returncode == 0 and "already completed" in again.stdout, again.stderr[-2000:]


def test_training_settings_moved_into_length_and_schedule():
    from slm.training.config import TrainConfig, TrainConfigError

    old = TrainConfig.from_node({"tokens": 2e5, "steps": 7, "schedule": "wsd", "warmup_steps": 2,
                                 "decay_fraction": 0.3, "min_lr_ratio": 0.0})
    new = TrainConfig(length={"tokens": 2e5, "steps": 7},
                      schedule={"kind": "wsd", "warmup_steps": 2, "decay_fraction": 0.3, "min_lr_ratio": 0.0})
    assert old == new and old.max_steps(128) == 7 and old.warmup(7) == 2
    assert [round(old.schedule.build(7)(s), 6) for s in range(7)] == [0.5, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0]
    assert upgrade_override("train.steps=20") == ("train.length.steps=20", "train.steps is now spelt "
                                                  "train.length.steps; read 'train.steps=20' as 'train.length.steps=20'")
    assert upgrade_override("train.schedule=wsd")[0] == "train.schedule.kind=wsd"
    assert key_spelling("train.length.tokens") == "train.tokens" and key_spelling("train.schedule.kind") == \
        "train.schedule"
    with pytest.raises(TrainConfigError, match=r"train.tokns is not a training field \(did you mean "
                                               r"train.length.tokens\?\)"):
        TrainConfig.from_node({"tokns": 1})


def test_a_config_file_with_an_old_key_is_one_line_naming_the_new_spelling():
    """A user's preset or sweep file is not rewritten: composing it fails, and the line says what to write."""
    from slm.cli.config import _compose, explain

    for overrides, line in ((["model=moe", "model.n_experts=4"], "model.n_experts is now spelt model.moe.n_experts"),
                            (["train.tokens=5"], "train.tokens is now spelt train.length.tokens")):
        with pytest.raises(Exception) as err:
            _compose(overrides)  # as Hydra meets a flat key in a YAML file (the command line is upgraded first)
        assert line in explain(err.value, overrides)
