"""ModelConfig, counts, the budget solver and the network. Plain PyTorch."""

from slm.model.budget import config_from_spec, solve_width
from slm.model.config import ConfigError, ModelConfig
from slm.model.counting import FLOPS_CONVENTION, Counts, count
from slm.model.transformer import Transformer

__all__ = ["ConfigError", "Counts", "FLOPS_CONVENTION", "ModelConfig", "Transformer", "config_from_spec", "count", "solve_width"]
