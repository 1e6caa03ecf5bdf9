"""AdamW with decoupled weight decay on matrices only (not norms, biases or, by default, embeddings)."""

from __future__ import annotations

import torch
from torch import nn

from slm.training.config import TrainConfig


def param_groups(model: nn.Module, cfg: TrainConfig) -> list[dict]:
    """Two groups: weight-decayed matrices, and everything else."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    embeddings |= {id(p) for p in getattr(model, "position", nn.Module()).parameters()}
    decay, no_decay = [], []
    for p in model.parameters():  # tied weights are yielded once
        if not p.requires_grad:
            continue
        is_embedding = id(p) in embeddings
        if p.ndim >= 2 and (cfg.decay_embeddings or not is_embedding):
            decay.append(p)
        else:
            no_decay.append(p)
    return [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    fused = next(model.parameters()).is_cuda
    return torch.optim.AdamW(param_groups(model, cfg), lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, fused=fused or None)
