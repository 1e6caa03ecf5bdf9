"""Preference-optimisation losses as pure functions of per-sequence log-probs (plain PyTorch).

Each loss takes `Pairs` (B pairs: the policy's completion log-probs of the chosen and rejected completions, summed
over the completion's tokens, with the completions' token counts and, for the losses that need them, the reference
model's log-probs) and returns `PairLoss`: the loss of each pair (B,) and each completion's implicit reward (B,),
detached, so training can log the chosen and rejected log-probs, rewards, margins and accuracy (`pair_metrics`).
A falling chosen log-prob while the margin grows (likelihood displacement) is the known failure to watch.

- `dpo`, arXiv 2305.18290: −log σ(β·Δ), Δ = (log π(y_w) − log π(y_l)) − (log π_ref(y_w) − log π_ref(y_l)), over
  summed log-probs; with label smoothing ε (cDPO): (1 − ε)·(−log σ(β·Δ)) + ε·(−log σ(−β·Δ)).
- `ipo`, arXiv 2310.12036 (Eq. 17): (Δ' − 1/(2β))², β its τ. Δ' is length-normalised as TRL computes it: each
  log-ratio divided by its completion's token count (TRL's DPOTrainer, confirmed with the IPO authors); OpenRLHF
  uses the summed log-ratios, so a β tuned in one does not transfer to the other.
- `hinge` (SLiC, arXiv 2305.10425): max(0, 1 − β·Δ).
- `simpo`, arXiv 2405.14734, reference-free: −log σ(β·(avg log π(y_w) − avg log π(y_l)) − γ), average log-probs
  (summed / token count), γ the target reward margin.
- `orpo`, arXiv 2403.07691, reference-free: NLL(y_w) − λ·log σ(log odds(y_w) − log odds(y_l)), from average
  log-probs p, odds = p / (1 − p); NLL(y_w) is the chosen completion's mean NLL (TRL's ORPOTrainer also counts the
  prompt's tokens in it).
- `sft`: the chosen completion's mean NLL, −log π(y_w) / |y_w| (the usual guard beside dpo against a falling
  chosen log-prob).
- `combined`: a weighted sum of the above (PreferenceSettings.loss and .weights).

Implicit rewards: β·(log π − log π_ref) for dpo, ipo and hinge (summed log-probs, as TRL logs them); β·(average
log π) for simpo, λ·(average log π) for orpo (TRL's CPO and ORPO trainers' logs); the average log-probs for sft.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from slm.objectives.preference_settings import PreferenceSettings


class Pairs(NamedTuple):
    """B preference pairs' log-probs: completions only (the prompt's tokens are not scored), summed per sequence."""

    chosen: Tensor  # (B,) log π(y_w | x)
    rejected: Tensor  # (B,) log π(y_l | x)
    chosen_tokens: Tensor  # (B,) |y_w|, completion tokens (counts below 1 are read as 1)
    rejected_tokens: Tensor  # (B,) |y_l|
    ref_chosen: Tensor | None = None  # (B,) log π_ref(y_w | x): precomputed, or from a frozen copy; no grad
    ref_rejected: Tensor | None = None  # (B,) log π_ref(y_l | x)

    def chosen_mean(self) -> Tensor:
        """(B,) the chosen completions' average log-prob per token."""
        return self.chosen / self.chosen_tokens.clamp(min=1).to(self.chosen.dtype)

    def rejected_mean(self) -> Tensor:
        """(B,) the rejected completions' average log-prob per token."""
        return self.rejected / self.rejected_tokens.clamp(min=1).to(self.rejected.dtype)

    def log_ratios(self, loss: str) -> tuple[Tensor, Tensor]:
        """((B,), (B,)) log π − log π_ref of the chosen and of the rejected; a ValueError naming `loss` without a
        reference."""
        if self.ref_chosen is None or self.ref_rejected is None:
            raise ValueError(f"{loss} needs the reference model's log-probs (Pairs.ref_chosen, Pairs.ref_rejected)")
        return self.chosen - self.ref_chosen, self.rejected - self.ref_rejected


class PairLoss(NamedTuple):
    """A loss per pair, with the implicit rewards its training logs."""

    loss: Tensor  # (B,) with grad; training minimises its mean
    chosen_rewards: Tensor  # (B,) detached
    rejected_rewards: Tensor  # (B,) detached


def _rewarded(loss: Tensor, chosen: Tensor, rejected: Tensor, scale: float) -> PairLoss:
    return PairLoss(loss, scale * chosen.detach(), scale * rejected.detach())


def dpo(pairs: Pairs, beta: float = 0.1, label_smoothing: float = 0.0) -> PairLoss:
    """DPO (arXiv 2305.18290, Eq. 7) over summed log-probs; label_smoothing ε > 0 is cDPO (ε of the labels assumed
    flipped). Rewards β·(log π − log π_ref)."""
    chosen, rejected = pairs.log_ratios("dpo")
    logits = beta * (chosen - rejected)  # (B,)
    loss = -(1 - label_smoothing) * F.logsigmoid(logits)
    if label_smoothing:
        loss = loss - label_smoothing * F.logsigmoid(-logits)
    return _rewarded(loss, chosen, rejected, beta)


def ipo(pairs: Pairs, beta: float = 0.1) -> PairLoss:
    """IPO (arXiv 2310.12036, Eq. 17), β its τ: (Δ' − 1/(2β))², each log-ratio divided by its completion's token
    count, as TRL does (OpenRLHF does not: β does not transfer between them). Rewards β·(log π − log π_ref),
    unnormalised."""
    chosen, rejected = pairs.log_ratios("ipo")
    delta = (chosen / pairs.chosen_tokens.clamp(min=1).to(chosen.dtype)
             - rejected / pairs.rejected_tokens.clamp(min=1).to(rejected.dtype))  # (B,)
    return _rewarded((delta - 1 / (2 * beta)) ** 2, chosen, rejected, beta)


def hinge(pairs: Pairs, beta: float = 0.1) -> PairLoss:
    """The hinge loss of SLiC (arXiv 2305.10425) on DPO's Δ: max(0, 1 − β·Δ). Rewards β·(log π − log π_ref)."""
    chosen, rejected = pairs.log_ratios("hinge")
    return _rewarded(torch.relu(1 - beta * (chosen - rejected)), chosen, rejected, beta)


def simpo(pairs: Pairs, beta: float = 2.0, gamma: float = 0.5) -> PairLoss:
    """SimPO (arXiv 2405.14734, Eq. 6), reference-free: −log σ(β·(avg log π(y_w) − avg log π(y_l)) − γ). Rewards
    β·(average log π)."""
    chosen, rejected = pairs.chosen_mean(), pairs.rejected_mean()
    return _rewarded(-F.logsigmoid(beta * (chosen - rejected) - gamma), chosen, rejected, beta)


def log1mexp(x: Tensor) -> Tensor:
    """log(1 − exp(x)) for x < 0, without cancellation (log1p below −ln 2, log(−expm1) above)."""
    return torch.where(x < -0.6931471805599453, torch.log1p(-torch.exp(x)), torch.log(-torch.expm1(x)))


def odds_ratio(chosen_mean: Tensor, rejected_mean: Tensor) -> Tensor:
    """(B,) ORPO's log σ(log odds(y_w) − log odds(y_l)) from average log-probs (arXiv 2403.07691, Eqs. 4 and 7),
    odds(y) = p / (1 − p); needs average log-probs < 0."""
    log_odds = (chosen_mean - rejected_mean) - (log1mexp(chosen_mean) - log1mexp(rejected_mean))
    return F.logsigmoid(log_odds)


def orpo(pairs: Pairs, lam: float = 0.1) -> PairLoss:
    """ORPO (arXiv 2403.07691, Eq. 6), reference-free: the chosen completion's mean NLL − λ·odds_ratio. Rewards
    λ·(average log π), as TRL logs them."""
    chosen, rejected = pairs.chosen_mean(), pairs.rejected_mean()
    return _rewarded(-chosen - lam * odds_ratio(chosen, rejected), chosen, rejected, lam)


def sft(pairs: Pairs) -> PairLoss:
    """The chosen completion's mean NLL per token, −log π(y_w) / |y_w| (the rejected one is not trained). Rewards
    the average log-probs."""
    chosen, rejected = pairs.chosen_mean(), pairs.rejected_mean()
    return _rewarded(-chosen, chosen, rejected, 1.0)


LOSSES: dict[str, Callable[[Pairs, PreferenceSettings], PairLoss]] = {
    "dpo": lambda p, s: dpo(p, s.beta, s.label_smoothing),
    "ipo": lambda p, s: ipo(p, s.beta),
    "hinge": lambda p, s: hinge(p, s.beta),
    "simpo": lambda p, s: simpo(p, s.beta, s.simpo_gamma),
    "orpo": lambda p, s: orpo(p, s.orpo_lambda),
    "sft": lambda p, s: sft(p),
}
"""Each loss of PreferenceSettings.loss (its keys are LOSS_NAMES), called with the settings' constants."""


def combined(pairs: Pairs, settings: PreferenceSettings) -> tuple[PairLoss, dict[str, Tensor]]:
    """The weighted sum of `settings.loss` (per pair), with the rewards of the first loss listed, and each loss's
    mean over the pairs, detached, by name (for the logs)."""
    total, parts, first = None, {}, None
    for name, weight in settings.weighted():
        out = LOSSES[name](pairs, settings)
        if first is None:
            first = out
        parts[name] = out.loss.detach().mean()
        total = weight * out.loss if total is None else total + weight * out.loss
    return PairLoss(total, first.chosen_rewards, first.rejected_rewards), parts


def pair_metrics(pairs: Pairs, out: PairLoss) -> dict[str, Tensor]:
    """Means over the pairs, detached, under TRL's names: logps/chosen, logps/rejected (summed log-probs),
    rewards/chosen, rewards/rejected, rewards/margins, rewards/accuracies (the fraction of pairs whose chosen
    reward is the higher)."""
    margins = out.chosen_rewards - out.rejected_rewards
    return {"logps/chosen": pairs.chosen.detach().mean(), "logps/rejected": pairs.rejected.detach().mean(),
            "rewards/chosen": out.chosen_rewards.mean(), "rewards/rejected": out.rejected_rewards.mean(),
            "rewards/margins": margins.mean(), "rewards/accuracies": (margins > 0).to(margins.dtype).mean()}
