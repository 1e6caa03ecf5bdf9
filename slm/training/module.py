"""`LanguageModelModule`: the Lightning wrapper around a framework-free slm model and an objective."""

from __future__ import annotations

import math
import random

import lightning as L
import torch

from slm.model import ModelConfig, build_model
from slm.training.checkpoint_io import NOT_WRITTEN
from slm.training.config import TrainConfig
from slm.training.optim import build_optimizer
from slm.training.schedules import Schedule
from slm.training.step import objective_for, step_loss, step_seed

__all__ = ["LanguageModelModule", "step_seed", "summarise", "val_metrics"]


def summarise(sums: list[tuple[torch.Tensor, int, dict]]) -> tuple[float, int, dict[str, list]]:
    """A validation's NLL, its target count and the objective's other numbers {name: [sum, count]} (a preference
    run's reward accuracy, ...) from the batches' objective.validate results."""
    total = sum(float(s) for s, _, _ in sums)
    count = sum(n for _, n, _ in sums)
    extras: dict[str, list] = {}
    for _, _, more in sums:
        for name, (value, n) in more.items():
            got = extras.setdefault(name, [0.0, 0])
            got[0], got[1] = got[0] + float(value), got[1] + n
    return total / count, count, extras


def val_metrics(nll: float, extras: dict[str, list], step: int) -> dict:
    """The metrics of one validation at optimizer step `step`: val_nll, val_ppl, val_step, val_<name> of `extras`."""
    return {"val_nll": nll, "val_ppl": math.exp(min(nll, 700.0)), "val_step": step,
            **{f"val_{name}": value / n for name, (value, n) in extras.items() if n}}


class LanguageModelModule(L.LightningModule):
    """Trains `build_model(model_cfg)` (the network model_cfg.kind names) with `train_cfg.objective`; validates NLL and perplexity.

    A non-finite training loss stops the run: `diverged` then holds the step and the value. The step losses stay
    on the device and are read back in one transfer on the logging cadence (`settle`: every log_interval steps,
    at a progress line, before any checkpoint is written and at the end), so a step never waits for the host; a
    single-process run may therefore take up to log_interval - 1 steps past a non-finite loss before it stops,
    on weights nobody keeps: a checkpoint is never written from a diverged run or from non-finite parameters
    (on_save_checkpoint marks it and AtomicCheckpointIO skips it), and the weights are saved only from a
    completed run. Data-parallel and accumulating runs read every step's loss back (their non-finite-gradient
    check needs it on every rank at once, configure_gradient_clipping).

    With `train_cfg.block_curriculum` (masked diffusion converted from an AR model), every training step runs
    the objective with the attention block of that step (slm.training.curriculum), logged as
    train/attention_block; validation uses the block of the last trained step, so its curve is the model as
    trained at that point (block-causal NELBO during the warm-up and decay, plain MDLM's in the stable phase).

    The objective's other terms are logged as train/<name> (lm_loss, and for a mixture of experts
    moe_balance, moe_z and their weighted *_loss). A mixture of experts' per-expert load (layers, experts) is
    returned beside the loss, {"loss", "moe_load", "logging_step"}, for slm.training.routing.RoutingLoad, which
    logs it and keeps it for the run record.
    """

    def __init__(self, model_cfg: ModelConfig, train_cfg: TrainConfig, max_steps: int, tokens_per_step: int,
                 checkpoint_meta: dict | None = None):
        super().__init__()
        self.checkpoint_meta = dict(checkpoint_meta or {})  # written into every checkpoint as slm_meta (below)
        self.model = build_model(model_cfg)
        self.train_cfg = train_cfg
        self.objective = objective_for(train_cfg)  # with train.loss: its loss path (plain, chunked, liger)
        self.max_steps = max_steps
        self.tokens_per_step = tokens_per_step
        self.diverged: dict | None = None
        self.last_train_loss: float | None = None
        self._loss_sum: torch.Tensor | None = None  # the losses of the current step's micro-batches so far
        self._pending: list[dict] = []  # completed steps whose loss is still on the device (settle)
        self.settled: list[dict] = []  # train_log rows read back and not yet written (StepLog takes them)
        self.last_lr: float | None = None
        self.val_metrics: dict[str, float] = {}
        self.val_curve: list[list[float]] = []  # [[step, val NLL], ...]: every validation of the run (resumes included)
        self.best: dict | None = None  # train.validation.restore_best: the best validation so far, and its weights
        self.best_state: dict[str, torch.Tensor] | None = None
        self.test_metrics: dict[str, float] = {}
        self.scoring_test = False  # the validation loop is scoring the test batches (slm.runs.job, at the end)
        self._val_sums: list[tuple[torch.Tensor, int, dict]] = []
        self._forward = self.model
        self.curriculum = train_cfg.block_curriculum
        self.last_attention_block: int | None = None

    def attention_block(self, step: int) -> int | None:
        """The curriculum's attention block for optimizer step `step` (None without a curriculum)."""
        if self.curriculum is None:
            return None
        return self.curriculum.block(min(max(step, 0), self.max_steps - 1), self.max_steps,
                                     self.model.cfg.context_length)

    def _objective_kwargs(self, block: int | None) -> dict:
        return {} if block is None else {"attention_block": block}

    def _rows(self, batch: torch.Tensor, batch_idx: int) -> tuple[int, int] | None:
        """rows=(first, total) for an objective with per-row noise when this batch is a part of the step's batch
        (a device's share, a micro-batch): which rows of it (slm.data.datamodule's layout). None otherwise."""
        trainer = self._trainer
        world = trainer.world_size if trainer is not None else 1
        micro = trainer.accumulate_grad_batches if trainer is not None else 1
        if not self.objective.row_noise or (world == 1 and micro == 1):
            return None
        share = self.train_cfg.batch_size // world
        return (self.global_rank * share + (batch_idx % micro) * batch.shape[0], self.train_cfg.batch_size)

    def configure_model(self) -> None:
        if self.train_cfg.compile and self._forward is self.model:
            self._forward = torch.compile(self.model)
            self.objective.compile()  # the head and the loss compiled with the model, as one function

    # ------------------------------------------------------------------ training
    def training_step(self, batch: torch.Tensor, batch_idx: int):
        block = self.attention_block(self.global_step)
        out = step_loss(self.objective, self._forward, batch, seed=self.train_cfg.seed, step=self.global_step,
                        attention_block=block, rows=self._rows(batch, batch_idx))  # slm.training.step: the benches'
        loss, terms = out.loss, out.terms
        # the schedule's lr (what LambdaLR gives a group at multiplier 1; a parametrization or Muon may scale groups)
        self.last_lr = self.train_cfg.lr * self.schedule(self.global_step)
        if block is not None:
            self.last_attention_block = block
        self._queue_loss(loss.detach(), batch_idx, block)
        if self.diverged is not None:
            self.trainer.should_stop = True
            if self._single():
                return None  # no backward, no update
            # data parallel or accumulating: every rank must run the same backward (the gradients are reduced
            # together); the non-finite gradients it gives reach every rank, and the update is skipped on all
            # of them (configure_gradient_clipping)
        load = out.moe_load
        logs = self.logging_step()
        if logs:
            self.log("train/loss", loss.detach())  # not prog_bar: Lightning would read it back every step
            self.log("train/lr", self.last_lr)
            self.log("train/tokens", float((self.global_step + 1) * self.tokens_per_step))
            if block is not None:
                self.log("train/attention_block", float(block))
            if len(terms) > 1:  # more than the LM loss alone
                self.log_dict({f"train/{name}": value for name, value in terms.items()})
        if load is not None:  # for RoutingLoad (slm.training.routing): the callbacks get the step's output
            return {"loss": loss, "moe_load": load, "logging_step": logs}
        return loss

    def logging_step(self) -> bool:
        """Whether this step's metrics reach the loggers: Lightning writes on-step metrics every log_interval
        steps (and when training stops) and drops the others, and each self.log call costs ~1 ms of bookkeeping
        (a tenth of a small model's step on a CPU), so they are logged on those steps only."""
        return (self.global_step + 1) % self.train_cfg.logging.interval == 0 or self.trainer.should_stop

    def _single(self) -> bool:
        """One process and one micro-batch a step: the loss is read back on the logging cadence, not every step."""
        return self._trainer.world_size == 1 and self._trainer.accumulate_grad_batches == 1

    def _queue_loss(self, loss: torch.Tensor, batch_idx: int, block: int | None) -> None:
        """Queue the step's loss (the mean over its micro-batches and, reduced, over the ranks; one device and one
        batch: the batch's loss as it is) on the device, known after the step's last micro-batch; settle on the
        logging cadence (every step unless _single)."""
        micro = self.trainer.accumulate_grad_batches
        self._loss_sum = loss if batch_idx % micro == 0 else self._loss_sum + loss
        if (batch_idx + 1) % micro:
            return
        step_loss = self._loss_sum / micro if micro > 1 else loss
        if self.trainer.world_size > 1:
            step_loss = self.trainer.strategy.reduce(step_loss.float(), reduce_op="mean")
        # a train_log row: step counts completed optimizer steps (the trainer's global_step after this one)
        self._pending.append({"step": self.global_step + 1, "loss": step_loss, "lr": self.last_lr,
                              **({"attention_block": block} if block is not None else {})})
        if not self._single() or self.logging_step():
            self.settle()

    def settle(self) -> None:
        """Read the queued step losses back in one transfer: last_train_loss and the train_log rows (`settled`)
        up to the first non-finite loss, which makes the run `diverged` at its step and stops it."""
        if not self._pending:
            return
        values = torch.stack([row["loss"].float() for row in self._pending]).tolist()
        rows, self._pending = self._pending, []
        for row, value in zip(rows, values):
            if self.diverged is not None:
                break
            if not math.isfinite(value):
                self.diverged = {"step": row["step"] - 1, "loss": value}
                if self._trainer is not None:
                    self.trainer.should_stop = True
                break
            self.last_train_loss = value
            self.settled.append({**row, "loss": value})

    def take_settled(self) -> list[dict]:
        """The train_log rows settled since the last call (StepLog writes them)."""
        rows, self.settled = self.settled, []
        return rows

    def finite_parameters(self) -> bool:
        """Whether every parameter is finite (one host read)."""
        flags = [torch.isfinite(p).all() for p in self.model.parameters()]
        return bool(torch.stack(flags).all()) if flags else True

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        max_norm = self.train_cfg.grad_clip if self.train_cfg.grad_clip is not None else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        if self.logging_step():
            self.log("train/grad_norm", norm)
        if self._trainer.world_size > 1 or self._trainer.accumulate_grad_batches > 1:
            # the norm of the reduced gradients: the same on every rank, so every rank skips the same update
            if not math.isfinite(float(norm)):
                if self.diverged is None:
                    self.diverged = {"step": self.global_step, "loss": float("nan"), "grad_norm": float(norm)}
                self.trainer.should_stop = True
                for p in self.model.parameters():
                    p.grad = None  # the optimizer skips a parameter without a gradient: no update

    def configure_optimizers(self):
        optimizer = build_optimizer(self.model, self.train_cfg)
        cfg = self.train_cfg
        self.schedule = cfg.schedule.build(self.max_steps)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, self.schedule)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # ------------------------------------------------------------------ validation
    def on_validation_epoch_start(self) -> None:
        self.settle()  # a diverged run stops here rather than validating weights it will not keep
        self._val_sums = []

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        block = self.attention_block(self.global_step - 1)  # the block the model was last trained with
        self._val_sums.append(self.objective.validate(self._forward, batch, seed=batch_idx,
                                                      **self._objective_kwargs(block)))

    def on_validation_epoch_end(self) -> None:
        if not self._val_sums:
            return
        nll, count, extras = summarise(self._val_sums)
        if self.scoring_test:
            ppl = "test_ppl" if self.objective.nll_kind == "nll" else "test_ppl_bound"  # exp(a NELBO): a bound
            self.test_metrics = {"test_nll": nll, ppl: math.exp(min(nll, 700.0)), "test_targets": count}
            return
        self.val_metrics = val_metrics(nll, extras, self.global_step)
        self.val_curve = [p for p in self.val_curve if p[0] != self.global_step] + [[self.global_step, nll]]
        if self.train_cfg.validation.restore_best and (self.best is None or nll < self.best["val_nll"]):
            self.best = dict(self.val_metrics)
            self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        # every rank validates every batch (the same numbers): sync_dist only tells Lightning the value is global
        self.log("val/nll", nll, sync_dist=True)
        self.log("val/ppl", self.val_metrics["val_ppl"], sync_dist=True)
        for name in extras:
            if f"val_{name}" in self.val_metrics:
                self.log(f"val/{name}", self.val_metrics[f"val_{name}"], sync_dist=True)
        block = self.attention_block(self.global_step - 1)
        if block is not None:
            self.val_metrics["val_attention_block"] = block
            self.log("val/attention_block", float(block), sync_dist=True)

    def restore_best(self) -> dict | None:
        """Load the best validation's weights (train.validation.restore_best) and make its metrics the current ones;
        returns the metrics of the last validation it replaced (None if nothing was restored)."""
        if self.best_state is None:
            return None
        last = dict(self.val_metrics)
        self.model.load_state_dict(self.best_state)
        self.val_metrics = dict(self.best)
        return last

    # ------------------------------------------------------------------ exact resume
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        self.settle()
        if self.diverged is None and not self.finite_parameters():  # a finite loss can still leave inf weights
            self.diverged = {"step": self.global_step, "loss": float("nan"), "parameters": "non-finite"}
            if self._trainer is not None:
                self.trainer.should_stop = True
        if self.diverged is not None:
            checkpoint[NOT_WRITTEN] = "diverged"  # AtomicCheckpointIO writes nothing: the last good copy stays
        checkpoint["slm_rng"] = {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "python": list(random.getstate()[1]),
        }
        checkpoint["slm_last_train_loss"] = self.last_train_loss
        checkpoint["slm_best"] = {"metrics": self.best, "state": self.best_state}
        checkpoint["slm_val_curve"] = [list(p) for p in self.val_curve]
        # what train.init_from needs to start another run from this file (slm.training.init_from): the model's
        # config, and whatever the job adds (the tokenizer's fingerprint)
        checkpoint["slm_meta"] = {"model_config": self.model.cfg.to_dict(), **self.checkpoint_meta}

    def on_train_end(self) -> None:
        self.settle()

    def on_train_start(self) -> None:
        self.apply_schedule()

    def apply_schedule(self) -> None:
        """Make this run's schedule (train.schedule at max_steps) the one that sets the lr from the current step on,
        the lr of the next step included. After a resume the scheduler holds what the checkpoint carried: its lr
        function's fields (LambdaLR saves a callable object's __dict__) and the groups' lr of the next step, both
        of the run that wrote it; a decay branch (slm.runs.branches) resumes from its parent run's checkpoint, a
        run of another length. Same values for a run resumed from its own checkpoint (and at step 0)."""
        vars(self.schedule).update(vars(self.train_cfg.schedule.build(self.max_steps)))
        for config in self.trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            if not isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
                continue
            for fn in scheduler.lr_lambdas:
                if isinstance(fn, Schedule) and fn is not self.schedule:
                    vars(fn).update(vars(self.schedule))
            lrs = [base * fn(scheduler.last_epoch) for fn, base in zip(scheduler.lr_lambdas, scheduler.base_lrs)]
            for group, lr in zip(scheduler.optimizer.param_groups, lrs):
                if isinstance(group["lr"], torch.Tensor):
                    group["lr"].fill_(lr)
                else:
                    group["lr"] = lr
            scheduler._last_lr = [group["lr"] for group in scheduler.optimizer.param_groups]

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("slm_rng")
        if state is not None:
            torch.set_rng_state(state["torch"])
            if state["cuda"] and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(state["cuda"])
            random.setstate((3, tuple(state["python"]), None))
        self.last_train_loss = checkpoint.get("slm_last_train_loss")
        best = checkpoint.get("slm_best") or {}
        self.best, self.best_state = best.get("metrics"), best.get("state")
        self.val_curve = [list(p) for p in checkpoint.get("slm_val_curve") or []]
