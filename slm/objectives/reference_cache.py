"""Reference log-probs computed once per (records file, tokenizer, reference checkpoint) and cached on disk, so
DPO-style training needs no second model in memory.

The key is the sha256 of: the records file's bytes, the tokenizer's identity (its fingerprint), the start token,
and the reference checkpoint's config.json and model.safetensors bytes. The cache file
(`<cache_dir>/reference-<key[:24]>.json`) holds the key, the record count and each record's summed chosen and
rejected completion log-probs; it is written atomically (slm.atomic: a temporary file beside it, fsynced, renamed),
so an interrupted write leaves no partial file. On a hit the reference model is never loaded; a cache file that
cannot be read, names another key or holds another count is recomputed, with one note on stderr.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from pathlib import Path
from typing import Callable, NamedTuple

import torch
from torch import Tensor, nn

from slm.atomic import atomic_write
from slm.data.preference_records import Tokenize, read_preference_records
from slm.model.weights import CONFIG_FILE, WEIGHTS_FILE, load_model, resolve_model_dir
from slm.data.records import tokenize_pairs
from slm.objectives.completion_logprobs import completion_logprobs

FORMAT = 2
"""The cache file's format version (part of the key)."""


class ReferenceLogprobs(NamedTuple):
    """The reference model's summed completion log-probs of every record, in file order."""

    chosen: Tensor  # (B,) float32 log π_ref(y_w | x)
    rejected: Tensor  # (B,) float32 log π_ref(y_l | x)

    def batch(self, index: Tensor) -> tuple[Tensor, Tensor]:
        """((b,), (b,)) the rows of a batch of records, for preference_pairs(reference=...)."""
        return self.chosen[index], self.rejected[index]


def _file_hash(path: Path, digest) -> None:
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)


def cache_key(records_path: str | os.PathLike, tokenizer_id: str, reference: str | os.PathLike | list[Path],
              bos: int | None = None, rows: str = "") -> str:
    """The sha256 (hex) of what decides the reference log-probs (module docstring); `reference` a run or
    checkpoint directory, or the files that hold the reference's config and weights (a training checkpoint file);
    `rows`, which of the file's records (empty: all of them)."""
    digest = hashlib.sha256(f"slm reference log-probs v{FORMAT}\0{tokenizer_id}\0{bos}\0".encode())
    if isinstance(reference, list):
        files = reference
    else:
        model_dir = resolve_model_dir(reference)
        files = [model_dir / CONFIG_FILE, model_dir / WEIGHTS_FILE]
    for path in (Path(records_path), *files):
        _file_hash(path, digest)
        digest.update(b"\0")
    if rows:
        digest.update(f"rows {rows}\0".encode())
    return digest.hexdigest()


def cache_path(cache_dir: str | os.PathLike, key: str) -> Path:
    return Path(cache_dir) / f"reference-{key[:24]}.json"


def _read_cache(path: Path, key: str, count: int) -> ReferenceLogprobs | str | None:
    """The cached log-probs; None without a file; what is wrong with it, in words, when it is unusable."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_bytes())
        chosen, rejected = data["chosen"], data["rejected"]
        if data["key"] != key:
            return "made for other records, tokenizer or reference"
        if data["count"] != count or len(chosen) != count or len(rejected) != count:
            return f"holds {data['count']} records, the file has {count}"
        values = torch.tensor([chosen, rejected], dtype=torch.float64)
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"unreadable ({type(err).__name__})"
    if not torch.isfinite(values).all():
        return "holds values that are not finite"
    return ReferenceLogprobs(values[0].float(), values[1].float())


def compute_reference(model: nn.Module, prompts: list[list[int]], completions: list[list[int]], pad_id: int,
                      batch_size: int) -> ReferenceLogprobs:
    """Summed completion log-probs of 2B rows (chosen then rejected), in eval mode without grad, `batch_size`
    rows per forward."""
    model.eval()
    sums = []
    with torch.no_grad():
        for start in range(0, len(prompts), batch_size):
            rows = slice(start, start + batch_size)
            sums.append(completion_logprobs(model, prompts[rows], completions[rows], pad_id)[0].cpu())
    flat = torch.cat(sums)  # (2B,)
    B = len(prompts) // 2
    return ReferenceLogprobs(flat[:B], flat[B:])


def reference_logprobs(records_path: str | os.PathLike, reference: str | os.PathLike, *, tokenize: Tokenize,
                       tokenizer_id: str, pad_id: int, cache_dir: str | os.PathLike, bos: int | None = None,
                       batch_size: int = 16, device: torch.device | str = "cpu",
                       load: Callable[..., nn.Module] = load_model) -> ReferenceLogprobs:
    """The reference checkpoint's log-probs of every record of `records_path`, from the cache or computed (the
    model loaded by `load(model_dir, device)`, only then) and cached. `tokenizer_id` names the tokenizer that
    `tokenize` is (Tokenizer.fingerprint())."""
    records = read_preference_records(records_path)
    key = cache_key(records_path, tokenizer_id, reference, bos)
    return cached_logprobs(key, *tokenize_pairs(records, tokenize, bos), cache_dir=cache_dir, pad_id=pad_id,
                           load=lambda: load(resolve_model_dir(reference), device), batch_size=batch_size,
                           what=f"{records_path} from {reference}")


def cached_logprobs(key: str, prompts: list[list[int]], completions: list[list[int]], *, cache_dir, pad_id: int,
                    load: Callable[[], nn.Module], batch_size: int = 16, what: str = "the records") -> ReferenceLogprobs:
    """The reference log-probs of 2B rows (chosen then rejected) under `key` (cache_key): read from the cache, or
    computed by the model `load()` returns (called only then) and cached atomically."""
    count = len(prompts) // 2
    path = cache_path(cache_dir, key)
    cached = _read_cache(path, key, count)
    if isinstance(cached, ReferenceLogprobs):
        return cached
    if cached is not None:
        print(f"note: {path}: {cached}; recomputing the reference log-probs", file=sys.stderr, flush=True)
    model = load()
    out = compute_reference(model, prompts, completions, pad_id, batch_size)
    del model
    payload = {"key": key, "count": count, "records": what,
               "chosen": [float(v) for v in out.chosen], "rejected": [float(v) for v in out.rejected]}
    if not all(math.isfinite(v) for v in payload["chosen"] + payload["rejected"]):
        raise ValueError(f"reference log-probs of {what} are not finite: the reference checkpoint's weights are "
                         "broken")
    text = json.dumps(payload) + "\n"
    atomic_write(path, lambda f: f.write(text.encode()), verb="caching reference log-probs in")
    return out
