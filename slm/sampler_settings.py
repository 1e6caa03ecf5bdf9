"""What a masked-diffusion sampler's settings may be (slm.model.diffusion.DiffusionSampler): `SamplerSettings`, a
settings group (slm.settings), checked without torch. The evaluation's settings hold one
(`eval.throughput.diffusion`), so a bad value is refused before training with the rule the sampler applies when
it is built; what depends on the model (a cache it cannot use) is checked where a model exists
(slm.model.diffusion.cache_refusal). Standard library only (and slm.settings), usable by every layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from slm.settings import Settings, setting

CACHES = ("none", "prefix", "dual")
"""A bidirectional model's cache: none (exact), or Fast-dLLM's approximate prefix and dual caches."""


@dataclass
class SamplerSettings(Settings):
    """A masked-diffusion sampler's settings (eval.throughput.diffusion: the decode measurement's sampler)."""

    block_length: int = setting(32, gt=0)
    """Tokens per left-to-right block."""
    steps: int | None = setting(None, gt=0, null="the caller's default")
    """Denoising steps in all; null: new_tokens / 4 in a decode measurement (four tokens a step), one per generated
    token in the sampler itself."""
    threshold: float | None = setting(None, gt=0, le=1, null="low-confidence remasking")
    """Commit every token whose confidence is above this probability; null: low-confidence remasking."""
    cache: str = setting("none", choices=CACHES)
    """none (exact) | prefix | dual: Fast-dLLM's approximate caches, refreshed per block."""


def check_sampler(block_length, steps, threshold, cache) -> SamplerSettings:
    """The settings as a settled SamplerSettings, or SettingsError naming the bad one (`sampler.cache='x' is
    invalid: one of: none, prefix, dual`)."""
    settings = SamplerSettings(block_length, steps, threshold, cache)
    settings.settle("sampler")
    return settings
