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

from slm.data.errors import DataError
from slm.data.preference_records import PreferenceRecord, Tokenize
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


def pad_rows(prompts: Sequence[Ids], completions: Sequence[Ids], pad_id: int,
             context_length: int) -> tuple[Tensor, Tensor]:
    """(ids (N, T), scored (N, T − 1)): each prompt + completion right-padded with pad_id to the longest, and
    where the target ids[:, 1:] is a completion token. A DataError (one line) for an empty prompt or completion
    or a sequence longer than context_length."""
    if len(prompts) != len(completions) or not prompts:
        raise ValueError(f"{len(prompts)} prompts and {len(completions)} completions: give one completion per "
                         "prompt, at least one")
    for row, (prompt, completion) in enumerate(zip(prompts, completions)):
        problem = ("an empty prompt: prepend a start token (e.g. the tokenizer's eot)" if not prompt else
                   "an empty completion" if not completion else None)
        total = len(prompt) + len(completion)
        if total > context_length:
            problem = f"{total} tokens ({len(prompt)} + {len(completion)}), longer than the model's " \
                      f"context_length {context_length} (sequences are not truncated)"
        if problem:
            raise DataError(f"sequence {row}: prompt + completion is {problem}")
    T = max(len(p) + len(c) for p, c in zip(prompts, completions))
    ids = torch.full((len(prompts), T), pad_id, dtype=torch.long)  # (N, T)
    scored = torch.zeros(len(prompts), T - 1, dtype=torch.bool)  # (N, T - 1): target ids[:, 1:] is scored
    for row, (prompt, completion) in enumerate(zip(prompts, completions)):
        n, m = len(prompt), len(completion)
        ids[row, :n + m] = torch.tensor(list(prompt) + list(completion), dtype=torch.long)
        scored[row, n - 1:n + m - 1] = True
    return ids, scored


def completion_logprobs(model: nn.Module, prompts: Sequence[Ids], completions: Sequence[Ids],
                        pad_id: int) -> tuple[Tensor, Tensor]:
    """((N,) summed log-probs of each completion given its prompt, float32 with the model's grad; (N,) completion
    token counts), from one right-padded forward. The model's train/eval mode and grad mode are the caller's."""
    check_causal(model.cfg)
    device = next(model.parameters()).device
    ids, scored = pad_rows(prompts, completions, pad_id, model.cfg.context_length)
    ids, scored = ids.to(device), scored.to(device)
    logits = model(ids[:, :-1])  # (N, T - 1, V): position i - 1 predicts token i
    logp = logits.float().log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # (N, T - 1)
    sums = torch.where(scored, logp, torch.zeros((), dtype=logp.dtype, device=device)).sum(-1)  # (N,)
    return sums, scored.sum(-1)


def tokenize_pairs(records: Sequence[PreferenceRecord], tokenize: Tokenize,
                   bos: int | None = None) -> tuple[list[list[int]], list[list[int]]]:
    """(prompts, completions) of 2B rows: the B chosen completions, then the B rejected ones (TRL's
    concatenated batch), each prompt tokenized apart from its completion; `bos` prepended to every prompt."""
    start = [] if bos is None else [bos]
    prompts = [start + list(tokenize(r.prompt)) for r in records]
    completions = [list(tokenize(r.chosen)) for r in records] + [list(tokenize(r.rejected)) for r in records]
    return prompts + prompts, completions


def preference_pairs(model: nn.Module, records: Sequence[PreferenceRecord], tokenize: Tokenize, pad_id: int, *,
                     bos: int | None = None, reference: tuple[Tensor, Tensor] | None = None) -> Pairs:
    """The Pairs of B records: the policy's summed completion log-probs of chosen and rejected from one forward of
    2B rows, their token counts, and `reference` ((B,) chosen, (B,) rejected: precomputed, e.g.
    slm.objectives.reference_cache) or None for the reference-free losses."""
    B = len(records)
    sums, counts = completion_logprobs(model, *tokenize_pairs(records, tokenize, bos), pad_id)  # (2B,) each
    ref_chosen, ref_rejected = (None, None) if reference is None else (r.to(sums.device) for r in reference)
    return Pairs(sums[:B], sums[B:], counts[:B], counts[B:], ref_chosen, ref_rejected)
