"""`train.parallel`: where a run trains and how its batch is shared out (devices, nodes, micro-batches), and the
checks of what this machine can run (an accelerator it has, bf16 where it is fast)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from slm.settings import Settings, SettingsError, setting


def cpu_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices natively (oneDNN's test: AVX512-BF16 or AMX on x86, BF16 on Arm).
    Without, bf16 autocast emulates them: measured 16x slower than float32 (a small GPT-2 step, one thread, with
    oneDNN held to AVX2), where with them it ran 2x faster than float32."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without oneDNN
        return False


def trains_on_cpu(accelerator: str) -> bool:
    """Whether a run with this train.parallel.accelerator trains on this machine's CPU: cpu, or auto where no GPU
    (CUDA or Apple MPS) is visible."""
    import torch

    gpu = torch.cuda.is_available() or torch.backends.mps.is_available()
    return accelerator == "cpu" or (accelerator == "auto" and not gpu)


@dataclass
class ParallelSettings(Settings):
    """`train.parallel`: the devices a run trains on and how each step's batch is split between them."""

    accelerator: Literal["auto", "cpu", "gpu", "cuda", "mps"] = "auto"
    """Lightning accelerator: auto (a GPU if one is visible, else the CPU), cpu, gpu / cuda, mps; one that is not
    available here is refused before the run starts."""
    devices: int = setting(1, gt=0)
    """Devices (GPUs, or CPU processes with gloo) per node. With more than one, each trains on its own rows of every
    batch (data parallel); the batch, the data order and the result do not depend on the device count."""
    num_nodes: int = setting(1, gt=0)
    """Nodes of the job (devices x num_nodes processes in all: Slurm tasks, or torchrun's)."""
    strategy: Literal["auto", "ddp"] = "auto"
    """Lightning strategy: auto (DDP when devices x num_nodes > 1) or ddp."""
    micro_batch_size: int | None = setting(None, gt=0, null="each device's whole share")
    """Sequences per forward/backward on one device; batch_size / (devices x num_nodes) must be a multiple of it,
    and the gradients of that many micro-batches are accumulated into each optimizer step (the loss averaged, so
    1 device x k micro-batches trains like k devices x 1). None: the whole per-device share at once."""

    @property
    def world_size(self) -> int:
        """Processes that train the run together (devices x num_nodes)."""
        return self.devices * self.num_nodes

    def check(self, key: str, root) -> None:
        world, batch = self.world_size, root.batch_size
        if batch % world:
            raise SettingsError.invalid("train.batch_size", batch, f"with {world} devices in all ({key}.devices x "
                                        f"{key}.num_nodes) it must be a multiple of {world}")
        share = batch // world
        if self.micro_batch_size is not None and share % self.micro_batch_size:
            raise SettingsError.invalid(f"{key}.micro_batch_size", self.micro_batch_size, f"a positive divisor of "
                                        f"each device's {share} rows (batch_size {batch} / {world} devices), or null")

    def check_machine(self, precision: str) -> None:
        """Refuse an accelerator this machine does not have (Lightning would fail later, with a traceback), and
        bf16-mixed where the run would train on a CPU without bfloat16 instructions (it would crawl: a step of the
        README's GPU example took more than 11 minutes). slm-train calls it before the data is prepared."""
        import torch

        gpu, mps = torch.cuda.is_available(), torch.backends.mps.is_available()
        missing = {"gpu": not gpu, "cuda": not gpu, "mps": not mps}.get(self.accelerator, False)
        on_cpu = trains_on_cpu(self.accelerator)
        if missing:
            raise SettingsError.invalid("train.parallel.accelerator", self.accelerator, "not here: " + (
                "no Apple MPS device" if self.accelerator == "mps" else "no CUDA device is visible "
                "(torch.cuda.is_available() is False)") + "; use auto or cpu")
        if precision == "bf16-mixed" and on_cpu and not cpu_bf16():
            where = "train.parallel.accelerator=cpu" if self.accelerator == "cpu" else "no CUDA device is visible"
            raise SettingsError.invalid("train.precision", precision, f"not here: the run would train on the CPU "
                                        f"({where}), which has no bfloat16 instructions, so its matrix products would "
                                        "be emulated, about 16x slower than float32; use train.precision=32 "
                                        "(bf16-mixed is for GPUs, and CPUs with AVX512-BF16 or AMX)")
