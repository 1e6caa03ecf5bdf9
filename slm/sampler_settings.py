"""What a masked-diffusion sampler's settings may be (slm.model.diffusion.DiffusionSampler), checked without torch:
the evaluation's preflight refuses a bad `eval.throughput.diffusion.*` before training with the same rule the
sampler applies when it is built. Standard library only (slm.model's package loads torch), usable by every layer.
"""

from __future__ import annotations

CACHES = ("none", "prefix", "dual")
"""A bidirectional model's cache: none (exact), or Fast-dLLM's approximate prefix and dual caches."""

SAMPLER_DEFAULTS = {"block_length": 32, "steps": None, "threshold": None, "cache": "none"}
"""The sampler settings a decode measurement takes, and their defaults (steps None: the measurement's own)."""


def check_sampler(block_length, steps, threshold, cache, cfg=None) -> None:
    """Refuse sampler settings no sampler can honour (ValueError, one line naming the setting): block_length and
    steps positive integers (steps None: one per generated token), threshold in (0, 1] or None, cache one of
    CACHES; with the model's config also a cache this model cannot use (block-causal models cache their committed
    blocks exactly; a bidirectional cache holds attention layers only)."""
    for name, value, optional in (("block_length", block_length, False), ("steps", steps, True)):
        if not (optional and value is None) and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name}={value!r}: must be an integer >= 1" + (" (None: one step per generated token)"
                                                                            if optional else ""))
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not 0 < threshold <= 1):
        raise ValueError(f"threshold={threshold!r}: must be in (0, 1] (None: low-confidence remasking)")
    if cache not in CACHES:
        raise ValueError(f"cache={cache!r}: must be one of {', '.join(CACHES)}")
    if cfg is None or cache == "none":
        return
    if cfg.attention.block is not None:
        raise ValueError(f"cache={cache!r} is for fully bidirectional models; this one is block-causal "
                         f"(attention.block={cfg.attention.block}) and caches its committed blocks exactly: "
                         "use cache='none'")
    from slm.model.cache import bidirectional_cache_refusal  # a model exists: torch is loaded

    if bidirectional_cache_refusal(cfg):
        raise ValueError(f"cache={cache!r}: {bidirectional_cache_refusal(cfg)}; use cache='none'")
