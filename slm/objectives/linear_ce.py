"""Linear + cross-entropy without the (tokens x vocab) float32 logits: the head and the loss of a language model
computed together, `chunk_tokens` rows at a time (`train.loss`).

The plain path makes the whole (N, V) logits, a float32 copy of them, the softmax's output and, in the backward
pass, a gradient of the same size: at vocab 50304 that is about 400 MB per 2048 tokens on each of them.
`ChunkedLinearCE` (the approach of Liger's fused linear cross-entropy, in PyTorch) computes, for one chunk of
rows at a time, the float32 logits, the loss, and at once the gradients of the loss with respect to the hidden
states, the head's weight and bias; only one chunk's (chunk x V) float32 buffers are ever alive. Its backward
multiplies the stored gradients by the incoming one. A tied head (the weight is the embedding's) needs nothing
special: autograd adds this gradient to the embedding's own. μP's readout multiplier scales the hidden states
before the head, with autograd, outside the Function (`HeadLoss`).

`impl` (LossSettings): plain (full logits, `.float()`, F.cross_entropy: the reference), chunked, liger (Liger's
Triton kernel, `liger_kernel.transformers.functional.liger_fused_linear_cross_entropy`, where the package is
installed and the tensors are on CUDA; it has no per-row weights or excluded token, so masked diffusion stays
chunked), auto (liger on CUDA where installed, else chunked). The Liger branch is a few guarded lines; it is not
exercised by the tests, which run on CPU where Liger does not install.

Only a network whose head is `Transformer.head` (final hidden states -> lm_head -> optional soft-cap) can skip its
logits; the others (the window models) take the plain path whatever `impl` says.
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from slm.typecheck import check_types, settings_from_node

IMPLS = ("auto", "plain", "chunked", "liger")
IGNORE_INDEX = -100  # F.cross_entropy's: a target that is not scored


class LossSettingsError(ValueError):
    """Bad `train.loss.*` settings; the message names the field, the value and what is allowed."""


def liger_installed() -> bool:
    """Whether liger_kernel can be imported (looked up without importing it: it loads Triton)."""
    return importlib.util.find_spec("liger_kernel") is not None


@dataclass
class LossSettings:
    """`train.loss`: how the head and the cross-entropy of the training loss are computed."""

    impl: str = "auto"
    """auto (liger on CUDA where liger_kernel is installed, else chunked), plain (the whole float32 logits, then
    F.cross_entropy), chunked (chunk_tokens rows at a time, gradients in the forward pass) or liger (Liger's fused
    kernel on CUDA, chunked on other devices; refused where liger_kernel is not installed, unlike auto)."""
    chunk_tokens: int = 256
    """Rows (tokens) per chunk of the chunked path: its float32 buffers are a few chunk_tokens x vocab."""

    def __post_init__(self) -> None:
        check_types(self, "train.loss", LossSettingsError)
        if self.impl not in IMPLS:
            raise LossSettingsError(f"train.loss.impl={self.impl!r} is invalid: choose one of: {', '.join(IMPLS)}")
        if self.impl == "liger" and not liger_installed():
            raise LossSettingsError("train.loss.impl=liger is invalid here: the liger_kernel package is not installed "
                                    "(pip install liger-kernel, CUDA only); use auto or chunked")
        if self.chunk_tokens < 1:
            raise LossSettingsError(f"train.loss.chunk_tokens={self.chunk_tokens!r} is invalid: a positive integer")

    def resolve(self, device: torch.device) -> str:
        """The path used on `device`: plain, chunked or liger."""
        if self.impl in ("auto", "liger") and device.type == "cuda" and liger_installed():
            return "liger"
        return "chunked" if self.impl in ("auto", "liger") else self.impl


def loss_settings(node) -> LossSettings:
    """`train.loss` as LossSettings (defaults filled in); an unknown field or a bad value is one line."""
    return settings_from_node(LossSettings, node, "train.loss", LossSettingsError)


def loss_defaults() -> dict:
    """The default settings as plain values (conf/train/default.yaml's `loss`)."""
    return asdict(LossSettings())


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
                         reduction: str = "mean", impl: str = "chunked", chunk: int = 256) -> torch.Tensor:
    """Cross-entropy of the logits softcap(h W^T + b) (h (N, d), weight (V, d), targets (N,), IGNORE_INDEX not
    scored), each row's term times row_weights[i] (None: 1), the logit of token `exclude` set to -inf (masked
    diffusion's mask token). reduction: mean (over the scored rows, as F.cross_entropy) or sum. impl: plain (the
    reference: all logits at once), chunked, or liger (Liger's kernel: CUDA tensors, with grad, no row weights or
    excluded token; else chunked). Without grad (validation) the chunked path computes no gradient."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction={reduction!r} is invalid: mean or sum")
    if impl == "plain":
        logits = F.linear(h, weight, bias).float()
        if softcap is not None:
            logits = softcap * torch.tanh(logits / softcap)
        if exclude is not None:
            logits[:, exclude] = float("-inf")
        if row_weights is None:
            return F.cross_entropy(logits, targets, reduction=reduction)
        ce = F.cross_entropy(logits, targets, reduction="none") * row_weights
        return ce.sum() if reduction == "sum" else ce.sum() / (targets != IGNORE_INDEX).sum()
    grad = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad
                                        or (bias is not None and bias.requires_grad))
    if impl == "liger" and grad and h.is_cuda and row_weights is None and exclude is None:
        # Liger's Triton kernel (untested here: the tests run on CPU, where liger_kernel does not install)
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        return liger_fused_linear_cross_entropy(h, weight, targets, bias, ignore_index=IGNORE_INDEX,
                                                reduction=reduction, softcap=softcap)
    if not grad:
        valid = targets != IGNORE_INDEX
        scale = 1.0 / valid.sum() if reduction == "mean" else 1.0
        total = _chunks(h, weight, bias, targets, row_weights, softcap, exclude, scale, (False, False, False),
                        chunk)[0]
        return total * scale
    return ChunkedLinearCE.apply(h, weight, bias, targets, row_weights, softcap, exclude, reduction, chunk)


# ---------------------------------------------------------------------------------------------- the model's head
def fused_head_ok(model) -> bool:
    """Whether `model` (or the module a torch.compile wrapper holds) has Transformer's head, so that its forward
    takes head=False and its logits are softcap(readout x h) W^T + b: what HeadLoss computes."""
    from slm.model.transformer import Transformer

    inner = getattr(model, "_orig_mod", model)
    return getattr(type(inner), "head", None) is Transformer.head


def resolve_impl(settings: LossSettings | None, model, device: torch.device) -> str:
    """The path a loss takes for this model on this device: plain (no settings, or a network whose head is not
    Transformer's), else settings.resolve(device)."""
    if settings is None or not fused_head_ok(model):
        return "plain"
    return settings.resolve(device)


def head_loss(model, h: torch.Tensor, targets: torch.Tensor, impl: str, chunk: int, **kwargs) -> torch.Tensor:
    """linear_cross_entropy of a Transformer's final hidden states h (..., d) and targets (...) through its head:
    μP's readout multiplier applied to h here (autograd), then lm_head's weight and bias and the config's
    final-logit soft-cap. kwargs: row_weights (flattened like targets), exclude, reduction."""
    scale = model.readout_scale
    if scale is not None:
        h = h * scale
    h, targets = h.reshape(-1, h.shape[-1]), targets.reshape(-1)
    row_weights = kwargs.pop("row_weights", None)
    if row_weights is not None:
        row_weights = row_weights.reshape(-1)
    return linear_cross_entropy(h, model.lm_head.weight, targets, model.lm_head.bias,
                                softcap=model.cfg.final_logit_softcap, row_weights=row_weights, impl=impl, chunk=chunk,
                                **kwargs)
