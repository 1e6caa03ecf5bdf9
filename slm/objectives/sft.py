"""Supervised fine-tuning on prompt/completion records (data.records): the next-token loss on the completion's
tokens only, the prompt context."""

from __future__ import annotations

import torch
from torch import nn

from slm.objectives.base import OBJECTIVES, Objective, with_aux
from slm.objectives.completion_logprobs import check_causal
from slm.objectives.linear_ce import IGNORE_INDEX


@OBJECTIVES.register("sft")
class SFT(Objective):
    """The mean cross-entropy over every completion token of the batch (prompt and padding not scored); validation
    gives the completions' summed NLL and their token count. A batch is slm.data.records' dict (ids, scored)."""

    records = "sft"

    def check(self, model_cfg) -> None:
        check_causal(model_cfg)

    def scored_rows(self, batch: int, context: int) -> int:
        return batch * context  # the head runs on every position (the prompt's are ignored)

    def _targets(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        ids, scored = batch["ids"], batch["scored"]
        return ids[:, :-1], ids[:, 1:].masked_fill(~scored, IGNORE_INDEX)  # (N, T - 1) each

    def terms(self, model: nn.Module, batch: dict, seed: int | None = None) -> dict[str, torch.Tensor]:
        inputs, targets = self._targets(batch)
        path = self.loss_path(model, inputs.device)
        out, aux = path.forward(model, inputs, aux=True)
        return with_aux(path(model, out, targets, reduction="mean"), aux)

    def nll(self, model: nn.Module, batch: dict, seed: int | None = None) -> tuple[torch.Tensor, int]:
        inputs, targets = self._targets(batch)
        path = self.loss_path(model, inputs.device)
        out, _ = path.forward(model, inputs)
        return path(model, out, targets, reduction="sum"), int(batch["scored"].sum())
