"""One training step as slm-train computes it, shared by `LanguageModelModule.training_step` and the benchmarks'
bare loops (bench/train_overhead.py, loss_step.py, moe_step.py, gpu.py), so that a benchmark times the step
slm-train runs: the objective built from the run's settings (`objective_for`: train.objective with train.loss),
its terms for the step's noise seed (`step_loss`: the loss, and what is logged beside it), and, outside
Lightning, the backward, clipping, optimizer and schedule steps Lightning would run (`train_step`).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import nn

from slm.objectives import OBJECTIVES, Objective


def step_seed(seed: int, step: int) -> int:
    """The objective's noise seed for optimizer step `step` of a run seeded `seed` (a pure function of both)."""
    return (seed * 1_000_003 + step) % 2**63


def objective_for(train_cfg) -> Objective:
    """The run's objective (train.objective) with its head and loss settings (train.loss): what slm-train trains."""
    return OBJECTIVES.get(train_cfg.objective).from_train(train_cfg)


@dataclass
class StepLoss:
    """A training step's loss and what is logged beside it."""

    loss: torch.Tensor
    """The loss to back-propagate (a scalar with grad)."""
    terms: dict[str, torch.Tensor]
    """Its parts, detached, logged as train/<name>: lm_loss and the model's auxiliary terms (e.g. moe_balance)."""
    moe_load: torch.Tensor | None
    """A mixture of experts' per-expert load (layers, experts) for slm.training.routing.RoutingLoad; None without."""


def step_loss(objective: Objective, model: nn.Module, batch: torch.Tensor, *, seed: int, step: int,
              attention_block: int | None = None, rows: tuple[int, int] | None = None) -> StepLoss:
    """The objective's terms of `batch` (token windows (B, T + 1)) at optimizer step `step` of a run seeded `seed`:
    its noise drawn from step_seed(seed, step); `attention_block` the curriculum's block (None: the model's own);
    `rows` which rows of the step's batch this is (Objective.row_noise; None: all of them)."""
    extra = {} if attention_block is None else {"attention_block": attention_block}
    if rows is not None:
        extra["rows"] = rows
    terms = objective.terms(model, batch, seed=step_seed(seed, step), **extra)
    loss = terms.pop("loss")
    return StepLoss(loss, terms, terms.pop("moe_load", None))


def train_step(objective: Objective, model: nn.Module, batch: torch.Tensor, optimizer, *, seed: int = 0,
               step: int = 0, scheduler=None, grad_clip: float | None = None, params: list | None = None,
               autocast=None) -> torch.Tensor:
    """One optimizer step as Lightning runs LanguageModelModule's, without Lightning: step_loss (under `autocast`,
    a context manager such as Lightning's bf16-mixed; None: none), backward, the gradient norm clipped to
    `grad_clip` (None: computed, not clipped, as configure_gradient_clipping does), the optimizer's and the
    schedule's steps, the gradients cleared. `params`: the model's parameters (default: all). The loss, detached
    (nothing is read back to the host)."""
    with autocast if autocast is not None else nullcontext():
        loss = step_loss(objective, model, batch, seed=seed, step=step).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params if params is not None else model.parameters(),
                                   grad_clip if grad_clip is not None else float("inf"))
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()
