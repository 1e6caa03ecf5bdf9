"""Next-token models over one flattened window (the baselines of arXiv 2512.20877, Sec. 3): the embeddings
of a window of exactly `context_length` tokens are concatenated and mapped to the logits of the token after
it, initialised by the config's `parametrization.init` scheme. No attention, no positions (a token's place in the
window is its place in the concatenation).

    linear   embed (V, d) -> flatten (T d) -> Linear(T d, V)
    mlp      embed -> flatten -> [Linear -> ReLU -> Dropout] per width in mlp.window_hidden -> Linear(., V)

Every Linear has a bias. `forward(idx)` takes idx (B, T) with T = context_length and returns logits
(B, 1, V) for the position after the window, so an objective reads the last position's logits the same way
as a transformer's (`slm.objectives.last_token`).
"""

from __future__ import annotations

import torch
from torch import nn

from slm.components import INITS
from slm.components.parametrization import scheme_of
from slm.model.counting import Counts
from slm.model.networks import NETWORKS


def _linear_params(n_in: int, n_out: int) -> int:
    return n_in * n_out + n_out


class WindowModel(nn.Module):
    """Token ids (B, context_length) -> logits of the next token (B, 1, V)."""

    every_position = False

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        widths = [cfg.context_length * cfg.d_model, *cfg.mlp.window_hidden]
        layers: list[nn.Module] = []
        for n_in, n_out in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(n_in, n_out), nn.ReLU(), nn.Dropout(cfg.block.dropout)]
        self.hidden = nn.Sequential(*layers)
        self.lm_head = nn.Linear(widths[-1], cfg.vocab_size)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise by the config's scheme (`parametrization.init`; the ladder presets use torch, PyTorch's
        defaults)."""
        init = INITS.get(self.cfg.parametrization.init)(self.cfg, scheme_of(self.cfg).init_depth())
        for module in self.modules():
            init.module(module)

    def forward(self, idx: torch.Tensor, cache=None, lengths=None, return_aux: bool = False):
        if cache is not None or lengths is not None:
            raise ValueError(f"model.kind={self.cfg.kind!r} reads one whole window: no KV cache or padded rows")
        B, T = idx.shape
        if T != self.cfg.context_length:
            raise ValueError(f"model.kind={self.cfg.kind!r} takes windows of exactly context_length="
                             f"{self.cfg.context_length} tokens, got {T}")
        h = self.tok_emb(idx).flatten(1)  # (B, T d)
        logits = self.lm_head(self.hidden(h))[:, None]  # (B, 1, V)
        return (logits, {}) if return_aux else logits

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @classmethod
    def parts(cls, cfg) -> dict[str, int]:
        widths = [cfg.context_length * cfg.d_model, *cfg.mlp.window_hidden]
        parts = {"embedding": cfg.vocab_size * cfg.d_model}
        if cfg.mlp.window_hidden:
            parts["hidden layers"] = sum(_linear_params(a, b) for a, b in zip(widths[:-1], widths[1:]))
        parts["output layer"] = _linear_params(widths[-1], cfg.vocab_size)
        return parts

    @classmethod
    def counts(cls, cfg) -> Counts:
        """FLOPs per token: a window of T tokens costs 6 x the weights it multiplies (every Linear, once per
        window; the embedding is a lookup), spread over its T positions."""
        parts = cls.parts(cfg)
        total, embedding = sum(parts.values()), parts["embedding"]
        applied = total - embedding
        return Counts(total, embedding, applied, total, 6 * applied // cfg.context_length)


@NETWORKS.register("linear")
class WindowLinear(WindowModel):
    """The linear baseline: one Linear from the flattened window to the logits."""


@NETWORKS.register("mlp")
class WindowMLP(WindowModel):
    """The MLP baseline: hidden ReLU layers of widths `mlp.window_hidden` between the flattened window and the
    logits."""
