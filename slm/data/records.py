"""Post-training records as training data (`data.records`): SFT's prompt/completion records or preference pairs,
tokenized once, batched as a pure function of (seed, step) like the token windows (so a resumed run continues
exactly), each batch right-padded to its longest sequence.

A sequence is the prompt's ids, then a completion's ids: the prompt and the completion are tokenized apart (their
boundary is a token boundary), and only the completion's tokens are scored. No start token is added, as lm-eval's
generation and slm-pairs' sampling read a prompt; an empty prompt is the tokenizer's end-of-text id alone. A batch is a dict of tensors:

- `ids` (N, T) int64: the sequences, right-padded with the pad id (in a causal model the padding after a sequence
  does not change its logits);
- `scored` (N, T - 1) bool: where the target ids[:, 1:] is a completion token;
- preference pairs only: N = 2b rows, the b chosen completions then the b rejected ones (TRL's concatenated batch),
  `index` (b,) each pair's line in its file (counting records), and `ref` (2b,) float32, the reference model's
  summed log-probs of each row when they were precomputed (slm.objectives.reference_cache).

The records file is read by slm.data.preference_records (one line for a bad record); a sequence longer than the
model's context is refused, never truncated.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from slm.data.errors import DataError
from slm.data.preference_records import Tokenize, read_preference_records, read_sft_records
from slm.data.config import RecordsSettings

KINDS = ("sft", "preference")
"""What a records file holds: prompt/completion (sft) or prompt/chosen/rejected (preference)."""
VALID_SEED = 0
"""The permutation that picks the held-out records when data.records.valid is null: one for every run and seed."""


def pad_rows(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int,
             context_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids (N, T), scored (N, T − 1)): each prompt + completion right-padded with pad_id to the longest, and
    where the target ids[:, 1:] is a completion token. A DataError (one line) for an empty prompt or completion
    or a sequence longer than context_length + 1 (the model reads all but the last token)."""
    if len(prompts) != len(completions) or not prompts:
        raise ValueError(f"{len(prompts)} prompts and {len(completions)} completions: give one completion per "
                         "prompt, at least one")
    for row, (prompt, completion) in enumerate(zip(prompts, completions)):
        problem = ("an empty prompt: prepend a start token (e.g. the tokenizer's eot)" if not prompt else
                   "an empty completion" if not completion else None)
        total = len(prompt) + len(completion)
        if total > context_length + 1:
            problem = f"{total} tokens ({len(prompt)} + {len(completion)}), longer than the model's " \
                      f"context_length {context_length} + 1 (sequences are not truncated)"
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


def tokenize_pairs(records, tokenize: Tokenize, bos: int | None = None) -> tuple[list[list[int]], list[list[int]]]:
    """(prompts, completions) of 2B rows from B PreferenceRecords: the B chosen completions, then the B rejected
    ones (TRL's concatenated batch), each prompt tokenized apart from its completion; `bos` prepended to every
    prompt."""
    start = [] if bos is None else [bos]
    prompts = [start + list(tokenize(r.prompt)) for r in records]
    completions = [list(tokenize(r.chosen)) for r in records] + [list(tokenize(r.rejected)) for r in records]
    return prompts + prompts, completions


@dataclass
class EncodedRecords:
    """One split's records as token ids."""

    kind: str
    """sft or preference (KINDS)."""
    path: Path
    """The file they were read from."""
    prompts: list[list[int]]
    """Each record's prompt ids (an empty prompt: the end-of-text id)."""
    completions: list[list[list[int]]]
    """Each record's completion ids: [completion] (sft) or [chosen, rejected] (preference)."""
    lines: np.ndarray
    """(n,) each record's position among its file's records (the reference cache's row)."""
    completion_bytes: int = 0
    """UTF-8 bytes of the scored completions (the chosen ones of pairs): for bits per byte."""
    ref: torch.Tensor | None = None
    """(n, completions) the reference model's summed log-probs of each completion, when precomputed."""

    def __len__(self) -> int:
        return len(self.prompts)

    def scored_tokens(self) -> int:
        """Completion tokens validation scores (sft: each completion; preference: the chosen ones)."""
        return sum(len(c[0]) for c in self.completions)

    def mean_tokens(self) -> float:
        """Tokens per record, every sequence counted (a pair's two)."""
        return sum(len(p) * len(c) + sum(map(len, c)) for p, c in zip(self.prompts, self.completions)) / len(self)

    def batch(self, rows: Sequence[int], pad_id: int, context_length: int) -> dict[str, torch.Tensor]:
        """The batch of records `rows` (positions in this split), the module docstring's dict."""
        rows = list(rows)
        per = len(self.completions[0])
        prompts = [self.prompts[r] for k in range(per) for r in rows]  # chosen rows, then rejected rows
        completions = [self.completions[r][k] for k in range(per) for r in rows]
        ids, scored = pad_rows(prompts, completions, pad_id, context_length)
        out = {"ids": ids, "scored": scored}
        if self.kind == "preference":
            out["index"] = torch.from_numpy(self.lines[rows])
            if self.ref is not None:
                out["ref"] = torch.cat([self.ref[rows, k] for k in range(per)])
        return out


@dataclass
class PreparedRecords:
    """The train and validation records of a run, tokenized and checked."""

    kind: str
    train: EncodedRecords
    valid: EncodedRecords
    files: dict[str, str] = field(default_factory=dict)
    """{split: the file's sha256}: what the record names."""

    def bytes_per_token(self, split: str, limit: int | None = None) -> float | None:
        """UTF-8 bytes per scored completion token of a split ("valid" or "train"), for bits per byte."""
        part = self.valid if split == "valid" else self.train if split == "train" else None
        tokens = part.scored_tokens() if part is not None else 0
        return part.completion_bytes / tokens if tokens else None

    def describe(self) -> dict:
        return {"kind": self.kind, "train": str(self.train.path), "valid": str(self.valid.path),
                "train_records": len(self.train), "valid_records": len(self.valid), "sha256": dict(self.files),
                "scored_tokens": {"train": self.train.scored_tokens(), "valid": self.valid.scored_tokens()}}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _encode(path: Path, kind: str, tokenize: Tokenize, bos: int | None, context_length: int,
            keep: np.ndarray | None = None) -> EncodedRecords:
    room = context_length + 1  # the model reads all but the last token
    if kind == "sft":
        records = read_sft_records(path, tokenize=tokenize, context_length=room)
        texts = [[r.completion] for r in records]
    else:
        records = read_preference_records(path, tokenize=tokenize, context_length=room)
        texts = [[r.chosen, r.rejected] for r in records]
    lines = np.arange(len(records)) if keep is None else keep
    return EncodedRecords(kind, path, [_prompt_ids(records[i].prompt, tokenize, bos, path) for i in lines],
                          [[list(tokenize(t)) for t in texts[i]] for i in lines], lines,
                          sum(len(texts[i][0].encode()) for i in lines))


def _prompt_ids(prompt: str, tokenize: Tokenize, bos: int | None, path: Path) -> list[int]:
    """The prompt's ids; an empty prompt is the start token alone (a tokenizer without one refuses it)."""
    if prompt:
        return list(tokenize(prompt))
    if bos is None:
        raise DataError(f"{path}: a record has an empty prompt, and the tokenizer has no end-of-text id to start the "
                        "sequence with: give every record a prompt, or set tokenizer.eot=true")
    return [bos]


def prepare_records(settings: RecordsSettings, kind: str, tokenizer, context_length: int) -> PreparedRecords:
    """The records of `settings` for an objective that trains on `kind` records, read, checked and tokenized with the
    run's tokenizer; a DataError (one line) for a missing or bad file or a split left empty."""
    if kind not in KINDS:
        raise ValueError(f"records kind {kind!r}: one of {', '.join(KINDS)}")
    tokenize, bos = tokenizer.encode, tokenizer.eot_id
    train_path = Path(settings.train).expanduser()
    if settings.valid is not None:
        train = _encode(train_path, kind, tokenize, bos, context_length)
        valid = _encode(Path(settings.valid).expanduser(), kind, tokenize, bos, context_length)
    else:
        whole = _encode(train_path, kind, tokenize, bos, context_length)
        n = len(whole)
        held = max(1, round(settings.valid_fraction * n))
        if held >= n:
            raise DataError(f"data.records.train={settings.train}: {n} record{'' if n == 1 else 's'}, too few to hold "
                            f"out data.records.valid_fraction={settings.valid_fraction:g} and train on the rest; give "
                            "more records or data.records.valid")
        order = np.random.default_rng(VALID_SEED).permutation(n)
        valid_rows, train_rows = np.sort(order[:held]), np.sort(order[held:])
        train, valid = (_subset(whole, rows) for rows in (train_rows, valid_rows))
    files = {"train": _sha256(train.path), **({"valid": _sha256(valid.path)} if settings.valid is not None else {})}
    return PreparedRecords(kind, train, valid, files)


def _subset(records: EncodedRecords, rows: np.ndarray) -> EncodedRecords:
    scored = [records.completions[i][0] for i in rows]
    share = sum(map(len, scored)) / max(1, records.scored_tokens())
    return EncodedRecords(records.kind, records.path, [records.prompts[i] for i in rows],
                          [records.completions[i] for i in rows], records.lines[rows],
                          round(records.completion_bytes * share))


class RecordOrder:
    """Which training records step s trains on: a pure function of (seed, s). Example i = s·B + j (j < B) of the
    run is record perm_e[i mod n] of epoch e = i div n, each epoch its own seeded permutation."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n, self.B, self.seed = n, batch_size, seed
        self._epoch: tuple[int, np.ndarray] | None = None

    def _perm(self, epoch: int) -> np.ndarray:
        if self._epoch is None or self._epoch[0] != epoch:
            self._epoch = (epoch, np.random.default_rng([self.seed, epoch]).permutation(self.n))
        return self._epoch[1]

    def rows(self, step: int, lo: int = 0, hi: int | None = None) -> list[int]:
        """Record positions of rows lo..hi of step `step`'s batch."""
        hi = self.B if hi is None else hi
        out = []
        for i in range(step * self.B + lo, step * self.B + hi):
            out.append(int(self._perm(i // self.n)[i % self.n]))
        return out
