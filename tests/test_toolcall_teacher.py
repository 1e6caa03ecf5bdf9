"""Pairs from labelled samples (slm.toolcall.teacher): one per prompt, a correct and an incorrect sample, and why a
prompt gave none."""

from __future__ import annotations

from slm.toolcall.items import generate
from slm.toolcall.teacher import correct_records, label, make_pairs, pair


def test_a_pair_is_the_most_frequent_correct_sample_and_a_drawn_incorrect_one():
    item = generate("train", 0, 1)[0]
    gold = item["answer"]
    wrong = ['{"fn":"add","args":[1,2]}', "garbage", "   "]
    _, samples = label(item, [gold + "\ntail", wrong[0], gold, wrong[1], wrong[2]])
    record, reason = pair(item, samples, seed=0)
    assert reason is None and record["chosen"] == gold + "\n" and record["rejected"] in (wrong[0] + "\n", "garbage\n")
    assert record["prompt"] == item["prompt"] and record["id"] == item["id"]
    drawn = {pair(item, samples, seed=s)[0]["rejected"] for s in range(20)}
    assert drawn == {wrong[0] + "\n", "garbage\n"}  # the blank one is never drawn
    assert pair(item, samples, seed=3) == pair(item, samples, seed=3)


def test_prompts_without_a_pair_are_counted_by_reason():
    items = generate("train", 0, 4)
    texts = [[items[0]["answer"]] * 2, ["x", "y"], [items[2]["answer"], ""], [items[3]["answer"], "z"]]
    labelled = [label(i, t) for i, t in zip(items, texts)]
    records, counts = make_pairs(labelled)
    assert counts["no_pair"] == {"all_correct": 1, "none_correct": 1, "only_blank_incorrect": 1}
    assert counts["pairs"] == len(records) == 1 and counts["samples"] == 8 and counts["correct_rate"] == 4 / 8
    assert [r["completion"] for r in correct_records(labelled)] == [items[i]["answer"] + "\n" for i in (0, 2, 3)]
