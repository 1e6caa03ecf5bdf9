"""The `slm` model for lm-evaluation-harness: scores any slm checkpoint, whatever its architecture.

    lm_eval.simple_evaluate(model="slm", model_args={"pretrained": "runs/train/default"}, tasks=[...])
    SLMLM(pretrained="runs/train/default/model", batch_size=32, device="cuda", dtype="bfloat16")

`pretrained` is a run directory (its `model/`) or a checkpoint directory (config.json, model.safetensors
and the tokenizer files `slm-train` saves next to them); `tokenizer=<dir>` takes the tokenizer from
elsewhere: an slm tokenizer directory or a Hugging Face one (tokenizer.json, ...), or `tokenizer=gpt2`, the
GPT-2 BPE shipped with slm. In a model_args string a path may hold commas (a run directory named after its
job key): see slm.eval.lm_args for how it is kept whole.

Requests are scored as lm-eval's `hf` model scores them (same tokenization through `TemplateLM`, same
left truncation to `max_length`, same rolling windows), so the numbers agree with `hf` on the same
weights (tests/test_eval_parity.py). What differs is the cost:
  - logits are computed only where a continuation token is scored, and log-probabilities as
    logit - logsumexp, never a full (B, T, V) log_softmax;
  - requests that share a context (multiple choice) run the context once: it is prefilled into a KV
    cache, copied per continuation, and only the continuations run after it (`prefix_sharing`), when
    that saves more context tokens than it runs continuation tokens through the cache;
  - `generate_until` decodes with the static KV cache (`slm.model.generate.Decoder`).
The prefix token (empty contexts, the first rolling window) is the tokenizer's end-of-text token, or the
newline token for tokenizers without one (the char tokenizer: Tiny Shakespeare separates documents by
blank lines).

Masked diffusion models (causal=false with a mask_token_id) are scored by slm.eval.lm_diffusion instead:
log-likelihoods are LLaDA's Monte Carlo estimate of the conditional ELBO (model_args mc_num, mc_batch,
seed), rolling ones a sum of such bounds (a NELBO), and generate_until runs the masked-diffusion sampler
(diffusion_block_length, diffusion_steps, diffusion_threshold). `SLMLM.estimator` says which estimator
scored a model; slm.eval.run records it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path

import torch
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import Collator, handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tqdm import tqdm

from slm.eval import lm_diffusion
from slm.model.cache import KVCache
from slm.model.generate import Decoder
from slm.model.weights import load_model, resolve_model_dir  # noqa: F401 (resolve_model_dir: part of this API)

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
HEAD_ROWS = 1 << 26  # logits computed at once: rows * vocab <= this (256 MiB in float32)


SHIPPED_TOKENIZERS = ("gpt2",)
"""Tokenizers that need no directory: `tokenizer=gpt2` is the GPT-2 BPE shipped with slm (eot 50256)."""


def load_eval_tokenizer(directory: str | Path):
    """An slm tokenizer saved in `directory` (slm_tokenizer.json), else a Hugging Face tokenizer directory
    (its eos_token, if any, is the end-of-text token); `gpt2` (no such directory): the shipped GPT-2 BPE."""
    from slm.data.tokenizers import HF_FILES, META_FILE, GPT2Tokenizer, HFTokenizer, load_tokenizer

    if str(directory) in SHIPPED_TOKENIZERS and not Path(directory).is_dir():
        return GPT2Tokenizer(eot=True)
    directory = Path(directory).expanduser()
    try:
        if (directory / META_FILE).is_file():
            return load_tokenizer(directory)
        if any((directory / f).is_file() for f in HF_FILES):
            tok = HFTokenizer(directory, eot=False)
            return HFTokenizer(directory, eot=True) if tok.eot_token is not None else tok
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as err:  # a damaged tokenizer file
        text = " ".join(str(err).split())[:300] or type(err).__name__
        raise ValueError(f"{directory}: cannot load the tokenizer ({type(err).__name__}: {text}); restore its "
                         "files or pass tokenizer=<dir>") from None
    raise FileNotFoundError(f"{directory}: no tokenizer ({META_FILE} or Hugging Face tokenizer files); "
                            "pass tokenizer=<dir> (or tokenizer=gpt2 for the GPT-2 BPE)")


def resolve_device(device: str | None, dtype: str = "auto") -> tuple[torch.device, torch.dtype]:
    """The device and dtype to evaluate with: `device`, else cuda when available (cuda without CUDA: cpu, with
    a warning, as lm-eval's default); dtype auto: bfloat16 on CUDA when supported, else float32."""
    if device and device.startswith("cuda") and not torch.cuda.is_available():
        log.warning("slm model: device=%s but CUDA is not available; using cpu", device)
        device = "cpu"
    try:
        resolved = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError as err:
        raise ValueError(f"device={device!r}: {' '.join(str(err).split())}") from None
    if dtype == "auto":
        dtype = "bfloat16" if resolved.type == "cuda" and torch.cuda.is_bf16_supported() else "float32"
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}: choose one of auto, {', '.join(DTYPES)}")
    return resolved, DTYPES[dtype]


def _as_bool(value) -> bool:
    return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")


def model_arg_names() -> frozenset[str]:
    """The `slm` model's argument names (SLMLM's and its diffusion settings). In a model_args string, a path value
    that names nothing on disk runs up to the first piece that starts with one of them (slm.eval.lm_args)."""
    import inspect

    params = inspect.signature(SLMLM.__init__).parameters
    return frozenset(n for n, p in params.items() if n != "self" and p.kind is p.POSITIONAL_OR_KEYWORD) \
        | frozenset(lm_diffusion.MODEL_ARGS)


@register_model("slm")
class SLMLM(TemplateLM):
    """lm-eval model over an slm checkpoint. Options (model_args): pretrained, tokenizer, batch_size,
    device, dtype (float32 | bfloat16 | float16 | auto), max_length (<= context_length), max_gen_toks,
    prefix_sharing (true), cuda_graph (false: generate_until batches vary in size); for diffusion models
    mc_num, mc_batch, seed, diffusion_block_length, diffusion_steps, diffusion_threshold (slm.eval.lm_diffusion)."""

    def __init__(self, pretrained: str, tokenizer: str | None = None, batch_size: int | str = 16,
                 device: str | None = None, dtype: str = "auto", max_length: int | None = None,
                 max_gen_toks: int = 256, prefix_sharing: bool = True, cuda_graph: bool = False,
                 max_batch_size: int | None = None, **unused):
        super().__init__()
        diffusion_args = {k: unused.pop(k) for k in lm_diffusion.MODEL_ARGS if k in unused}
        if unused and not Path(str(pretrained)).expanduser().exists():  # a path cut at a comma by lm-eval's CLI
            raise FileNotFoundError(
                f"{pretrained}: no such run or checkpoint directory; model_args {', '.join(sorted(unused))} may be "
                f"the rest of a path with commas, which lm-eval's parser cuts: quote it (pretrained=\"<path>\") "
                "or run slm-lm-eval / python -m slm.eval, which keep it whole")
        if unused:
            log.warning("slm model: ignoring unknown model_args %s", sorted(unused))
        self.model_dir = resolve_model_dir(pretrained)
        self._device, self.dtype = resolve_device(device, dtype)
        self.model = load_model(self.model_dir, self._device, self.dtype).eval()  # checked before allocating
        self.cfg = self.model.cfg
        self.tok = load_eval_tokenizer(tokenizer or self.model_dir)
        if self.tok.vocab_size > self.cfg.vocab_size:
            raise ValueError(f"tokenizer {self.tok.name} has {self.tok.vocab_size} ids but the model only "
                             f"{self.cfg.vocab_size}")
        if str(batch_size).startswith("auto"):
            log.warning("slm model: batch_size=auto is not supported; using 16")
            batch_size = 16
        self._batch_size = int(batch_size)
        self._max_length = int(max_length) if max_length is not None else self.cfg.context_length
        if not 1 < self._max_length <= self.cfg.context_length:
            raise ValueError(f"max_length={self._max_length} must be in 2..context_length={self.cfg.context_length}")
        self._max_gen_toks = int(max_gen_toks)
        self.prefix_sharing = _as_bool(prefix_sharing)
        self.cuda_graph = _as_bool(cuda_graph)
        self._prefix = self._choose_prefix_token()
        self.diffusion = lm_diffusion.diffusion_settings(self.cfg, diffusion_args)  # None: autoregressive

    # ------------------------------------------------------------------ lm-eval properties
    @property
    def eot_token_id(self) -> int:
        return self.tok.eot_id if self.tok.eot_id is not None else self._prefix

    @property
    def prefix_token_id(self) -> int:
        return self._prefix

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def max_gen_toks(self) -> int:
        return self._max_gen_toks

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def tokenizer_name(self) -> str:
        return self.tok.name

    @property
    def estimator(self) -> dict:
        """How log-likelihoods are computed: {"kind": "exact"}, or the diffusion estimate and its settings."""
        return self.diffusion.estimator() if self.diffusion is not None else {"kind": "exact"}

    def get_model_info(self) -> dict:
        return {"model_dir": str(self.model_dir), "model_family": self.cfg.family,
                "model_num_parameters": self.model.num_params(), "model_dtype": str(self.dtype),
                "tokenizer": self.tok.name, "estimator": self.estimator}

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> SLMLM:
        """`simple_evaluate(model="slm", model_args="pretrained=<path>,...")`: the path may hold commas
        (slm.eval.lm_args); other values are converted as lm-eval converts them."""
        from lm_eval.utils import handle_arg_string

        from slm.eval.lm_args import parse_model_args

        return cls.create_from_arg_obj(parse_model_args(arg_string, model_arg_names, handle_arg_string),
                                       additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> SLMLM:
        """As lm-eval's, except that a model_args value wins over the same key of `additional_config` (lm-eval's
        --batch_size, --device, which its CLI always passes: batch size 1 by default) instead of a TypeError."""
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None and k not in arg_dict}
        return cls(**arg_dict, **extra)

    def _choose_prefix_token(self) -> int:
        if self.tok.eot_id is not None:
            return self.tok.eot_id
        newline = self.tok_encode("\n")
        if len(newline) == 1:
            return newline[0]
        raise ValueError(f"tokenizer {self.tok.name} has no end-of-text token and no single newline token to "
                         "condition the first token on; save it with an eot token")

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        try:
            return self.tok.encode(string)
        except ValueError as err:  # e.g. a character the char tokenizer never saw, with unk off
            raise ValueError(f"cannot tokenize the task's text with {self.tok.name}: {err}") from None

    def tok_decode(self, tokens: list[int]) -> str:
        return self.tok.decode(tokens)

    # ------------------------------------------------------------------ scoring
    def _score(self, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden (M, d) at the positions that predict targets (M,) -> (log p(target) (M,), is argmax (M,)),
        in float32, the head applied in row blocks so (M, V) logits never exist at once."""
        lps, greedy = [], []
        step = max(1, HEAD_ROWS // self.cfg.vocab_size)
        for i in range(0, hidden.shape[0], step):
            logits = self.model.head(hidden[i:i + step]).float()  # (m, V)
            tgt = targets[i:i + step, None]
            lps.append((logits.gather(-1, tgt) - logits.logsumexp(-1, keepdim=True)).squeeze(-1))
            greedy.append(logits.argmax(-1) == tgt.squeeze(-1))
        return torch.cat(lps), torch.cat(greedy)

    def _finish(self, hidden: list[torch.Tensor], conts: list[list[int]]) -> list[tuple[float, bool]]:
        """Per request: hidden (len(cont), d) predicting cont -> (sum of log-probs, all greedy)."""
        lens = [len(c) for c in conts]
        targets = torch.tensor([t for c in conts for t in c], device=self.device)
        lp, greedy = self._score(torch.cat(hidden), targets)
        lp, greedy = lp.tolist(), greedy.tolist()
        out, at = [], 0
        for n in lens:
            out.append((float(sum(lp[at:at + n])), all(greedy[at:at + n])))
            at += n
        return out

    @torch.no_grad()
    def _run_plain(self, batch: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """(context, continuation) pairs as lm-eval's hf model runs them: input = (ctx + cont)[-(L+1):-1],
        right-padded into one forward."""
        L = self.max_length
        inputs = [(ctx + cont)[-(L + 1):][:-1] for ctx, cont in batch]
        width = max(len(x) for x in inputs)
        idx = torch.zeros(len(batch), width, dtype=torch.long)
        for b, x in enumerate(inputs):
            idx[b, :len(x)] = torch.tensor(x)
        h = self.model.hidden(idx.to(self.device))  # (B, width, d); padding only follows the scored positions
        hidden = [h[b, len(x) - len(cont):len(x)] for b, (x, (_, cont)) in enumerate(zip(inputs, batch))]
        return self._finish(hidden, [cont for _, cont in batch])

    @torch.no_grad()
    def _run_shared(self, groups: list[tuple[list[int], list[list[int]]]]) -> list[list[tuple[float, bool]]]:
        """Groups of (context, continuations): each context is prefilled once into a KV cache (rows padded
        to the longest), copied to one row per continuation, then the continuations run after it."""
        ctx_lens = [len(ctx) for ctx, _ in groups]
        cont_max = max(len(c) for _, conts in groups for c in conts)
        cache = KVCache(self.cfg, len(groups), max(ctx_lens) + cont_max - 1, self.device, self.dtype)
        idx = torch.zeros(len(groups), max(ctx_lens), dtype=torch.long)
        for g, (ctx, _) in enumerate(groups):
            idx[g, :len(ctx)] = torch.tensor(ctx)
        lengths = torch.tensor(ctx_lens, device=self.device)
        h = self.model.hidden(idx.to(self.device), cache, lengths)
        last = h[torch.arange(len(groups), device=self.device), lengths - 1]  # (G, d): predicts each cont[0]

        rows = [(g, cont) for g, (_, conts) in enumerate(groups) for cont in conts]
        hidden: list[torch.Tensor] = []
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start:start + self.batch_size]
            width = max(len(cont) for _, cont in chunk) - 1
            if width == 0:  # single-token continuations: the context's last position scores them all
                hidden += [last[g, None] for g, _ in chunk]
                continue
            sub = cache.select(torch.tensor([g for g, _ in chunk]))
            idx = torch.zeros(len(chunk), width, dtype=torch.long)
            for r, (_, cont) in enumerate(chunk):
                idx[r, :len(cont) - 1] = torch.tensor(cont[:-1])
            lens = torch.tensor([len(cont) - 1 for _, cont in chunk], device=self.device)
            hc = self.model.hidden(idx.to(self.device), sub, lens)  # (R, width, d)
            hidden += [torch.cat([last[g, None], hc[r, :len(cont) - 1]]) for r, (g, cont) in enumerate(chunk)]
        scores = self._finish(hidden, [cont for _, cont in rows])
        out, at = [], 0
        for _, conts in groups:
            out.append(scores[at:at + len(conts)])
            at += len(conts)
        return out

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        """requests: ((context, continuation) strings or None, context ids, continuation ids)."""
        if self.diffusion is not None:
            return lm_diffusion.loglikelihood_tokens(self, requests, disable_tqdm)
        L = self.max_length
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        by_context: dict[tuple, list[int]] = defaultdict(list)
        plain: list[int] = []
        for i, (_, ctx, cont) in enumerate(requests):
            if not ctx or not cont or len(cont) > L:
                raise ValueError(f"request {i}: needs a non-empty context and a continuation of 1..{L} tokens")
            if self.prefix_sharing and len(ctx) + len(cont) - 1 <= L:
                by_context[tuple(ctx)].append(i)
            else:
                plain.append(i)
        shared = []
        for ids in by_context.values():  # sharing pays when the context tokens saved outnumber the
            saved = (len(ids) - 1) * len(requests[ids[0]][1])  # continuation tokens run through the cache
            if len(ids) > 1 and saved > sum(len(requests[i][2]) - 1 for i in ids):
                shared.append(ids)
            else:
                plain += ids
        pbar = tqdm(total=len(requests), disable=disable_tqdm, desc="Running loglikelihood requests")

        # plain requests: lm-eval's order (longest first), batch_size at a time
        order = Collator(plain, sort_fn=lambda i: (-len(requests[i][1] + requests[i][2]),
                                                   tuple(requests[i][1] + requests[i][2])))
        for chunk in order.get_batched(n=self.batch_size):
            for i, score in zip(chunk, self._run_plain([(requests[i][1], requests[i][2]) for i in chunk])):
                results[i] = score
            pbar.update(len(chunk))

        # shared contexts: longest first, groups packed until batch_size continuations
        shared.sort(key=lambda ids: -(len(requests[ids[0]][1]) + max(len(requests[i][2]) for i in ids)))
        batch: list[list[int]] = []
        for ids in shared + [None]:
            if batch and (ids is None or sum(map(len, batch)) + len(ids) > self.batch_size):
                groups = [(requests[b[0]][1], [requests[i][2] for i in b]) for b in batch]
                for b, scores in zip(batch, self._run_shared(groups)):
                    for i, score in zip(b, scores):
                        results[i] = score
                pbar.update(sum(map(len, batch)))
                batch = []
            if ids is not None:
                batch.append(ids)
        pbar.close()

        for (key, _, _), score in zip(requests, results):
            if key is not None:
                self.cache_hook.add_partial("loglikelihood", key, score)
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Log-likelihood of whole documents: disjoint windows of max_length tokens, each conditioned on
        the tokens before it (lm-eval's get_rolling_token_windows with context_len=1, as the hf model).
        A diffusion model's is a bound, not an exact log-likelihood: the sum of each window's conditional
        ELBO (-NELBO), its context the preceding tokens that fit max_length with the window."""
        windows, owner = [], []
        for r, (string,) in enumerate(req.args for req in requests):
            for ctx, cont in map(make_disjoint_window, get_rolling_token_windows(
                    token_list=self.tok_encode(string), prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length, context_len=1)):
                windows.append((None, ctx, cont))
                owner.append(r)
        scores = self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm)
        totals = [0.0] * len(requests)
        for r, (lp, _) in zip(owner, scores):
            totals[r] += lp
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    # ------------------------------------------------------------------ generation
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy (or sampled, per the task's gen_kwargs) continuations, cut at the first stop string.
        Contexts keep their last max_length - max_gen_toks tokens (half the context if max_gen_toks does
        not leave that much room, and generation then ends at the context's end). Diffusion models decode
        with their sampler (slm.eval.lm_diffusion.generate)."""
        encoded: dict[str, list[int]] = {}

        def enc(text: str) -> list[int]:
            if text not in encoded:
                encoded[text] = self.tok_encode(text)
            return encoded[text]

        order = Collator([req.args for req in requests], sort_fn=lambda x: (-len(enc(x[0])), x[0]),
                         group_by="gen_kwargs", group_fn=lambda x: x[1])
        eos = self.tok_decode([self.tok.eot_id]) if self.tok.eot_id is not None else None
        pbar = tqdm(total=len(requests), disable=disable_tqdm, desc="Running generate_until requests")
        res = []
        for chunk in order.get_batched(n=self.batch_size):
            contexts, all_kwargs = zip(*chunk)
            kwargs = normalize_gen_kwargs(all_kwargs[0], self.max_gen_toks)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            max_gen = kwargs.pop("max_gen_toks")
            sampled = bool(kwargs.get("do_sample")) and float(kwargs.get("temperature", 0.0)) > 0
            temperature = float(kwargs.get("temperature", 0.0)) if sampled else 0.0
            room = self.max_length - max_gen if max_gen < self.max_length else self.max_length // 2
            prompts = [enc(c)[-room:] or [self.prefix_token_id] for c in contexts]
            eot = () if self.tok.eot_id is None else (self.tok.eot_id,)
            if self.diffusion is not None:  # the whole canvas must fit the context
                outs = lm_diffusion.generate(self, prompts, min(max_gen, self.max_length - room), temperature, eot)
            else:
                stops = [s for s in until if s]

                def stop(row: int, ids: list[int]) -> bool:
                    text = self.tok_decode(ids)
                    return any(s in text for s in stops)

                decoder = Decoder(self.model, batch_size=len(prompts),
                                  capacity=max(map(len, prompts)) + max_gen - 1, cuda_graph=self.cuda_graph)
                outs = decoder.generate(
                    prompts, max_gen, temperature=temperature, top_k=kwargs.get("top_k") if sampled else None,
                    top_p=kwargs.get("top_p") if sampled else None, stop_tokens=eot, stop=stop if stops else None)
            for context, gen_kwargs, ids in zip(contexts, all_kwargs, outs):
                text = postprocess_generated_text(self.tok_decode(ids), until, None)
                res.append(text)
                self.cache_hook.add_partial("generate_until", (context, gen_kwargs), text)
            pbar.update(len(chunk))
        pbar.close()
        return order.get_original(res)
