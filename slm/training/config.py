"""`TrainConfig`: optimisation, length, precision, validation, logging and checkpointing of one training run.

Each part owns its settings as a group (slm.settings.Settings): train.length, train.schedule, train.optim.<optimizer>,
train.loss, train.preference, train.validation, train.logging, train.checkpoint, train.parallel, train.block_curriculum; the top level
keeps what every run sets (seed, objective, batch, lr, precision, ...). Old flat spellings (train.validation.interval,
train.optim.adamw.betas, ...) read through slm.renames.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Literal

from slm.objectives.loss_settings import LossSettings
from slm.objectives.preference_settings import PreferenceSettings
from slm.renames import RenameError, closest, upgrade_train_fields
from slm.settings import Settings, SettingsError, require, setting
from slm.training.cadence import CheckpointSettings, LoggingSettings, ValidationSettings
from slm.training.curriculum import BlockCurriculum
from slm.training.devices import ParallelSettings
from slm.training.length import LengthSettings
from slm.training.optim import OPTIMIZERS, OptimSettings
from slm.training.decay_branches import DecayBranch, plan_branches
from slm.training.schedules import ScheduleSettings

TrainConfigError = SettingsError  # the name callers knew; every bad setting raises SettingsError


@dataclass
class TrainConfig(Settings):
    seed: int = setting(0, ge=0, lt=2**32)
    """Seed for model init, data order and dropout."""
    objective: str = "causal_lm"
    """Training objective (slm.objectives): causal_lm (every position), last_token (the token after each
    window only) or mdlm (masked diffusion); on post-training records (data.records), sft (completion tokens only) or
    preference (DPO and kin: train.preference)."""
    batch_size: int = setting(16, gt=0)
    """Sequences per optimizer step (each context_length tokens)."""
    length: LengthSettings = setting(factory=LengthSettings)
    """How long the run trains (slm.training.length), train.length.<field>: tokens, steps, epochs,
    windows_per_epoch."""
    window_sampling: Literal["tiled", "random"] = "tiled"
    """How training windows are drawn (slm.data.mix): tiled (each epoch a shuffled tiling of the tokens) or
    random (every window at a uniformly random start, with replacement: arXiv 2512.20877's sampler)."""
    lr: float = setting(1.0e-3, gt=0)
    """Peak learning rate: the one the schedule and an lr search scale (AdamW's; Muon's matrices have their own)."""
    schedule: ScheduleSettings = setting(factory=ScheduleSettings)
    """The learning-rate schedule (slm.training.schedules), train.schedule.<field>: kind (cosine, wsd, constant),
    warmup_fraction, warmup_steps, decay_fraction, min_lr_ratio, decay_branches."""
    optimizer: str = "adamw"
    """Optimizer (slm.training.optim): adamw, muon (torch's Muon for the hidden 2-D matrices, AdamW for the rest)
    or lion; each one's own settings are under train.optim.<optimizer>."""
    optim: OptimSettings = setting(factory=OptimSettings)
    """Each optimizer's own settings, train.optim.<optimizer>.<field>: adamw (betas, eps, weight_decay,
    decay_embeddings), muon (lr, momentum, nesterov, ns_steps, weight_decay, adjust_lr), lion (betas,
    weight_decay)."""
    loss: LossSettings = setting(factory=LossSettings)
    """How the head and the cross-entropy are computed, train.loss.<field> (slm.objectives.linear_ce): impl (auto,
    plain, chunked, liger) and chunk_tokens."""
    preference: PreferenceSettings = setting(factory=PreferenceSettings)
    """The preference losses of train.objective=preference, train.preference.<field>: loss (dpo, ipo, hinge, simpo,
    orpo, sft, summed), weights, beta, label_smoothing, simpo_gamma, orpo_lambda, reference (cached or frozen)."""
    grad_clip: float | None = setting(1.0, gt=0, null="no clipping")
    """Clip the global gradient norm to this value; None disables clipping (the norm is still logged)."""
    precision: Literal["32", "bf16-mixed"] = "32"
    """32 or bf16-mixed (a GPU's, or a CPU's with bfloat16 instructions: refused on a CPU without, where it would
    crawl)."""
    compile: bool = False
    """Compile the model with torch.compile, and the objective's loss with it (forward, head and loss as one function)."""
    validation: ValidationSettings = setting(factory=ValidationSettings)
    """When and on what the run is validated, train.validation.<field>: interval, batches, windows, restore_best,
    averaging (averaged weights validated beside the raw ones)."""
    logging: LoggingSettings = setting(factory=LoggingSettings)
    """What the run reports, train.logging.<field>: interval, loggers, progress_bar, print_interval, peak_flops,
    detect_anomaly."""
    checkpoint: CheckpointSettings = setting(factory=CheckpointSettings)
    """The checkpoints written and kept, train.checkpoint.<field>: interval, keep_every, keep_steps."""
    parallel: ParallelSettings = setting(factory=ParallelSettings)
    """Where the run trains, train.parallel.<field>: accelerator, devices, num_nodes, strategy, micro_batch_size."""
    init_from: str | None = None
    """Start from the weights of this run directory (its model/), checkpoint directory (config.json +
    model.safetensors) or training checkpoint file (a run's checkpoints/step-<N>.ckpt or last.ckpt, read
    weights-only): weights only, every tensor's shape must match; a new optimizer and schedule. A resumed run
    continues from its own checkpoint instead. None: random init."""
    block_curriculum: BlockCurriculum | None = None
    """mdlm only: attention block per step, warm-up from `start` to the context, stable, optional decay to a
    compact block (slm.training.curriculum; fields start, growth, warmup_fraction, decay_fraction,
    decay_block). None: the model's own attention."""

    def __post_init__(self) -> None:
        if isinstance(self.precision, int) and not isinstance(self.precision, bool):
            self.precision = str(self.precision)  # `train.precision=32` on the command line is a number
        self.settle("train")

    def check(self, key: str, root) -> None:
        from slm.objectives import OBJECTIVES

        OBJECTIVES.check(self.objective, f"{key}.objective", SettingsError)
        OPTIMIZERS.check(self.optimizer, f"{key}.optimizer", SettingsError)
        if self.init_from is not None and not self.init_from.strip():
            raise SettingsError.invalid(f"{key}.init_from", self.init_from, "a run or checkpoint directory, or null")
        branches = self.schedule.decay_branches
        if branches:  # a branch must be the run's prefix: nothing else may depend on the run's length
            require((self.length.epochs is None, f"{key}.schedule.decay_branches", branches,
                     f"a run measured in epochs ({key}.length.epochs) validates at each epoch's end; give the "
                     f"length as {key}.length.tokens or {key}.length.steps"),
                    (self.block_curriculum is None, f"{key}.schedule.decay_branches", branches,
                     f"{key}.block_curriculum stretches over the run's length, so a branch would not share its "
                     "steps"))

    @property
    def world_size(self) -> int:
        """Processes that train the run together (train.parallel: devices x num_nodes)."""
        return self.parallel.world_size

    def micro_batch(self) -> int:
        """Rows per forward/backward on one device."""
        return self.parallel.micro_batch_size or self.batch_size // self.world_size

    def accumulation(self) -> int:
        """Micro-batches accumulated into each optimizer step on each device."""
        return self.batch_size // self.world_size // self.micro_batch()

    @classmethod
    def from_node(cls, node: dict) -> "TrainConfig":
        """The config from the `train` node of a run config (or a stored one, in any spelling ever written:
        slm.renames); an unknown key is one line naming it."""
        try:
            node = upgrade_train_fields(node)
        except RenameError as err:
            raise SettingsError(str(err)) from None
        names = [f.name for f in fields(cls)]
        unknown = [key for key in node if key not in names]
        if unknown:
            raise SettingsError(f"train.{unknown[0]} is not a training field{closest('train', unknown[0], names)}; "
                                "see conf/train/default.yaml for the fields", key=f"train.{unknown[0]}")
        return cls(**node)

    def steps_per_epoch(self) -> int | None:
        """Optimizer steps per epoch when the run is measured in epochs, else None."""
        return self.length.steps_per_epoch(self.batch_size)

    def validation_interval(self, max_steps: int) -> int:
        """Steps between validations: each epoch's end when measured in epochs, else train.validation.interval
        (0: the end)."""
        return self.steps_per_epoch() or self.validation.interval or max_steps

    def max_steps(self, context_length: int) -> int:
        """Optimizer steps of the run: epochs of windows, `steps`, or the token budget in whole batches."""
        return self.length.max_steps(self.batch_size, context_length)

    def check_length(self, max_steps: int) -> None:
        """Settings that only make sense against the run's length: a warmup longer than the run, averaged weights
        never updated, a checkpoint kept at a step the run never reaches (the decay branches: `decay_branches`)."""
        run = f"the run has {max_steps} step{'' if max_steps == 1 else 's'}"
        warmup_steps = self.schedule.warmup_steps
        if warmup_steps is not None and warmup_steps > max_steps:
            raise SettingsError.invalid("train.schedule.warmup_steps", warmup_steps, f"longer than the run ({run})")
        self.validation.averaging.check_length(max_steps)
        beyond = [step for step in self.checkpoint.keep_steps if step > max_steps]
        if beyond:
            raise SettingsError.invalid("train.checkpoint.keep_steps", self.checkpoint.keep_steps,
                                        f"{beyond[0]} is beyond the end of the run ({run})")

    def decay_branches(self, context_length: int) -> list[DecayBranch]:
        """train.schedule.decay_branches against the run's length (slm.training.decay_branches.plan_branches)."""
        return plan_branches(self.schedule, self.length, self.batch_size, context_length)

    def warmup(self, max_steps: int) -> int:
        """Warmup steps of a run of max_steps (train.schedule)."""
        return self.schedule.warmup(max_steps)

    def to_dict(self) -> dict:
        return asdict(self)
