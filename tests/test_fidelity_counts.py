"""The families sweep against the study's published sizes, counted by hand: GPT-2 (76.48M) and dLLM-Canon
(76.05M) in the vocabulary their sweep entries train with, and gemma3 in the study's setting (a window as long
as the context) and with a window that is local (sweeps/gemma3_local_70m.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from slm.model import ModelConfig, Transformer, config_from_spec, count
from tests.conftest import compose_model_node

SWEEPS = Path(__file__).resolve().parent.parent / "sweeps"
GPT2_IDS = 50_257  # tiktoken r50k: 50,256 merges and <|endoftext|>


def point(sweep: str, preset: str) -> list[str]:
    """The overrides of the sweep file's point for `preset` (exactly one)."""
    points = yaml.safe_load((SWEEPS / f"{sweep}.yaml").read_text())["hydra"]["sweeper"]["points"]
    (found,) = [p for p in points if f"model={preset}" in p]
    return found


def job_model(sweep: str, overrides: list[str]) -> ModelConfig:
    """The model a sweep's job trains, as slm.runs.job builds it: the tokenizer (with the mask token its
    objective needs, padded as configured) sets vocab_size."""
    from slm.cli.config import compose_config
    from slm.data import TokenizerConfig
    from slm.data.tokenizers import tokenizer_class
    from slm.objectives import tokenizer_node_for

    cfg = compose_config([f"sweep={sweep}", *overrides])
    tok_cfg = TokenizerConfig.from_node(tokenizer_node_for(cfg.train.objective,
                                                           OmegaConf.to_container(cfg.tokenizer, resolve=True)))
    tokenizer = tokenizer_class(tok_cfg.kind).from_config(tok_cfg)
    if tok_cfg.mask:
        tokenizer.reserve_mask()
    spec = OmegaConf.to_container(cfg.model, resolve=True) | {"vocab_size": tok_cfg.padded(tokenizer.vocab_size)}
    return config_from_spec(spec)


def built(cfg: ModelConfig) -> int:
    with torch.device("meta"):  # shapes only
        return sum(p.numel() for p in Transformer(cfg).parameters())


def millions(n: int) -> float:
    """A count as the study prints it: millions to two decimals."""
    return round(n / 1e6, 2)


def dllm_canon_formula(vocab: int, kv_heads: int, d_ff: int, L: int = 32, d: int = 384, head_dim: int = 48) -> int:
    """LLaMA block, no biases, tied head: q, k, v, o; SwiGLU (gate, up, down); two RMSNorms; Canon A and C
    (depthwise, kernel 4, no bias); the final RMSNorm."""
    attention = d * d + 2 * d * (kv_heads * head_dim) + d * d
    mlp = 3 * d * d_ff
    norms = 2 * d
    canon = 2 * 4 * d
    return vocab * d + L * (attention + mlp + norms + canon) + d


def gpt2_formula(vocab: int, L: int = 32, d: int = 384, context: int = 1024) -> int:
    """GPT-2 block with biases, tied head: fused qkv and the output projection; the 4 d GELU MLP; two
    LayerNorms (weight and bias); learned positions; the final LayerNorm."""
    attention = (d * 3 * d + 3 * d) + (d * d + d)
    mlp = (d * 4 * d + 4 * d) + (4 * d * d + d)
    norms = 2 * 2 * d
    return vocab * d + context * d + L * (attention + mlp + norms) + 2 * d


def test_dllm_canon_has_the_study_count():
    expected = dllm_canon_formula(GPT2_IDS + 1, kv_heads=8, d_ff=1024)  # + the mask token, unpadded
    assert expected == 76_045_440 and millions(expected) == 76.05
    # the other reading of 76.05M (4 KV heads, SwiGLU 3 d) counts the same; llama3_canon's construction does not
    assert dllm_canon_formula(GPT2_IDS + 1, kv_heads=4, d_ff=3 * 384) == expected
    assert millions(dllm_canon_formula(50_304, kv_heads=4, d_ff=1024)) == 71.34

    cfg = job_model("families_70m", point("families_70m", "dllm_canon"))
    assert (cfg.vocab_size, cfg.attention.n_heads, cfg.attention.n_kv_heads, cfg.mlp.d_ff, cfg.n_layers, cfg.d_model) == \
        (50_258, 8, 8, 1024, 32, 384)
    assert count(cfg).params_total == built(cfg) == expected
    preset = config_from_spec(compose_model_node("model=dllm_canon"))  # slm-params model=dllm_canon
    assert count(preset).params_total == built(preset) == expected


def test_gpt2_has_the_study_count():
    expected = gpt2_formula(GPT2_IDS)
    assert expected == 76_475_520 and millions(expected) == 76.48
    assert millions(gpt2_formula(50_304)) == 76.49  # padded to a multiple of 64 it misses the study

    cfg = job_model("families_70m", point("families_70m", "gpt2"))
    assert (cfg.vocab_size, cfg.n_layers, cfg.d_model, cfg.attention.n_heads) == (GPT2_IDS, 32, 384, 6)
    assert count(cfg).params_total == built(cfg) == expected


@pytest.mark.parametrize("preset", ["llama3", "gemma3", "llama3_canon", "dllm"])
def test_the_other_families_keep_the_padded_vocabulary(preset):
    assert job_model("families_70m", point("families_70m", preset)).vocab_size == 50_304


def test_gemma3_in_the_study_setting_and_with_a_local_window():
    study = job_model("families_70m", point("families_70m", "gemma3"))
    assert study.attention.sliding_window == study.context_length == 1024  # the study's: every layer sees the whole window
    assert any("has no effect" in note for note in study.notes())

    (local_point,) = yaml.safe_load((SWEEPS / "gemma3_local_70m.yaml").read_text())["hydra"]["sweeper"]["points"]
    local = job_model("gemma3_local_70m", local_point)
    assert local.attention.sliding_window == 512 < local.context_length == 1024
    layers = [local.layer_type(i) for i in range(local.n_layers)]
    n_local = layers.count("local_attn")
    assert (n_local, layers.count("attn")) == (27, 5)  # five local layers of every six; the sixth global
    assert (local.n_layers, local.d_model, local.vocab_size) == (study.n_layers, study.d_model, study.vocab_size)
    assert local.notes() == []
    # the same weights; each local layer attends over 512 positions instead of 1024: PaLM's attention term,
    # 12 * H * hd * (keys per query), is that much smaller per local layer
    assert count(local).params_total == count(study).params_total
    assert count(study).flops_per_token - count(local).flops_per_token == \
        n_local * 12 * local.attention.n_heads * local.attention.head_dim * (1024 - 512)
