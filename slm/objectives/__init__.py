"""Training objectives: a loss over a model's outputs for a batch of token windows.

An objective is one class in the OBJECTIVES registry; the trainer calls `terms` for training and `nll` for
validation, so a new objective needs no change to the trainer: `causal_lm` (next-token prediction at every
position, exact NLL), `last_token` (the token after each window only, arXiv 2512.20877's protocol) and
`mdlm` (masked diffusion, its validation number an upper bound: the NELBO); on post-training records
(data.records), `sft` (the completion's tokens only) and `preference` (DPO and kin, train.preference).
"""

from slm.objectives.base import NLL_KINDS, OBJECTIVES, Objective, ObjectiveError
from slm.objectives.causal_lm import CausalLM
from slm.objectives.last_token import LastToken
from slm.objectives.mdlm import MDLM
from slm.objectives.preference_objective import Preference
from slm.objectives.sft import SFT

__all__ = ["CausalLM", "LastToken", "MDLM", "NLL_KINDS", "OBJECTIVES", "Objective", "ObjectiveError", "Preference", "SFT",
           "check_preset",
           "tokenizer_node_for"]


def check_preset(model_node: dict, objective: str) -> None:
    """Refuse a training objective that contradicts the one the model preset names (`model.objective`: mdlm for
    the masked diffusion presets, last_token for the window models; train.objective follows it unless given);
    a preset that names none takes any objective (its `check` still refuses a model it cannot train)."""
    named = model_node.get("objective")
    if named is None:
        return
    try:
        OBJECTIVES.get(named)
    except ValueError as err:  # "unknown objective 'x'; choose one of: ..."
        raise ObjectiveError(f"model.objective={named}: {err}") from None
    if objective == named:
        return
    raise ObjectiveError(f"train.objective={objective} contradicts the model preset ({model_node.get('family')}), "
                         f"which trains with {named} (model.objective={named}): leave train.objective out, or set "
                         f"model.objective={objective} too to train this network another way")


def tokenizer_node_for(objective: str, tokenizer_node: dict) -> dict:
    """The tokenizer config node an objective needs: with a mask token reserved for masked diffusion."""
    if OBJECTIVES.get(objective).needs_mask:
        return {**tokenizer_node, "mask": True}
    return dict(tokenizer_node)
