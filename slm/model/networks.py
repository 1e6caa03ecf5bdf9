"""The network kinds a ModelConfig can describe (`ModelConfig.kind`), by string key.

    transformer   blocks from the component registries (slm.model.transformer): logits at every position
    linear, mlp   a next-token model over one flattened window of exactly context_length tokens
                  (slm.model.window): logits for the token after the window only

Each entry is an nn.Module class built from the config alone, with `counts(cfg)` (slm.model.counting.Counts)
and `parts(cfg)` (where its parameters sit, summing to the total) computed without building it, and
`every_position`: whether its forward scores every position (next-token training) or the last only.
"""

from __future__ import annotations

from slm.components.registry import Registry

NETWORKS: Registry = Registry("model kind")


def build_model(cfg):
    """The network `cfg.kind` describes, initialised."""
    return NETWORKS.get(cfg.kind)(cfg)
