"""Supervised fine-tuning on prompt/completion records (data.records): the next-token loss on the completion's
tokens only, the prompt context."""

from __future__ import annotations

import torch
from torch import nn

from slm.objectives.base import OBJECTIVES, Objective, with_aux
from slm.objectives.completion_logprobs import check_causal


@OBJECTIVES.register("sft")
class SFT(Objective):
    """The mean cross-entropy over every completion token of the batch (prompt and padding not scored); validation
    gives the completions' summed NLL and their token count. A batch is slm.data.records' dict (ids, scored)."""

    records = "sft"

    def check(self, model_cfg) -> None:
        check_causal(model_cfg)

    def scored_rows(self, batch: int, context: int) -> int:
        return batch * context  # at most: the head runs on the completion positions only

    def _completion_loss(self, model: nn.Module, batch: dict, reduction: str, aux: bool) -> tuple[torch.Tensor, dict]:
        """The cross-entropy of the completion tokens (`reduction` over them) and the model's aux terms: the loss
        path's head and loss on the scored positions only (the prompt's and the padding's never reach the head;
        with the plain path the model's whole logits are computed, then read there)."""
        ids, scored = batch["ids"], batch["scored"]
        path = self.loss_path(model, ids.device)
        out, terms = path.forward(model, ids[:, :-1], aux=aux)  # (N, T - 1, d or V)
        return path(model, out[scored], ids[:, 1:][scored], reduction=reduction), terms  # (S, .) against (S,)

    def terms(self, model: nn.Module, batch: dict, seed: int | None = None) -> dict[str, torch.Tensor]:
        return with_aux(*self._completion_loss(model, batch, "mean", True))

    def nll(self, model: nn.Module, batch: dict, seed: int | None = None) -> tuple[torch.Tensor, int]:
        return self._completion_loss(model, batch, "sum", False)[0], int(batch["scored"].sum())
