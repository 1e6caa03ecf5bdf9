"""ModelConfig, counts, the budget solver and the network. Plain PyTorch."""

from slm.model.budget import config_from_spec, solve_width
from slm.model.config import ConfigError, ModelConfig
from slm.model.counting import FLOPS_CONVENTION, Counts, count
from slm.model.networks import NETWORKS, build_model
from slm.model.transformer import Transformer
from slm.model.window import WindowLinear, WindowMLP

__all__ = ["ConfigError", "Counts", "FLOPS_CONVENTION", "ModelConfig", "NETWORKS", "Transformer", "WindowLinear",
           "WindowMLP", "build_model", "config_from_spec", "count", "solve_width"]
