"""What the command line says about scores (slm.eval.score_lines): each headline under its metric's name, a
diffusion bound as a bound, an accuracy within noise of chance flagged (the report's rule), no one-task
"average"."""

from __future__ import annotations

import math

import pytest

from slm.eval.score_lines import average_score, brief, near_chance, score_lines, task_score


def section(mc=0.262, mc_se=0.0205, estimator=None, averages=None, average_tasks=None) -> dict:
    """An eval.lm_eval section as slm.eval.run records it: the offline suite's two tasks."""
    details = {"slm_shakespeare_bpb": {"bits_per_byte,none": 2.41, "bits_per_byte_stderr,none": "N/A"},
               "slm_shakespeare_mc": {"acc_norm,none": mc, "acc_norm_stderr,none": mc_se, "chance": 0.25}}
    lm = {"scores": {"slm_shakespeare_bpb": 2.41, "slm_shakespeare_mc": mc},
          "metrics": {"slm_shakespeare_bpb": "bits_per_byte,none", "slm_shakespeare_mc": "acc_norm,none"},
          "details": details, "averages": averages or {}, "average_tasks": average_tasks or {}}
    if estimator is not None:
        lm["estimator"] = estimator
    return lm


def test_near_chance_is_the_reports_rule():
    assert near_chance(0.29, 0.25, 0.0205)  # 0.04 <= 1.96 x 0.0205 = 0.0402
    assert not near_chance(0.30, 0.25, 0.0205)
    assert near_chance(0.25, 0.25, None) and not near_chance(0.26, 0.25, None)  # no stderr: at or below chance


def test_lines_name_the_metric_and_read_accuracy_against_chance():
    lines = score_lines(section())
    assert lines == [
        "slm_shakespeare_bpb: bits_per_byte 2.4100",
        "slm_shakespeare_mc: acc_norm 0.2620 ± 0.0205 (stderr); chance 0.2500: within noise of chance "
        "(score - chance <= 1.96 stderr)"]
    assert score_lines(section(mc=0.35))[1].endswith("chance 0.2500, above it beyond noise")
    assert brief(section()) == ("slm_shakespeare_bpb bits_per_byte 2.41, slm_shakespeare_mc acc_norm 0.262 "
                                "(within noise of chance 0.25)")
    assert brief(section(mc=0.35)) == "slm_shakespeare_bpb bits_per_byte 2.41, slm_shakespeare_mc acc_norm 0.35"
    assert brief({"scores": {}}) == "no scores"


def test_a_diffusion_models_perplexity_type_scores_are_bounds():
    estimator = {"kind": "llada_mc_conditional_elbo", "mc_num": 16, "seed": 1234}
    lm = section(estimator=estimator)
    assert task_score(lm, "slm_shakespeare_bpb")["bound"] and not task_score(lm, "slm_shakespeare_mc")["bound"]
    assert score_lines(lm)[0] == ("slm_shakespeare_bpb: bits_per_byte 2.4100, an upper bound (the diffusion "
                                  "model's Monte Carlo ELBO, mc_num 16)")
    assert brief(lm).startswith("slm_shakespeare_bpb bits_per_byte 2.41 (upper bound), ")
    exact = section(estimator={"kind": "exact"})
    assert not task_score(exact, "slm_shakespeare_bpb")["bound"]


def test_only_averages_of_two_or_more_tasks_are_printed():
    one = section(averages={"offline": 0.262}, average_tasks={"offline": ["slm_shakespeare_mc"]})
    assert len(score_lines(one)) == 2 and "average" not in brief(one)  # a record from before: not repeated
    lm = section(averages={"pair": 0.3, "offline": 0.262},
                 average_tasks={"pair": ["slm_shakespeare_mc", "other_mc"], "offline": ["slm_shakespeare_mc"]})
    lm["scores"]["other_mc"] = 0.338
    lm["metrics"]["other_mc"] = "acc,none"
    lm["details"]["other_mc"] = {"acc,none": 0.338, "acc_stderr,none": 0.0205, "chance": 0.25}
    pair = average_score(lm, "pair")
    assert pair["stderr"] == pytest.approx(math.sqrt(2 * 0.0205 ** 2) / 2) and pair["chance"] == 0.25
    assert not pair["near_chance"]  # 0.05 > 1.96 x 0.0145
    assert score_lines(lm)[-1] == "pair: average of 2 tasks 0.3000 ± 0.0145 (stderr, propagated); chance 0.2500, " \
                                  "above it beyond noise"
    assert brief(lm).endswith(", pair average of 2 tasks 0.3")
