"""The head and the loss of the training loss (`train.loss`): which path runs, chosen once, and the chunked linear +
cross-entropy that computes them without the (tokens x vocab) float32 logits.

A `LossPath` is the one thing an objective calls: `forward` (the model's output that the loss reads: its logits, or
its final hidden states) and then the path itself on the positions the objective scores, with their targets (and,
for masked diffusion, per-row weights and the excluded mask token). Which path is made once per model and device
from `train.loss` (`choose_path`, Objective.loss_path); no objective asks which one it got:

- `PlainPath` (plain): the model's whole forward, its logits `.float()`, then F.cross_entropy: the reference. Also
  every network whose head is not `Transformer.head` (the window models), and an objective made without settings
  (tools that hook the logits: slm.training.coordcheck).
- `ChunkedPath` (chunked): the hidden states, then `ChunkedLinearCE` (the approach of Liger's fused linear
  cross-entropy, in PyTorch): for one chunk of rows at a time the float32 logits, the loss, and at once the
  gradients of the loss with respect to the hidden states, the head's weight and bias; only one chunk's
  (chunk x V) float32 buffers are ever alive, where the plain path keeps the whole (N, V) logits, a float32 copy, the
  softmax's output and their gradient (at vocab 50304 about 400 MB per 2048 tokens each). Its backward multiplies
  the stored gradients by the incoming one. A tied head needs nothing special: autograd adds this gradient to the
  embedding's own. μP's readout multiplier scales the hidden states before the head, with autograd, outside the
  Function. With `plain_below` (auto's) a loss whose float32 logits (rows x vocab x 4 bytes) are smaller than that
  takes the plain computation on the same hidden states (`Transformer.head`, then F.cross_entropy): there the
  chunks save no memory worth having and cost time (PLAIN_BELOW_BYTES, measured in docs/benchmarks.md).
- `LigerPath` (liger): Liger's Triton kernel (`liger_kernel.transformers.functional.
  liger_fused_linear_cross_entropy`) for a training loss on CUDA; it has no per-row weights or excluded token, and
  validation computes no gradient, so those take the chunked path (masked diffusion stays chunked). A few guarded
  lines, not exercised by the tests, which run on CPU where Liger does not install.

`impl` (LossSettings): plain, chunked, liger (Liger where the package is installed and the device is CUDA, else as
auto), auto (liger on CUDA where installed, else chunked with plain below PLAIN_BELOW_BYTES). Every path equals
plain's result to float rounding (tests/test_linear_ce.py).
"""

from __future__ import annotations


from typing import ClassVar

import torch
import torch.nn.functional as F

from slm.objectives.loss_settings import IMPLS, LossSettings, LossSettingsError, liger_installed, loss_settings

__all__ = ["IMPLS", "LossSettings", "LossSettingsError", "liger_installed", "loss_settings", "choose_path", "LossPath"]
PATHS = ("plain", "chunked", "liger")
"""What runs (LossPath.name, and the record's `loss_impl`)."""
IGNORE_INDEX = -100  # F.cross_entropy's: a target that is not scored
PLAIN_BELOW_BYTES = 4 * 2**20
"""auto's rule: a loss whose float32 logits (rows x vocab x 4 bytes) are smaller than this takes the plain
computation (measured with bench/loss_step.py: docs/benchmarks.md, "The head and the loss on a CPU")."""


# ---------------------------------------------------------------------------------------------- the chunked path
def _chunks(h, weight, bias, targets, row_weights, softcap, exclude, scale, grads: tuple[bool, bool, bool],
            chunk: int):
    """Sum over rows of row_weight x CE (float32), and, for the inputs `grads` asks for (h, weight, bias), the
    gradients of `scale` x that sum. Targets equal to IGNORE_INDEX count zero."""
    n, v = h.shape[0], weight.shape[0]
    valid = targets != IGNORE_INDEX
    safe = torch.where(valid, targets, 0)
    w = valid.float() if row_weights is None else valid.float() * row_weights.float()
    grad_h = torch.empty_like(h) if grads[0] else None
    grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if grads[1] else None
    grad_b = torch.zeros(v, dtype=torch.float32, device=weight.device) if grads[2] else None
    total = torch.zeros((), dtype=torch.float32, device=h.device)
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        hc, tc, wc = h[lo:hi], safe[lo:hi], w[lo:hi]
        z = F.linear(hc, weight, bias).float()  # (c, V): the only logits there are
        if softcap is not None:
            th = z.div_(softcap).tanh_()
            z = th * softcap
        if exclude is not None:
            z[:, exclude] = float("-inf")
        lse = torch.logsumexp(z, dim=-1)  # (c,)
        total = total + ((lse - z.gather(1, tc[:, None]).squeeze(1)) * wc).sum()
        if not any(grads):
            continue
        dz = z.sub_(lse[:, None]).exp_()  # softmax, in place
        dz.scatter_add_(1, tc[:, None], -torch.ones_like(dz[:, :1]))  # minus the one-hot target
        dz.mul_((wc * scale)[:, None])
        if softcap is not None:
            dz.mul_(th.square_().neg_().add_(1))  # d(cap tanh(u / cap))/du = 1 - tanh^2
        dz = dz.to(hc.dtype)  # the head's own precision (bfloat16 under autocast), as the plain backward
        if grad_h is not None:
            grad_h[lo:hi] = dz @ weight.to(hc.dtype)
        if grad_w is not None:
            if dz.dtype == grad_w.dtype and not torch.is_autocast_enabled(dz.device.type):
                grad_w.addmm_(dz.t(), hc)  # no (V, d) temporary
            else:
                grad_w += dz.t() @ hc
        if grad_b is not None:
            grad_b += dz.float().sum(0)
    return total, grad_h, grad_w, grad_b


class ChunkedLinearCE(torch.autograd.Function):
    """loss = scale x sum_i row_weight_i CE(softcap(h_i W^T + b), target_i), gradients made in the forward pass."""

    @staticmethod
    def forward(ctx, h, weight, bias, targets, row_weights, softcap, exclude, reduction, chunk):
        valid = targets != IGNORE_INDEX
        scale = 1.0 / valid.sum() if reduction == "mean" else torch.ones((), device=h.device)
        grads = (h.requires_grad, weight.requires_grad, bias is not None and bias.requires_grad)
        total, grad_h, grad_w, grad_b = _chunks(h, weight, bias, targets, row_weights, softcap, exclude, scale, grads,
                                                chunk)
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        ctx.dtypes = (weight.dtype, None if bias is None else bias.dtype)
        return total * scale

    @staticmethod
    def backward(ctx, grad_out):
        grad_h, grad_w, grad_b = ctx.saved_tensors
        w_dtype, b_dtype = ctx.dtypes
        return (None if grad_h is None else grad_h * grad_out.to(grad_h.dtype),
                None if grad_w is None else (grad_w * grad_out).to(w_dtype),
                None if grad_b is None else (grad_b * grad_out).to(b_dtype),
                None, None, None, None, None, None)


def linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                         bias: torch.Tensor | None = None, *, softcap: float | None = None,
                         row_weights: torch.Tensor | None = None, exclude: int | None = None,
                         reduction: str = "mean", chunk: int = 256) -> torch.Tensor:
    """Cross-entropy of the logits softcap(h W^T + b) (h (N, d), weight (V, d), targets (N,), IGNORE_INDEX not
    scored), each row's term times row_weights[i] (None: 1), the logit of token `exclude` set to -inf (masked
    diffusion's mask token), `chunk` rows at a time (the chunked path). reduction: mean (over the scored rows, as
    F.cross_entropy) or sum. Without grad (validation) it computes no gradient."""
    _check_reduction(reduction)
    grad = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad
                                        or (bias is not None and bias.requires_grad))
    if not grad:
        valid = targets != IGNORE_INDEX
        scale = 1.0 / valid.sum() if reduction == "mean" else 1.0
        total = _chunks(h, weight, bias, targets, row_weights, softcap, exclude, scale, (False, False, False),
                        chunk)[0]
        return total * scale
    return ChunkedLinearCE.apply(h, weight, bias, targets, row_weights, softcap, exclude, reduction, chunk)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, *, row_weights: torch.Tensor | None = None,
                  exclude: int | None = None, reduction: str = "mean") -> torch.Tensor:
    """The plain path's loss: the logits (N, V) in float32, token `exclude`'s at -inf, then F.cross_entropy (targets
    (N,), IGNORE_INDEX not scored), each row's term times row_weights[i] (None: 1); mean over the scored rows or
    sum."""
    _check_reduction(reduction)
    logits = logits.float()  # float32 softmax
    if exclude is not None:  # out of place: the logits may be a model's output that autograd keeps
        logits = logits.index_fill(-1, torch.tensor([exclude], device=logits.device), float("-inf"))
    if row_weights is None:
        return F.cross_entropy(logits, targets, reduction=reduction)
    ce = F.cross_entropy(logits, targets, reduction="none") * row_weights
    return ce.sum() if reduction == "sum" else ce.sum() / (targets != IGNORE_INDEX).sum()


def _check_reduction(reduction: str) -> None:
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction={reduction!r} is invalid: mean or sum")


# ---------------------------------------------------------------------------------------------- the paths
def fused_head_ok(model) -> bool:
    """Whether `model` (or the module a torch.compile wrapper holds) has Transformer's head, so that its forward
    takes head=False and its logits are softcap(readout x h) W^T + b: what the chunked and liger paths compute."""
    from slm.model.transformer import Transformer

    inner = getattr(model, "_orig_mod", model)
    return getattr(type(inner), "head", None) is Transformer.head


def _rows(out: torch.Tensor, targets: torch.Tensor, row_weights: torch.Tensor | None):
    """(out (N, last), targets (N,), row_weights (N,) or None): the scored positions as rows."""
    rows = out.reshape(-1, out.shape[-1])
    return rows, targets.reshape(-1), None if row_weights is None else row_weights.reshape(-1)


class LossPath:
    """The head and the loss of a training objective, chosen once per model and device from `train.loss`
    (choose_path). An objective calls `forward` for the model's output, takes the positions it scores, and calls
    the path on them: `path(model, out, targets, row_weights=..., exclude=..., reduction=...)`, a scalar; it never
    asks which path it has. `name` is the path's own (PATHS); `ran` says which a loss of a given size takes."""

    name: ClassVar[str]

    def forward(self, model, inputs: torch.Tensor, *, aux: bool = False, **kwargs) -> tuple[torch.Tensor, dict]:
        """(what this path's loss reads from the model for `inputs`: its final hidden states (..., d); the model's
        auxiliary terms, {} unless aux). kwargs go to the model (attention_block)."""
        out = model(inputs, return_aux=aux, head=False, **kwargs)
        return out if aux else (out, {})

    def __call__(self, model, out: torch.Tensor, targets: torch.Tensor, *, row_weights: torch.Tensor | None = None,
                 exclude: int | None = None, reduction: str = "mean") -> torch.Tensor:
        """The cross-entropy of the model's head on `out` (forward's, at the scored positions: (..., d)) against
        `targets` (...), IGNORE_INDEX not scored; each position's term times row_weights (None: 1); token
        `exclude`'s logit at -inf; mean over the scored positions or sum."""
        raise NotImplementedError

    def ran(self, rows: int, vocab: int, *, weighted: bool = False) -> str:
        """The path (PATHS) a training loss over `rows` positions of a `vocab`-token head takes (weighted: with
        row weights and an excluded token, masked diffusion's)."""
        return self.name

    def describe(self, rows: int, vocab: int, *, weighted: bool = False) -> str:
        """`ran`, and why it is not the one asked for where that is so: the record's `loss_impl`."""
        return self.ran(rows, vocab, weighted=weighted)


class PlainPath(LossPath):
    """The reference: the model's whole forward (hooks on the model see its logits), the logits `.float()`, then
    F.cross_entropy (cross_entropy)."""

    name = "plain"

    def forward(self, model, inputs: torch.Tensor, *, aux: bool = False, **kwargs) -> tuple[torch.Tensor, dict]:
        """(the model's logits (..., V), its auxiliary terms ({} unless aux))."""
        out = model(inputs, return_aux=aux, **kwargs)
        return out if aux else (out, {})

    def __call__(self, model, out, targets, *, row_weights=None, exclude=None, reduction="mean"):
        logits, targets, row_weights = _rows(out, targets, row_weights)
        return cross_entropy(logits, targets, row_weights=row_weights, exclude=exclude, reduction=reduction)


class ChunkedPath(LossPath):
    """The head and the loss together, `chunk_tokens` rows at a time (linear_cross_entropy); a loss whose float32
    logits are smaller than `plain_below` bytes takes the plain computation on the same hidden states
    (Transformer.head, then cross_entropy). `note`: why this path runs where another was asked for."""

    name = "chunked"

    def __init__(self, chunk_tokens: int, plain_below: int = 0, note: str | None = None):
        self.chunk_tokens, self.plain_below, self.note = chunk_tokens, plain_below, note

    def small(self, rows: int, vocab: int) -> bool:
        """Whether a loss over `rows` positions of a `vocab`-token head takes the plain computation."""
        return rows * vocab * 4 < self.plain_below

    def __call__(self, model, out, targets, *, row_weights=None, exclude=None, reduction="mean"):
        h, targets, row_weights = _rows(out, targets, row_weights)
        if self.small(h.shape[0], model.lm_head.weight.shape[0]):
            return cross_entropy(model.head(h), targets, row_weights=row_weights, exclude=exclude,
                                 reduction=reduction)
        return self._fused(model, h, targets, row_weights, exclude, reduction)

    def _fused(self, model, h, targets, row_weights, exclude, reduction) -> torch.Tensor:
        scale = model.readout_scale  # μP's readout multiplier, applied to h with autograd
        if scale is not None:
            h = h * scale
        return linear_cross_entropy(h, model.lm_head.weight, targets, model.lm_head.bias,
                                    softcap=model.cfg.embedding.logit_softcap, row_weights=row_weights, exclude=exclude,
                                    reduction=reduction, chunk=self.chunk_tokens)

    def ran(self, rows: int, vocab: int, *, weighted: bool = False) -> str:
        return "plain" if self.small(rows, vocab) else "chunked"

    def describe(self, rows: int, vocab: int, *, weighted: bool = False) -> str:
        path = self.ran(rows, vocab, weighted=weighted)
        return f"{path} ({self.note})" if self.note else path


class LigerPath(ChunkedPath):
    """Liger's fused kernel for a training loss on CUDA without row weights or an excluded token; the chunked
    path (with its plain_below) for the rest: masked diffusion, and validation (no gradient)."""

    name = "liger"

    def __call__(self, model, out, targets, *, row_weights=None, exclude=None, reduction="mean"):
        weight, bias = model.lm_head.weight, model.lm_head.bias
        grad = torch.is_grad_enabled() and (out.requires_grad or weight.requires_grad
                                            or (bias is not None and bias.requires_grad))
        if not (grad and out.is_cuda and row_weights is None and exclude is None):
            return super().__call__(model, out, targets, row_weights=row_weights, exclude=exclude,
                                    reduction=reduction)
        _check_reduction(reduction)
        # Liger's Triton kernel (untested here: the tests run on CPU, where liger_kernel does not install)
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        h, targets, _ = _rows(out, targets, None)
        if model.readout_scale is not None:
            h = h * model.readout_scale
        return liger_fused_linear_cross_entropy(h, weight, targets, bias, ignore_index=IGNORE_INDEX,
                                                reduction=reduction, softcap=model.cfg.embedding.logit_softcap)

    def ran(self, rows: int, vocab: int, *, weighted: bool = False) -> str:
        return super().ran(rows, vocab) if weighted else "liger"

    def describe(self, rows: int, vocab: int, *, weighted: bool = False) -> str:
        if weighted:
            return f"{super().ran(rows, vocab)} (mdlm's row weights: not liger)"
        return "liger"


def choose_path(settings: LossSettings | None, model, device: torch.device) -> LossPath:
    """The path of this model's head and loss on `device`, made once (Objective.loss_path):
    plain: no settings (tools that hook the logits), a network whose head is not Transformer's, or impl=plain;
    chunked: impl=chunked; auto and liger: liger on CUDA where liger_kernel is installed, else chunked with plain
    below PLAIN_BELOW_BYTES of float32 logits."""
    if settings is None or settings.impl == "plain" or not fused_head_ok(model):
        return PlainPath()
    if settings.impl == "chunked":
        return ChunkedPath(settings.chunk_tokens)
    if device.type == "cuda" and liger_installed():
        return LigerPath(settings.chunk_tokens, PLAIN_BELOW_BYTES)
    return ChunkedPath(settings.chunk_tokens, PLAIN_BELOW_BYTES,
                       note="liger_kernel not installed" if device.type == "cuda" else None)
