"""lm-eval scoring of masked diffusion models (`model.attention.causal=false` with a `mask_token_id`), for SLMLM.

A diffusion model has no exact likelihood; it is scored by LLaDA's Monte Carlo estimate of the conditional
ELBO (Nie et al. 2025, "Large Language Diffusion Models", Eq. 6 and its lm-eval harness): for a context c
and a continuation x of n tokens,

    log p(x | c) >= E_l E_S [ (n / l) * sum_{i in S} log p(x_i | c, x with S masked) ],

l uniform on 1..n and S a uniformly random set of l continuation positions; the context is never masked
and the log-probabilities are SUBS ones (the mask token's logit excluded, slm.objectives.mdlm). Each
request is estimated from `mc_num` samples whose l are stratified over 1..n, drawn from a generator seeded
by (seed, the request's token ids): a score depends on the request only, not on its batch or order.
Samples of every request with the same length share forwards (`mc_batch` rows each).

is_greedy is one extra forward per request with the whole continuation masked: true when every
position's SUBS argmax is its target (not LLaDA's one-token-at-a-time check, which costs n forwards).

Rolling log-likelihoods (perplexity tasks) sum this bound over lm-eval's rolling windows: a NELBO, not an
exact NLL. generate_until (SLMLM's, through `generate` here) samples with `slm.model.diffusion.diffusion_generate`.

model_args (for masked diffusion models; an autoregressive model given any of them on the command line warns
once that they do not apply, and one scored by a sweep's shared `eval` config leaves them out silently,
slm.eval.run.evaluate): mc_num (128, LLaDA's default), mc_batch
(rows per forward; None: batch_size * max_length tokens' worth), seed (1234), diffusion_block_length (32),
diffusion_steps (None: one per generated token), diffusion_threshold (None: a fixed number of tokens per
step).
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from dataclasses import dataclass, fields

import numpy as np
import torch
from tqdm import tqdm

from slm.objectives.mdlm import masked_log_probs
from slm.settings import Settings, setting

log = logging.getLogger(__name__)

ESTIMATOR = "llada_mc_conditional_elbo"
HEAD_ROWS = 1 << 26  # logits computed at once: rows * vocab <= this (as slm.eval.lm)


def _parsed(value):
    """A model_args value as lm-eval's command line gives it, a string, read as null, an integer or a number (the
    settings check what it is); any other value as it is."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.lower() in ("none", "null", ""):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return value


@dataclass
class DiffusionSettings(Settings):
    """The diffusion model_args of the `slm` lm-eval model (MODEL_ARGS), named as given (eval.model_args.*)."""

    mc_num: int = setting(128, gt=0)
    """Monte Carlo samples per request (LLaDA's default)."""
    mc_batch: int | None = setting(None, gt=0, null="as many as fit batch_size * max_length tokens")
    """Rows (samples) per forward; None: as many as fit batch_size * max_length tokens."""
    seed: int = 1234
    """Seed of each request's samples (with the request's token ids)."""
    diffusion_block_length: int = setting(32, gt=0)
    """generate_until: the sampler's block length (capped to the generation length)."""
    diffusion_steps: int | None = setting(None, gt=0, null="one per generated token")
    """generate_until: denoising steps; None: the sampler's default (one per generated token)."""
    diffusion_threshold: float | None = setting(None, gt=0, le=1, null="low-confidence remasking")
    """generate_until: confidence threshold for parallel unmasking; None: off (low-confidence remasking)."""

    @classmethod
    def from_model_args(cls, args: dict, key: str = "model_args") -> DiffusionSettings:
        """Settings from model_args named as in MODEL_ARGS (strings read as numbers); SettingsError naming
        `<key>.<name>` for a bad value."""
        settings = cls(**{name: _parsed(args[name]) for name in MODEL_ARGS if name in args})
        settings.settle(key)
        return settings

    def derive(self, root) -> None:
        if self.diffusion_threshold is not None:
            self.diffusion_threshold = float(self.diffusion_threshold)

    def estimator(self) -> dict:
        """What the results record says about how log-likelihoods were estimated."""
        return {"kind": ESTIMATOR, "mc_num": self.mc_num, "seed": self.seed}


MODEL_ARGS = tuple(f.name for f in fields(DiffusionSettings))
"""The `slm` model's arguments for diffusion models (mc_num, mc_batch, seed, diffusion_block_length, diffusion_steps,
diffusion_threshold): DiffusionSettings' fields."""


def diffusion_settings(cfg, args: dict) -> DiffusionSettings | None:
    """Settings for a masked diffusion model, None for an autoregressive one (whose diffusion args, checked
    all the same, are ignored with one warning). A bidirectional model without a mask token cannot be scored."""
    settings = DiffusionSettings.from_model_args(args)
    if cfg.attention.causal:
        if args:
            log.warning("slm model: %s ignored: diffusion model_args do not apply to an autoregressive model",
                        ", ".join(sorted(args)))
        return None
    if cfg.embedding.mask_token_id is None:
        raise ValueError("slm model: a bidirectional model (causal=false) without mask_token_id can be scored "
                         "neither autoregressively nor as a masked diffusion model")
    return settings


# ---------------------------------------------------------------------------------------- the estimator
def request_seed(seed: int, ctx: list[int], cont: list[int]) -> int:
    """A 63-bit seed from the run's seed and the request's tokens (stable across processes and orders)."""
    h = hashlib.blake2b(f"{seed}:{len(ctx)}:".encode(), digest_size=8)
    h.update(np.asarray(ctx + cont, dtype="<i8").tobytes())
    return int.from_bytes(h.digest(), "little") & ((1 << 63) - 1)


def mask_plan(n: int, mc_num: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(masked (mc_num, n) bool, weights n / l (mc_num,) float64): sample j masks l_j random positions of the
    n, l_j = 1 + floor((u + j) n / mc_num) for one u ~ U[0, 1): stratified over 1..n (each l equally often
    when n divides mc_num), and averaged over j the law of l_j is uniform on 1..n, so the mean is unbiased."""
    u = torch.rand((), generator=generator, dtype=torch.float64)
    l = ((u + torch.arange(mc_num, dtype=torch.float64)) * n / mc_num).floor().long().clamp(max=n - 1) + 1
    rank = torch.rand(mc_num, n, generator=generator).argsort(dim=1).argsort(dim=1)  # a random order per row
    return rank < l[:, None], n / l.double()


def _subs_score(model, hidden: torch.Tensor, targets: torch.Tensor, mask_id: int):
    """hidden (M, d) at masked positions, targets (M,) -> (SUBS log p(target) (M,) float32, is argmax (M,))."""
    lps, hits = [], []
    step = max(1, HEAD_ROWS // model.cfg.vocab_size)
    for i in range(0, hidden.shape[0], step):
        logp = masked_log_probs(model.head(hidden[i:i + step]), mask_id)  # (m, V)
        tgt = targets[i:i + step]
        lps.append(logp.gather(-1, tgt[:, None]).squeeze(-1))
        hits.append(logp.argmax(-1) == tgt)
    return torch.cat(lps), torch.cat(hits)


@torch.no_grad()
def conditional_elbo(model, items: list[tuple[list[int], list[int]]], mc_num: int, seed: int,
                     rows_per_forward, progress=None) -> list[tuple[float, bool]]:
    """Per (context, continuation) item, len(ctx) + len(cont) <= context_length, cont non-empty: (Monte
    Carlo conditional ELBO of cont given ctx, is_greedy). Rows of equal length T run rows_per_forward(T) at a
    time, across items; progress (a tqdm) advances per finished item."""
    mask_id = model.cfg.embedding.mask_token_id
    device = model.lm_head.weight.device
    totals = [0.0] * len(items)
    greedy = [False] * len(items)
    by_length: dict[int, list[int]] = defaultdict(list)
    for i in sorted(range(len(items)), key=lambda i: (items[i][0] + items[i][1], len(items[i][0]))):
        by_length[len(items[i][0]) + len(items[i][1])].append(i)

    def rows(ids: list[int]):
        """(item, its tokens (T,), masked continuation positions (n,), weight n/l or None for the greedy row
        (all masked), is the item's last row)."""
        for i in ids:
            ctx, cont = items[i]
            tokens = torch.tensor(ctx + cont)
            masked, weights = mask_plan(len(cont), mc_num, torch.Generator().manual_seed(request_seed(seed, ctx, cont)))
            yield i, tokens, torch.ones(len(cont), dtype=torch.bool), None, False
            for j, (m, w) in enumerate(zip(masked, weights.tolist())):
                yield i, tokens, m, w, j == mc_num - 1

    def run(chunk) -> None:
        clean = torch.stack([tokens for _, tokens, _, _, _ in chunk])  # (R, T)
        sel = torch.zeros_like(clean, dtype=torch.bool)
        for r, (i, _, m, _, _) in enumerate(chunk):
            sel[r, len(items[i][0]):] = m
        clean, sel = clean.to(device), sel.to(device)
        h = model.hidden(clean.masked_fill(sel, mask_id))  # (R, T, d)
        lp, hit = _subs_score(model, h[sel], clean[sel], mask_id)  # (M,) over the masked positions, row-major
        row = sel.nonzero()[:, 0]
        lp_row = torch.zeros(len(chunk), dtype=torch.float64, device=device).index_add_(0, row, lp.double())
        miss_row = torch.zeros(len(chunk), dtype=torch.long, device=device).index_add_(0, row, (~hit).long())
        for (i, _, _, w, _), lp_r, miss in zip(chunk, lp_row.tolist(), miss_row.tolist()):
            if w is None:
                greedy[i] = miss == 0
            else:
                totals[i] += w * lp_r
        if progress is not None:
            progress.update(sum(last for *_, last in chunk))

    for T, ids in by_length.items():
        per_forward, chunk = max(1, int(rows_per_forward(T))), []
        for row in rows(ids):
            chunk.append(row)
            if len(chunk) == per_forward:
                run(chunk)
                chunk = []
        if chunk:
            run(chunk)
    return [(total / mc_num, g) for total, g in zip(totals, greedy)]


# ---------------------------------------------------------------------------------------- lm-eval requests
def loglikelihood_tokens(lm, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
    """SLMLM._loglikelihood_tokens for a diffusion model: requests ((strings) or None, context ids,
    continuation ids); the context keeps its last max_length - len(cont) tokens."""
    L, s = lm.max_length, lm.diffusion
    items = []
    for i, (_, ctx, cont) in enumerate(requests):
        if not cont or len(cont) > L:
            raise ValueError(f"request {i}: needs a continuation of 1..{L} tokens")
        items.append((list(ctx[max(0, len(ctx) - (L - len(cont))):]), list(cont)))
    pbar = tqdm(total=len(requests), disable=disable_tqdm, desc="Running loglikelihood requests (diffusion)")
    rows = (lambda T: s.mc_batch) if s.mc_batch else (lambda T: lm.batch_size * L // T)
    results = conditional_elbo(lm.model, items, s.mc_num, s.seed, rows, pbar)
    pbar.close()
    for (key, _, _), score in zip(requests, results):
        if key is not None:
            lm.cache_hook.add_partial("loglikelihood", key, score)
    return results


def generate(lm, prompts: list[list[int]], gen_length: int, temperature: float, stop_tokens=()) -> list[list[int]]:
    """SLMLM.generate_until's decoding for a diffusion model: gen_length new ids per prompt by the sampler
    (top_k/top_p do not apply), cut before the first stop token (the sampler stops after the block that holds
    one)."""
    from slm.model.diffusion import diffusion_generate

    s = lm.diffusion
    return diffusion_generate(lm.model, prompts, gen_length, block_length=min(s.diffusion_block_length, gen_length),
                              steps=s.diffusion_steps, threshold=s.diffusion_threshold, temperature=temperature,
                              seed=s.seed,
                              stop_tokens=stop_tokens)
