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

from slm.typecheck import settings_from_node


class CurriculumError(ValueError):
    """An invalid block curriculum; the message names the field, the value and what is allowed."""


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class BlockCurriculum:
    start: int = 1
    """Attention block of the first warm-up steps (1: causal, as an AR model was trained)."""
    growth: int = 2
    """The block is multiplied by this at each warm-up stage until it reaches the context."""
    warmup_fraction: float = 0.1
    """Share of the steps over which the block grows from `start` to the context (stages evenly spaced)."""
    decay_fraction: float = 0.0
    """Share of the steps at the end trained with `decay_block` (0: none; the run ends as plain MDLM)."""
    decay_block: int | None = None
    """Block of the decay phase (LLaDA 2.0 uses 32); the saved model's attention.block. Needs decay_fraction > 0."""

    def __post_init__(self) -> None:
        for name, low in (("start", 1), ("growth", 2)):
            value = getattr(self, name)
            if not _integer(value) or value < low:
                raise CurriculumError(f"train.block_curriculum.{name}={value!r} is invalid: must be an integer "
                                      f">= {low}")
        for name in ("warmup_fraction", "decay_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise CurriculumError(f"train.block_curriculum.{name}={value!r} is invalid: must be in [0, 1)")
        if self.warmup_fraction + self.decay_fraction > 1:
            raise CurriculumError(f"train.block_curriculum: warmup_fraction {self.warmup_fraction} + decay_fraction "
                                  f"{self.decay_fraction} is invalid: must be <= 1")
        if self.decay_block is not None and (not _integer(self.decay_block) or self.decay_block < 1):
            raise CurriculumError(f"train.block_curriculum.decay_block={self.decay_block!r} is invalid: must be a "
                                  "positive integer or null")
        if (self.decay_block is None) != (self.decay_fraction == 0):
            raise CurriculumError(f"train.block_curriculum.decay_block={self.decay_block!r} with decay_fraction="
                                  f"{self.decay_fraction!r} is invalid: set both (a decay phase) or neither")

    @classmethod
    def from_node(cls, node) -> "BlockCurriculum | None":
        """From a config mapping (None stays None); an unknown key is an error naming the known ones."""
        return None if node is None else settings_from_node(cls, node, "train.block_curriculum", CurriculumError)

    def check(self, context: int) -> None:
        """Raise CurriculumError if the curriculum does not fit a model of this context length."""
        if self.decay_block is not None and self.decay_block >= context:
            raise CurriculumError(f"train.block_curriculum.decay_block={self.decay_block} is invalid: must be smaller "
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
