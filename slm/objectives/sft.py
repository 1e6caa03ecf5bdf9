"""Supervised fine-tuning on prompt/completion records (data.records): the next-token loss on the completion's
tokens only, the prompt context. Validation adds two accuracies of greedy decoding under teacher forcing (the
argmax of each completion position's logits against its target): per completion token (val_token_acc) and per
completion, every token right (val_exact_acc)."""

from __future__ import annotations

import torch
from torch import nn

from slm.objectives.base import OBJECTIVES, Objective, with_aux
from slm.objectives.completion_logprobs import HEAD_CHUNK_ROWS, check_causal


@OBJECTIVES.register("sft")
class SFT(Objective):
    """The mean cross-entropy over every completion token of the batch (prompt and padding not scored); validation
    gives the completions' summed NLL and their token count, and the accuracies `token_acc` and `exact_acc`. A batch
    is slm.data.records' dict (ids, scored)."""

    records = "sft"

    def check(self, model_cfg) -> None:
        check_causal(model_cfg)

    def scored_rows(self, batch: int, context: int) -> int:
        return batch * context  # at most: the head runs on the completion positions only

    def _completion_loss(self, model: nn.Module, batch: dict, reduction: str, aux: bool,
                         hits: list | None = None) -> tuple[torch.Tensor, dict]:
        """The cross-entropy of the completion tokens (`reduction` over them) and the model's aux terms: the loss
        path's head and loss on the scored positions only (the prompt's and the padding's never reach the head;
        with the plain path the model's whole logits are computed, then read there). `hits`: a list that gets
        (S,) bool, whether each scored position's argmax is its target."""
        ids, scored = batch["ids"], batch["scored"]
        path = self.loss_path(model, ids.device)
        out, terms = path.forward(model, ids[:, :-1], aux=aux)  # (N, T - 1, d or V)
        rows, targets = out[scored], ids[:, 1:][scored]  # (S, d or V), (S,)
        if hits is not None:
            hits.append(_argmax_hits(model, rows, targets, logits=path.name == "plain"))
        return path(model, rows, targets, reduction=reduction), terms

    def terms(self, model: nn.Module, batch: dict, seed: int | None = None) -> dict[str, torch.Tensor]:
        return with_aux(*self._completion_loss(model, batch, "mean", True))

    def nll(self, model: nn.Module, batch: dict, seed: int | None = None) -> tuple[torch.Tensor, int]:
        return self._completion_loss(model, batch, "sum", False)[0], int(batch["scored"].sum())

    def validate(self, model: nn.Module, batch: dict, seed: int | None = None, **kwargs):
        """nll's (sum, count), and {"token_acc": (right tokens, tokens), "exact_acc": (right completions, rows)}."""
        hits: list[torch.Tensor] = []
        total = self._completion_loss(model, batch, "sum", False, hits)[0]
        scored = batch["scored"]
        row = torch.arange(scored.shape[0], device=scored.device)[:, None].expand_as(scored)[scored]  # (S,)
        wrong = torch.zeros(scored.shape[0], device=scored.device).index_add(0, row, (~hits[0]).float())  # (N,)
        count = int(scored.sum())
        return total, count, {"token_acc": (hits[0].float().sum(), count),
                              "exact_acc": ((wrong == 0).float().sum(), scored.shape[0])}


def _argmax_hits(model: nn.Module, rows: torch.Tensor, targets: torch.Tensor, logits: bool) -> torch.Tensor:
    """(S,) whether the argmax of each row's logits is its target; `rows` are the logits (logits=True) or the final
    hidden states, put through the model's head HEAD_CHUNK_ROWS at a time (a large vocabulary's logits are never
    whole)."""
    with torch.no_grad():
        if logits:
            return rows.argmax(-1) == targets
        head = getattr(model, "_orig_mod", model).head
        return torch.cat([head(rows[lo:lo + HEAD_CHUNK_ROWS]).argmax(-1) == targets[lo:lo + HEAD_CHUNK_ROWS]
                          for lo in range(0, rows.shape[0], HEAD_CHUNK_ROWS)])
