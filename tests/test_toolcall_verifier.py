"""The verifier (slm.toolcall.verifier) on hand-written completions, on garbage, and on the controlled corruptions
(slm.toolcall.corruptions): each one fails in its own way and only in it."""

from __future__ import annotations

import random

import pytest

from slm.eval.toolcall_tasks import documents, process_results
from slm.toolcall.corruptions import FORMAT_VALID, MODES, corrupt, pick
from slm.toolcall.items import SPLITS, generate
from slm.toolcall.verifier import Verdict, aggregate, parse, verify

SUB = {"id": "x", "tools": ["add", "sub"], "question": "what is 137 minus 48?", "calls": [
    {"fn": "sub", "args": [137, 48]}], "result": 89, "answer": '{"fn":"sub","args":[137,48]}', "kind": "single"}
TWO = {"id": "y", "tools": ["add", "mul", "sub"], "question": "add 3 and 4, then multiply that by 5.", "calls": [
    {"fn": "add", "args": [3, 4]}, {"fn": "mul", "args": ["$1", 5]}], "result": 35, "kind": "two_step",
    "answer": '[{"fn":"add","args":[3,4]},{"fn":"mul","args":["$1",5]}]'}
NONE = {"id": "z", "tools": ["add"], "question": "square 5.", "calls": [], "result": None, "answer": '{"fn":null}',
        "kind": "no_call"}


def v(*flags) -> Verdict:
    return Verdict(*map(bool, flags))


@pytest.mark.parametrize("item, text, expected", [
    (SUB, '{"fn":"sub","args":[137,48]}\n', v(1, 1, 1, 1, 1)),
    (SUB, ' { "args": [137, 48], "fn": "sub" }  \nanything after the newline', v(1, 1, 1, 1, 1)),
    (SUB, '{"fn":"add","args":[137,48]}', v(1, 0, 1, 0, 0)),            # wrong name
    (SUB, '{"fn":"sub","args":[48,137]}', v(1, 1, 0, 0, 0)),            # swapped
    (SUB, '{"fn":"add","args":[41,48]}', v(1, 0, 0, 1, 0)),             # another call, the same result
    (SUB, '{"fn":"mul","args":[137,48]}', v(1, 0, 1, 0, 0)),            # a tool not shown: not executed
    (SUB, '{"fn":"sub","args":[137,48]', v(0, 0, 0, 0, 0)),             # bad JSON
    (SUB, '{"fn":"sub","args":[137,48]} ok', v(0, 0, 0, 0, 0)),         # trailing text
    (SUB, '{"fn":"sub","args":[137.0,48]}', v(0, 0, 0, 0, 0)),          # not integers
    (SUB, '{"fn":"sub","args":[137,48],"x":1}', v(0, 0, 0, 0, 0)),      # another key
    (SUB, '{"fn":null}', v(1, 0, 0, 0, 0)),
    (TWO, TWO["answer"] + "\n", v(1, 1, 1, 1, 1)),
    (TWO, '[{"fn":"add","args":[4,3]},{"fn":"mul","args":[5,"$1"]}]', v(1, 1, 0, 1, 0)),
    (TWO, '[{"fn":"add","args":[3,4]},{"fn":"mul","args":["$2",5]}]', v(0, 0, 0, 0, 0)),  # a reference forward
    (TWO, '{"fn":"add","args":[3,4]}', v(1, 0, 0, 0, 0)),
    (NONE, '{"fn": null}', v(1, 1, 1, 1, 1)),
    (NONE, '{"fn":null,"args":[]}', v(1, 1, 1, 1, 1)),
    (NONE, '{"fn":"add","args":[5,5]}', v(1, 0, 0, 0, 0)),
])
def test_hand_written_completions(item, text, expected):
    assert verify(item, text) == expected


@pytest.mark.parametrize("text", ["", "\n", None, 17, "NaN", '{"fn":"sub","args":[NaN,1]}', "[" * 100_000,
                                  '{"fn":"sq","args":[' + "9" * 5000 + "]}", "[]", '"sub"', "{" + "\x00",
                                  '[{"fn":"sq","args":[2]}]' * 3, '{"fn":"sq","args":["$0"]}'])
def test_garbage_is_never_an_error_only_invalid(text):
    assert verify(SUB, text) == Verdict() and parse(text) is None


def test_random_text_never_raises():
    rng = random.Random(0)
    alphabet = '{}[]":,$0123456789 fnargsubnull\n'
    for _ in range(2000):
        verify(TWO, "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))))


def test_aggregate_is_the_mean_of_each_check():
    rates = aggregate([verify(SUB, SUB["answer"]), verify(SUB, '{"fn":"add","args":[137,48]}'), verify(SUB, "x")])
    assert rates == {"n": 3, "format_valid": 2 / 3, "name_acc": 1 / 3, "args_acc": 2 / 3, "result_acc": 1 / 3,
                     "exact_match": 1 / 3}
    assert aggregate([])["exact_match"] is None


def test_the_lm_eval_metric_is_the_verifier_per_item():
    doc = documents("test", 3)[1]
    assert process_results(doc, [doc["answer"] + "\n"]) == dict.fromkeys(
        ("format_valid", "name_acc", "args_acc", "result_acc", "exact_match"), 1)
    assert process_results(doc, ["{broken"]) == dict.fromkeys(
        ("format_valid", "name_acc", "args_acc", "result_acc", "exact_match"), 0)


def test_each_corruption_differs_from_the_gold_and_fails_as_it_says():
    applied = dict.fromkeys(MODES, 0)
    for split in SPLITS:
        for item in generate(split, 0, 200):
            assert verify(item, item["answer"]).exact
            for mode in MODES:
                text = corrupt(item, mode, seed=3)
                if text is None:
                    assert mode in ("swapped_args", "off_by_one_digit")
                    continue
                applied[mode] += 1
                verdict = verify(item, text + "\n")
                assert text != item["answer"] and not verdict.exact
                assert verdict.format_valid == (mode in FORMAT_VALID)
                if mode == "wrong_tool" and item["calls"]:
                    assert not verdict.name_ok and verdict.args_ok
                if mode in ("swapped_args", "off_by_one_digit"):
                    assert verdict.name_ok and not verdict.args_ok
                assert corrupt(item, mode, seed=3) == text  # deterministic
    assert all(n > 100 for n in applied.values()), applied
    assert pick(SUB, ["swapped_args"])[0] == "swapped_args" and pick(NONE, ["swapped_args"]) is None
    with pytest.raises(ValueError, match="corruption 'typo' is invalid"):
        corrupt(SUB, "typo")
