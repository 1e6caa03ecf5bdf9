"""Parameter and FLOP counts computed from a ModelConfig alone, without building the model.

Each component class reports its own `num_params` (a mixer also its FLOPs beyond its weights, a feed-forward
kind the parameters one token uses), so a new component is counted with no change here.
`tests/test_counting.py` checks these against `sum(p.numel())` of the built model.
"""

from __future__ import annotations

from dataclasses import dataclass

from slm.components import FFNS, MIXERS
from slm.components.canon import canon_params
from slm.components.norm import norm_params
from slm.model.config import ModelConfig
from slm.model.embedding import embedding_params
from slm.model.networks import NETWORKS

FLOPS_CONVENTION = (
    "PaLM (Chowdhery et al. 2022, arXiv:2204.02311, App. B): 6*N + 12*L*H*hd*T per token for a "
    "forward+backward pass; N = non-embedding parameters applied per token (shared blocks once per "
    "application, only the routed experts of a mixture of experts) plus the output head d*V; the attention "
    "term over attention layers only, T = context_length, or the sliding window on local layers; a Titans mac "
    "layer's T = its segment's keys (persistent tokens, memory reads, tokens), plus 18 per memory weight for "
    "learning the memory"
)


@dataclass(frozen=True)
class Counts:
    params_total: int
    """Distinct parameters, tied and shared weights once (= sum(p.numel()) of the built model)."""
    params_embedding: int
    """Token embedding + learned positions + the output head when untied."""
    params_non_embedding: int
    """params_total - params_embedding."""
    params_active: int
    """Parameters one token uses: params_total less the experts a mixture-of-experts layer does not route it
    to (= params_total for a dense model)."""
    flops_per_token: int
    """Training FLOPs per token at context_length (see FLOPS_CONVENTION)."""


def _norm_params(cfg: ModelConfig) -> int:
    return norm_params(cfg, cfg.d_model)


def block_parts(cfg: ModelConfig, layer: int) -> dict[str, int]:
    """Parameters of block `layer` by part: its mixer (by the mixer's own parts where it names them), its
    feed-forward, its norms and Canon layers."""
    kind, ffn = cfg.layer_type(layer), cfg.mlp_type(layer)
    mixer = MIXERS.get(kind)
    parts = {f"{kind} layers" + (f": {part}" if part else ""): n
             for part, n in (mixer.param_parts(cfg) or {"": mixer.num_params(cfg)}).items()}
    parts[f"{ffn} feed-forwards"] = FFNS.get(ffn).num_params(cfg)
    parts["norms"] = 2 * (2 if cfg.norm.placement == "sandwich" else 1) * _norm_params(cfg)
    parts["canon layers"] = canon_params(cfg, "A", cfg.d_model) + canon_params(cfg, "C", cfg.d_model)
    return parts


def block_params(cfg: ModelConfig, layer: int) -> int:
    """Parameters of block `layer`."""
    return sum(block_parts(cfg, layer).values())


def breakdown(cfg: ModelConfig) -> dict[str, int]:
    """Where params_total sits, by part (the network kind's own parts; the values sum to params_total)."""
    return NETWORKS.get(cfg.kind).parts(cfg)


def count(cfg: ModelConfig) -> Counts:
    """Parameter and FLOP counts of the network `cfg.kind` describes."""
    return NETWORKS.get(cfg.kind).counts(cfg)


def stack_breakdown(cfg: ModelConfig) -> dict[str, int]:
    """A transformer's parts: embedding (and untied head, learned positions), then the blocks' parts summed
    over blocks (block_parts), the final norm with the norms."""
    parts = {"embedding": embedding_params(cfg)}
    for i in range(cfg.n_layers):
        for name, n in block_parts(cfg, i).items():
            parts[name] = parts.get(name, 0) + n
    parts["norms"] += _norm_params(cfg) if cfg.has_final_norm else 0
    return {name: n for name, n in parts.items() if n}


def stack_counts(cfg: ModelConfig) -> Counts:
    """A transformer's counts."""
    head = cfg.vocab_size * cfg.d_model + (cfg.vocab_size if cfg.embedding.head_bias else 0)
    embedding = embedding_params(cfg)
    final_norm = _norm_params(cfg) if cfg.has_final_norm else 0
    layers = range(cfg.n_layers)
    blocks = sum(block_params(cfg, i) for i in layers)

    def unrouted(i: int) -> int:  # experts a token skips in block i
        return FFNS.get(cfg.mlp_type(i)).num_params(cfg) - FFNS.get(cfg.mlp_type(i)).active_params(cfg)

    schedule = cfg.block_schedule()  # the block of each application (repeats and loops)
    applied = sum(block_params(cfg, i) - unrouted(i) for i in schedule) + final_norm + head  # weights used per token
    mixing = sum(MIXERS.get(cfg.layer_type(i)).flops_per_token(cfg) for i in schedule)
    total = embedding + blocks + final_norm
    return Counts(total, embedding, total - embedding, total - sum(unrouted(i) for i in layers), 6 * applied + mixing)
