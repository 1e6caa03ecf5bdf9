"""The μP coordinate check (Yang et al. 2022, arXiv 2203.03466, Appendix D.1; microsoft/mup's `get_coord_data`):
train a model for a few steps at several widths and record the size of its activations at each step.

Under a correct μP every layer's RMS stays about constant as the width grows, at every step; under the standard
parametrization (a width-independent learning rate) the logits, and after a few steps the hidden states, grow
with width. `measure` gives tidy rows {width, seed, step, layer, rms}; `average` and `slope` summarise them.
Plain PyTorch: the CLI is slm.cli.coordcheck.
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch

from slm.model import ModelConfig, build_model, config_from_spec
from slm.model.budget import PRESET_KEYS, SOLVER_KEYS, heads_follow_width
from slm.model.config import upgrade_fields
from slm.objectives import OBJECTIVES
from slm.training.config import TrainConfig
from slm.training.optim import build_optimizer


def width_config(spec: dict, width: int) -> ModelConfig:
    """The model of `spec` at d_model = width, heads following the width through attention.head_dim (as
    slm.model.budget's solver moves a width); sizes left None in the spec (mlp.d_ff, attention.n_kv_heads) are
    derived at that width."""
    # d_model is given, not solved; a preset's objective is not a network field
    fields = {k: v for k, v in upgrade_fields(spec).items() if k not in SOLVER_KEYS and k not in PRESET_KEYS}
    return config_from_spec({**heads_follow_width(fields), "d_model": width})


def layer_names(n_layers: int) -> list[str]:
    """Where `measure` reads activations, input to output: the embedding (the first block's input: token
    embeddings, scaled where the model scales them, plus learned positions), each block's output, the final
    norm's output and the logits."""
    return ["embedding", *(f"block.{i}" for i in range(n_layers)), "final_norm", "logits"]


def measure(spec: dict, widths: list[int], train_cfg: TrainConfig, batches: list[torch.Tensor], steps: int,
            seeds=(0,), device: str | torch.device = "cpu") -> list[dict]:
    """Rows {width, seed, step, layer, rms}: for each width and seed, the model of `spec` at that width (torch
    seeded with the seed) trained with the causal LM loss on `batches` (token windows (B, T+1), used in turn)
    by train_cfg's optimizer and grad clip at a constant lr; at steps 1..steps, the RMS of each layer's output
    (`layer_names`; a block applied more than once: its last application) in that step's forward, before its
    update."""
    objective = OBJECTIVES.get("causal_lm")()
    configs = [width_config(spec, w) for w in widths]  # a bad width fails before anything is trained
    for cfg in configs:
        objective.check(cfg)  # a bidirectional model or a window model: one line
    batches = [b.to(device) for b in batches]
    rows = []
    for cfg in configs:
        for seed in seeds:
            torch.manual_seed(seed)
            model = build_model(cfg).to(device).train()
            optimizer = build_optimizer(model, train_cfg)
            seen: dict[str, torch.Tensor] = {}
            handles = record_into(model, seen)
            for step in range(1, steps + 1):
                seen.clear()
                loss = objective.terms(model, batches[(step - 1) % len(batches)])["loss"]
                rows += [{"width": cfg.d_model, "seed": seed, "step": step, "layer": name, "rms": float(seen[name])}
                         for name in layer_names(cfg.n_layers) if name in seen]
                if step == steps:
                    break  # nothing reads the last update
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if train_cfg.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
                optimizer.step()
            for handle in handles:
                handle.remove()
    return rows


def record_into(model: torch.nn.Module, seen: dict) -> list:
    """Forward hooks that put each layer's RMS into `seen` (under its `layer_names` name); their handles."""

    def keep(name):
        def hook(module, args, out):
            seen[name] = rms(out[0] if isinstance(out, tuple) else out)  # the model's own: (logits, aux)
        return hook

    def first_input(module, args):
        if "embedding" not in seen:  # block 0's first application reads the embedding
            seen["embedding"] = rms(args[0])

    modules = {"final_norm": model.norm, "logits": model, **{f"block.{i}": b for i, b in enumerate(model.blocks)}}
    handles = [m.register_forward_hook(keep(name)) for name, m in modules.items() if m is not None]
    return [*handles, model.blocks[0].register_forward_pre_hook(first_input)]


def rms(x: torch.Tensor) -> torch.Tensor:
    """sqrt(mean(x^2)) over every element, in float32."""
    return x.detach().float().pow(2).mean().sqrt()


def average(rows: list[dict]) -> list[dict]:
    """Rows {width, step, layer, rms}: the mean RMS over seeds."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        groups[(r["width"], r["step"], r["layer"])].append(r["rms"])
    return [{"width": w, "step": s, "layer": name, "rms": sum(v) / len(v)} for (w, s, name), v in groups.items()]


def slope(rows: list[dict], layer: str = "logits", step: int | None = None) -> float:
    """Least-squares slope of log(rms) against log(width) for one layer at one step (None: the last), from
    per-seed or averaged rows: about 0 under μP, > 0 where the layer grows with width."""
    step = max(r["step"] for r in rows) if step is None else step
    points = [(math.log(r["width"]), math.log(r["rms"])) for r in average(rows)
              if r["layer"] == layer and r["step"] == step]
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
