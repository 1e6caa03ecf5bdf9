"""ModelConfig's flat fields moved into groups (issue 40: model.attention, position, mlp, conv, norm, embedding, block,
parametrization) and their old spellings keep working: checkpoint directories written before the move load into
the same config and compute the same logits, a training checkpoint's stored config loads, an old command line is
rewritten with a note, and a run directory keyed the old way is found. tests/data/flat_model_groups holds five tiny
models saved by the code before the move (flat_model_groups/make.py), covering every moved field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from slm.model import ModelConfig
from slm.model.weights import load_model
from slm.renames import COLUMN_GROUPS, MODEL_MOVED, key_spelling, model_column, upgrade_override
from slm.settings import nested

FIXTURES = Path(__file__).parent / "data" / "flat_model_groups"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
MOVED_HERE = {old: f"{group}.{name}" for old, (group, name) in MODEL_MOVED.items() if group in COLUMN_GROUPS}

TODAY = {  # each fixture's settings as they are spelt today
    "gpt2_post_norm": {"position.kind": "learned", "norm.kind": "layernorm", "norm.eps": 1e-5, "mlp.kind": "gelu",
                       "mlp.gelu_approximate": "none", "block.bias": True, "embedding.tie": False,
                       "embedding.head_bias": True, "parametrization.init": "gpt2",
                       "parametrization.init_std": 0.03, "block.dropout": 0.1,
                       "block.dropout_at": ["attention", "mlp"], "norm.placement": "post", "norm.final": True},
    "gemma_sandwich": {"attention.n_heads": None, "attention.head_dim": 8, "attention.n_kv_heads": 2,
                       "norm.kind": "rmsnorm_gemma", "norm.placement": "sandwich", "attention.qk_norm": True,
                       "attention.qk_norm_scope": "all_heads", "mlp.kind": "geglu", "mlp.ratio": 2.5,
                       "mlp.d_ff_multiple": 16, "embedding.scale": True, "layer_types": ["local_attn", "attn"],
                       "attention.sliding_window": 8, "position.rope_theta": 500.0,
                       "position.rope_theta_local": 100.0, "position.rotary_fraction": 0.5, "attention.scale": 0.3,
                       "attention.logit_softcap": 20.0, "embedding.logit_softcap": 15.0, "embedding.padding_idx": 0,
                       "parametrization.init": "normal", "block.repeat": 2},
    "lfm2_completep_loop": {"n_layers": 3, "layer_types": ["conv", "attn"], "conv.kernel": 4,
                            "parametrization": {"kind": "completep", "base_width": 16, "base_depth": 1,
                                                "depth_alpha": 0.5, "base_head_dim": 4, "decay": "with_lr",
                                                "init": "normal"},
                            "block.loop_layers": 1, "block.loop_steps": 2, "mlp.d_ff": 40},
    "dllm_block_canon": {"attention.causal": False, "attention.block": 4, "embedding.mask_token_id": 60,
                         "embedding.document_end_id": 1, "canon": {"set": "AC"}, "attention.n_kv_heads": 1},
    "window_mlp": {"kind": "mlp", "mlp.window_hidden": [16, 8], "d_model": 8, "block.dropout": 0.1,
                   "parametrization.init": "torch", "embedding.tie": False, "attention.n_heads": None},
}
BASE = {"n_layers": 2, "d_model": 32, "attention.n_heads": 4, "vocab_size": 61, "context_length": 16}


@pytest.mark.parametrize("case", sorted(TODAY))
def test_a_checkpoint_saved_with_flat_fields_loads_the_same_config_and_logits(case, one_thread):
    """Weights and logits of a model saved before the move: the same config (spelt today) and the same numbers (the
    values exact on the machine that made them; within float rounding on a CPU whose kernels differ)."""
    stored = json.loads((FIXTURES / case / "config.json").read_text())
    assert "n_layers" in stored and not any(isinstance(stored.get(g), dict) for g in ("attention", "norm", "block"))
    model = load_model(FIXTURES / case)
    assert model.cfg == ModelConfig(**nested({**BASE, **TODAY[case]}))
    assert model.cfg.to_dict() == ModelConfig.from_dict(model.cfg.to_dict()).to_dict()  # today's spelling round-trips
    expected = EXPECTED["cases"][case]
    assert sum(p.numel() for p in model.parameters()) == expected["count"]
    with torch.no_grad():
        logits = model.eval()(torch.tensor(EXPECTED["tokens"])).float()
    torch.testing.assert_close(logits.flatten()[:64], torch.tensor(expected["logits"]), rtol=0, atol=2e-5)
    assert abs(float(logits.double().sum()) - expected["sum"]) <= 1e-4 * float(logits.double().norm())


def test_the_fixtures_set_every_moved_field():
    """Each field moved into a group has a value other than its default in some fixture (a new moved field needs a
    case in flat_model_groups/make.py and TODAY)."""
    defaults = ModelConfig(attention={"n_heads": 4}).to_dict()
    flat_defaults = {old: defaults[group][name] for old, (group, name) in MODEL_MOVED.items() if group in COLUMN_GROUPS}
    stored = [json.loads((FIXTURES / case / "config.json").read_text()) for case in TODAY]

    def value(config: dict, old: str):
        group, _, name = old.rpartition(".")
        return (config.get(group) or {}).get(name) if group else config.get(old)

    unset = [old for old in flat_defaults if all(value(c, old) == flat_defaults[old] for c in stored)
             and old not in ("n_kv_heads", "head_dim", "d_ff")]  # derived: always stored filled in
    assert not unset, unset


def test_a_training_checkpoints_stored_config_loads():
    """A training checkpoint file (last.ckpt of a run made before the move) keeps its model config flat in slm_meta:
    it loads into today's config, the one that run resumes with."""
    from slm.training.init_from import find_source

    (ckpt,) = (Path(__file__).parent / "data" / "flat_settings_run").glob("t/*/checkpoints/last.ckpt")
    stored = find_source(ckpt).config()
    assert "n_heads" in stored and "attention" not in stored
    cfg = ModelConfig.from_dict(stored)
    assert (cfg.attention.n_heads, cfg.attention.head_dim, cfg.norm.kind, cfg.parametrization.init) == \
        (stored["n_heads"], stored["head_dim"], stored["norm"], stored["init"])
    assert (cfg.moe.n_experts, cfg.canon.set) == (4, "A")


@pytest.mark.parametrize("old, new", [
    ("model.norm=layernorm", "model.norm.kind=layernorm"),
    ("model.n_heads=4", "model.attention.n_heads=4"),
    ("model.attention_block=8", "model.attention.block=8"),
    ("model.mlp_ratio=3", "model.mlp.ratio=3"),
    ("model.layer_repeat=2", "model.block.repeat=2"),
    ("model.tie_embeddings=false", "model.embedding.tie=false"),
    ("model.parametrization=mup", "model.parametrization.kind=mup"),
    ("model.mup.base_width=64", "model.parametrization.base_width=64"),
    ("+model.final_logit_softcap=30", "+model.embedding.logit_softcap=30"),
])
def test_an_old_command_line_is_rewritten_and_keyed_as_before(old, new):
    line, note = upgrade_override(old)
    assert line == new and note == f"{old.lstrip('+').split('=')[0]} is now spelt {new.lstrip('+').split('=')[0]}; " \
                                    f"read {old!r} as {new!r}"
    assert key_spelling(new.split("=")[0]) == old.split("=")[0]
    assert upgrade_override(new) == (new, None)


def test_every_moved_field_is_rewritten_and_its_column_keeps_its_name():
    for old, new in MOVED_HERE.items():
        assert upgrade_override(f"model.{old}=1")[0] == f"model.{new}=1"
        assert model_column(*new.split(".")) == old.replace(".", "_")  # mup.base_width -> mup_base_width
    assert upgrade_override("model.norm={kind: layernorm}") == ("model.norm={kind: layernorm}", None)  # the group


def test_a_run_keyed_with_old_spellings_is_found(tmp_path):
    from slm.cli.job_keys import key_from_overrides
    from slm.runs.keys import job_key

    old = job_key("model.n_heads=2,model.norm=layernorm,model=debug")
    (tmp_path / old).mkdir()
    found = key_from_overrides(["model=debug", "model.attention.n_heads=2", "model.norm.kind=layernorm"],
                               parent=tmp_path)
    assert found == old
    assert key_from_overrides(["model=debug", "model.n_heads=2", "model.norm=layernorm"], parent=tmp_path) == old
    assert key_from_overrides(["model=debug", "model.attention.n_heads=2"]) == "model.attention.n_heads=2,model=debug"
    # a run keyed between the two moves: model.moe already nested, model.n_kv_heads still flat (sweeps/cpu_default)
    between = job_key("model.moe.n_experts=8,model.n_kv_heads=2,model=moe")
    (tmp_path / between).mkdir()
    new = ["model=moe", "model.attention.n_kv_heads=2", "model.moe.n_experts=8"]
    assert key_from_overrides(new, parent=tmp_path) == between
    assert key_spelling("model.attention.n_kv_heads", "issue 40") == "model.n_kv_heads"
    assert key_spelling("model.moe.n_experts", "issue 40") == "model.moe.n_experts"


def test_a_stored_config_with_both_spellings_of_one_setting_is_refused():
    from slm.model import ConfigError

    flat = {**{k: v for k, v in BASE.items() if "." not in k}, "n_heads": 4}
    assert ModelConfig.from_dict({**flat, "norm": "layernorm", "attention": {"head_dim": 8}}).norm.kind == "layernorm"
    with pytest.raises(ConfigError, match=r"model.n_heads=4 and model.attention.n_heads=2 are one setting"):
        ModelConfig.from_dict({**flat, "attention": {"n_heads": 2}})


def test_a_config_file_with_an_old_key_is_one_line_naming_the_new_spelling():
    """A preset or sweep of the user's is not rewritten: a flat field is refused naming its new place, and so is a
    group's kind given as the group (`norm: layernorm` would replace the whole model.norm mapping in Hydra)."""
    from omegaconf import OmegaConf

    from slm.cli.config import _compose, explain, old_spelling

    for overrides, line in ((["model.head_dim=16"], "model.head_dim is now spelt model.attention.head_dim"),
                            (["model.mup.base_width=32"], "model.mup is now spelt model.parametrization")):
        with pytest.raises(Exception) as err:
            _compose(overrides)  # as Hydra meets a flat key in a YAML file (the command line is upgraded first)
        assert line in explain(err.value, overrides)
    assert old_spelling(OmegaConf.create({"norm": "layernorm"}), "model") == "model.norm is now spelt model.norm.kind"
    assert old_spelling(OmegaConf.create({"norm": {"kind": "layernorm"}}), "model") is None
