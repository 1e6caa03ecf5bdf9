"""Pruning a trial of an Optuna search (hydra.sweeper.pruner; issue 52): the run reports each validation to its trial
and stops where the study's pruner says so.

The Optuna sweeper writes `trial.json` into a trial's run directory before it launches the job (TrialLink,
slm.training.trial_link: the study's storage and name, the trial's id and number, the pruner's settings). A run that
finds it adds ReportToTrial: at each validation during training, rank 0 reports the validation NLL at the optimizer step (Optuna's
`trial.report(value, step)`) and asks `trial.should_prune()`; the answer is broadcast, so every process of a
multi-process run stops together, raising RunPruned (slm.runs.job records the run `pruned`, a final state: never
launched again, never counted failed). Each answer is kept in the trial by step: a run resumed from an earlier
checkpoint that validates a step again gets the answer it got the first time, so the decisions of an interrupted
and restarted search are the decisions of an uninterrupted one.

The intermediate value is the validation NLL, lower is better: the sweeper refuses a pruner for an objective other
than eval.val_nll minimised (slm.sweeps.optuna_settings).
"""

from __future__ import annotations

import math

import lightning as L

from slm.training.trial_link import TrialLink, make_pruner, open_storage


DECISIONS = "slm_pruner_decisions"
"""The trial's user attribute with the pruner's answer at each reported step: {"<step>": [step, value, reason] or
null}."""


class RunPruned(Exception):
    """Raised on every process by ReportToTrial when the pruner stops the trial (slm.runs.job records `pruned`)."""

    def __init__(self, step: int, value: float, reason: str):
        super().__init__(f"pruned at step {step}: {reason}")
        self.step, self.value, self.reason = int(step), float(value), reason


class ReportToTrial(L.Callback):
    """Reports each validation during training to the run's trial, and stops the run where the pruner says so
    (the module docstring). The trial is opened on rank 0 at the first validation."""

    def __init__(self, link: TrialLink):
        self.link = link
        self._trial = None

    def _open(self):
        if self._trial is None:
            import optuna

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            study = optuna.load_study(study_name=self.link.study, storage=open_storage(self.link.storage),
                                      pruner=make_pruner(self.link.pruner))
            self._trial = optuna.Trial(study, self.link.trial_id)
        return self._trial

    def _decide(self, step: int, value: float) -> list | None:
        """Rank 0: report the value and ask the pruner; [step, value, reason] or None. Each decision is kept in the
        trial (user attribute DECISIONS, by step): a step decided before (a run resumed from an earlier checkpoint,
        or killed between the decision and its record) gets the same answer, from the value reported first."""
        trial = self._open()
        frozen = trial.storage.get_trial(self.link.trial_id)
        decided = dict(frozen.user_attrs.get(DECISIONS) or {})
        if str(step) in decided:
            return decided[str(step)]
        if step not in frozen.intermediate_values:
            trial.report(value, step)
        value = float(trial.storage.get_trial(self.link.trial_id).intermediate_values[step])
        decision = [step, value, f"{self.link.describe()} at step {step}: val_nll {value:.4f}"] \
            if trial.should_prune() else None
        trial.set_user_attr(DECISIONS, {**decided, str(step): decision})
        return decision

    def on_validation_end(self, trainer, pl_module) -> None:
        from lightning.pytorch.trainer.states import TrainerFn

        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING or getattr(pl_module, "scoring_test",
                                                                                        False):
            return
        decision = None
        if trainer.is_global_zero:
            value = (getattr(pl_module, "val_metrics", None) or {}).get("val_nll")
            if isinstance(value, (int, float)) and math.isfinite(value):
                decision = self._decide(trainer.global_step, float(value))
        decision = trainer.strategy.broadcast(decision, src=0)
        if decision:
            raise RunPruned(*decision)


__all__ = ["DECISIONS", "ReportToTrial", "RunPruned"]
