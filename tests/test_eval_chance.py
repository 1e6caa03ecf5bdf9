"""The evaluation records what the report needs to read a score against noise: each multiple-choice task's
chance level (the mean over its documents of 1 / number of choices) and the tasks a suite average holds."""

from __future__ import annotations

import pytest

from slm.eval.checks import EvalError
from slm.eval.run import load_tasks, task_manager
from slm.eval.spec import EvalSpec
from slm.eval.summary import chance_level, eval_section, summarize

TASKS = ["slm_shakespeare_bpb", "slm_shakespeare_mc"]


@pytest.fixture(scope="module")
def tasks():
    objects = load_tasks(task_manager(TASKS, []), TASKS)
    return {obj.config.task: obj for obj in objects}


def test_chance_level_of_the_offline_tasks(tasks):
    assert chance_level(tasks["slm_shakespeare_mc"]) == pytest.approx(0.25)  # the answer and 3 distractors
    assert chance_level(tasks["slm_shakespeare_mc"], 5) == pytest.approx(0.25)
    assert chance_level(tasks["slm_shakespeare_bpb"]) is None  # perplexity: no chance level


def test_chance_level_is_the_mean_of_one_over_the_choices():
    class Config:
        process_results = None

    class Task:
        OUTPUT_TYPE, config, eval_docs = "multiple_choice", Config(), [2, 4, 4, 5]

        def doc_to_choice(self, doc):
            return ["x"] * doc

    assert chance_level(Task()) == pytest.approx((1 / 2 + 1 / 4 + 1 / 4 + 1 / 5) / 4)
    assert chance_level(Task(), 2) == pytest.approx((1 / 2 + 1 / 4) / 2)  # only the documents scored
    custom = Task()
    custom.config = type("C", (), {"process_results": lambda *a: {}})()
    assert chance_level(custom) is None  # its own scoring (e.g. truthfulqa_mc2): not an argmax accuracy


def test_summary_records_chance_and_the_averaged_tasks_of_two_or_more():
    results = {"results": {"slm_shakespeare_mc": {"acc_norm,none": 0.3, "acc_norm_stderr,none": 0.02},
                           "slm_shakespeare_bpb": {"bits_per_byte,none": 3.0}},
               "n-samples": {"slm_shakespeare_mc": {"effective": 445}}, "config": {}}
    spec = EvalSpec(tasks=TASKS, metrics={"slm_shakespeare_mc": "acc_norm,none",
                                          "slm_shakespeare_bpb": "bits_per_byte,none"},
                    average={"offline": ["slm_shakespeare_mc"], "both": TASKS})
    summary = summarize(results, spec, {"slm_shakespeare_mc": 0.25})
    assert summary["details"]["slm_shakespeare_mc"]["chance"] == 0.25
    assert "chance" not in summary["details"]["slm_shakespeare_bpb"]
    assert summary["average_tasks"] == {"both": TASKS}  # one task is no average: offline is not recorded
    assert summary["averages"] == {"both": pytest.approx(1.65)}
    summary["results_file"] = "eval/r.json"
    previous = {"lm_eval": {"scores": {"hellaswag": 0.3, "piqa": 0.6}, "averages": {"pair": 0.45, "offline": 0.2},
                            "average_tasks": {"pair": ["hellaswag", "piqa"], "offline": ["slm_shakespeare_mc"]}}}
    section = eval_section(summary, previous)["lm_eval"]
    assert section["average_tasks"] == {"pair": ["hellaswag", "piqa"], "both": TASKS}  # the earlier one-task one goes
    assert set(section["averages"]) == {"pair", "both"}


def test_a_task_scored_under_its_new_name_replaces_its_old_name():
    """slm_shakespeare_ppl is RENAMED_TASKS' old name of slm_shakespeare_bpb (its headline is bits per byte): scoring
    a run again drops the entries an earlier evaluation left under the old name."""
    old = {"scores": {"slm_shakespeare_ppl": 3.1, "hellaswag": 0.3},
           "metrics": {"slm_shakespeare_ppl": "bits_per_byte,none", "hellaswag": "acc_norm,none"},
           "details": {"slm_shakespeare_ppl": {"bits_per_byte,none": 3.1}, "hellaswag": {}}}
    summary = {"scores": {"slm_shakespeare_bpb": 2.9}, "metrics": {"slm_shakespeare_bpb": "bits_per_byte,none"},
               "details": {"slm_shakespeare_bpb": {}}, "averages": {}, "average_tasks": {}, "version": "x",
               "results_file": "eval/r.json"}
    section = eval_section(summary, {"lm_eval": old})["lm_eval"]
    assert section["scores"] == {"hellaswag": 0.3, "slm_shakespeare_bpb": 2.9}
    assert set(section["metrics"]) == set(section["details"]) == {"hellaswag", "slm_shakespeare_bpb"}
    untouched = eval_section({**summary, "scores": {"hellaswag": 0.4}}, {"lm_eval": old})["lm_eval"]
    assert untouched["scores"]["slm_shakespeare_ppl"] == 3.1  # not scored again: kept for the collector to rename


def test_an_unknown_old_task_name_says_its_new_one():
    with pytest.raises(EvalError, match=r"slm_shakespeare_ppl \(now slm_shakespeare_bpb\)"):
        task_manager(["slm_shakespeare_ppl"], [])
