"""Titans' neural long-term memory (Behrouz, Zhong, Mirrokni 2025, arXiv 2501.00663, Sec. 3): an MLP whose
weights are the state of a recurrence, learned at test time by gradient descent with momentum and decay.

    loss      l(M; k, v) = ||M(k) - v||^2
    surprise  S_t = eta_t * S_{t-1} - theta_t * grad l(M_{t-1}; k_t, v_t)
    memory    M_t = (1 - alpha_t) * M_{t-1} + S_t
    read      M(q), no update

Chunked (Sec. 3.2): inside a chunk of C tokens every gradient is taken at the chunk's first weights M_0,
u_i = grad l(M_0; k_i, v_i), and momentum and decay then run token by token, which sums to

    S_C = E_C S_0 - sum_i theta_i (E_C / E_i) u_i                      E_j = eta_1 ... eta_j
    M_C = A_C M_0 + sum_j (A_C / A_j) E_j S_0 - sum_i w_i u_i          A_j = (1 - alpha_1) ... (1 - alpha_j)
    w_i = theta_i sum_{j >= i} (A_C / A_j) (E_j / E_i)

The gradient of one token is, per layer, an outer product of that layer's input and its back-propagated
error, so each weighted sum over the chunk is one matmul, inputs^T diag(w) errors: a chunk costs a few
batched matmuls, and with C = 1 it is the token-by-token recurrence. The gradients are written out by hand
instead of taken with torch.func: vmap(grad) would materialise one copy of the weights per token where the
sums need none. They are plain differentiable torch ops, so the outer model trains the projections, the
gates and the initial weights through the updates (second-order terms included). The products A, E are
taken in log space (C x C exponents, all <= 0), so long chunks with strong decay neither overflow nor
divide by zero.

Each layer computes a W / sqrt(d_in) (weights start at N(0, 1)), so with inputs of unit RMS a step theta on
one token moves that token's output by about theta times its error, whatever the width.

Shapes: `weights` is a list of (B, H, d_in, d_out), one per layer, for H independent memories per row;
keys, values and queries (B, H, N, d); gates (B, H, N).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def layer_shapes(cfg) -> list[tuple[int, int]]:
    """(d_in, d_out) of each layer of one memory head: d -> hidden -> ... -> d, d = d_model / memory.heads."""
    width = cfg.d_model // cfg.memory.heads
    dims = [width] + [cfg.memory.hidden] * (cfg.memory.depth - 1) + [width]
    return list(zip(dims[:-1], dims[1:]))


def _silu_grad(z: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(z)
    return s * (1 + z * (1 - s))


def read(weights: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """M(x): x (B, H, N, d) -> (B, H, N, d), SiLU between layers."""
    return _forward(weights, x)[0]


def _forward(weights, x):
    """M(x), each layer's input, and the pre-activations of the hidden layers."""
    inputs, pre = [], []
    z = x
    for i, w in enumerate(weights):
        if i:
            pre.append(z)
            z = F.silu(z)
        inputs.append(z)
        z = z @ w * w.shape[-2] ** -0.5
    return z, inputs, pre


def weighted_grads(weights: list[torch.Tensor], k: torch.Tensor, v: torch.Tensor,
                   coefs: list[torch.Tensor], max_norm: float | None = None) -> list[list[torch.Tensor]]:
    """For each c in coefs (B, H, N): sum_i c_i grad l(weights; k_i, v_i), one tensor per layer; with
    `max_norm`, each token's gradient (all layers together) is first scaled down to that norm at most."""
    out, inputs, pre = _forward(weights, k)
    error = 2 * (out - v)  # dl/d(output of the last layer), (B, H, N, d)
    errors = [None] * len(weights)
    for i in reversed(range(len(weights))):
        errors[i] = error * weights[i].shape[-2] ** -0.5  # the layer's own 1/sqrt(d_in) folded in
        if i:
            error = (errors[i] @ weights[i].transpose(-1, -2)) * _silu_grad(pre[i - 1])
    if max_norm is not None:  # a token's gradient is an outer product per layer: |a b^T|^2 = |a|^2 |b|^2
        square = sum(a.square().sum(-1) * e.square().sum(-1) for a, e in zip(inputs, errors))  # (B, H, N)
        clip = (max_norm**2 / square.clamp(min=max_norm**2)).sqrt()
        coefs = [c * clip for c in coefs]
    return [[inputs[i].transpose(-1, -2) @ (c[..., None] * errors[i]) for i in range(len(weights))]
            for c in coefs]


TINY = -46.0
"""log(1e-20): products and decays below it are taken as 0, so that none lands among float32's subnormal
numbers (below 1.2e-38), on which CPU matmuls run several times slower."""


def _exp(log_x: torch.Tensor) -> torch.Tensor:
    """exp(log_x), exactly 0 where log_x < TINY."""
    return torch.where(log_x < TINY, 0.0, log_x.exp())


def update(weights: list[torch.Tensor], momentum: list[torch.Tensor], k: torch.Tensor, v: torch.Tensor,
           theta: torch.Tensor, log_eta: torch.Tensor, log_keep: torch.Tensor, max_norm: float | None = None
           ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Learn one chunk: the memory (weights, momentum) after keys k -> values v (B, H, C, d), with step sizes
    theta, momentum log eta and retention log(1 - alpha) per token (B, H, C). Gradients at `weights`, each
    token's clipped to `max_norm` if given."""
    log_e = log_eta.cumsum(-1)  # log E_j
    log_a = log_keep.cumsum(-1)  # log A_j
    last_a, last_e = log_a[..., -1:], log_e[..., -1:]
    to_end = last_a - log_a + log_e  # log (A_C / A_j) E_j
    C = k.shape[-2]
    later = torch.ones(C, C, dtype=torch.bool, device=k.device).triu()  # [i, j]: j >= i
    paths = (to_end[..., None, :] - log_e[..., :, None]).masked_fill(~later, float("-inf"))
    w = theta * _exp(paths).sum(-1)  # (B, H, C)
    carried = theta * _exp(last_e - log_e)  # theta_i E_C / E_i
    into_memory, into_momentum = weighted_grads(weights, k, v, [w, carried], max_norm)
    keep, from_momentum, fade = _exp(last_a)[..., None], _exp(to_end).sum(-1)[..., None, None], _exp(last_e)[..., None]
    new_weights = [keep * m + from_momentum * s - g for m, s, g in zip(weights, momentum, into_memory)]
    new_momentum = [fade * s - g for s, g in zip(momentum, into_momentum)]
    return new_weights, new_momentum


def learn(weights, momentum, k, v, theta, log_eta, log_keep, chunk: int, budget: float | None = None,
          max_norm: float | None = None):
    """`update` over consecutive chunks of `chunk` tokens (the last may be shorter). With a `budget`, a
    chunk whose steps theta sum to more is scaled down to sum to it (its tokens keep their proportions);
    with `max_norm`, each token's gradient is clipped to that norm."""
    for start in range(0, k.shape[-2], chunk):
        part = slice(start, start + chunk)
        step = theta[..., part]
        if budget is not None:
            step = step * budget / step.sum(-1, keepdim=True).clamp(min=budget)
        weights, momentum = update(weights, momentum, k[..., part, :], v[..., part, :], step,
                                   log_eta[..., part], log_keep[..., part], max_norm)
    return weights, momentum
