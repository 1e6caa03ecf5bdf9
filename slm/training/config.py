"""`TrainConfig`: optimisation, length, precision, logging and checkpointing of one training run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from typing import Literal

from slm.renames import RenameError, closest, upgrade_train_fields
from slm.training.curriculum import BlockCurriculum, CurriculumError
from slm.training.length import LengthSettings, LengthSettingsError
from slm.training.optim import OPTIMIZERS, OptimSettingsError, optim_defaults, optim_settings
from slm.training.schedules import ScheduleSettings, ScheduleSettingsError
from slm.typecheck import check_types, settings_from_node

LOGGERS = ("csv", "tensorboard", "wandb")
GROUPS = {"length": LengthSettings, "schedule": ScheduleSettings}
"""TrainConfig's nested settings (train.<group>.<field>), each checked by its own class."""


class TrainConfigError(ValueError):
    """An invalid training config; the message names the field, the value and what is allowed."""


def _optim_defaults() -> dict:
    return optim_defaults()


def _loss_defaults() -> dict:
    from slm.objectives.linear_ce import loss_defaults

    return loss_defaults()


def cpu_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices natively (oneDNN's test: AVX512-BF16 or AMX on x86, BF16 on Arm).
    Without, bf16 autocast emulates them: measured 16x slower than float32 (a small GPT-2 step, one thread, with
    oneDNN held to AVX2), where with them it ran 2x faster than float32."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without oneDNN
        return False



@dataclass
class TrainConfig:
    seed: int = 0
    """Seed for model init, data order and dropout."""
    objective: str = "causal_lm"
    """Training objective (slm.objectives): causal_lm (every position), last_token (the token after each
    window only) or mdlm (masked diffusion)."""
    batch_size: int = 16
    """Sequences per optimizer step (each context_length tokens)."""
    length: LengthSettings = field(default_factory=LengthSettings)
    """How long the run trains (slm.training.length), train.length.<field>: tokens, steps, epochs,
    windows_per_epoch."""
    eval_windows: int | None = None
    """Validate on the first eval_windows windows of the validation split at stride 1 (starts 0, 1, 2, ...:
    arXiv 2512.20877's protocol), and after training score the same windows of the test split (eval.test_nll);
    None: val_batches batches of windows spread evenly over the validation split, and no test score."""
    restore_best: bool = False
    """At the end, restore the weights of the best validation (the model saved, tested and scored is that one;
    arXiv 2512.20877's protocol)."""
    window_sampling: Literal["tiled", "random"] = "tiled"
    """How training windows are drawn (slm.data.mix): tiled (each epoch a shuffled tiling of the tokens) or
    random (every window at a uniformly random start, with replacement: arXiv 2512.20877's sampler)."""
    lr: float = 1.0e-3
    """Peak learning rate."""
    schedule: ScheduleSettings = field(default_factory=ScheduleSettings)
    """The learning-rate schedule (slm.training.schedules), train.schedule.<field>: kind (cosine, wsd, constant),
    warmup_fraction, warmup_steps, decay_fraction, min_lr_ratio."""
    weight_decay: float = 0.1
    """AdamW decoupled weight decay on matrices."""
    decay_embeddings: bool = False
    """Also decay embeddings (norm weights and biases are never decayed)."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    """AdamW betas."""
    eps: float = 1.0e-8
    """AdamW epsilon."""
    optimizer: str = "adamw"
    """Optimizer (slm.training.optim): adamw, muon (torch's Muon for the hidden 2-D matrices, AdamW for the rest)
    or lion. lr, betas, eps and weight_decay above are AdamW's (and Lion's lr and decay)."""
    optim: dict = field(default_factory=_optim_defaults)
    """Each optimizer's own settings, train.optim.<optimizer>.<field>: muon (lr, momentum, nesterov, ns_steps,
    weight_decay, adjust_lr), lion (betas); see conf/train/default.yaml."""
    loss: dict = field(default_factory=_loss_defaults)
    """How the head and the cross-entropy are computed, train.loss.<field> (slm.objectives.linear_ce): impl (auto,
    plain, chunked, liger) and chunk_tokens."""
    grad_clip: float | None = 1.0
    """Clip the global gradient norm to this value; None disables clipping (the norm is still logged)."""
    precision: Literal["32", "bf16-mixed"] = "32"
    """32 or bf16-mixed (a GPU's, or a CPU's with bfloat16 instructions: refused on a CPU without, where it would
    crawl)."""
    compile: bool = False
    """Compile the model with torch.compile, and the objective's loss with it (forward, head and loss as one function)."""
    val_interval: int = 200
    """Validate every this many steps (and always at the end); 0: only at the end."""
    val_batches: int = 20
    """Validation batches (fixed windows of the held-out split)."""
    log_interval: int = 10
    """Send metrics to the loggers every this many steps."""
    print_interval: int | None = None
    """Without a progress bar (progress_bar false, or stdout not a terminal), print a progress line to stdout every
    this many steps, and at the first and the last step of each session: step/max, loss, lr, tokens/s, MFU where
    the device's peak is known, ETA (and one line per validation). None: about every 1% of the run
    (max_steps // 100, at least 1); 0: no progress lines."""
    ckpt_interval: int = 200
    """Write last.ckpt every this many steps (and at the end)."""
    keep_every: int | None = None
    """Also keep the checkpoint of every this many steps as checkpoints/step-<N>.ckpt (full training state, written
    atomically, never replaced nor deleted; train.init_from takes its path). None: none."""
    keep_steps: list[int] = field(default_factory=list)
    """Steps whose checkpoint is kept as checkpoints/step-<N>.ckpt (with keep_every's), e.g. [1000, 5000]."""
    loggers: list[str] = field(default_factory=lambda: ["csv"])
    """Any of csv, tensorboard, wandb."""
    accelerator: Literal["auto", "cpu", "gpu", "cuda", "mps"] = "auto"
    """Lightning accelerator: auto (a GPU if one is visible, else the CPU), cpu, gpu / cuda, mps; one that is not
    available here is refused before the run starts."""
    devices: int = 1
    """Devices (GPUs, or CPU processes with gloo) per node. With more than one, each trains on its own rows of every
    batch (data parallel); the batch, the data order and the result do not depend on the device count."""
    num_nodes: int = 1
    """Nodes of the job (devices x num_nodes processes in all: Slurm tasks, or torchrun's)."""
    strategy: Literal["auto", "ddp"] = "auto"
    """Lightning strategy: auto (DDP when devices x num_nodes > 1) or ddp."""
    micro_batch_size: int | None = None
    """Sequences per forward/backward on one device; batch_size / (devices x num_nodes) must be a multiple of it,
    and the gradients of that many micro-batches are accumulated into each optimizer step (the loss averaged, so
    1 device x k micro-batches trains like k devices x 1). None: the whole per-device share at once."""
    peak_flops: float | None = None
    """Peak FLOP/s of one device for MFU; None looks the device up in slm.training.hardware."""
    progress_bar: bool = True
    """Show a progress bar (steps of max_steps, loss, tokens/s, ETA) when stdout is a terminal; when it is not (a
    file, a pipe, a Slurm log), or when false, print_interval's progress lines instead."""
    detect_anomaly: bool = False
    """torch.autograd anomaly detection (slow; for debugging)."""
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
        from slm.objectives import OBJECTIVES

        if isinstance(self.precision, int) and not isinstance(self.precision, bool):
            self.precision = str(self.precision)  # `train.precision=32` on the command line is a number
        try:
            for name, cls in GROUPS.items():
                setattr(self, name, settings_from_node(cls, getattr(self, name), f"train.{name}", TrainConfigError))
                getattr(self, name).check()
        except (LengthSettingsError, ScheduleSettingsError) as err:
            raise TrainConfigError(str(err)) from None
        check_types(self, "train", TrainConfigError)  # a string in a numeric field, lr=inf, tokens=nan, ...
        if isinstance(self.loggers, str):
            self.loggers = [name.strip() for name in self.loggers.split(",") if name.strip()]
        for name, registry in (("objective", OBJECTIVES), ("optimizer", OPTIMIZERS)):
            registry.check(getattr(self, name), f"train.{name}", TrainConfigError)  # train.schedule.kind=x: unknown ...
        try:
            self.optim = optim_settings(self.optim)
        except OptimSettingsError as err:
            raise TrainConfigError(str(err)) from None
        from slm.objectives.linear_ce import LossSettingsError, loss_settings

        try:
            self.loss = loss_settings(self.loss)
        except LossSettingsError as err:
            raise TrainConfigError(str(err)) from None
        for name in ("batch_size", "val_batches", "log_interval", "ckpt_interval"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise TrainConfigError(f"train.{name}={value!r} is invalid: must be a positive integer")
        if not self.lr > 0:
            raise TrainConfigError(f"train.lr={self.lr!r} is invalid: must be > 0")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise TrainConfigError(f"train.grad_clip={self.grad_clip!r} is invalid: a norm > 0, or null (no clipping)")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise TrainConfigError(f"train.betas={self.betas!r} is invalid: two numbers in [0, 1), e.g. [0.9, 0.95]")
        if not self.eps > 0:
            raise TrainConfigError(f"train.eps={self.eps!r} is invalid: must be > 0")
        if not self.weight_decay >= 0:
            raise TrainConfigError(f"train.weight_decay={self.weight_decay!r} is invalid: must be >= 0")
        if not 0 <= self.seed < 2**32:
            raise TrainConfigError(f"train.seed={self.seed!r} is invalid: an integer in 0..2**32-1")
        if self.peak_flops is not None and not self.peak_flops > 0:
            raise TrainConfigError(f"train.peak_flops={self.peak_flops!r} is invalid: FLOP/s > 0, or null (look the "
                                   "device up)")
        for logger in self.loggers:
            if logger not in LOGGERS:
                raise TrainConfigError(f"train.loggers has {logger!r}: choose from: {', '.join(LOGGERS)}")
        if self.print_interval is not None and self.print_interval < 0:
            raise TrainConfigError(f"train.print_interval={self.print_interval!r} is invalid: an integer >= 0 (0: no "
                                   "progress lines), or null (about every 1% of the run)")
        if self.keep_every is not None and self.keep_every <= 0:
            raise TrainConfigError(f"train.keep_every={self.keep_every!r} is invalid: a positive number of steps, or "
                                   "null (none)")
        if any(step <= 0 for step in self.keep_steps):
            raise TrainConfigError(f"train.keep_steps={self.keep_steps!r} is invalid: positive step numbers, e.g. "
                                   "[1000, 5000]")
        if self.eval_windows is not None and self.eval_windows < 1:
            raise TrainConfigError(f"train.eval_windows={self.eval_windows!r} is invalid: a positive integer, or null")
        self._check_parallel()
        if self.val_interval < 0:
            raise TrainConfigError(f"train.val_interval={self.val_interval!r} is invalid: must be >= 0")
        if self.init_from is not None and (not isinstance(self.init_from, str) or not self.init_from.strip()):
            raise TrainConfigError(f"train.init_from={self.init_from!r} is invalid: a run or checkpoint directory, "
                                   "or null")
        try:
            self.block_curriculum = BlockCurriculum.from_node(self.block_curriculum)
        except CurriculumError as err:
            raise TrainConfigError(str(err)) from None
        if self.block_curriculum is not None and self.objective != "mdlm":
            raise TrainConfigError(f"train.block_curriculum is set with train.objective={self.objective}: the "
                                   "attention-block curriculum is for masked diffusion (train.objective=mdlm)")

    def _check_parallel(self) -> None:
        for name in ("devices", "num_nodes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TrainConfigError(f"train.{name}={value!r} is invalid: must be a positive integer")
        world = self.world_size
        if self.batch_size % world:
            raise TrainConfigError(f"train.batch_size={self.batch_size} is invalid with {world} devices in all "
                                   f"(devices x num_nodes): it must be a multiple of {world}")
        share = self.batch_size // world
        micro = self.micro_batch_size
        if micro is not None and (isinstance(micro, bool) or not isinstance(micro, int) or micro < 1 or share % micro):
            raise TrainConfigError(f"train.micro_batch_size={micro!r} is invalid: a positive divisor of each device's "
                                   f"{share} rows (batch_size {self.batch_size} / {world} devices), or null")

    @property
    def world_size(self) -> int:
        """Processes that train the run together (devices x num_nodes)."""
        return self.devices * self.num_nodes

    def micro_batch(self) -> int:
        """Rows per forward/backward on one device."""
        return self.micro_batch_size or self.batch_size // self.world_size

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
            raise TrainConfigError(str(err)) from None
        names = [f.name for f in fields(cls)]
        for key in node:
            if key not in names:
                raise TrainConfigError(f"train.{key} is not a training field{closest('train', key, names)}; "
                                       "see conf/train/default.yaml for the fields")
        return cls(**node)

    def steps_per_epoch(self) -> int | None:
        """Optimizer steps per epoch when the run is measured in epochs, else None."""
        return self.length.steps_per_epoch(self.batch_size)

    def validation_interval(self, max_steps: int) -> int:
        """Steps between validations: each epoch's end when measured in epochs, else val_interval (0: the end)."""
        return self.steps_per_epoch() or self.val_interval or max_steps

    def max_steps(self, context_length: int) -> int:
        """Optimizer steps of the run: epochs of windows, `steps`, or the token budget in whole batches."""
        try:
            return self.length.max_steps(self.batch_size, context_length)
        except LengthSettingsError as err:
            raise TrainConfigError(str(err)) from None

    def check_length(self, max_steps: int) -> None:
        """Settings that only make sense against the run's length (a warmup longer than the run, a checkpoint kept
        at a step the run never reaches)."""
        warmup_steps = self.schedule.warmup_steps
        if warmup_steps is not None and warmup_steps > max_steps:
            raise TrainConfigError(f"train.schedule.warmup_steps={warmup_steps} is invalid: longer than the run "
                                   f"({max_steps} step{'' if max_steps == 1 else 's'})")
        beyond = [step for step in self.keep_steps if step > max_steps]
        if beyond:
            raise TrainConfigError(f"train.keep_steps has {beyond[0]}: beyond the end of the run ({max_steps} step{'' if max_steps == 1 else 's'})")

    def print_every(self, max_steps: int) -> int:
        """Steps between progress lines: print_interval, or about 1% of the run when it is None (0: none)."""
        if self.print_interval is not None:
            return self.print_interval
        return max(1, max_steps // 100)

    def keeps(self, step: int) -> bool:
        """Whether the checkpoint of optimizer step `step` is kept as checkpoints/step-<step>.ckpt."""
        return step in self.keep_steps or (self.keep_every is not None and step > 0 and step % self.keep_every == 0)

    def check_loggers(self) -> None:
        """Refuse a logger whose package is not installed (before any data is prepared; Lightning would fail
        after it, with a traceback)."""
        import importlib.util

        if "wandb" in self.loggers and importlib.util.find_spec("wandb") is None:
            raise TrainConfigError("train.loggers has wandb, but the wandb package is not installed: "
                                   "pip install -e '.[wandb]' in the slm checkout (the package named slm on PyPI is "
                                   "another project), or leave wandb out of train.loggers")

    def check_accelerator(self) -> None:
        """Refuse an accelerator this machine does not have (Lightning would fail later, with a traceback), and
        bf16-mixed where the run would train on a CPU without bfloat16 instructions (it would crawl: a step of the
        README's GPU example took more than 11 minutes). slm-train calls it before the data is prepared."""
        import torch

        if self.accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
            raise TrainConfigError(f"train.accelerator={self.accelerator} is invalid here: no CUDA device is visible "
                                   "(torch.cuda.is_available() is False); use auto or cpu")
        if self.accelerator == "mps" and not torch.backends.mps.is_available():
            raise TrainConfigError("train.accelerator=mps is invalid here: no Apple MPS device; use auto or cpu")
        on_cpu = self.accelerator == "cpu" or (self.accelerator == "auto" and not torch.cuda.is_available()
                                               and not torch.backends.mps.is_available())
        if self.precision == "bf16-mixed" and on_cpu and not cpu_bf16():
            where = "train.accelerator=cpu" if self.accelerator == "cpu" else "no CUDA device is visible"
            raise TrainConfigError(f"train.precision=bf16-mixed is invalid here: the run would train on the CPU "
                                   f"({where}), which has no bfloat16 instructions, so its matrix products would be "
                                   "emulated, about 16x slower than float32; use train.precision=32 (bf16-mixed is "
                                   "for GPUs, and CPUs with AVX512-BF16 or AMX)")

    def warmup(self, max_steps: int) -> int:
        """Warmup steps of a run of max_steps (train.schedule)."""
        return self.schedule.warmup(max_steps)

    def to_dict(self) -> dict:
        return asdict(self)
