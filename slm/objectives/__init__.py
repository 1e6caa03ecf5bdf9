"""Training objectives: a loss over a model's outputs for a batch of token windows.

An objective is one class in the OBJECTIVES registry; the trainer calls `terms` for training and `nll` for
validation, so a new objective needs no change to the trainer: `causal_lm` (next-token prediction at every
position, exact NLL), `last_token` (the token after each window only, arXiv 2512.20877's protocol) and
`mdlm` (masked diffusion, its validation number an upper bound: the NELBO).
"""

from slm.objectives.base import NLL_KINDS, OBJECTIVES, Objective, ObjectiveError
from slm.objectives.causal_lm import CausalLM
from slm.objectives.last_token import LastToken
from slm.objectives.mdlm import MDLM

__all__ = ["CausalLM", "LastToken", "MDLM", "NLL_KINDS", "OBJECTIVES", "Objective", "ObjectiveError", "tokenizer_node_for"]


def tokenizer_node_for(objective: str, tokenizer_node: dict) -> dict:
    """The tokenizer config node an objective needs: with a mask token reserved for masked diffusion."""
    if OBJECTIVES.get(objective).needs_mask:
        return {**tokenizer_node, "mask": True}
    return dict(tokenizer_node)
