"""Masked diffusion (MDLM: Sahoo et al. 2024, "Simple and Effective Masked Diffusion Language Models";
kuleshov-group/mdlm), with the log-linear schedule and the SUBS parameterisation.

For a window x0 of T tokens and a time t ~ U(eps, 1) per sequence (stratified across the batch, "antithetic"),
each token is replaced by the mask token with probability (1 - eps) * t. A bidirectional model predicts the
clean tokens; the mask token's logit is never predicted and a visible token is carried over (it costs
nothing), so the loss is

    L = sum over masked positions of -log p(x0 | xt) * 1/t, divided by B * T (all tokens),

1/t being the log-linear schedule's weight dsigma / expm1(sigma). Its expectation is the negative ELBO per
token, an upper bound on the NLL: validation reports that bound (nll_kind "nelbo"), estimated with t and
masks drawn from a generator seeded by the batch index, so it is the same number on every run and resume;
training draws its times and masks from a generator seeded by (run seed, step), so a resumed run draws the
same noise as an uninterrupted one (the global generator is also used by data loaders and validation).

`attention_block` (terms and nll) runs the model block-causally with that block for this call: the trainer's
block curriculum (slm.training.curriculum) passes it when an AR model is converted; None: the model's own.
"""

from __future__ import annotations

import torch
from torch import nn

from slm.objectives.base import OBJECTIVES, Objective, ObjectiveError, with_aux
from slm.objectives.linear_ce import IGNORE_INDEX, LossPath

EPS = 1e-3  # MDLM's sampling_eps and the log-linear noise's eps


def sample_times(batch: int, device, generator: torch.Generator | None = None, eps: float = EPS) -> torch.Tensor:
    """(B,) times in [eps, 1): one uniform draw, spread over the batch in B strata (MDLM's antithetic sampling)."""
    u = torch.rand(batch, device=device, generator=generator)
    t = (u / batch + torch.arange(batch, device=device) / batch) % 1
    return (1 - eps) * t + eps


def corrupt(x0: torch.Tensor, t: torch.Tensor, mask_id: int, generator: torch.Generator | None = None,
            eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """(xt, masked): each token of x0 (B, T) masked with probability (1 - eps) * t[b]."""
    masked = torch.rand(x0.shape, device=x0.device, generator=generator) < ((1 - eps) * t)[:, None]
    return torch.where(masked, torch.full_like(x0, mask_id), x0), masked


def masked_log_probs(logits: torch.Tensor, mask_id: int) -> torch.Tensor:
    """log p over the vocabulary (float32) with the mask token excluded (SUBS: it is never predicted)."""
    logits = logits.float()
    logits[..., mask_id] = float("-inf")
    return logits.log_softmax(dim=-1)


@OBJECTIVES.register("mdlm")
class MDLM(Objective):
    needs_mask = True
    nll_kind = "nelbo"
    row_noise = True
    weighted = True

    def check(self, model_cfg) -> None:
        if model_cfg.attention.causal:
            raise ObjectiveError("train.objective=mdlm needs a bidirectional model: set model.attention.causal=false "
                                 "(the dllm presets do)")
        if model_cfg.embedding.mask_token_id is None:
            raise ObjectiveError("train.objective=mdlm needs model.embedding.mask_token_id (slm-train sets it from the "
                                 "tokenizer's mask token)")

    def _noise(self, mask_id: int, x0: torch.Tensor, generator=None, rows: tuple[int, int] | None = None):
        """(xt, masked, t) for the windows x0 (B, T). rows=(first, total): `x0` are rows first.. of a batch of
        `total`, whose times and masks are drawn whole and sliced (Objective.row_noise)."""
        if rows is None:
            t = sample_times(x0.shape[0], x0.device, generator)
            xt, masked = corrupt(x0, t, mask_id, generator)
            return xt, masked, t
        first, total = rows
        part = slice(first, first + x0.shape[0])
        t = sample_times(total, x0.device, generator)
        whole = x0.new_zeros((total, x0.shape[1]))  # only its shape is used: the masks of every row
        _, masked = corrupt(whole, t, mask_id, generator)
        t, masked = t[part], masked[part]
        return torch.where(masked, torch.full_like(x0, mask_id), x0), masked, t

    def _weighted_nll(self, model: nn.Module, tokens: torch.Tensor, generator=None, aux: bool = False,
                      attention_block: int | None = None, rows: tuple[int, int] | None = None, *,
                      mean: bool = True):
        """(the weighted NLL of the batch: its mean over the B x T tokens (mean) or its sum, the model's aux terms
        ({} unless aux))."""
        mask_id = model.cfg.embedding.mask_token_id  # a torch.compile'd model forwards attribute access
        x0 = tokens[:, :-1]  # (B, T): the model's context, as the causal objective uses
        xt, masked, t = self._noise(mask_id, x0, generator, rows)
        return self._score(model, x0, xt, masked, t, self.loss_path(model, tokens.device), aux, attention_block,
                           mean)

    def _score(self, model: nn.Module, x0, xt, masked, t, path: LossPath, aux: bool, attention_block: int | None,
               mean: bool) -> tuple[torch.Tensor, dict]:
        """sum (or mean over B x T) of -log p(x0 | xt) / t over the masked positions, and the model's aux terms, by the
        objective's loss path: every position scored with weight 1/t where masked (the others not scored), the mask
        token's logit at -inf (slm.objectives.linear_ce)."""
        block = {} if attention_block is None else {"attention_block": attention_block}
        out, extra = path.forward(model, xt, aux=aux, **block)
        targets = torch.where(masked, x0, IGNORE_INDEX)
        weights = (1 / t)[:, None].expand_as(x0)
        total = path(model, out, targets, row_weights=weights, exclude=model.cfg.embedding.mask_token_id,
                     reduction="sum")
        return (total / x0.numel() if mean else total), extra

    def terms(self, model: nn.Module, tokens: torch.Tensor, seed: int | None = None,
              attention_block: int | None = None, rows: tuple[int, int] | None = None) -> dict[str, torch.Tensor]:
        loss, aux = self._weighted_nll(model, tokens, _generator(seed, tokens.device), aux=True,
                                       attention_block=attention_block, rows=rows)
        return with_aux(loss, aux)

    def nll(self, model: nn.Module, tokens: torch.Tensor, seed: int | None = None,
            attention_block: int | None = None) -> tuple[torch.Tensor, int]:
        total, _ = self._weighted_nll(model, tokens, _generator(seed, tokens.device),
                                      attention_block=attention_block, mean=False)
        return total, tokens[:, :-1].numel()


def _generator(seed: int | None, device) -> torch.Generator | None:
    return None if seed is None else torch.Generator(device=device).manual_seed(seed)
