"""The preference losses' settings (`PreferenceSettings`, `train.preference`): which losses, their weights and
their constants. Standard library only, so a config reads it without loading torch; the losses themselves are in
slm.objectives.preference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from slm.settings import Settings, require, setting

LOSS_NAMES = ("dpo", "ipo", "hinge", "simpo", "orpo", "sft")
"""The preference losses (slm.objectives.preference.LOSSES has one function for each)."""
NEEDS_REFERENCE = ("dpo", "ipo", "hinge")
"""The losses that read the reference model's log-probs; simpo, orpo and sft are reference-free."""


@dataclass
class PreferenceSettings(Settings):
    """The preference loss: a weighted sum of the named losses (one loss: weight 1), and their constants."""

    loss: list[str] = setting(factory=lambda: ["dpo"], choices=LOSS_NAMES, each=True)
    """The losses summed (each once): dpo (with label_smoothing: cDPO), ipo (length-normalised, as TRL), hinge,
    simpo and orpo (reference-free), sft (the chosen completion's mean NLL), e.g. [dpo, sft]."""
    weights: list[float] | None = setting(None, ge=0, each=True, null="weight 1 for every loss")
    """One weight per loss, in the order of `loss` (e.g. [1.0, 0.2] for dpo + 0.2 sft); at least one > 0."""
    beta: float = setting(0.1, gt=0)
    """β of dpo, hinge and simpo (the reward scale), and ipo's τ (its margin is 1/(2τ)); the DPO paper uses 0.1,
    the SimPO paper 2 to 2.5."""
    label_smoothing: float = setting(0.0, ge=0, lt=0.5)
    """cDPO's ε, the assumed fraction of flipped labels: the dpo loss becomes (1 − ε)·dpo + ε·dpo of the swapped
    pair; 0 is plain DPO. Only with dpo."""
    simpo_gamma: float = setting(0.5, ge=0)
    """SimPO's target reward margin γ (in reward units: the loss is −log σ(β·Δ(average log-prob) − γ))."""
    orpo_lambda: float = setting(0.1, gt=0)
    """ORPO's λ, the weight of the odds-ratio term beside the chosen completion's NLL (TRL's ORPOConfig.beta)."""
    reference: Literal["cached", "frozen"] = "cached"
    """Where dpo, ipo and hinge get the reference's log-probs (the reference is train.init_from's weights): cached
    (computed once per records file and reference before training, kept on disk; no second model in memory) or
    frozen (a frozen copy of the starting model scores every batch)."""

    def check(self, key: str, root) -> None:
        weights = self.weights
        require(
            (len(self.loss) > 0, f"{key}.loss", self.loss, "at least one of: " + ", ".join(LOSS_NAMES)),
            (len(set(self.loss)) == len(self.loss), f"{key}.loss", self.loss, "each loss at most once"),
            (weights is None or len(weights) == len(self.loss), f"{key}.weights", weights,
             f"one weight per loss ({len(self.loss)}: {', '.join(self.loss)}), or null"),
            (weights is None or sum(weights) > 0, f"{key}.weights", weights, "at least one weight > 0"),
            (self.label_smoothing == 0 or "dpo" in self.loss, f"{key}.label_smoothing", self.label_smoothing,
             f"0 unless {key}.loss includes dpo (cDPO smooths the dpo loss only)"),
        )

    @property
    def needs_reference(self) -> bool:
        """Whether a loss reads the reference model's log-probs (training must precompute them or keep a copy)."""
        return any(name in NEEDS_REFERENCE for name in self.loss)

    def weighted(self) -> list[tuple[str, float]]:
        """(loss, weight) in the order of `loss`."""
        return [(name, float(w)) for name, w in zip(self.loss, self.weights or [1.0] * len(self.loss))]


def preference_settings(node, key: str = "train.preference") -> PreferenceSettings:
    """`node` (a mapping, None for the defaults, or PreferenceSettings) as checked PreferenceSettings; an unknown
    field or a bad value is one SettingsError naming `<key>.<field>`."""
    out = PreferenceSettings.from_node(node, key)
    out.settle(key)
    return out
