"""Batch-1 generation speed of a model: decode tokens/s, time to first token, peak memory.

    stats = measure_decode(model, prompt_tokens=128, new_tokens=128)

The prompt is random token ids (seeded), the decode greedy with no stop token, so every call produces the
same number of tokens. `repeats` timed calls follow `warmup` untimed ones; the median is reported. On CUDA
the one-token step replays a CUDA graph (`slm.model.generate.Decoder`); `compile=True` also runs it through
torch.compile (on CPU the only way past per-op overhead: ~4x for small models). If the fast path fails
(capture, or no C++ compiler) the measurement falls back to eager mode and says so (`cuda_graph` /
`compile` false, `fast_path_error`).

Peak memory: on CUDA, `torch.cuda.max_memory_allocated` over the timed calls (weights + cache +
activations); on CPU, the process's peak resident set size (`ru_maxrss`, which includes everything the
process ever held, so compare it only between runs of the same command).
"""

from __future__ import annotations

import resource
import statistics
import sys

import torch

from slm.model.generate import Decoder
from slm.model.transformer import Transformer


def measure_decode(model: Transformer, prompt_tokens: int = 128, new_tokens: int = 128, warmup: int = 1,
                   repeats: int = 3, cuda_graph: bool | None = None, compile: bool = False, seed: int = 0,
                   cpu_threads: int | None = None) -> dict:
    """Decode speed at batch 1; prompt and new tokens are capped to fit the model's context. `cpu_threads`:
    torch's intra-op threads for the measurement on a CPU (None: as they are)."""
    threads = torch.get_num_threads()
    if cpu_threads is not None and next(model.parameters()).device.type == "cpu":
        torch.set_num_threads(cpu_threads)
    try:
        return _measure(model, prompt_tokens, new_tokens, warmup, repeats, cuda_graph, compile, seed)
    finally:
        torch.set_num_threads(threads)


def _measure(model, prompt_tokens, new_tokens, warmup, repeats, cuda_graph, compile, seed) -> dict:
    ctx = model.cfg.context_length
    prompt_tokens = max(1, min(prompt_tokens, ctx // 2))
    new_tokens = max(2, min(new_tokens, ctx - prompt_tokens + 1))
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, model.cfg.vocab_size, (prompt_tokens,), generator=gen).tolist()
    p = next(model.parameters())
    device = p.device
    error = None
    capacity = prompt_tokens + new_tokens - 1
    try:
        decoder = Decoder(model, batch_size=1, capacity=capacity, cuda_graph=cuda_graph, compile=compile)
        decoder.generate([prompt], new_tokens)  # captures the graph / compiles the step, if asked
    except Exception as err:  # noqa: BLE001 - a failed fast path must not lose the measurement
        if not (compile or (cuda_graph is not False and device.type == "cuda")):
            raise
        error = " ".join(f"{type(err).__name__}: {err}".split())[:500]
        decoder = Decoder(model, batch_size=1, capacity=capacity, cuda_graph=False)
    for _ in range(warmup):
        decoder.generate([prompt], new_tokens)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    ttft, decode = [], []
    for _ in range(repeats):
        out = decoder.generate([prompt], new_tokens)
        timing = decoder.last_timing
        ttft.append(timing["ttft_s"])
        decode.append((len(out[0]) - 1) / timing["decode_s"])
    if device.type == "cuda":
        peak, how = torch.cuda.max_memory_allocated(device), "cuda_max_memory_allocated"
    else:
        scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is bytes on macOS, KiB on Linux
        peak, how = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale, "process_peak_rss"
    stats = {
        "decode_tokens_per_s": statistics.median(decode),
        "time_to_first_token_s": statistics.median(ttft),
        "batch_size": 1, "prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "repeats": repeats,
        "peak_memory_bytes": int(peak), "peak_memory_measure": how,
        "kv_cache_bytes": decoder.cache.nbytes(),
        "device": str(device), "dtype": str(p.dtype).removeprefix("torch."),
        "cuda_graph": decoder.cuda_graph, "compile": decoder.compiled, "torch_threads": torch.get_num_threads(),
    }
    if error:
        stats["fast_path_error"] = error
    return stats
