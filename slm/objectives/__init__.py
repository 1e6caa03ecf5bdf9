"""Training objectives: a loss over a model's outputs for a batch of token windows.

An objective is one class in the OBJECTIVES registry; the trainer calls `loss` for training and
`nll` for validation, so a new objective (e.g. masked diffusion) needs no change to the trainer.
"""

from slm.objectives.base import OBJECTIVES, Objective
from slm.objectives.causal_lm import CausalLM

__all__ = ["OBJECTIVES", "Objective", "CausalLM"]
