"""Under what the decode speeds were measured: the device, its threads, the load, and each decoder's settings
(slm.eval.throughput records them under eval.throughput in result.json).

    conditions(rows).lines()     # ["batch 1 on CPU (1 thread), other jobs may have shared the machine; ...", ...]

The table holds the device (decode_device; the GPU's name or "cpu (N threads)" in `device`), the dtype, the
decoder and a diffusion sampler's settings; the prompt and generation lengths, the measurement's threads
and the fast paths (CUDA graph, torch.compile) are read from each run's result.json where it is at hand.
The load: a record keeps how many cores' worth of CPU time other processes used during the measurement
(decode_other_cores, slm.cpu_busy). A CPU figure says "otherwise idle" when every CPU run recorded under
IDLE_CORES, the range of that load when some ran beside other work, and "other jobs may have shared the
machine" when some run did not record it (older records); the caption (load_caption) says the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import math

import pandas as pd

IDLE_CORES = 0.25
"""Other processes' CPU use (in cores) below which a CPU measurement counts as made on an idle machine."""

@dataclass
class Conditions:
    devices: dict = field(default_factory=dict)
    """{device description: number of runs}."""
    cpu: bool = False
    other_cores: list = field(default_factory=list)
    """Per CPU run: the cores other processes kept busy while it was measured (None: not recorded)."""
    ar: str = ""
    """The autoregressive decoder's settings, or "" when no run decodes autoregressively."""
    diffusion: str = ""
    """The diffusion sampler's settings, or "" when no run decodes by diffusion."""
    lengths_ar: str = ""
    lengths_diffusion: str = ""
    """Prompt and generation lengths per decoder ("" where not recorded)."""

    def device_text(self) -> str:
        if not self.devices:
            return "device not recorded"
        if len(self.devices) == 1:
            return next(iter(self.devices))
        return "; ".join(f"{d} ({n} runs)" for d, n in self.devices.items())

    def load_text(self) -> str:
        """What else ran on the machine while the CPU runs were measured (module docstring)."""
        known = [c for c in self.other_cores if c is not None]
        if not known or len(known) < len(self.other_cores):
            return ", other jobs may have shared the machine"
        if max(known) < IDLE_CORES:
            return ", machine otherwise idle"
        return f", beside other work (it kept {self._span(known)} cores busy)"

    @staticmethod
    def _span(known: list[float]) -> str:
        low, high = min(known), max(known)
        return f"{high:.1f}" if round(low, 1) == round(high, 1) else f"{low:.1f}-{high:.1f}"

    def load_caption(self) -> str:
        """The caption's sentence on the CPU load, in agreement with the subtitle's (load_text)."""
        known = [c for c in self.other_cores if c is not None]
        unknown = len(self.other_cores) - len(known)
        if unknown:
            return (f"{unknown} of {len(self.other_cores)} CPU record(s) do not say what else ran on the machine "
                    "(older records): a CPU speed measured beside other jobs (a local sweep on shared cores) is lower "
                    "than on an idle machine")
        if max(known) < IDLE_CORES:
            return (f"Each CPU speed was measured with other processes keeping under {IDLE_CORES:g} cores busy "
                    "(recorded per run: decode_other_cores)")
        return (f"Other processes kept {self._span(known)} cores busy while the CPU speeds were measured (recorded "
                "per run: decode_other_cores): a speed measured beside more work is lower than on an idle machine, "
                "so compare runs measured under similar load")

    def lines(self) -> list[str]:
        """Two short lines for a figure's subtitle: where and how it was measured, then each decoder's
        settings (the prompt and generation lengths once when both decoders share them)."""
        first = f"batch 1 on {self.device_text()}"
        if self.cpu:
            first += self.load_text()
        if len(self.devices) > 1:
            first += "; speeds compare only within a device"
        shared = self.lengths_ar if self.lengths_ar == self.lengths_diffusion or not self.diffusion \
            else self.lengths_ar if not self.ar else ""
        if shared or (not self.ar and self.lengths_diffusion):
            first += f"; {shared or self.lengths_diffusion}"
        second = []
        if self.ar:
            second.append("autoregressive: " + ", ".join([self.ar] + ([self.lengths_ar] if self.lengths_ar
                                                                       and not shared else [])))
        if self.diffusion:
            second.append("ringed: masked diffusion, " + ", ".join(
                [self.diffusion] + ([self.lengths_diffusion] if self.lengths_diffusion and not shared else [])))
        return [first] + (["; ".join(second)] if second else [])


def _record_throughput(run_dir) -> dict:
    from slm.runs.record import RecordError, load_record

    try:
        record = load_record(run_dir) if isinstance(run_dir, str) and run_dir else None
    except (RecordError, OSError, ValueError):
        return {}
    return ((record or {}).get("eval") or {}).get("throughput") or {}


def _device(row, tp: dict) -> tuple[str, bool]:
    where = str(row.get("decode_device") or tp.get("device") or "")
    env = row.get("device")
    env = env if isinstance(env, str) else ""
    if where.startswith("cuda") or (not where and env and not env.startswith("cpu")):
        return (env if env and not env.startswith("cpu") else "GPU (name not recorded)"), False
    if where.startswith("cpu") or env.startswith("cpu"):
        threads = tp.get("torch_threads")
        return (f"CPU ({threads} thread{'s' if threads != 1 else ''})" if threads else "CPU"), True
    return (where or "device not recorded"), False


def _lengths(settings: list[dict]) -> str:
    prompts = sorted({s["prompt_tokens"] for s in settings if s.get("prompt_tokens")})
    news = sorted({s["new_tokens"] for s in settings if s.get("new_tokens")})
    if not prompts and not news:
        return ""
    return f"{'/'.join(map(str, prompts)) or '?'}-token prompt + {'/'.join(map(str, news)) or '?'} new tokens"


def conditions(rows: pd.DataFrame) -> Conditions:
    """The measurement conditions of the runs in `rows` (those with a decode speed)."""
    out = Conditions()
    ar, diffusion = [], []
    for _, row in rows.iterrows():
        tp = _record_throughput(row.get("run_dir"))
        name, cpu = _device(row, tp)
        out.devices[name] = out.devices.get(name, 0) + 1
        out.cpu |= cpu
        if cpu:
            other = row.get("decode_other_cores", tp.get("other_cores_busy"))
            other = pd.to_numeric(other, errors="coerce") if other is not None else None
            out.other_cores.append(float(other) if other is not None and math.isfinite(other) else None)
        (diffusion if str(row.get("decoder")) == "masked_diffusion" else ar).append((row, tp))
    if ar:
        tps = [tp for _, tp in ar]
        parts = ["greedy with a KV cache"]
        if any(tp.get("cuda_graph") for tp in tps):
            parts.append("CUDA graph" + ("" if all(tp.get("cuda_graph") for tp in tps) else " (some runs)"))
        if any(tp.get("compile") for tp in tps):
            parts.append("torch.compile" + ("" if all(tp.get("compile") for tp in tps) else " (some runs)"))
        out.ar, out.lengths_ar = ", ".join(parts), _lengths(tps)
    if diffusion:
        samplers = sorted({r.get("decode_sampler") for r, _ in diffusion if isinstance(r.get("decode_sampler"), str)})
        out.diffusion = "; ".join(samplers) or "sampler settings not recorded"
        out.lengths_diffusion = _lengths([tp for _, tp in diffusion])
    return out
