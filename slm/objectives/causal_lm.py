"""Next-token prediction: predict tokens[:, 1:] from tokens[:, :-1]."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from slm.model.networks import NETWORKS
from slm.objectives.base import OBJECTIVES, Objective, ObjectiveError, with_aux
from slm.objectives.linear_ce import head_loss


@OBJECTIVES.register("causal_lm")
class CausalLM(Objective):
    def check(self, model_cfg) -> None:
        if not NETWORKS.get(model_cfg.kind).every_position:
            raise ObjectiveError(f"train.objective=causal_lm scores every position, but model.kind="
                                 f"{model_cfg.kind!r} predicts only the token after its window: use "
                                 "train.objective=last_token")
        if not model_cfg.causal:
            raise ObjectiveError("train.objective=causal_lm needs a causal model, but model.causal=false: a "
                                 "bidirectional model sees the tokens it is asked to predict (masked diffusion: "
                                 "train.objective=mdlm)")

    def terms(self, model: nn.Module, tokens: torch.Tensor, seed: int | None = None) -> dict[str, torch.Tensor]:
        inputs, targets = tokens[:, :-1], tokens[:, 1:]  # (B, T) each
        return with_aux(*self._score(model, inputs, targets, self._impl(model, tokens.device), self._chunk(), True))

    def nll(self, model: nn.Module, tokens: torch.Tensor, seed: int | None = None) -> tuple[torch.Tensor, int]:
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        total, _ = self._score(model, inputs, targets, self._impl(model, tokens.device), self._chunk(), False)
        return total, targets.numel()

    def _score(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, impl: str, chunk: int,
               train: bool) -> tuple[torch.Tensor, dict]:
        """(the mean cross-entropy and the model's aux terms when training; the summed one and {} for validation)
        by `impl`: plain (all logits, float32), else the head and loss together (slm.objectives.linear_ce)."""
        if impl == "plain":
            if train:
                logits, aux = model(inputs, return_aux=True)
                return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten()), aux  # float32 softmax
            logits = model(inputs).float()
            return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum"), {}
        out = model(inputs, return_aux=train, head=False)
        h, aux = out if train else (out, {})
        return head_loss(model, h, targets, impl, chunk, reduction="mean" if train else "sum"), aux
