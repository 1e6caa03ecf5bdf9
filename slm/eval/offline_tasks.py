"""Documents of the offline lm-eval tasks, built deterministically from the Tiny Shakespeare test split
shipped in `slm/data/corpora` (no network, no files written). The task YAMLs in `slm/eval/tasks/` load
them through lm-eval's `custom_dataset` hook.

slm_shakespeare_ppl  loglikelihood_rolling over documents of consecutive speeches (>= 1000 characters,
                     cut at speech boundaries): word/byte perplexity and bits per byte.
slm_shakespeare_mc   multiple-choice continuation: a speaker's name, the first one or two lines of a
                     speech and the first half of its next line (context; cut at the space nearest the
                     middle), the rest of that line (the answer) and three second halves of lines from
                     other speeches (distractors, chosen with lengths close to the answer's so that length
                     alone does not give it away), in a seeded order. Completing a line tests local
                     syntax and sense, which even small models pick up.

The test split is never used for training (slm trains on train and validates on valid).
"""

from __future__ import annotations

import random
from functools import lru_cache
from importlib import resources

CORPUS = "corpora/tiny_shakespeare/test.txt"
PPL_DOC_CHARS = 1000
MC_CONTEXT_LINES = 2
MC_DISTRACTORS = 3
MC_CANDIDATES = 24  # random candidate lines per question; the distractors are the closest in length


@lru_cache(maxsize=1)
def speeches() -> tuple[tuple[str, ...], ...]:
    """The test split's speeches (blocks between blank lines), each as its lines: ("NAME:", verse, ...)."""
    text = resources.files("slm.data").joinpath(CORPUS).read_text(encoding="utf-8")
    return tuple(tuple(block.split("\n")) for block in text.split("\n\n") if block.strip())


def ppl_documents() -> list[dict]:
    """[{"text": ...}]: consecutive speeches joined by blank lines, each document >= PPL_DOC_CHARS characters
    (the last one may be shorter)."""
    docs, current = [], []
    for speech in speeches():
        current.append("\n".join(speech))
        if sum(len(s) + 2 for s in current) >= PPL_DOC_CHARS:
            docs.append({"text": "\n\n".join(current)})
            current = []
    if current:
        docs.append({"text": "\n\n".join(current)})
    return docs


def split_line(line: str) -> tuple[str, str] | None:
    """(head, tail) of a line cut at the space nearest its middle (tail starts with that space), or None
    for a line without an inner space."""
    spaces = [i for i, ch in enumerate(line) if ch == " " and 0 < i < len(line) - 1]
    if not spaces:
        return None
    cut = min(spaces, key=lambda i: (abs(i - len(line) // 2), i))
    return line[:cut], line[cut:]


def mc_documents() -> list[dict]:
    """[{"context", "choices", "label"}], one per speech with at least two lines of verse whose next line
    can be cut in two."""
    all_speeches = speeches()
    pool = [(i, parts[1]) for i, speech in enumerate(all_speeches) for line in speech[1:]
            if (parts := split_line(line))]
    docs = []
    for i, speech in enumerate(all_speeches):
        verse = [line for line in speech[1:] if line.strip()]
        if len(verse) < 2:
            continue
        k = min(MC_CONTEXT_LINES, len(verse) - 1)
        parts = split_line(verse[k])
        if parts is None:
            continue
        head, answer = parts
        context = "\n".join((speech[0], *verse[:k], head))
        rng = random.Random(f"slm_shakespeare_mc/{len(docs)}")
        candidates: list[str] = []
        while len(candidates) < MC_CANDIDATES:
            j, tail = pool[rng.randrange(len(pool))]
            if j != i and tail != answer and tail not in candidates:
                candidates.append(tail)
        candidates.sort(key=lambda tail: (abs(len(tail) - len(answer)), tail))
        choices = [answer] + candidates[:MC_DISTRACTORS]
        rng.shuffle(choices)
        docs.append({"context": context, "choices": choices, "label": choices.index(answer)})
    return docs


def _dataset(docs: list[dict]):
    import datasets

    return datasets.DatasetDict({"test": datasets.Dataset.from_list(docs)})


def ppl_dataset(**metadata):
    """lm-eval `custom_dataset` hook (gets the task metadata, unused): {"test": ppl documents}."""
    return _dataset(ppl_documents())


def mc_dataset(**metadata):
    """lm-eval `custom_dataset` hook (gets the task metadata, unused): {"test": multiple-choice documents}."""
    return _dataset(mc_documents())
