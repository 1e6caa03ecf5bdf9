"""The data, tokenizer and eval settings on the settings protocol: a doc line under every field, one SettingsError
naming the full key, and the layer-0 modules standard library only."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from slm.cli.conf_defaults import field_docs
from slm.data.config import DataConfig, SourceConfig, TokenizerConfig
from slm.eval.lm_diffusion import DiffusionSettings
from slm.eval.spec import EvalSpec, ThroughputSettings, spec_from_config
from slm.sampler_settings import SamplerSettings, check_sampler
from slm.settings import SettingsError


@pytest.mark.parametrize("cls", [TokenizerConfig, SourceConfig, DataConfig, EvalSpec, ThroughputSettings,
                                 SamplerSettings, DiffusionSettings])
def test_every_field_has_a_doc_line(cls):
    docs = field_docs(cls)
    assert [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)] == []


def test_a_bad_source_names_its_place_in_the_list():
    node = {"sources": [{"name": "a"}, {"name": "b", "weight": -1}]}
    with pytest.raises(SettingsError, match=r"^data.sources.1.weight=-1 is invalid: must be a number > 0$") as err:
        DataConfig.from_node(node)
    assert err.value.key == "data.sources.1.weight"
    with pytest.raises(SettingsError, match=r"^data.sources.1.name='a' is invalid: used by an earlier source"):
        DataConfig.from_node({"sources": [{"name": "a"}, {"name": "a"}]})


def test_counts_from_a_command_line_and_paths_with_commas():
    """2e9 on a command line is a float: an integral one is the count; one path (a run directory's name may hold
    commas) is a list of one."""
    cfg = DataConfig.from_node({"token_budget": 2e9, "sources": [{"kind": "local", "paths": "runs/a=1,b=2/x.txt"}]})
    assert cfg.token_budget == 2_000_000_000 and cfg.sources[0].paths == ["runs/a=1,b=2/x.txt"]
    assert cfg.sources[0].name == "local" and cfg.sources[0].where == "data.sources.0"
    with pytest.raises(SettingsError, match=r"^data.token_budget=2.5 is invalid: expected an integer or null$"):
        DataConfig.from_node({"token_budget": 2.5})


def test_eval_groups_and_their_keys():
    spec = spec_from_config({"tasks": "a, b", "average": ["a", "b"], "limit": 4.7, "throughput": False}, "suite")
    assert EvalSpec(limit=4.5).limit == 4.5  # as lm-eval recorded it (slm-lm-eval)
    assert spec.tasks == ["a", "b"] and spec.average == {"suite": ["a", "b"]} and spec.limit == 4
    assert spec.throughput.enabled is False and spec.throughput.diffusion == SamplerSettings()
    with pytest.raises(SettingsError, match=r"^eval.throughput.diffusion.threshold=0 is invalid: must be a number in "
                                            r"\(0, 1\], or null \(low-confidence remasking\)$"):
        spec_from_config({"throughput": {"diffusion": {"threshold": 0}}})
    with pytest.raises(SettingsError, match=r"^eval.model_args.device='cpu' is invalid: evaluation sets device itself; "
                                            r"use eval.device$"):
        EvalSpec(model_args={"device": "cpu"})


def test_the_slm_models_diffusion_arguments_read_strings_and_name_their_key():
    """lm-eval's command line gives model_args as strings; slm-train's preflight names them eval.model_args.*."""
    s = DiffusionSettings.from_model_args({"mc_num": "32", "diffusion_steps": "None", "diffusion_threshold": "1"})
    assert (s.mc_num, s.diffusion_steps, s.diffusion_threshold) == (32, None, 1.0)
    with pytest.raises(SettingsError, match=r"^eval.model_args.mc_batch=0 is invalid: must be an integer > 0"):
        DiffusionSettings.from_model_args({"mc_batch": "0"}, "eval.model_args")


def test_the_sampler_refuses_what_no_sampler_can_honour():
    assert check_sampler(8, None, 0.9, "dual") == SamplerSettings(8, None, 0.9, "dual")
    with pytest.raises(SettingsError, match=r"^sampler.block_length=0 is invalid: must be an integer > 0$"):
        check_sampler(0, None, None, "none")


@pytest.mark.parametrize("module", ["slm.sampler_settings", "slm.typecheck"])
def test_layer_zero_modules_load_the_standard_library_only(module):
    """No torch for the sampler's settings; typecheck below settings (settings imports typecheck, not back)."""
    code = (f"import sys; import {module}; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'slm')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = eval(out)  # noqa: S307 - our own printout
    assert not any(m.startswith(("torch", "numpy")) for m in loaded), loaded
    if module == "slm.typecheck":
        assert "slm.settings" not in loaded, loaded
