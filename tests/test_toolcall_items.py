"""The function-calling task's items (slm.toolcall.items): deterministic, disjoint splits, held-out templates,
numbers and tool pairs, short enough for a small context, and encodable by a character vocabulary fitted on training."""

from __future__ import annotations

import pytest

from slm.toolcall.items import HELD_OUT_PAIRS, SPLITS, bucket_split, execute, generate
from slm.toolcall.templates import FIRST, SINGLE, THEN
from slm.toolcall.tools import TOOLS, ToolError, tools_line

N = 400


@pytest.fixture(scope="module")
def splits():
    return {s: generate(s, 0, N) for s in SPLITS}


def test_the_generator_is_deterministic_and_a_longer_list_extends_a_shorter(splits):
    assert generate("test", 0, N) == splits["test"]
    assert generate("test", 0, 50) == splits["test"][:50]
    assert generate("test", 1, 50) != splits["test"][:50]
    with pytest.raises(ValueError, match="split='tset' is invalid: one of train, valid, test"):
        generate("tset")


def test_train_valid_and_test_are_disjoint_and_every_split_is_distinct(splits):
    prompts = {s: {i["prompt"] for i in items} for s, items in splits.items()}
    assert all(len(p) == N for p in prompts.values())  # no duplicate within a split
    assert not prompts["train"] & prompts["test"] and not prompts["train"] & prompts["valid"]
    assert all(bucket_split(p) == s for s in ("train", "valid", "test") for p in prompts[s])
    big = {i["prompt"] for i in generate("train", 5, 3000)}  # any seed's training items miss the test split
    assert not big & prompts["test"]


def test_an_item_is_its_prompt_and_one_rigid_answer_that_executes_to_its_result(splits):
    item = splits["train"][0]
    assert item["prompt"] == f"{tools_line(item['tools'])}\nQ: {item['question']}\nA: "
    for items in splits.values():
        for it in items:
            assert " " not in it["answer"] and "\n" not in it["answer"]
            assert execute(it["calls"], it["tools"]) == it["result"]
            assert all(c["fn"] in it["tools"] for c in it["calls"])
            if it["kind"] == "no_call":
                assert it["answer"] == '{"fn":null}' and it["result"] is None
    kinds = {k: sum(i["kind"] == k for i in splits["train"]) for k in ("single", "two_step", "no_call")}
    assert all(count > N * 0.1 for count in kinds.values()), kinds


def test_held_out_splits_differ_from_training_in_the_way_they_say(splits):
    train = splits["train"] + splits["valid"] + splits["test"]
    assert not any(pair <= set(i["tools"]) for i in train for pair in HELD_OUT_PAIRS)
    assert all(i["kind"] == "two_step" and frozenset(c["fn"] for c in i["calls"]) in HELD_OUT_PAIRS
               for i in splits["test_combos"])
    numbers = [a for i in train for c in i["calls"] for a in c["args"] if isinstance(a, int)]
    long = [a for i in splits["test_long"] for c in i["calls"] for a in c["args"] if isinstance(a, int)]
    assert max(numbers) < 1000 and min(long) >= 1000
    seen = {t for tool in SINGLE for t in SINGLE[tool][0]}
    held = {t for tool in SINGLE for t in SINGLE[tool][1]}
    assert not seen & held and all(any(i["question"] == t.format(a=c["args"][0], b=c["args"][-1])
                                       for t in held) for i in splits["test_templates"] for c in i["calls"])


def test_every_split_fits_a_small_context_and_a_training_char_vocabulary():
    train_text = "".join(i["prompt"] + i["answer"] + "\n" for i in generate("train", 0, 3000))
    for split in SPLITS:
        for it in generate(split, 0, N):
            assert len(it["prompt"]) + len(it["answer"]) + 1 <= 200
            assert set(it["prompt"] + it["answer"]) <= set(train_text), (split, it["prompt"])
    every_template = {t for tool in SINGLE for group in SINGLE[tool] for t in group} | set(FIRST.values()) | \
        {p for tool in THEN for p, _ in THEN[tool]}
    assert set("".join(every_template).replace("{a}", "").replace("{b}", "")) <= set(train_text)


def test_tools_compute_integers_and_refuse_calls_they_cannot_make():
    assert TOOLS["sub"].call([137, 48]) == 89 and TOOLS["div"].call([7, 2]) == 3 and TOOLS["neg"].call([5]) == -5
    assert TOOLS["sq"].signature == "sq(a)" and TOOLS["mod"].signature == "mod(a,b)"
    for tool, args in (("div", [1, 0]), ("add", [1]), ("add", [1, True]), ("sq", [10 ** 50]), ("mul", [1.0, 2])):
        with pytest.raises(ToolError):
            TOOLS[tool].call(args)
    assert execute([{"fn": "add", "args": [3, 4]}, {"fn": "mul", "args": ["$1", 5]}]) == 35
    with pytest.raises(KeyError):
        execute([{"fn": "add", "args": [3, 4]}], shown=["sub"])


def test_the_package_is_standard_library_only():
    """slm/toolcall is usable by every layer: importing all of it loads neither torch nor lm-eval nor datasets."""
    import subprocess
    import sys

    code = ("import sys, slm.toolcall.tools, slm.toolcall.items, slm.toolcall.verifier, slm.toolcall.corruptions, "
            "slm.toolcall.files, slm.toolcall.teacher, slm.toolcall.bfcl\n"
            "print(sorted(m for m in ('torch', 'lm_eval', 'datasets', 'numpy', 'hydra') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
