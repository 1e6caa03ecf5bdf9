"""Preference pairs from a teacher's samples: k completions per prompt, each labelled by the verifier, a pair =
(a verified-correct sample, a verified-incorrect one) of the same prompt. Standard library only: the sampling
itself is the caller's (`slm-pairs`, slm/cli/pairs.py, samples a finished run's model with slm.model.generate).

    labelled = [label(item, texts) for item, texts in zip(items, samples)]   # each sample's verdict
    records, summary = make_pairs(labelled, seed=0)                          # TRL prompt/chosen/rejected + counts

Correct means `exact` (the calls equal the gold's). A sample is cut at its first newline and keeps the newline
(as the SFT completions do). One pair per prompt: the chosen is the prompt's most frequent correct sample, the
rejected a seeded draw among its distinct incorrect ones; an incorrect sample whose first line is blank cannot be a
completion (the record readers refuse it) and is never drawn. A prompt gives no pair when every sample is correct
(`all_correct`), none is (`none_correct`), or its only incorrect samples are blank (`only_blank_incorrect`).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from slm.toolcall.verifier import RATES, Verdict, verify

NO_PAIR = ("all_correct", "none_correct", "only_blank_incorrect")


@dataclass(frozen=True)
class Sample:
    """One sampled completion (its first line and the newline) and its verdict."""

    text: str
    verdict: Verdict


def completion(text: str) -> str:
    """A sample as a completion: its first line and a newline."""
    return text.split("\n", 1)[0] + "\n"


def label(item: dict, texts: list[str]) -> tuple[dict, list[Sample]]:
    """(item, its samples each cut at the first newline and verified)."""
    return item, [Sample(completion(t), verify(item, t)) for t in texts]


def pair(item: dict, samples: list[Sample], seed: int = 0) -> tuple[dict | None, str | None]:
    """(the TRL preference record, None) for one prompt's samples, or (None, the reason in NO_PAIR)."""
    correct = Counter(s.text for s in samples if s.verdict.exact)
    wrong = sorted({s.text for s in samples if not s.verdict.exact and s.text.strip()})
    if not correct:
        return None, "none_correct"
    if not wrong:
        return None, "all_correct" if all(s.verdict.exact for s in samples) else "only_blank_incorrect"
    chosen = min(correct, key=lambda t: (-correct[t], t))
    rejected = random.Random(f"slm.toolcall.teacher/{seed}/{item['id']}").choice(wrong)
    verdict = next(s.verdict for s in samples if s.text == rejected)
    return {"prompt": item["prompt"], "chosen": chosen, "rejected": rejected, "id": item["id"],
            "kind": item.get("kind"), "rejected_verdict": verdict.as_dict()}, None


def make_pairs(labelled: list[tuple[dict, list[Sample]]], seed: int = 0) -> tuple[list[dict], dict]:
    """(pair records, counts): prompts, pairs, no_pair {reason: prompts}, samples, and each verifier rate over all
    samples (correct_rate = exact_match)."""
    records, no_pair = [], dict.fromkeys(NO_PAIR, 0)
    for item, samples in labelled:
        record, reason = pair(item, samples, seed)
        if record is None:
            no_pair[reason] += 1
        else:
            records.append(record)
    verdicts = [s.verdict for _, samples in labelled for s in samples]
    n = len(verdicts)
    rates = {rate: (sum(getattr(v, field) for v in verdicts) / n if n else None) for rate, field in RATES.items()}
    return records, {"prompts": len(labelled), "pairs": len(records), "no_pair": no_pair, "samples": n,
                     "correct_rate": rates["exact_match"], "rates": rates}


def correct_records(labelled: list[tuple[dict, list[Sample]]]) -> list[dict]:
    """TRL prompt/completion records of each prompt's distinct verified-correct samples (rejection-sampling
    fine-tuning's data)."""
    return [{"prompt": item["prompt"], "completion": text, "id": item["id"], "kind": item.get("kind")}
            for item, samples in labelled for text in dict.fromkeys(s.text for s in samples if s.verdict.exact)]
