"""Completion log-probs of a causal model: what the preference losses (slm.objectives.preference) take.

Each sequence is a prompt's token ids followed by a completion's; only the completion is scored: completion token
t_i (at position i of the joined sequence) adds log softmax(logits at position i − 1)[t_i], so the prompt's tokens
are context only and a prompt needs at least one token (prepend a start token, e.g. the tokenizer's eot, to an
empty one). Sequences of different lengths are right-padded into one batch and run in one forward; in a causal
model the padding after a sequence cannot change its logits, so each sum equals that of the sequence alone.

A bidirectional model (masked diffusion, model.attention.causal=false) or one that predicts only the token after
its window is refused with one line, as is a sequence longer than the model's context (never truncated).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from slm.data.preference_records import PreferenceRecord, Tokenize
from slm.data.records import pad_rows, tokenize_pairs
from slm.model.networks import NETWORKS
from slm.objectives.base import ObjectiveError
from slm.objectives.preference import Pairs

Ids = Sequence[int]


def check_causal(cfg) -> None:
    """Refuse, with one line, a model whose logits at position i − 1 are not a prediction of token i from the
    tokens before it."""
    if not cfg.attention.causal:
        raise ObjectiveError("completion log-probs need a causal model, but model.attention.causal=false: a "
                             "bidirectional (masked-diffusion) model sees the tokens it is asked to score")
    if not NETWORKS.get(cfg.kind).every_position:
        raise ObjectiveError(f"completion log-probs need a prediction at every position, but model.kind="
                             f"{cfg.kind!r} predicts only the token after its window")


HEAD_CHUNK_ROWS = 256
"""Scored positions per head chunk when their float32 logits would exceed linear_ce.PLAIN_BELOW_BYTES."""


def sequence_logprobs(model: nn.Module, ids: Tensor, scored: Tensor) -> tuple[Tensor, Tensor]:
    """((N,) summed log-probs of the scored targets of each row, float32 with the model's grad; (N,) their counts)
    of right-padded rows `ids` (N, T) with `scored` (N, T − 1) (slm.data.records' batch). The head runs on the
    scored positions only (the model's hidden states, then its head), where the model has Transformer's head; where
    their float32 logits would be large (a 50k vocabulary), HEAD_CHUNK_ROWS at a time, each chunk's logits recomputed
    in the backward pass (activation checkpointing) instead of kept, so one chunk's are alive at a time."""
    from slm.objectives.linear_ce import PLAIN_BELOW_BYTES, fused_head_ok

    inputs, targets = ids[:, :-1], ids[:, 1:]  # position i - 1 predicts token i
    picked = targets[scored]  # (S,)
    if fused_head_ok(model):
        h = model(inputs, head=False)[scored]  # (S, d): the scored positions only
        inner = getattr(model, "_orig_mod", model)
        head, vocab = inner.head, inner.lm_head.weight.shape[0]
        if h.shape[0] * vocab * 4 > PLAIN_BELOW_BYTES and h.requires_grad:
            logp = torch.cat([checkpoint(_picked_logprobs, head, h[lo:lo + HEAD_CHUNK_ROWS],
                                         picked[lo:lo + HEAD_CHUNK_ROWS], use_reentrant=False)
                              for lo in range(0, h.shape[0], HEAD_CHUNK_ROWS)])
        else:
            logp = _picked_logprobs(head, h, picked)
    else:
        logp = _picked_logprobs(lambda x: x, model(inputs)[scored], picked)
    rows = torch.arange(ids.shape[0], device=ids.device)[:, None].expand_as(scored)[scored]  # (S,) row of each
    sums = torch.zeros(ids.shape[0], dtype=logp.dtype, device=ids.device).index_add(0, rows, logp)
    return sums, scored.sum(-1)


def _picked_logprobs(head, h: Tensor, picked: Tensor) -> Tensor:
    """(S,) log softmax(head(h))[picked], in float32."""
    return head(h).float().log_softmax(-1).gather(-1, picked[:, None]).squeeze(-1)


def completion_logprobs(model: nn.Module, prompts: Sequence[Ids], completions: Sequence[Ids],
                        pad_id: int) -> tuple[Tensor, Tensor]:
    """((N,) summed log-probs of each completion given its prompt, float32 with the model's grad; (N,) completion
    token counts), from one right-padded forward. The model's train/eval mode and grad mode are the caller's."""
    check_causal(model.cfg)
    device = next(model.parameters()).device
    ids, scored = pad_rows(prompts, completions, pad_id, model.cfg.context_length)
    return sequence_logprobs(model, ids.to(device), scored.to(device))


def preference_pairs(model: nn.Module, records: Sequence[PreferenceRecord], tokenize: Tokenize, pad_id: int, *,
                     bos: int | None = None, reference: tuple[Tensor, Tensor] | None = None) -> Pairs:
    """The Pairs of B records: the policy's summed completion log-probs of chosen and rejected from one forward of
    2B rows, their token counts, and `reference` ((B,) chosen, (B,) rejected: precomputed, e.g.
    slm.objectives.reference_cache) or None for the reference-free losses."""
    B = len(records)
    sums, counts = completion_logprobs(model, *tokenize_pairs(records, tokenize, bos), pad_id)  # (2B,) each
    ref_chosen, ref_rejected = (None, None) if reference is None else (r.to(sums.device) for r in reference)
    return Pairs(sums[:B], sums[B:], counts[:B], counts[B:], ref_chosen, ref_rejected)
