"""Mixture of experts, the `moe` feed-forward kind of `ModelConfig.mlp_types` (Shazeer et al. 2017; the
routing of Qwen3-MoE / Mixtral in transformers).

    p = softmax(router(x))                       # (N, E) in float32, router: d -> n_experts, no bias
    w, e = top_k(p)                              # each token's experts; w / sum(w) if norm_topk_prob
    y = sum_j w_j * expert_{e_j}(x)  (+ shared(x))

Each expert is an MLP of kind `cfg.mlp.kind` with hidden size `moe.expert_d_ff`, stored stacked: w_in (E, [gate; up]
rows, d) and w_out (E, d, expert_d_ff), transformers' gate_up_proj / down_proj layout. Routing is dropless:
every (token, expert) pair is computed. Tokens are sorted by expert and each expert runs one matmul over
its tokens (a loop over experts, never over tokens); on a GPU the per-expert sizes cost one host sync per
layer, so this part runs outside torch.compile. A decode step on a static cache (CUDA graph, compiled decode)
gathers each token's experts instead, with fixed shapes.

Auxiliary statistics go to the forward's `seq.record`; `MoE.reduce_aux` turns the layers' statistics into
  moe_balance   E * sum_i f_i * P_i (Switch Transformer, Fedus et al. 2021): f_i the fraction of routed
                (token, slot) pairs per token that go to expert i (sums to top_k), P_i the mean router
                probability; per layer then averaged (moe.aux_scope=layer) or over all layers' tokens at once
                (pooled: transformers' load_balancing_loss_func)
  moe_z         mean over tokens of logsumexp(router logits)^2 (ST-MoE, Zoph et al. 2022), averaged per layer
  moe_load      (layers, E) share of routed pairs per expert (uniform: 1 / E)
and the training-loss terms "loss/moe_balance" = moe.aux_coef * moe_balance, "loss/moe_z" = moe.z_coef * moe_z.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from slm.components.mlp import FFNS, MLPS, FeedForward
from slm.settings import Settings, require, setting


@dataclass
class MoeSettings(Settings):
    """`model.moe`: the mixture-of-experts layers (the `moe` entries of model.mlp_types)."""

    n_experts: int = setting(0, ge=0)
    """Experts in each moe layer; 0 when there is no moe layer."""
    top_k: int = setting(2, gt=0)
    """Experts each token is routed to."""
    expert_d_ff: int | None = setting(None, gt=0, null="the model's mlp.d_ff")
    """Hidden size of each expert; null: the model's d_ff."""
    shared_expert_d_ff: int = setting(0, ge=0)
    """Hidden size of an always-on shared expert in each moe layer (DeepSeekMoE-style); 0: none."""
    norm_topk_prob: bool = True
    """Renormalise each token's top_k router probabilities to sum to 1 (Qwen3-MoE, Mixtral)."""
    aux_coef: float = setting(0.01, ge=0)
    """Weight of the load-balancing loss E * sum_i f_i * P_i (Switch Transformer) in the training loss."""
    aux_scope: Literal["layer", "pooled"] = "layer"
    """layer: the balancing loss per moe layer, averaged (Switch); pooled: over all layers' tokens at once
    (transformers' load_balancing_loss_func, Qwen3-MoE / Mixtral)."""
    z_coef: float = setting(0.0, ge=0)
    """Weight of the router z-loss, mean logsumexp(router logits)^2 (ST-MoE); 0: off."""

    def derive(self, cfg) -> None:
        if self.expert_d_ff is None:
            self.expert_d_ff = cfg.mlp.d_ff

    def check(self, key: str, cfg) -> None:
        """Against the model `cfg` (its mlp_types, block.bias, canon.set)."""
        used = "moe" in cfg.mlp_types
        require((used or self.n_experts == 0, f"{key}.n_experts", self.n_experts,
                 "model.mlp_types has no moe layer to use it; add one or set 0"),
                (not used or self.n_experts >= 1, f"{key}.n_experts", self.n_experts,
                 f"model.mlp_types {cfg.mlp_types} has moe layers: a positive number of experts is needed"),
                (not used or self.top_k <= self.n_experts, f"{key}.top_k", self.top_k,
                 f"must be an integer in 1..n_experts={self.n_experts}"),
                (not used or not cfg.block.bias, "model.block.bias", cfg.block.bias,
                 "moe layers have no biases (router and experts); set false"),
                (not used or "D" not in cfg.canon.set, "model.canon.set", cfg.canon.set,
                 "Canon D sits inside a dense MLP; moe layers have none"))


@FFNS.register("moe")
class MoE(FeedForward, nn.Module):
    """Top-k routed experts (and an optional always-on shared expert) replacing a block's MLP."""

    def __init__(self, cfg):
        nn.Module.__init__(self)
        kind = MLPS.get(cfg.mlp.kind)
        E, d, f = cfg.moe.n_experts, cfg.d_model, cfg.moe.expert_d_ff
        self.n_experts, self.top_k, self.norm_topk_prob = E, cfg.moe.top_k, cfg.moe.norm_topk_prob
        self.gated, self.activation, self.gelu_approximate = kind.gated, kind.activation, cfg.mlp.gelu_approximate
        self.router = nn.Linear(d, E, bias=False)  # (E, d)
        self.w_in = nn.Parameter(torch.empty(E, (2 if kind.gated else 1) * f, d))  # per expert: [gate; up] rows
        self.w_out = nn.Parameter(torch.empty(E, d, f))
        self.shared = kind(cfg, d_ff=cfg.moe.shared_expert_d_ff) if cfg.moe.shared_expert_d_ff else None
        bound = 1 / math.sqrt(d)  # nn.Linear's default init, so the module is usable as built
        nn.init.uniform_(self.w_in, -bound, bound)
        nn.init.uniform_(self.w_out, -1 / math.sqrt(f), 1 / math.sqrt(f))

    @staticmethod
    def expert_params(cfg) -> int:
        gated = MLPS.get(cfg.mlp.kind).gated
        return cfg.d_model * cfg.moe.expert_d_ff * (3 if gated else 2)

    @classmethod
    def num_params(cls, cfg) -> int:
        shared = cls._shared_params(cfg)
        return cfg.d_model * cfg.moe.n_experts + cfg.moe.n_experts * cls.expert_params(cfg) + shared

    @classmethod
    def active_params(cls, cfg) -> int:
        """Router, the top_k experts a token is routed to, and the shared expert."""
        return cfg.d_model * cfg.moe.n_experts + cfg.moe.top_k * cls.expert_params(cfg) + cls._shared_params(cfg)

    @staticmethod
    def _shared_params(cfg) -> int:
        gated = MLPS.get(cfg.mlp.kind).gated
        return cfg.d_model * cfg.moe.shared_expert_d_ff * (3 if gated else 2)

    def init_weights(self, init) -> None:
        """Under the init scheme (slm.components.init): w_in as an input projection, w_out as a residual output."""
        init.normal(self.w_in)
        init.normal(self.w_out, residual=True)

    # ------------------------------------------------------------------ forward
    def forward(self, x: torch.Tensor, seq=None, kv=None) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d); the layer's routing statistics go to `seq.record` (if seq is given)."""
        shape = x.shape
        flat = x.reshape(-1, shape[-1])  # (N, d)
        logits = self.router(flat)  # (N, E)
        probs = logits.softmax(dim=-1, dtype=torch.float32)
        weights, chosen = probs.topk(self.top_k, dim=-1)  # (N, k) each
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        static = seq is not None and getattr(seq.cache, "static", False)
        out, counts = (self._experts_gathered if static else self._experts)(flat, chosen, weights.to(x.dtype))
        if self.shared is not None:
            out = out + self.shared(flat)
        if seq is not None:
            z = torch.logsumexp(logits.float(), dim=-1).pow(2).sum()
            seq.record(MoE, (counts, probs.sum(dim=0), flat.shape[0], z))
        return out.view(shape)

    # per-expert sizes are data: compiled, every step would recompile. torch.compiler.disable in its lazy form: it
    # imports torch._dynamo at the first call, not when this module loads (1-2 s that slm-params never needs)
    @torch._disable_dynamo
    def _experts(self, flat: torch.Tensor, chosen: torch.Tensor, weights: torch.Tensor):
        """Sum over each token's experts of weight * expert(token): flat (N, d), chosen/weights (N, k).
        -> ((N, d), tokens per expert (E,) as float)."""
        N, k = chosen.shape
        pairs = chosen.reshape(-1)  # (N k,) expert of each (token, slot) pair
        order = pairs.argsort(stable=True)  # pairs grouped by expert
        counts = torch.bincount(pairs, minlength=self.n_experts)  # (E,)
        xs = flat[order // k]  # (N k, d) the token of each pair, grouped by expert
        outs = []
        # unbind once: indexing w_in[e] per expert would make its backward write E full-size gradients
        for xe, w_in, w_out in zip(xs.split(counts.tolist()), self.w_in.unbind(0), self.w_out.unbind(0)):
            h = xe @ w_in.T  # (n_e, [2] f)
            if self.gated:
                gate, up = h.chunk(2, dim=-1)
                h = self.activation(gate, self.gelu_approximate) * up
            else:
                h = self.activation(h, self.gelu_approximate)
            outs.append(h @ w_out.T)  # (n_e, d)
        ys = torch.cat(outs) * weights.reshape(-1)[order, None]  # (N k, d), weighted
        out = ys[order.argsort()].view(N, k, -1).sum(dim=1)  # back to (token, slot) order: deterministic sum
        return out, counts.float()

    def _experts_gathered(self, flat: torch.Tensor, chosen: torch.Tensor, weights: torch.Tensor):
        """The same sum with each token's experts' weights gathered (N, k, ., .): no data-dependent shapes or
        host sync, so a static-cache decode step can be compiled and captured in a CUDA graph. Memory grows
        with N * k whole experts, so it is used for decode steps only (a static cache)."""
        h = torch.einsum("nd,nkfd->nkf", flat, self.w_in[chosen])  # (N, k, [2] f)
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            h = self.activation(gate, self.gelu_approximate) * up
        else:
            h = self.activation(h, self.gelu_approximate)
        y = torch.einsum("nkf,nkdf->nkd", h, self.w_out[chosen])  # (N, k, d)
        counts = torch.zeros(self.n_experts, device=flat.device).index_add_(
            0, chosen.reshape(-1), torch.ones(chosen.numel(), device=flat.device))
        return (y * weights[..., None]).sum(dim=1), counts

    # ------------------------------------------------------------------ auxiliary losses
    @classmethod
    def reduce_aux(cls, cfg, stats: list) -> dict[str, torch.Tensor]:
        """The layers' recorded (counts (E,), probability sums (E,), tokens, z sum) -> losses and metrics
        (see the module docstring)."""
        counts = torch.stack([s[0] for s in stats])  # (L, E) routed pairs per expert
        prob_sums = torch.stack([s[1] for s in stats])  # (L, E)
        rows = torch.tensor([float(s[2]) for s in stats], device=counts.device)[:, None]  # (L, 1) tokens
        E = cfg.moe.n_experts
        if cfg.moe.aux_scope == "pooled":
            balance = E * ((counts.sum(0) / rows.sum()) * (prob_sums.sum(0) / rows.sum())).sum()
        else:
            balance = E * ((counts / rows) * (prob_sums / rows)).sum(dim=1).mean()
        z = torch.stack([s[3] / s[2] for s in stats]).mean()
        out = {"moe_balance": balance.detach(), "moe_z": z.detach(), "moe_load": (counts / (rows * cfg.moe.top_k)).detach()}
        if cfg.moe.aux_coef:
            out["loss/moe_balance"] = cfg.moe.aux_coef * balance
        if cfg.moe.z_coef:
            out["loss/moe_z"] = cfg.moe.z_coef * z
        return out
