"""`train.loss`: how the head and the cross-entropy of the training loss are computed (the paths themselves are in
slm.objectives.linear_ce). Standard library only, so the training config reads it without loading torch."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from slm.settings import Settings, SettingsError, setting

IMPLS = ("auto", "plain", "chunked", "liger")
LossSettingsError = SettingsError  # the name this module's callers knew


def liger_installed() -> bool:
    """Whether liger_kernel can be imported (looked up without importing it: it loads Triton)."""
    return importlib.util.find_spec("liger_kernel") is not None


@dataclass
class LossSettings(Settings):
    """`train.loss`: how the head and the cross-entropy of the training loss are computed."""

    impl: str = setting("auto", choices=IMPLS)
    """auto (liger on CUDA where liger_kernel is installed, else chunked), plain (the whole float32 logits, then
    F.cross_entropy), chunked (chunk_tokens rows at a time, gradients in the forward pass) or liger (Liger's fused
    kernel on CUDA, chunked on other devices; refused where liger_kernel is not installed, unlike auto). Where
    auto and liger take the chunked path, a loss whose float32 logits are under PLAIN_BELOW_BYTES is computed as
    plain computes it (there the chunks save no memory worth having, and cost time)."""
    chunk_tokens: int = setting(256, gt=0)
    """Rows (tokens) per chunk of the chunked path: its float32 buffers are a few chunk_tokens x vocab."""

    def check(self, key: str, root) -> None:
        if self.impl == "liger" and not liger_installed():
            raise SettingsError.invalid(f"{key}.impl", self.impl, "not here: the liger_kernel package is not "
                                        "installed (pip install liger-kernel, CUDA only); use auto or chunked")


def loss_settings(node) -> LossSettings:
    """`train.loss` as LossSettings (defaults filled in), checked; an unknown field or a bad value is one line."""
    out = LossSettings.from_node(node, "train.loss")
    out.settle("train.loss")
    return out
