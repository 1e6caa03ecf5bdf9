"""The probes' files (`slm-probes <dir>`), each written atomically (slm.atomic):

  <task>_train.jsonl, <task>_valid.jsonl
                                  TRL prompt/completion records of each task
  manifest.json                   the settings and what each file holds

The tokenizer's text is not a file: data=probes's source (kind probes, slm.data.sources) is the alphabet
(slm.probes.tasks.ALPHABET), so a char tokenizer has the same ids for every task and run.

A record's split is decided by a hash of its prompt (VALID_SHARE of prompts are validation), whatever the seed: the
splits never share a prompt, at any seed. Records are drawn from one seeded stream per task and kept where their
prompt belongs until both splits are full, so the files are a function of (task, seed, sizes).

    manifest = write_probes(Path("probes"), ProbeSizes(train=8000, valid=256), seed=0)
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from slm.atomic import atomic_write
from slm.probes.tasks import ALPHABET, TASKS, task

MANIFEST = "manifest.json"
VALID_SHARE = 8
"""One prompt in VALID_SHARE belongs to the validation split (by its hash)."""
MAX_DRAWS = 50
"""Draws per record wanted before giving up (a task with too few distinct prompts for the sizes)."""


@dataclass(frozen=True)
class ProbeSizes:
    """How many records each task's files hold."""

    train: int = 8000
    """Training records per task (duplicates allowed, as MAD draws them)."""
    valid: int = 256
    """Validation records per task (distinct prompts)."""


def split_of(prompt: str) -> str:
    """"valid" for one prompt in VALID_SHARE (by its SHA-256), else "train"."""
    return "valid" if hashlib.sha256(prompt.encode()).digest()[0] % VALID_SHARE == 0 else "train"


def generate(name: str, seed: int, sizes: ProbeSizes) -> dict[str, list[dict]]:
    """{"train": [...], "valid": [...]}: task `name`'s records ({"prompt", "completion"}) at `seed`."""
    make, rng = task(name, seed), random.Random(f"{name}:{seed}")
    out: dict[str, list[dict]] = {"train": [], "valid": []}
    want = {"train": sizes.train, "valid": sizes.valid}
    seen: set[str] = set()  # validation prompts: each once
    draws = MAX_DRAWS * (sizes.train + sizes.valid)
    for _ in range(draws):
        if all(len(out[s]) >= want[s] for s in out):
            return out
        prompt, completion = make(rng)
        split = split_of(prompt)
        if len(out[split]) >= want[split] or prompt in seen:
            continue
        if split == "valid":
            seen.add(prompt)
        out[split].append({"prompt": prompt, "completion": completion})
    if all(len(out[s]) >= want[s] for s in out):
        return out
    raise ValueError(f"{name}: {len(out['train'])} train and {len(out['valid'])} valid records after {draws} draws: "
                     "ask for fewer")


def _write(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def write_probes(out: Path, sizes: ProbeSizes = ProbeSizes(), seed: int = 0, tasks=TASKS) -> dict:
    """Write each task's files into `out` (made if missing); the manifest's contents. Every record is
    drawn before anything is written."""
    drawn = {name: generate(name, seed, sizes) for name in tasks}
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict] = {}
    for name, records in drawn.items():
        for split, rows in records.items():
            _write(out / f"{name}_{split}.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
            longest = max(len(r["prompt"]) + len(r["completion"]) for r in rows)
            files[f"{name}_{split}.jsonl"] = {"records": len(rows), "longest_characters": longest}
    manifest = {"seed": seed, "sizes": asdict(sizes), "tasks": list(tasks), "alphabet": ALPHABET, "files": files}
    _write(out / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return manifest
