"""Batch-1 generation speed of a model: decode tokens/s, time to first token, peak memory.

    stats = measure_decode(model, prompt_tokens=128, new_tokens=128)

The prompt is random token ids (seeded), the decode greedy with no stop token, so every call produces the
same number of tokens. `repeats` timed calls follow `warmup` untimed ones; the median is reported. On CUDA
the one-token step replays a CUDA graph (`slm.model.generate.Decoder`); `compile=True` also runs it through
torch.compile (on CPU the only way past per-op overhead: ~4x for small models). If the fast path fails
(capture, or no C++ compiler) the measurement falls back to eager mode and says so (`cuda_graph` /
`compile` false, `fast_path_error`).

A masked diffusion model (model.attention.causal=false with a mask token) is timed with its sampler
(`slm.model.diffusion`), with the settings in `diffusion` (block_length, steps, threshold, cache; steps None:
new_tokens / 4, four tokens a step) recorded under `sampler`. The rates mean the same for both kinds:
time_to_first_token_s until the first token is out (AR: prefill + one step; diffusion: the first denoising
step, which commits first_tokens at once), decode_tokens_per_s for the tokens after those, and
generate_tokens_per_s = new_tokens / the whole call.

Peak memory: on CUDA, `torch.cuda.max_memory_allocated` over the timed calls (weights + cache +
activations); on CPU, the process's peak resident set size (`ru_maxrss`, which includes everything the
process ever held, so compare it only between runs of the same command).

Load: `other_cores_busy` is the CPU time other processes used during the timed calls, in cores (0: the
machine was otherwise idle; slm.cpu_busy), beside `cpus`, the cores this process may use. A CPU speed
measured beside other work is slower by an unknown factor; the report says so.
"""

from __future__ import annotations

import resource
import statistics
import sys

import torch

from slm.cpu_busy import OtherWork
from slm.model.diffusion import DiffusionSampler, is_diffusion
from slm.model.generate import Decoder
from slm.model.transformer import Transformer
from slm.sampler_settings import SamplerSettings


def measure_decode(model: Transformer, prompt_tokens: int = 128, new_tokens: int = 128, warmup: int = 1,
                   repeats: int = 3, cuda_graph: bool | None = None, compile: bool = False, seed: int = 0,
                   cpu_threads: int | None = None, diffusion: dict | None = None) -> dict:
    """Decode speed at batch 1; prompt and new tokens are capped to fit the model's context. `cpu_threads`:
    torch's intra-op threads for the measurement on a CPU (None: as they are). `diffusion`: sampler
    settings for a masked diffusion model (ignored for autoregressive ones)."""
    threads = torch.get_num_threads()
    if cpu_threads is not None and next(model.parameters()).device.type == "cpu":
        torch.set_num_threads(cpu_threads)
    try:
        if is_diffusion(model.cfg):
            return _measure_diffusion(model, prompt_tokens, new_tokens, warmup, repeats, seed, diffusion or {})
        return _measure(model, prompt_tokens, new_tokens, warmup, repeats, cuda_graph, compile, seed)
    finally:
        torch.set_num_threads(threads)


def _sizes(model, prompt_tokens: int, new_tokens: int, seed: int) -> tuple[list[int], int]:
    ctx = model.cfg.context_length
    prompt_tokens = max(1, min(prompt_tokens, ctx // 2))
    new_tokens = max(2, min(new_tokens, ctx - prompt_tokens + 1))
    gen = torch.Generator().manual_seed(seed)
    vocab = model.cfg.vocab_size if model.cfg.embedding.mask_token_id is None else model.cfg.embedding.mask_token_id
    return torch.randint(0, vocab, (prompt_tokens,), generator=gen).tolist(), new_tokens


def _peak_memory(device) -> tuple[int, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "cuda_max_memory_allocated"
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale, "process_peak_rss"


def _timed(generate, prompt: list[int], new_tokens: int, warmup: int, repeats: int, device) -> dict:
    """The fields both decoders report: generate() -> (tokens out, its last_timing: ttft_s, decode_s and
    first_tokens, the tokens out at ttft), run `warmup` untimed then `repeats` timed times; medians."""
    for _ in range(warmup):
        generate()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    ttft, decode, whole = [], [], []
    with OtherWork() as other:
        for _ in range(repeats):
            n, t = generate()
            ttft.append(t["ttft_s"])
            decode.append((n - t["first_tokens"]) / t["decode_s"] if t["decode_s"] > 0 else float("nan"))
            whole.append(n / (t["ttft_s"] + t["decode_s"]))
    peak, how = _peak_memory(device)
    return {"decode_tokens_per_s": statistics.median(decode), "generate_tokens_per_s": statistics.median(whole),
            "time_to_first_token_s": statistics.median(ttft), "batch_size": 1, "prompt_tokens": len(prompt),
            "new_tokens": new_tokens, "repeats": repeats, "peak_memory_bytes": int(peak),
            "peak_memory_measure": how, "device": str(device), "torch_threads": torch.get_num_threads(),
            **other.as_dict()}


def _measure_diffusion(model, prompt_tokens, new_tokens, warmup, repeats, seed, settings) -> dict:
    settings = SamplerSettings.from_node(settings, "diffusion")  # an unknown key: one line (the sampler checks values)
    prompt, new_tokens = _sizes(model, prompt_tokens, new_tokens, seed)
    new_tokens = min(new_tokens, model.cfg.context_length - len(prompt))  # the canvas holds every new token
    steps = settings.steps or max(1, new_tokens // 4)
    sampler = DiffusionSampler(model, settings.block_length, steps, settings.threshold, cache=settings.cache)
    p = next(model.parameters())

    def generate():
        return len(sampler.generate([prompt], new_tokens, seed=seed)[0]), sampler.last_timing

    stats = _timed(generate, prompt, new_tokens, warmup, repeats, p.device)
    cache = model.cfg.attention.block is not None or settings.cache != "none"
    return {**stats, "kv_cache_bytes": _block_cache_bytes(model, len(prompt) + new_tokens) if cache else 0,
            "dtype": str(p.dtype).removeprefix("torch."), "cuda_graph": False, "compile": False,
            "decoder": "masked_diffusion",
            "sampler": {**sampler.settings(new_tokens), "forwards": sampler.last_timing["forwards"]}}


def _block_cache_bytes(model, capacity: int) -> int:
    from slm.model.cache import KVCache

    p = next(model.parameters())
    with torch.device("meta"):
        bidirectional = model.cfg.attention.block is None  # a dllm sampler's prefix or dual cache
        return KVCache(model.cfg, 1, capacity, "meta", p.dtype, bidirectional=bidirectional).nbytes()


def _measure(model, prompt_tokens, new_tokens, warmup, repeats, cuda_graph, compile, seed) -> dict:
    prompt, new_tokens = _sizes(model, prompt_tokens, new_tokens, seed)
    p = next(model.parameters())
    device = p.device
    error = None
    capacity = len(prompt) + new_tokens - 1
    try:
        decoder = Decoder(model, batch_size=1, capacity=capacity, cuda_graph=cuda_graph, compile=compile)
        decoder.generate([prompt], new_tokens)  # captures the graph / compiles the step, if asked
    except Exception as err:  # noqa: BLE001 - a failed fast path must not lose the measurement
        if not (compile or (cuda_graph is not False and device.type == "cuda")):
            raise
        error = " ".join(f"{type(err).__name__}: {err}".split())[:500]
        decoder = Decoder(model, batch_size=1, capacity=capacity, cuda_graph=False)

    def generate():
        return len(decoder.generate([prompt], new_tokens)[0]), {**decoder.last_timing, "first_tokens": 1}

    stats = {**_timed(generate, prompt, new_tokens, warmup, repeats, device),
             "kv_cache_bytes": decoder.cache.nbytes(), "dtype": str(p.dtype).removeprefix("torch."),
             "cuda_graph": decoder.cuda_graph, "compile": decoder.compiled, "chain": decoder.chain,
             "decoder": "autoregressive"}
    if error:
        stats["fast_path_error"] = error
    return stats
