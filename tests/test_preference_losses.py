"""The preference losses (slm.objectives.preference) and their settings.

Parity: dpo, ipo, hinge and dpo + sft equal TRL's own DPOTrainer._compute_loss, cDPO and simpo TRL's
CPOTrainer.cpo_loss, orpo's odds-ratio term TRL's ORPOTrainer.odds_ratio_loss, on the same log-probs, with their
gradients with respect to the log-probs (TRL 1.16, the `dev` extras; skipped where trl is not importable). Each TRL
method runs on a stand-in trainer (made with __new__, the attributes the method reads set by hand) and, for
DPOTrainer, a stand-in model whose per-token log-probs sum to the values under test.
"""

from __future__ import annotations

import importlib.metadata
import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from slm.objectives.preference import (LOSSES, Pairs, combined, dpo, hinge, ipo, odds_ratio, orpo, pair_metrics,
                                       sft, simpo)
from slm.objectives.preference_settings import LOSS_NAMES, PreferenceSettings, preference_settings
from slm.settings import SettingsError

B, PROMPT = 6, 3
CHOSEN_TOKENS = torch.tensor([3, 5, 2, 7, 1, 4])
REJECTED_TOKENS = torch.tensor([4, 1, 6, 2, 3, 4])


def make_pairs(chosen_tokens=CHOSEN_TOKENS, rejected_tokens=REJECTED_TOKENS, seed=0) -> Pairs:
    """Random summed log-probs (float64) for B pairs: the policy's are leaves with grad, the reference's not."""
    g = torch.Generator().manual_seed(seed)

    def draw(grad: bool):
        return (-torch.rand(B, generator=g, dtype=torch.float64) * 20).requires_grad_(grad)

    return Pairs(draw(True), draw(True), chosen_tokens, rejected_tokens, draw(False), draw(False))


def grads(loss: torch.Tensor, pairs: Pairs) -> torch.Tensor:
    """(2, B) d loss / d (chosen, rejected) log-probs."""
    return torch.stack(torch.autograd.grad(loss, [pairs.chosen, pairs.rejected]))


# ---------------------------------------------------------------- TRL's own code, on stand-ins
class _Accelerator:
    device = torch.device("cpu")

    def gather(self, tensor):
        return tensor

    gather_for_metrics = gather


def trl_dpo(pairs: Pairs, loss_types: list[str], weights: list[float], beta: float):
    """TRL's DPOTrainer._compute_loss on `pairs` (precomputed reference log-probs): (its loss, its logged
    metrics). The stand-in model's per-token log-probs hold each sequence's summed log-prob at its first completion
    token and 0 elsewhere (TRL's fused head gives 0 at the masked positions), so TRL's sums are the values under
    test and its gradients flow back to them."""
    from trl import DPOTrainer

    trainer = DPOTrainer.__new__(DPOTrainer)
    trainer.__dict__.update(
        model=SimpleNamespace(training=True), accelerator=_Accelerator(), aux_loss_enabled=False, ld_alpha=None,
        precompute_ref_logps=True, f_divergence_type="reverse_kl", loss_types=loss_types, loss_weights=weights,
        beta=beta, label_smoothing=0.0, use_weighting=False, _total_train_tokens=0, _tp_size=1,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)})
    lengths = torch.cat([pairs.chosen_tokens, pairs.rejected_tokens])  # (2B,): the batch is [chosen, rejected]
    width = PROMPT + int(lengths.max())
    positions = torch.arange(width)[None, :]
    completion_mask = ((positions >= PROMPT) & (positions < PROMPT + lengths[:, None])).long()  # (2B, T)
    first_completion_token = torch.zeros(2 * B, width - 1, dtype=torch.float64)
    first_completion_token[:, PROMPT - 1] = 1  # shifted: position PROMPT - 1 predicts the first completion token

    def model(**_):
        zeros = torch.zeros(2 * B, width - 1)
        log_probs = torch.cat([pairs.chosen, pairs.rejected])[:, None] * first_completion_token  # (2B, T - 1)
        return SimpleNamespace(log_probs=log_probs, entropy=zeros, mean_logits=zeros, is_top1=zeros.bool())

    inputs = {"input_ids": torch.zeros(2 * B, width, dtype=torch.long), "completion_mask": completion_mask,
              "attention_mask": torch.ones(2 * B, width, dtype=torch.long),
              "ref_chosen_logps": pairs.ref_chosen, "ref_rejected_logps": pairs.ref_rejected}
    loss = trainer._compute_loss(model, inputs, return_outputs=False)
    return loss, {k: v[-1] for k, v in trainer._metrics["train"].items()}


def trl_cpo(chosen, rejected, loss_type: str, beta: float, label_smoothing=0.0, simpo_gamma=0.5):
    """TRL's CPOTrainer.cpo_loss (losses, chosen rewards, rejected rewards), per pair."""
    from trl.experimental.cpo import CPOTrainer

    trainer = CPOTrainer.__new__(CPOTrainer)
    trainer.__dict__.update(accelerator=_Accelerator(), alpha=0.0, beta=beta, loss_type=loss_type,
                            label_smoothing=label_smoothing, simpo_gamma=simpo_gamma)
    return trainer.cpo_loss(chosen, rejected)


def trl_orpo(chosen_mean, rejected_mean, lam: float):
    """TRL's ORPOTrainer.odds_ratio_loss: (λ·log σ(log odds ratio) per pair, chosen rewards, rejected rewards)."""
    from trl.experimental.orpo import ORPOTrainer

    trainer = ORPOTrainer.__new__(ORPOTrainer)
    trainer.__dict__.update(accelerator=_Accelerator(), beta=lam)
    return trainer.odds_ratio_loss(chosen_mean, rejected_mean)[:3]


def trl_version() -> str | None:
    """The installed trl's version, None where it is not installed (looked up without importing it: ~5 s)."""
    try:
        return importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        return None


needs_trl = pytest.mark.skipif(
    not (trl_version() or "").startswith("1.16."),
    reason=f"the parity tests run TRL 1.16's own code on stand-ins of its trainers; trl here: {trl_version()} "
           "(pip install trl==1.16.0, in the dev extras)")


# ---------------------------------------------------------------- parity
@needs_trl
@pytest.mark.parametrize("ours, trl_type, beta", [(dpo, "sigmoid", 0.1), (hinge, "hinge", 0.5), (ipo, "ipo", 0.5)])
def test_reference_losses_equal_trl_dpo_trainer(ours, trl_type, beta):
    pairs = make_pairs()
    theirs, metrics = trl_dpo(pairs, [trl_type], [1.0], beta)
    out = ours(pairs, beta)
    assert torch.allclose(out.loss.mean(), theirs, rtol=0, atol=1e-12)
    assert torch.allclose(grads(out.loss.mean(), pairs), grads(theirs, pairs), rtol=0, atol=1e-12)
    mine = pair_metrics(pairs, out)
    for name, value in mine.items():  # TRL takes the accuracy's mean in float32
        assert math.isclose(value.item(), metrics[name], abs_tol=1e-7 if "accuracies" in name else 1e-12), name
    if ours is hinge:  # both sides of the kink are exercised
        margins = out.chosen_rewards - out.rejected_rewards  # β·Δ
        assert (margins > 1).any() and (margins < 1).any()


@needs_trl
def test_dpo_plus_sft_equals_trl_weighted_loss_types():
    """TRL's sft term is the token mean over the batch's chosen completions: ours (per pair, then the mean) is
    the same number where the chosen completions have one length."""
    pairs = make_pairs(chosen_tokens=torch.full((B,), 4))
    theirs, _ = trl_dpo(pairs, ["sigmoid", "sft"], [1.0, 0.3], 0.1)
    out, parts = combined(pairs, preference_settings({"loss": ["dpo", "sft"], "weights": [1.0, 0.3]}))
    assert torch.allclose(out.loss.mean(), theirs, rtol=0, atol=1e-12)
    assert torch.allclose(grads(out.loss.mean(), pairs), grads(theirs, pairs), rtol=0, atol=1e-12)
    assert set(parts) == {"dpo", "sft"}


@needs_trl
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_cdpo_equals_trl_conservative_loss(eps):
    """TRL 1.16's DPOTrainer has no label smoothing in its sigmoid loss; the conservative (cDPO) form is
    CPOTrainer's sigmoid loss, given the log-ratios as its log-probs."""
    pairs = make_pairs()
    out = dpo(pairs, 0.1, eps)
    losses, chosen_r, rejected_r = trl_cpo(pairs.chosen - pairs.ref_chosen, pairs.rejected - pairs.ref_rejected,
                                           "sigmoid", 0.1, label_smoothing=eps)
    assert torch.allclose(out.loss, losses, rtol=0, atol=1e-12)
    assert torch.allclose(grads(out.loss.sum(), pairs), grads(losses.sum(), pairs), rtol=0, atol=1e-12)
    assert torch.allclose(out.chosen_rewards, chosen_r) and torch.allclose(out.rejected_rewards, rejected_r)


@needs_trl
def test_simpo_equals_trl_cpo_trainer():
    pairs = make_pairs()
    out = simpo(pairs, beta=2.0, gamma=0.7)
    losses, chosen_r, rejected_r = trl_cpo(pairs.chosen_mean(), pairs.rejected_mean(), "simpo", 2.0,
                                           simpo_gamma=0.7)
    assert torch.allclose(out.loss, losses, rtol=0, atol=1e-12)
    assert torch.allclose(grads(out.loss.sum(), pairs), grads(losses.sum(), pairs), rtol=0, atol=1e-12)
    assert torch.equal(out.chosen_rewards, chosen_r) and torch.equal(out.rejected_rewards, rejected_r)


@needs_trl
def test_orpo_odds_ratio_equals_trl_orpo_trainer():
    """TRL computes the odds ratio in float32 (it casts), so the figures agree to float32's precision; the NLL
    half is not compared (TRL's counts the prompt's tokens too, by design)."""
    pairs = make_pairs()
    ours = 0.2 * odds_ratio(pairs.chosen_mean(), pairs.rejected_mean())
    theirs, chosen_r, rejected_r = trl_orpo(pairs.chosen_mean(), pairs.rejected_mean(), 0.2)
    assert torch.allclose(ours, theirs.double(), rtol=0, atol=1e-6)
    assert torch.allclose(grads(ours.sum(), pairs), grads(theirs.sum(), pairs).double(), rtol=0, atol=1e-6)
    out = orpo(pairs, 0.2)
    assert torch.allclose(out.chosen_rewards, chosen_r.double(), atol=1e-6)
    assert torch.allclose(out.rejected_rewards, rejected_r.double(), atol=1e-6)


# ---------------------------------------------------------------- structure
def test_label_smoothing_zero_is_plain_dpo_and_eps_mixes_the_swapped_pair():
    pairs = make_pairs()
    plain = -F.logsigmoid(0.1 * ((pairs.chosen - pairs.ref_chosen) - (pairs.rejected - pairs.ref_rejected)))
    assert torch.equal(dpo(pairs, 0.1, 0.0).loss, plain)
    assert torch.equal(dpo(pairs, 0.1).loss, plain)
    swapped = pairs._replace(chosen=pairs.rejected, rejected=pairs.chosen, ref_chosen=pairs.ref_rejected,
                             ref_rejected=pairs.ref_chosen)
    mixed = 0.8 * dpo(pairs, 0.1).loss + 0.2 * dpo(swapped, 0.1).loss
    assert torch.allclose(dpo(pairs, 0.1, 0.2).loss, mixed, rtol=0, atol=1e-12)


def test_weighted_sum_equals_the_sum_of_its_parts():
    pairs = make_pairs()
    settings = preference_settings({"loss": ["dpo", "sft", "simpo"], "weights": [1.0, 0.2, 0.5], "beta": 0.3})
    out, parts = combined(pairs, settings)
    expected = 1.0 * dpo(pairs, 0.3).loss + 0.2 * sft(pairs).loss + 0.5 * simpo(pairs, 0.3, 0.5).loss
    assert torch.allclose(out.loss, expected, rtol=0, atol=1e-12)
    assert torch.allclose(grads(out.loss.sum(), pairs), grads(expected.sum(), pairs), rtol=0, atol=1e-12)
    assert list(parts) == ["dpo", "sft", "simpo"]
    assert torch.allclose(parts["sft"], sft(pairs).loss.mean())
    assert torch.equal(out.chosen_rewards, dpo(pairs, 0.3).chosen_rewards)  # the first loss's rewards
    one, _ = combined(pairs, preference_settings({"loss": ["ipo"], "beta": 0.3}))
    assert torch.equal(one.loss, ipo(pairs, 0.3).loss)


def test_orpo_is_the_chosen_nll_plus_lambda_times_the_odds_ratio_term():
    pairs = make_pairs()
    expected = sft(pairs).loss - 0.1 * odds_ratio(pairs.chosen_mean(), pairs.rejected_mean())
    assert torch.allclose(orpo(pairs, 0.1).loss, expected, rtol=0, atol=1e-12)


def test_ipo_is_length_normalised():
    """Doubling every completion's length and its log-probs (the same per-token log-probs) leaves ipo's loss
    unchanged; dpo's, over summed log-probs, changes."""
    pairs = make_pairs()
    doubled = Pairs(*(2 * t for t in pairs))
    assert torch.allclose(ipo(doubled, 0.1).loss, ipo(pairs, 0.1).loss, rtol=0, atol=1e-12)
    assert not torch.allclose(dpo(doubled, 0.1).loss, dpo(pairs, 0.1).loss)


def test_metrics_and_the_registry():
    pairs = make_pairs()
    out = dpo(pairs, 0.1)
    metrics = pair_metrics(pairs, out)
    assert set(metrics) == {"logps/chosen", "logps/rejected", "rewards/chosen", "rewards/rejected",
                            "rewards/margins", "rewards/accuracies"}
    assert all(not v.requires_grad for v in metrics.values()) and not out.chosen_rewards.requires_grad
    assert tuple(LOSSES) == LOSS_NAMES


@pytest.mark.parametrize("name", ["dpo", "ipo", "hinge"])
def test_a_reference_loss_without_reference_log_probs_is_one_line(name):
    pairs = make_pairs()._replace(ref_chosen=None, ref_rejected=None)
    with pytest.raises(ValueError, match=f"^{name} needs the reference model's log-probs"):
        LOSSES[name](pairs, PreferenceSettings())
    for free in ("simpo", "orpo", "sft"):
        LOSSES[free](pairs, PreferenceSettings())


# ---------------------------------------------------------------- settings
def test_settings_defaults_and_what_they_need():
    s = preference_settings(None)
    assert (s.loss, s.weights, s.beta, s.label_smoothing) == (["dpo"], None, 0.1, 0.0)
    assert s.needs_reference and s.weighted() == [("dpo", 1.0)]
    assert not preference_settings({"loss": "simpo,sft"}).needs_reference  # the command line's comma form


@pytest.mark.parametrize("node, key, allowed", [
    ({"loss": ["dpx"]}, "loss", "every item one of: dpo, ipo, hinge, simpo, orpo, sft"),
    ({"loss": []}, "loss", "at least one of"),
    ({"loss": ["dpo", "dpo"]}, "loss", "each loss at most once"),
    ({"weights": [1.0, 2.0]}, "weights", "one weight per loss (1: dpo)"),
    ({"weights": [-1.0]}, "weights", "every item a number >= 0"),
    ({"loss": ["dpo", "sft"], "weights": [0, 0]}, "weights", "at least one weight > 0"),
    ({"beta": 0}, "beta", "must be a number > 0"),
    ({"beta": "x"}, "beta", "expected a finite number"),
    ({"label_smoothing": 0.5}, "label_smoothing", "must be a number in [0, 0.5)"),
    ({"loss": ["ipo"], "label_smoothing": 0.1}, "label_smoothing", "0 unless train.preference.loss includes dpo"),
    ({"simpo_gamma": -1}, "simpo_gamma", "must be a number >= 0"),
    ({"orpo_lambda": 0}, "orpo_lambda", "must be a number > 0"),
    ({"betta": 1}, "betta", "did you mean beta?"),
])
def test_a_bad_setting_is_one_line_naming_the_full_key(node, key, allowed):
    with pytest.raises(SettingsError) as err:
        preference_settings(node)
    assert err.value.key == f"train.preference.{key}"
    prefix = "train.preference has unknown key" if key == "betta" else f"train.preference.{key}="
    assert str(err.value).startswith(prefix) and allowed in str(err.value)
    assert "\n" not in str(err.value)


def test_the_group_hangs_under_a_config_with_one_field():
    """As TrainConfig.preference will (the next slice): the group adopted from a mapping, its errors keyed under
    the parent's key."""
    from dataclasses import dataclass

    from slm.settings import Settings, setting

    @dataclass
    class Parent(Settings):
        preference: PreferenceSettings = setting(factory=PreferenceSettings)

    parent = Parent(preference={"loss": "dpo,sft", "weights": [1.0, 0.1]})
    parent.settle("train")
    assert parent.preference.weighted() == [("dpo", 1.0), ("sft", 0.1)]
    with pytest.raises(SettingsError, match=r"^train\.preference\.weights=\[1\.0\] is invalid: one weight per loss"):
        Parent(preference={"loss": ["dpo", "sft"], "weights": [1.0]}).settle("train")
