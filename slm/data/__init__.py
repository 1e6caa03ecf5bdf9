"""Data: tokenizers, sources and mixes, cached token shards, and the Lightning DataModule.

    prepared = prepare(cfg.data, cfg.tokenizer)     # plain dicts of the composed Hydra nodes
    dm = SLMDataModule(prepared, batch_size, context_length, seed, val_batches)

SLMDataModule is imported on first use, so tokenizing (and its worker processes) does not load Lightning.
"""

from slm.data.config import DataConfig, SourceConfig, TokenizerConfig
from slm.data.errors import DataError
from slm.data.prepare import PreparedData, PreparedSource, prepare
from slm.data.sources import SOURCES
from slm.data.tokenizers import TOKENIZERS, Tokenizer, load_tokenizer

__all__ = ["DataConfig", "DataError", "PreparedData", "PreparedSource", "SLMDataModule", "SOURCES", "SourceConfig",
           "TOKENIZERS", "Tokenizer", "TokenizerConfig", "load_tokenizer", "prepare"]


def __getattr__(name: str):
    if name == "SLMDataModule":
        from slm.data.datamodule import SLMDataModule

        return SLMDataModule
    raise AttributeError(f"module 'slm.data' has no attribute {name!r}")
