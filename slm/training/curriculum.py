"""The attention-block curriculum of an autoregressive model converted to masked diffusion.

LLaDA 2.0 (Bie et al. 2025) converts an AR model into a diffusion model by warmup-stable-decay ("WSD") over
the size of the attention block (block diffusion, Arriola et al. 2025: each position sees its own block both
ways and every earlier block):

    warm-up  the block grows from `start` (1: causal attention, what the AR model was trained with) to the full
             context, multiplied by `growth` at evenly spaced steps;
    stable   the full context: plain bidirectional masked diffusion (MDLM);
    decay    optionally, a compact block (`decay_block`) for the last steps, so the model ends as a block
             diffusion model that decodes block by block with a KV cache (its saved config has
             attention.block = decay_block).

The block of an optimizer step is a pure function of the step and the run's length, so a resumed run
trains with exactly the blocks of an uninterrupted one. A block >= the context is full attention.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

from slm.settings import Settings, SettingsError, setting

CurriculumError = SettingsError  # the name this module's callers knew


@dataclass
class BlockCurriculum(Settings):
    """`train.block_curriculum` (mdlm only; None: the model's own attention)."""

    optional: ClassVar[bool] = True

    start: int = setting(1, ge=1)
    """Attention block of the first warm-up steps (1: causal, as an AR model was trained)."""
    growth: int = setting(2, ge=2)
    """The block is multiplied by this at each warm-up stage until it reaches the context."""
    warmup_fraction: float = setting(0.1, ge=0, lt=1)
    """Share of the steps over which the block grows from `start` to the context (stages evenly spaced)."""
    decay_fraction: float = setting(0.0, ge=0, lt=1)
    """Share of the steps at the end trained with `decay_block` (0: none; the run ends as plain MDLM)."""
    decay_block: int | None = setting(None, ge=1, null="no decay phase")
    """Block of the decay phase (LLaDA 2.0 uses 32); the saved model's attention.block. Needs decay_fraction > 0."""

    def check(self, key: str, root) -> None:
        if self.warmup_fraction + self.decay_fraction > 1:
            raise SettingsError(f"{key}: warmup_fraction {self.warmup_fraction} + decay_fraction "
                                f"{self.decay_fraction} is invalid: must be <= 1", key=f"{key}.decay_fraction",
                                value=self.decay_fraction)
        if (self.decay_block is None) != (self.decay_fraction == 0):
            raise SettingsError(f"{key}.decay_block={self.decay_block!r} with decay_fraction={self.decay_fraction!r}"
                                " is invalid: set both (a decay phase) or neither", key=f"{key}.decay_block",
                                value=self.decay_block)
        if root is not self and getattr(root, "objective", "mdlm") != "mdlm":
            raise SettingsError(f"{key} is set with train.objective={root.objective}: the attention-block "
                                "curriculum is for masked diffusion (train.objective=mdlm)", key=key, value=asdict(self))

    @classmethod
    def from_config(cls, node) -> "BlockCurriculum | None":
        """From a config mapping (None stays None), checked on its own (no enclosing config)."""
        out = cls.from_node(node, "train.block_curriculum")
        if out is not None:
            out.settle("train.block_curriculum")
        return out

    def check_context(self, context: int) -> None:
        """Raise SettingsError if the curriculum does not fit a model of this context length."""
        if self.decay_block is not None and self.decay_block >= context:
            raise SettingsError.invalid("train.block_curriculum.decay_block", self.decay_block, f"must be smaller "
                                        f"than the context ({context}); a block that large is full attention")

    def warmup_blocks(self, context: int) -> list[int]:
        """The warm-up's blocks, one per stage: start, start x growth, ... while below the context."""
        blocks, block = [], self.start
        while block < context:
            blocks.append(block)
            block *= self.growth
        return blocks

    def phases(self, max_steps: int) -> tuple[int, int]:
        """(warm-up steps, first step of the decay phase; max_steps without one)."""
        warmup = int(self.warmup_fraction * max_steps)
        decay = max(1, int(self.decay_fraction * max_steps)) if self.decay_block is not None else 0
        return warmup, max(warmup, max_steps - decay)

    def block(self, step: int, max_steps: int, context: int) -> int:
        """Attention block of optimizer step `step` (0-based) of a run of `max_steps` steps; context: full."""
        warmup, decay_start = self.phases(max_steps)
        if step >= decay_start and self.decay_block is not None:
            return self.decay_block
        stages = self.warmup_blocks(context)
        if step < warmup and stages:
            return stages[step * len(stages) // warmup]
        return context

    def schedule(self, max_steps: int, context: int) -> list[tuple[int, int]]:
        """[(first step, block), ...] where the block changes: the whole curriculum of a run, for the record."""
        out: list[tuple[int, int]] = []
        for step in range(max_steps):
            b = self.block(step, max_steps, context)
            if not out or out[-1][1] != b:
                out.append((step, b))
        return out

    def to_dict(self) -> dict:
        return asdict(self)
