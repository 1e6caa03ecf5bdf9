"""The six MAD tasks (Poli et al., arXiv 2403.17844) as prompt/completion pairs of characters.

Every task draws from one small alphabet (ALPHABET, 28 characters), so a character tokenizer fitted on it encodes
every task with the same ids. A task is a function `(rng) -> (prompt, completion)` of a `random.Random`; its sizes
are the module's constants (chosen so that a 4-layer, 64-wide model learns something in a few hundred steps on one
CPU thread; MAD's own are larger: sequences of 128-256 tokens).

| task | prompt | completion |
| --- | --- | --- |
| recall | 12 key/value pairs (a key always maps to the same value), `?`, a key shown | its value |
| fuzzy_recall | 8 pairs of 1-2-character keys and 1-2-character values (no key a prefix of another), `?`, a key | its value |
| noisy_recall | as recall, each pair but the queried one replaced by 2 noise characters with probability 1/4 | its value |
| selective_copy | 6 characters scattered among 18 blanks `.`, then `|` | the 6 characters in order |
| compression | 20 random characters, then `|` | the 20 characters again |
| memorization | 4 keys of 2 characters, then `=`; a key's value is fixed by the seed for every record | the 4 values |

In a causal model compression is a copy of the prompt (MAD's compression squeezes the sequence through one
position of an encoder; a prompt/completion record cannot), and memorization's held-out records ask the same 64
facts in other combinations (it measures what the weights hold, not generalisation).
"""

from __future__ import annotations

import random
from itertools import product
from typing import Callable

KEYS = "abcdefgh"
"""Key characters (recall tasks, memorization's 2-character keys)."""
VALUES = "01234567"
"""Value characters."""
NOISE = "qrstuvwx"
"""Noise characters (noisy_recall)."""
QUERY, BLANK, MARK, INSERT = "?", ".", "|", "="
"""The query marker, selective copying's blank, the copy/compress marker, memorization's insert marker."""
ALPHABET = KEYS + VALUES + NOISE + QUERY + BLANK + MARK + INSERT
"""Every character any task writes."""
SYMBOLS = KEYS + VALUES
"""What copying and compression draw from."""

RECALL_PAIRS = 12
FUZZY_PAIRS = 8
FUZZY_MOTIF = 2
"""Longest key or value of fuzzy_recall, in characters."""
NOISE_RATE = 0.25
COPY_TOKENS, COPY_BLANKS = 6, 18
COMPRESS_TOKENS = 20
MEMORY_KEYS = 4
"""Keys a memorization record asks."""

Task = Callable[[random.Random], tuple[str, str]]


def _pairs(rng: random.Random, n: int, noise: float) -> tuple[str, str]:
    """(prompt, completion) of recall: n pair slots, one map per record, the query a key shown."""
    mapping = {k: rng.choice(VALUES) for k in KEYS}
    keys = [rng.choice(KEYS) for _ in range(n)]
    asked = rng.randrange(n)  # the slot whose key is queried: never noise
    parts = []
    for slot, key in enumerate(keys):
        if slot != asked and noise and rng.random() < noise:
            parts.append(rng.choice(NOISE) + rng.choice(NOISE))
        else:
            parts.append(key + mapping[key])
    return "".join(parts) + QUERY + keys[asked], mapping[keys[asked]]


def recall(rng: random.Random) -> tuple[str, str]:
    return _pairs(rng, RECALL_PAIRS, 0.0)


def noisy_recall(rng: random.Random) -> tuple[str, str]:
    return _pairs(rng, RECALL_PAIRS, NOISE_RATE)


def _motif(rng: random.Random, chars: str) -> str:
    return "".join(rng.choice(chars) for _ in range(rng.randint(1, FUZZY_MOTIF)))


def fuzzy_recall(rng: random.Random) -> tuple[str, str]:
    """Keys and values of 1-FUZZY_MOTIF characters; the keys of a record prefix-free, so a query is unambiguous."""
    mapping: dict[str, str] = {}
    parts = []
    while len(parts) < FUZZY_PAIRS:
        key = _motif(rng, KEYS)
        if key not in mapping:
            if any(k.startswith(key) or key.startswith(k) for k in mapping):
                continue
            mapping[key] = _motif(rng, VALUES)
        parts.append(key + mapping[key])
    asked = rng.choice(sorted(mapping))
    return "".join(parts) + QUERY + asked, mapping[asked]


def selective_copy(rng: random.Random) -> tuple[str, str]:
    tokens = [rng.choice(SYMBOLS) for _ in range(COPY_TOKENS)]
    slots = sorted(rng.sample(range(COPY_TOKENS + COPY_BLANKS), COPY_TOKENS))
    prompt = [BLANK] * (COPY_TOKENS + COPY_BLANKS)
    for slot, token in zip(slots, tokens):
        prompt[slot] = token
    return "".join(prompt) + MARK, "".join(tokens)


def compression(rng: random.Random) -> tuple[str, str]:
    text = "".join(rng.choice(SYMBOLS) for _ in range(COMPRESS_TOKENS))
    return text + MARK, text


def memory_map(seed: int) -> dict[str, str]:
    """memorization's facts: every 2-character key (64) to a value, fixed by the seed."""
    rng = random.Random(f"memorization-map:{seed}")
    return {a + b: rng.choice(VALUES) for a, b in product(KEYS, KEYS)}


def memorization(rng: random.Random, facts: dict[str, str]) -> tuple[str, str]:
    keys = [rng.choice(sorted(facts)) for _ in range(MEMORY_KEYS)]
    return "".join(keys) + INSERT, "".join(facts[k] for k in keys)


TASKS = ("recall", "fuzzy_recall", "noisy_recall", "selective_copy", "compression", "memorization")
"""The tasks, in MAD's order (its names shortened)."""


def task(name: str, seed: int) -> Task:
    """The generator of task `name` (TASKS) at `seed` (memorization's facts depend on it)."""
    if name == "memorization":
        facts = memory_map(seed)
        return lambda rng: memorization(rng, facts)
    return {"recall": recall, "fuzzy_recall": fuzzy_recall, "noisy_recall": noisy_recall,
            "selective_copy": selective_copy, "compression": compression}[name]
