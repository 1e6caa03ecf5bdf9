"""The μP coordinate check (slm.training.coordcheck, slm-coordcheck): activations keep their size across widths
under mup and grow under sp, and the CLI writes its record and figure or rejects bad input in one line."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from slm.cli.config import compose_config
from slm.settings import nested
from slm.training.config import TrainConfig
from slm.training.coordcheck import layer_names, measure, slope, width_config

WIDTHS = [32, 64, 128, 256]
STEPS = 5
TINY = {"n_layers": 2, "attention.head_dim": 16, "attention.n_kv_heads": None, "context_length": 32,
        "parametrization.base_width": 32}
"""A llama3-style model (RMSNorm, SwiGLU, RoPE, tied embeddings, init normal) small enough for a second a scheme."""


@pytest.fixture(scope="module")
def shakespeare(tmp_path_factory):
    """Composed config and STEPS fixed batches (8 windows of 33 characters) of the embedded Tiny Shakespeare."""
    from slm.cli.coordcheck import training_batches
    from slm.data import prepare

    cfg = OmegaConf.to_container(compose_config(["model=llama3"]), resolve=True)
    cfg["data"]["cache_dir"] = str(tmp_path_factory.getbasetemp() / "slm-cache")
    prepared = prepare(cfg["data"], cfg["tokenizer"])
    return cfg, prepared.vocab_size, training_batches(prepared, 8, TINY["context_length"], 0, "tiled", STEPS)


def slopes(shakespeare, scheme: str) -> dict[str, float]:
    cfg, vocab, batches = shakespeare
    spec = nested({**cfg["model"], **TINY, "vocab_size": vocab, "parametrization.kind": scheme})
    train = TrainConfig.from_node({**cfg["train"], "lr": 5e-3})  # AdamW, betas 0.9/0.95, decay 0.1, clip 1
    rows = measure(spec, WIDTHS, train, batches, STEPS)
    assert {r["width"] for r in rows} == set(WIDTHS) and {r["step"] for r in rows} == set(range(1, STEPS + 1))
    assert {r["layer"] for r in rows} == set(layer_names(2))
    return {layer: slope(rows, layer) for layer in layer_names(2)}


def test_mup_keeps_every_layer_flat_in_width(shakespeare, one_thread):
    """Measured (lr 5e-3, seed 0: the test's; seeds 1-3 alike): logits +0.01 (-0.03..+0.03), blocks +0.03, +0.09
    (-0.05..+0.11). A μP without the readout multiplier gives logits +0.79; without the hidden lr's 1/m, blocks
    +2.1; without the hidden init's m^-1/2, blocks +0.4 (each fails here)."""
    got = slopes(shakespeare, "mup")
    assert all(abs(s) < 0.25 for s in got.values()), got


def test_sp_logits_and_hidden_states_grow_with_width(shakespeare, one_thread):
    """Measured (seed 0; seeds 1-3 alike): logits +0.72 (+0.70..+0.76; at init already about +0.5: fixed-std
    tied embeddings read out unscaled), blocks +1.87, +1.90 (+1.39..+1.90: a fixed lr on fixed-std matrices)."""
    got = slopes(shakespeare, "sp")
    assert got["logits"] > 0.4 and got["block.1"] > 1.0, got


def test_heads_follow_the_width():
    spec = {"family": "llama3", "n_layers": 2, "d_model": 384, "attention": {"head_dim": 48, "n_kv_heads": None},
            "mlp": {"kind": "swiglu"}}
    cfg = width_config(spec, 96)
    assert (cfg.d_model, cfg.attention.n_heads, cfg.attention.head_dim, cfg.mlp.d_ff) == (96, 2, 48, 256)
    own = nested({**spec, "attention.head_dim": None, "attention.n_heads": 8})
    assert width_config(own, 96).attention.head_dim == 48  # the model's own head_dim
    with pytest.raises(ValueError, match="multiple of head_dim=48"):
        width_config(spec, 100)


def test_cli_writes_record_and_figure(tmp_path, monkeypatch, capsys, one_thread):
    from slm.cli.coordcheck import run

    monkeypatch.setenv("SLM_CACHE", str(tmp_path.parent / "slm-cache"))
    run(["model=debug", "train.lr=5e-3", "--widths", "16,32,64", "--steps=2", "--layers", "2", "--context", "16",
         "--batch", "4", "-o", str(tmp_path / "cc")])
    record = json.loads((tmp_path / "cc" / "coordcheck.json").read_text())
    settings = record["settings"]
    assert settings["widths"] == [16, 32, 64] and settings["schemes"] == ["sp", "mup"] and settings["steps"] == 2
    assert (settings["n_layers"], settings["context_length"], settings["batch_size"]) == (2, 16, 4)
    assert settings["vocab_size"] == 65  # the char tokenizer's, not the preset's
    assert len(record["rows"]) == 2 * 3 * 2 * len(layer_names(2))  # schemes x widths x steps x layers
    assert set(record["slopes_at_last_step"]) == {"sp", "mup"}
    assert (tmp_path / "cc" / "coordcheck.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    # the headline is about the layers the figure draws (2 layers: the middle block is the last), in its words
    header = next(line for line in out.splitlines() if "logits" in line and "slope" not in line).split("  ")
    assert [h.strip() for h in header if h.strip()] == ["embedding", "block 1 (last)", "logits"]
    for scheme in ("sp", "mup"):
        (line,) = [line for line in out.splitlines() if line.split()[:1] == [scheme]]
        slopes = record["slopes_at_last_step"][scheme]
        assert line.split()[1:] == [f"{round(slopes[layer], 2) + 0.0:+.2f}" for layer in ("embedding", "block.1",
                                                                                           "logits")]
    assert "block.0" not in out and "block 0" not in out  # not drawn, so not the headline


@pytest.mark.parametrize("argv, fragment", [
    (["model=llama3", "--schemes", "sp,nup"], "unknown parametrization 'nup'"),
    (["model=llama3", "--widths", "64,128"], "64 is not a multiple of the model's head_dim=48"),
    (["model=debug", "--steps", "0"], "--steps='0' is invalid"),
    (["model=debug"], "-o DIR is required"),
    (["model=debug", "--width", "64,128"], "unknown option '--width'"),
    (["model=dllm"], "model.attention.causal=false"),  # a bidirectional model has no causal LM loss
    (["model=ladder_linear"], "model.kind=linear"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, monkeypatch, capsys, argv, fragment):
    from slm.cli.coordcheck import run

    monkeypatch.setenv("SLM_CACHE", str(tmp_path.parent / "slm-cache"))
    out = tmp_path / "cc"
    with pytest.raises(SystemExit) as exit_:
        run([*argv, *([] if "-o DIR" in fragment else ["-o", str(out)])])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("slm-coordcheck: error:") and fragment in err[0], err
    assert not out.exists()
