"""The function-calling task (slm.toolcall) as offline lm-eval `generate_until` tasks: the YAMLs
slm/eval/tasks/slm_toolcall*.yaml load their documents through `custom_dataset` and score each generation with the
verifier (slm.toolcall.verifier) through `process_results`.

    slm_toolcall            the test split               (same distribution as training, other items)
    slm_toolcall_templates  the test_templates split     (question templates training never uses)
    slm_toolcall_long       the test_long split          (4-5 digit numbers; training: 1-3)
    slm_toolcall_combos     the test_combos split        (two-step calls over tool pairs never shown together)

Each has EVAL_ITEMS items of its split at seed 0 (the items_<split>.jsonl that `slm-toolcall` writes by default).
Generation is greedy and ends at the first newline. Per item: format_valid, name_acc, args_acc, result_acc and
exact_match, each 0 or 1 and averaged (aggregation mean), so the per-document file keeps them and slm-compare's
McNemar test pairs two runs on exact_match.
"""

from __future__ import annotations

import json

from slm.toolcall.items import generate
from slm.toolcall.verifier import scores, verify

EVAL_ITEMS = 500
SEED = 0


def documents(split: str, n: int = EVAL_ITEMS) -> list[dict]:
    """[{"id", "kind", "prompt", "answer", "item"}]: `item` is the whole item as JSON (its calls mix integers and
    "$1" strings, which a dataset column cannot hold)."""
    return [{"id": it["id"], "kind": it["kind"], "prompt": it["prompt"], "answer": it["answer"],
             "item": json.dumps(it)} for it in generate(split, SEED, n)]


def _dataset(split: str):
    import datasets

    return datasets.DatasetDict({"test": datasets.Dataset.from_list(documents(split))})


def test_dataset(**metadata):
    """lm-eval `custom_dataset` hook (the task metadata, unused): the test split's documents."""
    return _dataset("test")


def templates_dataset(**metadata):
    return _dataset("test_templates")


def long_dataset(**metadata):
    return _dataset("test_long")


def combos_dataset(**metadata):
    return _dataset("test_combos")


def process_results(doc: dict, results: list) -> dict[str, int]:
    """The verifier's 0/1 scores of the generation (results[0]) for the document's item."""
    return scores(verify(json.loads(doc["item"]), results[0] if results else ""))
