"""Averaged weights while a run trains (train.validation.averaging: slm.training.averaging), validated beside the raw
weights at every validation, carried in the checkpoint, and kept at the end on request.

`Averager` holds the average: a copy of the network that is never trained, whose parameters are the average (ema:
updated in place after every optimizer step; lawa: the mean of a first-in first-out queue of parameter snapshots,
written into the copy when it is validated). The copy is not a submodule of the LightningModule, so the optimizer,
the checkpoint's state_dict and train.init_from never see it; its buffers are the network's at the first update.
`AverageWeights`, the callback, updates it at the end of each optimizer step (list it before any callback that saves a
checkpoint on a step's end), validates it on the batches the module has just validated (the same windows, seeds and
attention block, under the trainer's precision context), logs val/nll_avg, keeps the curve, and saves and restores all
of it with the checkpoint (Lightning's callback state), so a run killed and resumed averages exactly the weights an
uninterrupted one does.

Why not Lightning's WeightAveraging callback (torch.optim.swa_utils.AveragedModel): it swaps the averaged weights in
for validation, so only one of the two is validated, whereas the point here is both (the averaged weights' loss is
a proxy of its own); and AveragedModel keeps an EMA or a running mean of every update (SWA), not LAWA's window of the
last snapshots. The EMA is torch.optim.swa_utils' (a lerp toward the weights), written out here.
"""

from __future__ import annotations

import copy
import math

import lightning as L
import torch

from slm.training.averaging import AveragingSettings
from slm.training.callbacks import step_ended
from slm.training.module import summarise, val_metrics


class Averager:
    """The averaged weights of one run: `update` after each optimizer step, `network` the averaged network (None
    before the first update), `state_dict`/`load_state_dict` for the checkpoint."""

    def __init__(self, settings: AveragingSettings):
        self.settings = settings
        self.copy: torch.nn.Module | None = None
        self.count = 0
        """ema: updates made; lawa: snapshots taken."""
        self.last_step: int | None = None
        self.snapshots: list[tuple[int, list[torch.Tensor]]] = []
        """lawa: (step, the parameters after it), oldest first, at most `window`."""
        self._loaded: dict | None = None  # a checkpoint's state, applied once the network is at hand
        self._current = False  # lawa: the copy holds the mean of the snapshots

    def _make_copy(self, model: torch.nn.Module) -> None:
        self.copy = copy.deepcopy(model).eval().requires_grad_(False)  # no random draw: the run's RNG is untouched

    def _params(self) -> list[torch.Tensor]:
        return [p.data for p in self.copy.parameters()]

    @torch.no_grad()
    def update(self, model: torch.nn.Module, step: int) -> None:
        """Take the weights after optimizer step `step` into the average, if the settings take that step."""
        self.bind(model)
        if not self.settings.takes(step):
            return
        weights = [p.detach() for p in model.parameters()]
        if self.copy is None:
            self._make_copy(model)
        if self.settings.kind == "ema":
            if self.count == 0:
                torch._foreach_copy_(self._params(), weights)
            else:
                torch._foreach_lerp_(self._params(), weights, 1.0 - self.settings.decay)
        else:
            self.snapshots = [*self.snapshots, (step, [w.clone() for w in weights])][-self.settings.window:]
            self._current = False
        self.count, self.last_step = self.count + 1, step

    @torch.no_grad()
    def network(self, model: torch.nn.Module) -> torch.nn.Module | None:
        """The averaged network (None before the first update); lawa: the snapshots summed oldest first, then
        divided by their number."""
        self.bind(model)
        if self.copy is None or self.count == 0:
            return None
        if self.settings.kind == "lawa" and not self._current:
            for i, p in enumerate(self._params()):
                p.copy_(self.snapshots[0][1][i])
                for _, snapshot in self.snapshots[1:]:
                    p.add_(snapshot[i])
                p.div_(len(self.snapshots))
            self._current = True
        return self.copy

    def describe(self) -> dict:
        """What the average holds, for the record: kind, updates, the last step taken (lawa: the snapshots' steps)."""
        out = {"kind": self.settings.kind, "updates": self.count, "last_update": self.last_step}
        if self.settings.kind == "lawa":
            out["snapshots"] = [step for step, _ in self.snapshots]
        return out

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict:
        names = [name for name, _ in self.copy.named_parameters()] if self.copy is not None else []
        state = {"kind": self.settings.kind, "count": self.count, "last_step": self.last_step}
        if self.settings.kind == "ema" and self.copy is not None:
            state["params"] = dict(zip(names, self._params()))
        elif self.settings.kind == "lawa":
            state["snapshots"] = [{"step": step, "params": dict(zip(names, snap))} for step, snap in self.snapshots]
        return state

    def load_state_dict(self, state: dict) -> None:
        """A checkpoint's state; applied when the network is next at hand (bind). A state of another kind (the
        run's settings changed) is dropped: the average starts again."""
        if state.get("kind") == self.settings.kind:
            self._loaded = state

    @torch.no_grad()
    def bind(self, model: torch.nn.Module) -> None:
        """Apply a loaded state to a copy of `model` (its parameters put on the model's devices)."""
        state, self._loaded = self._loaded, None
        if state is None:
            return
        self.count, self.last_step, self.copy, self.snapshots = state["count"], state["last_step"], None, []
        if self.count == 0:
            return
        self._make_copy(model)
        named = list(self.copy.named_parameters())
        if self.settings.kind == "ema":
            for name, p in named:
                p.copy_(state["params"][name])
        else:
            self.snapshots = [(snap["step"], [snap["params"][name].to(p.device, p.dtype) for name, p in named])
                              for snap in state["snapshots"]][-self.settings.window:]
            self._current = False


class AverageWeights(L.Callback):
    """train.validation.averaging: the Averager updated at the end of each optimizer step, validated beside the raw
    weights (`metrics`: the last validation's, in the module's val_metrics form; `curve`: [[step, NLL], ...] of every
    one, resumes included), the whole of it in the checkpoint."""

    def __init__(self, settings: AveragingSettings):
        self.averager = Averager(settings)
        self.metrics: dict = {}
        self.curve: list[list] = []
        self._sums: list = []
        self._net: torch.nn.Module | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if step_ended(trainer, batch_idx):
            self.averager.update(pl_module.model, trainer.global_step)

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        self._sums = []
        self._net = None if pl_module.scoring_test else self.averager.network(pl_module.model)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if self._net is None:
            return
        block = pl_module.attention_block(pl_module.global_step - 1)  # as LanguageModelModule.validation_step
        with trainer.precision_plugin.val_step_context():
            self._sums.append(pl_module.objective.validate(self._net, batch, seed=batch_idx,
                                                           **pl_module._objective_kwargs(block)))

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if self._net is None or not self._sums:
            return
        nll, _, extras = summarise(self._sums)
        step = pl_module.global_step
        self.metrics = val_metrics(nll, extras, step)
        self.curve = [p for p in self.curve if p[0] != step] + [[step, nll]]
        pl_module.log("val/nll_avg", nll, sync_dist=True)  # every rank validated every batch: the same number
        self._sums, self._net = [], None

    def keep(self, pl_module) -> dict | None:
        """train.validation.averaging.keep: the module's weights become the averaged ones and its validation
        metrics theirs (after the final validation); returns the raw weights' metrics it replaced, with kept:
        averaged (None when nothing was averaged)."""
        net = self.averager.network(pl_module.model)
        if net is None or not self.metrics:
            return None
        last = dict(pl_module.val_metrics)
        with torch.no_grad():
            for mine, averaged in zip(pl_module.model.parameters(), net.parameters()):
                mine.copy_(averaged)
        block = {k: v for k, v in last.items() if k == "val_attention_block"}
        pl_module.val_metrics = {**self.metrics, **block}
        return {**last, "kept": "averaged"}

    def record(self) -> dict:
        """The record's eval entries: val_nll_avg (the last validation's), its curve and what was averaged."""
        out = {"val_curve_avg": [list(p) for p in self.curve], "averaged_weights": self.averager.describe()}
        nll = self.metrics.get("val_nll")
        if nll is not None and math.isfinite(nll):
            out["val_nll_avg"] = nll
        return out

    def state_dict(self) -> dict:
        return {"averager": self.averager.state_dict(), "curve": [list(p) for p in self.curve]}

    def load_state_dict(self, state_dict: dict) -> None:
        self.averager.load_state_dict(state_dict.get("averager") or {})
        self.curve = [list(p) for p in state_dict.get("curve") or []]
