"""Preference optimisation on prompt/chosen/rejected records (data.records): `train.objective=preference`, the
weighted sum of the losses train.preference.loss names (dpo, ipo, hinge, simpo, orpo, sft: slm.objectives.preference).

Each step scores the batch's 2b rows (b chosen completions, then b rejected) in one forward (the head on the
completion positions only: completion_logprobs.sequence_logprobs). The losses that need a reference (dpo, ipo, hinge)
read its log-probs from the batch (`ref`: precomputed once per records file and reference, the cache of
slm.objectives.reference_cache) or, with train.preference.reference=frozen, from a frozen copy of the starting
weights (`reference`, set by the trainer) run on the same rows without grad. Logged beside the loss: each loss's
part, the chosen and rejected log-probs (summed), their implicit rewards, the margin and the accuracy (the share of
pairs whose chosen reward is the higher): a chosen log-prob that falls while the margin grows is likelihood
displacement. Validation's NLL is the chosen completions' (per token, exact); the same pair metrics are reported
beside it.
"""

from __future__ import annotations

import torch
from torch import nn

from slm.objectives.base import OBJECTIVES, Objective
from slm.objectives.completion_logprobs import check_causal, sequence_logprobs
from slm.objectives.preference import Pairs, combined, pair_metrics
from slm.objectives.preference_settings import PreferenceSettings

METRIC_NAMES = {"logps/chosen": "chosen_logps", "logps/rejected": "rejected_logps", "rewards/chosen": "chosen_reward",
                "rewards/rejected": "rejected_reward", "rewards/margins": "reward_margin",
                "rewards/accuracies": "reward_accuracy"}
"""TRL's metric names (pair_metrics) as slm logs them (train/<name>, val_<name>)."""


@OBJECTIVES.register("preference")
class Preference(Objective):
    records = "preference"

    def __init__(self, loss=None, preference: PreferenceSettings | None = None):
        super().__init__(loss)
        self.settings = preference or PreferenceSettings()
        self.reference: nn.Module | None = None
        """train.preference.reference=frozen: the frozen starting model (eval mode, no grad), set by the trainer."""

    @classmethod
    def from_train(cls, train_cfg) -> "Preference":
        return cls(train_cfg.loss, train_cfg.preference)

    def check(self, model_cfg) -> None:
        check_causal(model_cfg)

    def pairs(self, model: nn.Module, batch: dict) -> Pairs:
        """The batch's Pairs: the policy's log-probs with grad, the reference's where the losses need them."""
        sums, counts = sequence_logprobs(model, batch["ids"], batch["scored"])  # (2b,) each
        b = sums.shape[0] // 2
        ref = None
        if self.settings.needs_reference:
            ref = batch.get("ref")
            if ref is None:
                if self.reference is None:
                    raise RuntimeError("the preference losses need the reference's log-probs: the batch has none "
                                       "(ref) and no frozen reference model was set")
                if next(self.reference.parameters()).device != sums.device:
                    self.reference.to(sums.device)
                with torch.no_grad():
                    ref = sequence_logprobs(self.reference, batch["ids"], batch["scored"])[0]
            ref = ref.to(sums)
        return Pairs(sums[:b], sums[b:], counts[:b], counts[b:],
                     None if ref is None else ref[:b], None if ref is None else ref[b:])

    def terms(self, model: nn.Module, batch: dict, seed: int | None = None) -> dict[str, torch.Tensor]:
        pairs = self.pairs(model, batch)
        out, parts = combined(pairs, self.settings)
        metrics = {METRIC_NAMES[k]: v for k, v in pair_metrics(pairs, out).items()}
        return {"loss": out.loss.mean(), **{f"{name}_loss": v for name, v in parts.items()}, **metrics}

    def nll(self, model: nn.Module, batch: dict, seed: int | None = None) -> tuple[torch.Tensor, int]:
        total, count, _ = self.validate(model, batch, seed)
        return total, count

    def validate(self, model: nn.Module, batch: dict, seed: int | None = None, **kwargs):
        pairs = self.pairs(model, batch)
        out, parts = combined(pairs, self.settings)
        b = pairs.chosen.shape[0]
        margins = out.chosen_rewards - out.rejected_rewards
        extras = {"pref_loss": (out.loss.detach().sum(), b), "chosen_logps": (pairs.chosen.detach().sum(), b),
                  "rejected_logps": (pairs.rejected.detach().sum(), b), "reward_margin": (margins.sum(), b),
                  "reward_accuracy": ((margins > 0).float().sum(), b)}
        return -pairs.chosen.detach().sum(), int(pairs.chosen_tokens.sum()), extras
