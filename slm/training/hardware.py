"""Peak dense FLOP/s per device, for MFU. Figures from NVIDIA's product datasheets (dense, no sparsity).

MFU is reported only where the device is known; on a CPU, or an unknown GPU, it is None unless
`train.logging.peak_flops` gives the peak, since a made-up denominator would make the number meaningless.
"""

from __future__ import annotations

import torch

# device-name substring -> {precision: peak FLOP/s}; "32" is the TF32 tensor-core peak when TF32
# matmuls are allowed, else plain FP32. First match wins, so more specific names come first.
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H200": {"bf16": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12},
    "H100 PCIe": {"bf16": 756.0e12, "tf32": 378.0e12, "fp32": 51.2e12},
    "H100": {"bf16": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12},
    "A100": {"bf16": 312.0e12, "tf32": 156.0e12, "fp32": 19.5e12},
    "L40S": {"bf16": 362.1e12, "tf32": 183.0e12, "fp32": 91.6e12},
    "L4": {"bf16": 121.0e12, "tf32": 60.0e12, "fp32": 30.3e12},
    "A10": {"bf16": 125.0e12, "tf32": 62.5e12, "fp32": 31.2e12},
    "RTX 4090": {"bf16": 165.2e12, "tf32": 82.6e12, "fp32": 82.6e12},
}


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type


def peak_flops(device: torch.device, precision: str) -> float | None:
    """Peak FLOP/s of one device at the training precision, or None if unknown (CPU included)."""
    if device.type != "cuda":
        return None
    name = device_name(device)
    for key, peaks in PEAK_FLOPS.items():
        if key in name:
            if precision.startswith("bf16"):
                return peaks["bf16"]
            return peaks["tf32"] if torch.backends.cuda.matmul.allow_tf32 else peaks["fp32"]
    return None
