"""The objective interface and its registry."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from slm.components.registry import Registry
from slm.objectives.linear_ce import LossPath, LossSettings, choose_path

OBJECTIVES: Registry[type["Objective"]] = Registry("objective")

NLL_KINDS = {"nll": "exact negative log-likelihood (nats/token)",
             "nelbo": "negative ELBO (nats/token): an upper bound on the NLL, not comparable with an exact NLL"}


class ObjectiveError(ValueError):
    """A model the objective cannot train; the message says why and what to set."""


class Objective:
    """Turns a batch of token windows (B, T + 1) into a training loss and validation NLL sums."""

    needs_mask: ClassVar[bool] = False
    """The tokenizer must reserve a mask token (model.embedding.mask_token_id is set from it)."""
    row_noise: ClassVar[bool] = False
    """terms() draws random noise per row and takes `rows=(first, total)`: the batch it is given is rows first..
    of a batch of `total` rows, whose noise it draws whole and slices, so a micro-batch or a device's share gets
    the noise it would get in the whole batch (data parallel and accumulation train exactly like one batch)."""
    nll_kind: ClassVar[str] = "nll"
    """What `nll` measures (a key of NLL_KINDS): recorded with val_nll so a bound is never read as an NLL."""

    weighted: ClassVar[bool] = False
    """Its loss weights each position and excludes a token (masked diffusion): Liger's kernel cannot compute it."""
    records: ClassVar[str | None] = None
    """What it trains on: None, token windows (B, T + 1); "sft" or "preference", the batches of data.records
    (slm.data.records: a dict of right-padded rows and their scored positions)."""

    @classmethod
    def from_train(cls, train_cfg) -> "Objective":
        """The objective with the run's settings (train.loss; an objective with a group of its own reads it too)."""
        return cls(train_cfg.loss)

    def __init__(self, loss: LossSettings | None = None):
        self.loss_settings = loss
        """`train.loss`: how the head and the cross-entropy are computed (slm.objectives.linear_ce); None: the
        plain path (the model's whole forward, then the loss), as tools that hook the logits (slm.training.coordcheck)
        need."""
        self._paths: dict[tuple[type, torch.device], LossPath] = {}

    def compile(self) -> None:
        """train.compile: compile the objective's `_score` (the model's forward, head and loss as one function; the
        objective's noise and bookkeeping stay eager). An objective without one keeps only the model compiled."""
        if hasattr(self, "_score"):
            self._score = torch.compile(self._score)

    def loss_path(self, model: nn.Module, device: torch.device) -> LossPath:
        """The head and loss of this model on `device` (plain, chunked or liger: linear_ce.choose_path), chosen
        from train.loss the first time and kept: every call of terms and nll runs it."""
        key = (type(getattr(model, "_orig_mod", model)), torch.device(device))
        path = self._paths.get(key)
        if path is None:
            path = self._paths[key] = choose_path(self.loss_settings, model, device)
        return path

    def scored_rows(self, batch: int, context: int) -> int:
        """Positions the loss of a batch of `batch` windows of `context` tokens scores (the head's rows)."""
        return batch * context

    def loss_impl(self, model: nn.Module, device: torch.device, batch: tuple[int, int]) -> str:
        """Which path the training loss of a batch of token windows of shape `batch` (B, T + 1) takes on `device`
        (the record's `loss_impl`: plain, chunked or liger, with why where it is not the one asked for)."""
        rows = self.scored_rows(batch[0], batch[1] - 1)
        vocab = getattr(model, "_orig_mod", model).cfg.vocab_size
        return self.loss_path(model, device).describe(rows, vocab, weighted=self.weighted)

    def check(self, model_cfg) -> None:
        """Raise ObjectiveError for a model this objective cannot train (checked before training)."""

    def terms(self, model: nn.Module, tokens: torch.Tensor, seed: int | None = None) -> dict[str, torch.Tensor]:
        """The training loss of the batch, "loss" (a scalar with grad), and what it is made of, detached, for
        the logs: "lm_loss" and the model's auxiliary terms (e.g. a mixture of experts' balancing loss, which
        "loss" includes with its weight, and its per-expert load). `seed` fixes the objective's own noise
        (the trainer passes a function of the run's seed and the step, so a resumed run draws the same noise;
        None: the global generator)."""
        raise NotImplementedError

    def loss(self, model: nn.Module, tokens: torch.Tensor, seed: int | None = None) -> torch.Tensor:
        """Mean training loss over the batch (a scalar with grad)."""
        return self.terms(model, tokens, seed)["loss"]

    def nll(self, model: nn.Module, tokens: torch.Tensor, seed: int | None = None) -> tuple[torch.Tensor, int]:
        """(summed negative log-likelihood, or its bound, in nats; number of tokens it covers) for validation.
        `seed` makes a stochastic estimate repeatable (validation passes the batch index)."""
        raise NotImplementedError

    def validate(self, model: nn.Module, batch, seed: int | None = None,
                 **kwargs) -> tuple[torch.Tensor, int, dict[str, tuple[torch.Tensor, int]]]:
        """`nll`'s (sum, count) and what else validation reports, {name: (sum, count)} (each averaged over the
        validation as sum / count; none here)."""
        total, count = self.nll(model, batch, seed=seed, **kwargs)
        return total, count, {}


def with_aux(lm_loss: torch.Tensor, aux: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """terms() from a language-modelling loss and the model's auxiliary terms: those named "loss/<name>"
    are added to the loss (logged as <name>_loss), the rest are metrics."""
    extra = [value for name, value in aux.items() if name.startswith("loss/")]
    terms = {"loss": lm_loss + sum(extra) if extra else lm_loss, "lm_loss": lm_loss.detach()}
    for name, value in aux.items():
        key = name.removeprefix("loss/") + "_loss" if name.startswith("loss/") else name
        terms[key] = value.detach()
    return terms
