"""Benchmark: the GPU figures in one command (`make bench-gpu`), printed as one table and written as JSON, after
checking each fast path it measures against its reference on the same device (its own table; exit 1 on a mismatch).

Per family of the study's 70M shape (the points of sweeps/families_70m.yaml, which builds on sweeps/gpu_1b.yaml:
GPT-2 BPE padded to 50304 rows, batch 64 x 1024 tokens, bf16-mixed, torch.compile; moe at its 24 layers, sized by
its active parameters; dllm with train.objective=mdlm):

  train   tokens/s and MFU of the trainer's step, steady state: the median (min-max) over timed windows after
          the warm-up steps (which include the compile). The step is LanguageModelModule's: its model, objective
          and optimizer and schedule (configure_model compiles the model with the head and loss, as train.compile
          does), run as a plain loop of slm.training.step.train_step (the module's step_loss -> backward -> clip ->
          optimizer and schedule step), under bf16 autocast as Lightning's bf16-mixed; the batches are random token
          windows already on the device (Lightning's own overhead and the data loader's share are
          bench/train_overhead.py's). MFU is
          ThroughputMonitor's: count(cfg).flops_per_token x tokens/s / slm.training.hardware.peak_flops. Peak
          memory is torch.cuda.max_memory_allocated over the family's steps. `attention` is the backend each
          attention kind ran on in an eager forward at full context (slm.components.flex.backends_used; the
          compiled step applies the same rule at trace time: flex.attention_backends); `loss` the head + loss
          path the training batch takes (Objective.loss_impl, from the path the objective chose once:
          slm.objectives.linear_ce.choose_path: liger, chunked or plain).
  decode  end-to-end generation tokens/s (prefill included, greedy, random prompt and weights, every row the same
          number of new tokens) at batch 1 and 16: slm's Decoder (the one-token step replayed as a CUDA graph)
          against transformers' `generate` with a static cache, compiled (cache_implementation="static"; generate
          compiles the forward: CompileConfig(dynamic=False), mode reduce-overhead) on the same weights
          (slm.interop.hf.to_hf), in alternating pairs; the dllm's DiffusionSampler (cache none, prefix, dual;
          low-confidence remasking at 4 tokens a step) against an AR model of its shape and weights (slm's
          Decoder), likewise.
  checks  first (they are quick): each fast path against its reference on the same weights, on this device
          (bench/gpu_checks.py, whose docstring justifies each tolerance): FlexAttention's masks against SDPA
          with a dense mask; the chunked (and Liger) head + loss and its gradients against the plain path; the
          chained CUDA-graph decoder's greedy tokens against the step-by-step decoder's, per autoregressive
          family; the compiled bf16 step's loss and gradients against eager; and a 50-step run whose loss falls.
          They print as their own table after the figures (check, family/shape, compared, max abs diff,
          tolerance, ok) and go in the JSON ("checks"); any failure makes the command exit 1, after printing
          everything. `--checks` picks some; `--parts train,decode` skips them.

A family that fails prints its error in its row; the others go on. `--budget-s` bounds the whole run: a family,
comparison or group of checks that would start with too little time left is skipped and says so in its row.

    python bench/gpu.py                                    # CUDA: the table, bench/out/gpu.json
    python bench/gpu.py --families llama3 dllm --hf-families llama3 gpt2
    python bench/gpu.py --smoke --threads 1                # the same code on the CPU at tiny shapes, float32, eager
    python bench/gpu.py --parts checks --checks flex,loss  # only those checks

Without CUDA (and without --smoke) it prints one line and exits 0. Exit 1: a check failed; 2: bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import json
import math
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch

if __package__:  # imported as bench.gpu (the tests)
    from bench import gpu_checks
else:  # python bench/gpu.py: this folder is sys.path[0]
    import gpu_checks

SWEEP = "families_70m"
FAMILIES = ("gpt2", "llama3", "qwen3", "gemma3", "llama3_canon", "lfm2", "moe", "dllm")
ORDER = ("llama3", "dllm", "gpt2", "qwen3", "gemma3", "llama3_canon", "lfm2", "moe")
"""The order families are measured in: the headline figures (llama3 against transformers, the dllm's
decoding) first, so a tight --budget-s skips the others."""
COLUMNS = ("part", "family", "variant", "batch", "tokens/s (min-max)", "MFU", "peak GiB", "reference",
           "ref tokens/s", "ratio (min-max)", "attention", "loss", "note")
SMOKE_MODEL = {"n_layers": 6, "d_model": 64, "attention.head_dim": 16, "context_length": 64}  # 6: gemma3's unit
SMOKE_MOE = {"n_experts": 4, "expert_d_ff": 64}
SMOKE_TRAIN = {"batch_size": 2, "precision": "32", "compile": False, "parallel": {"accelerator": "cpu"}}


@dataclasses.dataclass
class Options:
    """What one run measures and how (the command line's, or --smoke's)."""

    device: torch.device
    smoke: bool
    families: list[str]
    hf_families: list[str]
    parts: list[str]
    checks: list[str]
    warmup_steps: int
    windows: int
    window_steps: int
    prompt: int
    new: int
    batches: list[int]
    repeats: int
    block_length: int
    decode_compile: bool
    budget_s: float
    min_train_s: float
    min_decode_s: float
    min_hf_s: float


class Clock:
    """The run's time budget (budget_s <= 0: none)."""

    def __init__(self, budget_s: float):
        self.start, self.budget = time.perf_counter(), budget_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return math.inf if self.budget <= 0 else self.budget - self.elapsed()


def log(message: str) -> None:
    """A progress line on stderr (the table goes to stdout)."""
    print(f"bench-gpu: {message}", file=sys.stderr, flush=True)


def one_line(err: BaseException, limit: int = 240) -> str:
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def free(device: torch.device) -> None:
    """Forget the last family's compiled graphs (a code object shared by the families, an objective's `_score`,
    would otherwise reach dynamo's recompile limit) and its memory."""
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------- configs
def sweep_points() -> dict[str, list[str]]:
    """{preset: the overrides of its point} of the study's family sweep (sweeps/families_70m.yaml)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from slm.cli.config import CONF_DIR, register_resolvers

    register_resolvers()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"sweep={SWEEP}"], return_hydra_config=True)
    points = OmegaConf.to_container(cfg.hydra.sweeper.points)
    return {next(o for o in p if o.startswith("model=")).split("=", 1)[1]: list(p) for p in points}


@dataclasses.dataclass
class Setup:
    """One family's model and training settings, composed as slm-train composes the sweep's job."""

    family: str
    overrides: list[str]
    model_cfg: object
    train_cfg: object
    data_vocab: int
    """Ids a training window holds (the tokenizer's, without the mask token)."""
    counts: object
    tokens_per_step: int
    max_steps: int


def setup(family: str, overrides: list[str], smoke: bool) -> Setup:
    """The job's config as slm.runs.job builds it (compose, tokenizer with its padding and mask token,
    config_from_spec), without preparing any data; --smoke shrinks the model and trains in float32 on the CPU."""
    import tempfile

    from omegaconf import OmegaConf

    from slm.cli.config import compose_config
    from slm.data import TokenizerConfig
    from slm.data.prepare import build_tokenizer
    from slm.model import config_from_spec, count
    from slm.objectives import OBJECTIVES, tokenizer_node_for
    from slm.settings import nested
    from slm.training.config import TrainConfig

    cfg = compose_config([f"sweep={SWEEP}", *overrides])
    train_node = OmegaConf.to_container(cfg.train, resolve=True)
    model_node = OmegaConf.to_container(cfg.model, resolve=True)
    if smoke:
        train_node.update(SMOKE_TRAIN)
        model_node = nested({**model_node, **SMOKE_MODEL})
        if model_node["moe"]["n_experts"]:
            model_node["moe"].update(SMOKE_MOE)
        if model_node["attention"].get("sliding_window"):  # a window inside the short context: it masks something
            model_node["attention"]["sliding_window"] = SMOKE_MODEL["context_length"] // 2
    train_cfg = TrainConfig.from_node(train_node)
    tok_cfg = TokenizerConfig.from_node(tokenizer_node_for(train_cfg.objective,
                                                           OmegaConf.to_container(cfg.tokenizer, resolve=True)))
    tokenizer = build_tokenizer(tok_cfg, [], Path(tempfile.gettempdir()))  # gpt2: nothing fitted, nothing written
    spec = {**model_node, "vocab_size": tok_cfg.padded(tokenizer.vocab_size)}
    if tokenizer.mask_id is not None:
        spec = nested({**spec, "embedding.mask_token_id": tokenizer.mask_id})
    model_cfg = config_from_spec(spec)
    OBJECTIVES.get(train_cfg.objective)().check(model_cfg)
    data_vocab = tokenizer.vocab_size - (tokenizer.mask_id is not None)
    return Setup(family, overrides, model_cfg, train_cfg, data_vocab, count(model_cfg),
                 train_cfg.batch_size * model_cfg.context_length, train_cfg.max_steps(model_cfg.context_length))


def autocast(train_cfg, device: torch.device):
    """Lightning's bf16-mixed: autocast to bfloat16 around the forward and the loss; "32": none."""
    if str(train_cfg.precision).startswith("bf16"):
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return nullcontext()


def peak_bytes(device: torch.device) -> int | None:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


# ---------------------------------------------------------------------------------------------- training
def measure_train(s: Setup, opts: Options) -> dict:
    """The trainer's step for one family: tokens/s (median, min-max over windows), MFU, peak memory, the
    attention backends and the loss path."""
    from slm.components import flex
    from slm.objectives.linear_ce import liger_installed
    from slm.training.hardware import peak_flops
    from slm.training.module import LanguageModelModule
    from slm.training.step import train_step

    device, cfg, train_cfg = opts.device, s.model_cfg, s.train_cfg
    reset_peak(device)
    torch.manual_seed(train_cfg.seed)
    module = LanguageModelModule(cfg, train_cfg, s.max_steps, s.tokens_per_step).to(device)
    module.train()
    B, T = train_cfg.batch_size, cfg.context_length
    loss_impl = module.objective.loss_impl(module.model, device, (B, T + 1))
    # an eager forward at full context records the backend of each attention kind (a compiled forward records
    # nothing: it applies the same rule while it is traced)
    flex.backends_used(reset=True)
    with torch.no_grad(), autocast(train_cfg, device):
        module.model(torch.zeros(1, cfg.context_length, dtype=torch.long, device=device), head=False)
    used = flex.backends_used(reset=True)
    rule = flex.attention_backends(cfg, device, training=True)
    module.configure_model()  # train.compile: the model, and the objective's head and loss with it
    optimizers = module.configure_optimizers()
    optimizer, scheduler = optimizers["optimizer"], optimizers["lr_scheduler"]["scheduler"]
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, s.data_vocab, (B, T + 1), generator=gen).to(device) for _ in range(4)]
    params = list(module.model.parameters())
    losses = []
    step = 0

    def one_step() -> None:
        nonlocal step
        losses.append(train_step(module.objective, module._forward, batches[step % len(batches)], optimizer,
                                 seed=train_cfg.seed, step=step, scheduler=scheduler, grad_clip=train_cfg.grad_clip,
                                 params=params, autocast=autocast(train_cfg, device)))
        step += 1

    sync(device)
    started = time.perf_counter()
    for _ in range(opts.warmup_steps):
        one_step()
    sync(device)
    warmup_s = time.perf_counter() - started
    rates = []
    for _ in range(opts.windows):
        begin = time.perf_counter()
        for _ in range(opts.window_steps):
            one_step()
        sync(device)
        rates.append(opts.window_steps * s.tokens_per_step / (time.perf_counter() - begin))
    final = torch.stack(losses).float().tolist()
    peak = peak_bytes(device)
    one = train_cfg.logging.peak_flops or peak_flops(device, train_cfg.precision)
    rate = spread(rates)
    mfu = {k: s.counts.flops_per_token * rate[k] / one for k in ("median", "min", "max")} if one else None
    del module, optimizer, scheduler, optimizers, batches, losses
    return {"tokens_per_s": rate, "mfu": mfu, "peak_flops": one, "flops_per_token": s.counts.flops_per_token,
            "params_total": s.counts.params_total, "params_active": s.counts.params_active,
            "peak_memory_bytes": peak, "attention_used": used, "attention_rule": rule, "loss_impl": loss_impl,
            "liger_installed": liger_installed(), "warmup_steps": opts.warmup_steps, "warmup_s": warmup_s,
            "timed_steps": opts.windows * opts.window_steps, "last_loss": final[-1],
            "finite_losses": all(math.isfinite(v) for v in final), "batch_size": B, "context_length": T,
            "tokens_per_step": s.tokens_per_step, "precision": train_cfg.precision, "compile": train_cfg.compile}


# ---------------------------------------------------------------------------------------------- decoding
def decode_model(s: Setup, opts: Options, **changes):
    """The family's network (seed 0), bfloat16 on CUDA (float32 in --smoke), eval mode; `changes` alter its config."""
    from slm.model import build_model

    torch.manual_seed(0)
    cfg = s.model_cfg
    if changes:  # {group: {field: value}}
        cfg = dataclasses.replace(cfg, **{g: dataclasses.replace(getattr(cfg, g), **f) for g, f in changes.items()})
    model = build_model(cfg).eval()
    dtype = torch.bfloat16 if opts.device.type == "cuda" else torch.float32
    return model.to(device=opts.device, dtype=dtype)


def prompts(s: Setup, batch: int, length: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(0)
    return torch.randint(0, s.data_vocab, (batch, length), generator=gen).tolist()


def timed(fn, device: torch.device) -> tuple[float, object]:
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - start, out


def hf_runner(hf_model, batch_prompts: list[list[int]], new: int, device: torch.device):
    """transformers' greedy generate with a static cache, compiled on CUDA (generate compiles the one-token forward
    when the cache is static and the device CUDA: CompileConfig's mode reduce-overhead, i.e. CUDA graphs);
    uncompiled elsewhere (--smoke)."""
    from transformers import CompileConfig

    ids = torch.tensor(batch_prompts, device=device)
    mask = torch.ones_like(ids)
    # static shapes (dynamic=False): each batch size its own graph, as slm's CUDA graph per Decoder
    compiled = {"compile_config": CompileConfig(dynamic=False)} if device.type == "cuda" else {"disable_compile": True}

    def run():
        with torch.no_grad():
            out = hf_model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                                    do_sample=False, pad_token_id=0, cache_implementation="static", **compiled)
        return out[:, ids.shape[1]:].tolist()

    return run


def paired(a, b, repeats: int, device: torch.device, tokens: int) -> dict:
    """a and b alternated `repeats` times: tokens/s of each, a / b per pair; medians and min-max."""
    ra, rb, ratio, outs = [], [], [], None
    for _ in range(repeats):
        ta, out_a = timed(a, device)
        tb, out_b = timed(b, device)
        ra.append(tokens / ta)
        rb.append(tokens / tb)
        ratio.append(ra[-1] / rb[-1])
        outs = (out_a, out_b)
    return {"a": spread(ra), "b": spread(rb), "ratio": spread(ratio), "outs": outs}


def same_fraction(x: list[list[int]], y: list[list[int]]) -> float:
    pairs = [(p, q) for rx, ry in zip(x, y) for p, q in zip(rx, ry)]
    return sum(p == q for p, q in pairs) / max(1, len(pairs))


def decode_ar(s: Setup, opts: Options, clock: Clock) -> list[dict]:
    """Rows of an AR family: slm's Decoder at each batch size, against transformers where asked and convertible."""
    from slm.model.generate import Decoder

    device, P, N = opts.device, opts.prompt, opts.new
    model = decode_model(s, opts)
    decoders, rows = {}, []
    for b in opts.batches:
        rows_in = prompts(s, b, P)
        fallback = ""
        reset_peak(device)
        try:
            dec = Decoder(model, batch_size=b, capacity=P + N - 1, compile=opts.decode_compile)
            warm, _ = timed(lambda: dec.generate(rows_in, N), device)  # captures the CUDA graph / compiles the step
        except Exception as err:  # noqa: BLE001 - as slm.eval.throughput: a failed fast path keeps the figure
            if not (opts.decode_compile or device.type == "cuda"):
                raise
            fallback = f"fast path failed, eager: {one_line(err, 120)}"
            dec = Decoder(model, batch_size=b, capacity=P + N - 1, cuda_graph=False)
            warm, _ = timed(lambda: dec.generate(rows_in, N), device)
        decoders[b] = (dec, rows_in, warm, peak_bytes(device), fallback)
    hf, hf_note = None, None
    if s.family in opts.hf_families:
        if clock.left() < opts.min_hf_s:
            hf_note = f"transformers skipped: {clock.left():.0f} s left of --budget-s"
        else:
            try:
                import transformers

                from slm.interop.hf import to_hf

                transformers.logging.set_verbosity_error()
                # the same weights: decode_model's seed, built on the CPU in float32, then cast as slm's were
                cpu_model = decode_model(s, dataclasses.replace(opts, device=torch.device("cpu")))
                hf = to_hf(cpu_model).to(device=device, dtype=next(model.parameters()).dtype).eval()
                del cpu_model
            except Exception as err:  # noqa: BLE001 - e.g. a family transformers has no class for
                hf_note = f"transformers: {one_line(err, 160)}"
    reference = ("transformers static+compile" if device.type == "cuda" else "transformers static") if hf else "-"
    for b, (dec, rows_in, warm, peak, fallback) in decoders.items():
        tokens = b * N
        variant = "slm " + ("compiled " if dec.compiled else "") + ("cuda-graph" if dec.cuda_graph else "eager")
        row = {"part": "decode", "family": s.family, "variant": variant, "batch": str(b), "reference": reference,
               "prompt_tokens": P, "new_tokens": N, "warmup_s": warm, "peak_memory_bytes": peak,
               "cuda_graph": dec.cuda_graph, "compile": dec.compiled, "note": hf_note or ""}
        if fallback:
            row["fast_path_error"] = fallback
        slm_run = (lambda dec=dec, rows_in=rows_in: dec.generate(rows_in, N))
        if hf is not None:
            try:
                run = hf_runner(hf, rows_in, N, device)
                hf_warm = sum(timed(run, device)[0] for _ in range(2))  # compiles, then records its graphs
                r = paired(slm_run, run, opts.repeats, device, tokens)
                row.update(tokens_per_s=r["a"], ref_tokens_per_s=r["b"], ratio=r["ratio"], ref_warmup_s=hf_warm,
                           ref_compiled=hasattr(hf, "_compiled_call"),
                           same_tokens_fraction=same_fraction(*r["outs"]))
                if row["same_tokens_fraction"] < 1:
                    row["note"] = f"{row['same_tokens_fraction']:.0%} of tokens as transformers'"
                if device.type == "cuda" and not row["ref_compiled"]:
                    row["note"] = (row["note"] + "; " if row["note"] else "") + "transformers did not compile"
            except Exception as err:  # noqa: BLE001 - the reference failing keeps slm's figure
                row["note"] = f"transformers: {one_line(err, 160)}"
                row["error"] = one_line(err, 2000)
        if "tokens_per_s" not in row:
            row["tokens_per_s"] = spread([tokens / timed(slm_run, device)[0] for _ in range(opts.repeats)])
        if fallback:
            row["note"] = "; ".join(filter(None, [fallback, row["note"]]))
        rows.append(row)
    del hf, decoders, model
    return rows


def decode_diffusion(s: Setup, opts: Options) -> list[dict]:
    """Rows of a masked diffusion family: its sampler (cache none, prefix, dual) at each batch size against an AR
    model of the same shape and weights (slm's Decoder), in pairs."""
    from slm.model.diffusion import DiffusionSampler
    from slm.model.generate import Decoder
    from slm.sampler_settings import CACHES

    device, P, N = opts.device, opts.prompt, opts.new
    model = decode_model(s, opts)
    ar = decode_model(s, opts, attention={"causal": True, "block": None})
    steps = max(1, N // 4)
    rows = []
    for b in opts.batches:
        rows_in = prompts(s, b, P)
        dec = Decoder(ar, batch_size=b, capacity=P + N - 1)
        dec.generate(rows_in, N)  # captures the CUDA graph
        for cache in CACHES:
            row = {"part": "decode", "family": s.family, "variant": f"mdlm cache={cache}", "batch": str(b),
                   "reference": f"slm AR, same shape ({'cuda-graph' if dec.cuda_graph else 'eager'})",
                   "prompt_tokens": P, "new_tokens": N, "block_length": opts.block_length, "steps": steps, "note": ""}
            try:
                sampler = DiffusionSampler(model, opts.block_length, steps, cache=cache)
                reset_peak(device)
                row["warmup_s"] = timed(lambda: sampler.generate(rows_in, N, seed=0), device)[0]
                row["peak_memory_bytes"] = peak_bytes(device)
                r = paired(lambda: sampler.generate(rows_in, N, seed=0), lambda: dec.generate(rows_in, N),
                           opts.repeats, device, b * N)
                per_step = N / sampler.last_timing["forwards"]
                row.update(tokens_per_s=r["a"], ref_tokens_per_s=r["b"], ratio=r["ratio"],
                           tokens_per_step_per_row=per_step, note=f"{per_step:.1f} tokens/step, random weights")
            except Exception as err:  # noqa: BLE001 - one cache failing keeps the others
                row.update(note=f"error: {one_line(err)}", error=one_line(err, 2000))
            rows.append(row)
    del model, ar
    return rows


# ---------------------------------------------------------------------------------------------- the table
def si(x: float) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def cells(row: dict) -> dict[str, str]:
    """A row's table cells (COLUMNS), from its numbers."""
    def rate(r):
        return f"{si(r['median'])} ({si(r['min'])}-{si(r['max'])})" if r else "-"

    mfu = row.get("mfu")
    ratio = row.get("ratio")
    peak = row.get("peak_memory_bytes")
    attention = row.get("attention_used") or row.get("attention_rule")
    return {
        "part": row["part"], "family": row["family"], "variant": row.get("variant", "-"),
        "batch": row.get("batch", "-"), "tokens/s (min-max)": rate(row.get("tokens_per_s")),
        "MFU": f"{mfu['median']:.1%}" if mfu else "-",
        "peak GiB": f"{peak / 2**30:.2f}" if peak is not None else "-",
        "reference": row.get("reference", "-"),
        "ref tokens/s": si(row["ref_tokens_per_s"]["median"]) if row.get("ref_tokens_per_s") else "-",
        "ratio (min-max)": f"{ratio['median']:.2f}x ({ratio['min']:.2f}-{ratio['max']:.2f})" if ratio else "-",
        "attention": ", ".join(f"{k}:{v}" for k, v in attention.items()) if attention else "-",
        "loss": row.get("loss_impl", "-"), "note": row.get("note") or "",
    }


def render(header: list[str], rows: list[dict], columns: tuple[str, ...] = COLUMNS) -> str:
    table = [dict(zip(columns, columns))] + [r["cells"] for r in rows]
    widths = {c: max(len(t[c]) for t in table) for c in columns}
    lines = [*header, ""]
    for i, t in enumerate(table):
        lines.append("  ".join(t[c].ljust(widths[c]) for c in columns).rstrip())
        if i == 0:
            lines.append("  ".join("-" * widths[c] for c in columns))
    return "\n".join(lines)


def header_lines(opts: Options, setups: dict[str, Setup], rows: list[dict]) -> tuple[list[str], dict]:
    import platform

    try:
        import transformers
        tf_version = transformers.__version__
    except ImportError:
        tf_version = None
    device = opts.device
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({platform.machine()})"
    some = next(iter(setups.values()), None)
    t = some.train_cfg if some else None
    peak = next((r["peak_flops"] for r in rows if r.get("peak_flops")), None)
    info = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "device": gpu,
            "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": tf_version, "smoke": opts.smoke,
            "threads": torch.get_num_threads(), "sweep": SWEEP,
            "batch_size": t.batch_size if t else None,
            "context_length": some.model_cfg.context_length if some else None,
            "precision": t.precision if t else None, "compile": t.compile if t else None,
            "loss_settings": dataclasses.asdict(t.loss) if t else None,
            "warmup_steps": opts.warmup_steps, "windows": opts.windows, "window_steps": opts.window_steps,
            "decode": {"prompt_tokens": opts.prompt, "new_tokens": opts.new, "batches": opts.batches,
                       "pairs": opts.repeats, "slm_step_compiled": opts.decode_compile,
                       "diffusion_block_length": opts.block_length, "diffusion_tokens_per_step": 4},
            "peak_flops": peak, "families": opts.families, "hf_families": opts.hf_families, "parts": opts.parts,
            "checks": opts.checks if "checks" in opts.parts else [],
            "budget_s": opts.budget_s, "transformers_compile": "CompileConfig(dynamic=False): mode reduce-overhead",
            "train_loop": "plain loop of LanguageModelModule's step (slm.training.step.train_step: step_loss, "
                          "backward, clip, optimizer, schedule); random token windows on the device; Lightning's "
                          "overhead: bench/train_overhead.py"}
    what = "SMOKE (tiny shapes, float32, eager, CPU: checks the code path, measures nothing)" if opts.smoke else ""
    lines = [f"bench-gpu {info['date']}  {gpu}  torch {torch.__version__}"
             + (f" (CUDA {torch.version.cuda})" if torch.version.cuda else "")
             + f"  transformers {tf_version or 'not installed'}  {what}".rstrip()]
    if t:
        lines.append(f"train: sweeps/{SWEEP}.yaml's shapes (gpu_1b.yaml: batch {t.batch_size} x "
                     f"{some.model_cfg.context_length} tokens, precision {t.precision}, compile {t.compile}, "
                     f"train.loss.impl {t.loss.impl}), the trainer's step in a plain loop (Lightning excluded), "
                     f"{opts.warmup_steps} warm-up steps, then the median (min-max) of {opts.windows} windows of "
                     f"{opts.window_steps} steps; MFU = flops/token x tokens/s / "
                     + (f"{peak / 1e12:.1f} TFLOP/s" if peak else "the device's peak (unknown here: no MFU)")
                     + " (slm.training.hardware)")
    lines.append(f"decode: prompt {opts.prompt} + {opts.new} new tokens a row, greedy, random weights "
                 f"({'bfloat16' if device.type == 'cuda' else 'float32'}), tokens/s of the whole generate call; "
                 f"{opts.repeats} alternating pairs against the reference; dllm: blocks of {opts.block_length}, "
                 "4 tokens a step")
    return lines, info


# ---------------------------------------------------------------------------------------------- the run
def skipped(clock: Clock, opts: Options) -> str:
    return f"skipped: {max(0.0, clock.left()):.0f} s left of --budget-s {opts.budget_s:g}"


def run(opts: Options, points: dict[str, list[str]], out_json: Path | None) -> dict:
    clock = Clock(opts.budget_s)
    rows: list[dict] = []
    setups: dict[str, Setup] = {}
    order = [f for f in ORDER if f in opts.families] + [f for f in opts.families if f not in ORDER]
    by_family: dict[str, list[dict]] = {f: [] for f in opts.families}
    setup_errors: dict[str, BaseException] = {}
    for family in order:
        try:
            setups[family] = setup(family, points[family], opts.smoke)
        except Exception as err:  # noqa: BLE001 - its row says so below
            setup_errors[family] = err
    checks: list[dict] = []
    if "checks" in opts.parts:  # first: they are quick, and a wrong fast path makes its figures moot
        checks = gpu_checks.run_checks(opts, [setups[f] for f in order if f in setups], clock)
        free(opts.device)
    for family in order:
        base = {"family": family}
        if family in setup_errors:
            err = setup_errors[family]
            by_family[family].append({**base, "part": "setup", "note": f"error: {one_line(err)}",
                                      "error": one_line(err, 2000)})
            continue
        s = setups[family]
        diffusion = not s.model_cfg.attention.causal
        if "train" in opts.parts:
            row = {**base, "part": "train", "batch": f"{s.train_cfg.batch_size}x{s.model_cfg.context_length}",
                   "variant": f"{s.train_cfg.precision}{' compile' if s.train_cfg.compile else ' eager'}"
                              f" {s.train_cfg.objective}"}
            if clock.left() < opts.min_train_s:
                row["note"] = skipped(clock, opts)
            else:
                log(f"train {family} ({s.counts.params_total / 1e6:.1f}M parameters) ...")
                try:
                    row.update(measure_train(s, opts))
                    notes = [] if row["finite_losses"] else ["non-finite loss"]
                    if row["attention_used"] != row["attention_rule"]:
                        notes.append(f"flex.attention_backends says {row['attention_rule']}")
                    row["note"] = "; ".join(notes)
                    log(f"train {family}: {si(row['tokens_per_s']['median'])} tokens/s "
                        f"(warm-up {row['warmup_s']:.0f} s)")
                except Exception as err:  # noqa: BLE001 - one family failing keeps the others
                    row.update(note=f"error: {one_line(err)}", error=one_line(err, 2000))
                    log(f"train {family}: {one_line(err)}")
                free(opts.device)
            by_family[family].append(row)
        if "decode" in opts.parts:
            if clock.left() < opts.min_decode_s:
                by_family[family].append({**base, "part": "decode", "variant": "-", "note": skipped(clock, opts)})
                continue
            log(f"decode {family} ...")
            try:
                by_family[family].extend(decode_diffusion(s, opts) if diffusion else decode_ar(s, opts, clock))
            except Exception as err:  # noqa: BLE001
                by_family[family].append({**base, "part": "decode", "variant": "-",
                                          "note": f"error: {one_line(err)}", "error": one_line(err, 2000)})
                log(f"decode {family}: {one_line(err)}")
            free(opts.device)
    for family in opts.families:
        rows.extend(by_family[family])
    for row in rows:
        row.pop("outs", None)
        row["cells"] = cells(row)
    header, info = header_lines(opts, setups, rows)
    info["elapsed_s"] = clock.elapsed()
    budget = f" of --budget-s {opts.budget_s:.0f}" if opts.budget_s > 0 else ""
    header.append(f"elapsed {info['elapsed_s']:.0f} s{budget}")
    text = render(header, rows) if rows else "\n".join(header)
    failed = gpu_checks.failures(checks)
    if checks:
        for check in checks:
            check["cells"] = gpu_checks.cells(check)
        passed = sum(c["ok"] is True for c in checks)
        skipped_checks = sum(c["ok"] is None for c in checks)
        verdict = (f"checks FAILED ({len(failed)}): {', '.join(failed)}" if failed else f"checks: {passed} passed")
        verdict += f", {skipped_checks} skipped" if skipped_checks else ""
        text += "\n\n" + render(["checks: each fast path against its reference on this device, the same weights "
                                  "(bench/gpu_checks.py; its docstring justifies each tolerance)"],
                                 checks, gpu_checks.COLUMNS) + "\n" + verdict
    print(text, flush=True)
    report = {"header": info, "header_lines": header, "columns": list(COLUMNS), "rows": rows,
              "check_columns": list(gpu_checks.COLUMNS), "checks": checks, "checks_failed": failed}
    if out_json is not None:
        out_json.parent.mkdir(parents=True, exist_ok=True)
        out_json.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"wrote {out_json}")
    return report


def csv_list(kind, choices=None):
    def parse(text: str) -> list:
        items = [kind(x) for x in text.replace(",", " ").split()]
        bad = [x for x in items if choices is not None and x not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"{text!r} is invalid: a comma-separated list of "
                                             + (", ".join(map(str, choices)) if choices else kind.__name__))
        return items
    return parse


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """Bad input: one line, exit 2."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="bench/gpu.py", description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true",
                        help="the same code path on the CPU at tiny shapes, float32, no compile, a few steps")
    parser.add_argument("--families", type=csv_list(str), default=None,
                        help=f"comma-separated presets of sweeps/{SWEEP}.yaml (default: {','.join(FAMILIES)})")
    parser.add_argument("--hf-families", type=csv_list(str), default=["llama3"],
                        help="AR families also decoded by transformers' generate (default llama3; 'all': each "
                             "that converts)")
    parser.add_argument("--parts", type=csv_list(str, ("checks", "train", "decode")),
                        default=["checks", "train", "decode"],
                        help="checks (each fast path against its reference: bench/gpu_checks.py), train, decode "
                             "(default: all three)")
    parser.add_argument("--checks", type=csv_list(str, gpu_checks.CHECKS), default=list(gpu_checks.CHECKS),
                        help=f"which checks the checks part runs (default: {','.join(gpu_checks.CHECKS)})")
    parser.add_argument("--warmup-steps", type=int, default=None, help="untimed steps first (default 4; smoke 1)")
    parser.add_argument("--windows", type=int, default=None, help="timed windows (default 5; smoke 2)")
    parser.add_argument("--window-steps", type=int, default=None, help="steps per window (default 5; smoke 1)")
    parser.add_argument("--prompt", type=int, default=None, help="decode prompt tokens (default 128; smoke 8)")
    parser.add_argument("--new", type=int, default=None, help="decode new tokens a row (default 128; smoke 4)")
    parser.add_argument("--batches", type=csv_list(int), default=[1, 16], help="decode batch sizes (default 1,16)")
    parser.add_argument("--repeats", type=int, default=None, help="decode pairs (default 5; smoke 2)")
    parser.add_argument("--block-length", type=int, default=32, help="diffusion decode block (default 32; smoke 4)")
    parser.add_argument("--decode-compile", action="store_true",
                        help="also torch.compile slm's one-token step (Decoder(compile=True)) before the CUDA graph")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="seconds for the whole run: a family starts with >= 150 s left, transformers' "
                             "comparison with >= 90 s, a group of checks with bench/gpu_checks.py's MIN_S (default "
                             "560, so that the command ends within 10 minutes on one H100; smoke and 0: no limit)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--json", type=Path, default=None,
                        help="also write the table here (default bench/out/gpu.json, git-ignored; smoke: "
                             "bench/out/gpu_smoke.json)")
    args = parser.parse_args(argv)

    if not args.smoke and not torch.cuda.is_available():
        print(f"bench-gpu: no CUDA device here: torch.cuda.is_available() is False (torch {torch.__version__}); "
              "nothing measured (`python bench/gpu.py --smoke` runs the same code on the CPU at tiny shapes)")
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    families = args.families or list(FAMILIES)
    points = sweep_points()
    unknown = [f for f in families if f not in points]
    if unknown:
        parser.error(f"--families {unknown[0]} is not a preset of sweeps/{SWEEP}.yaml: choose from "
                     f"{', '.join(points)}")
    hf = families if args.hf_families == ["all"] else args.hf_families
    if any(f not in points for f in hf):
        bad = next(f for f in hf if f not in points)
        parser.error(f"--hf-families {bad} is not a preset of sweeps/{SWEEP}.yaml: choose from all, "
                     f"{', '.join(points)}")
    smoke = args.smoke

    def pick(value, gpu, cpu):
        return value if value is not None else (cpu if smoke else gpu)

    for name in ("warmup_steps", "windows", "window_steps", "prompt", "new", "repeats"):
        value = getattr(args, name)
        least = 0 if name == "warmup_steps" else 1
        if value is not None and value < least:
            parser.error(f"--{name.replace('_', '-')} {value} is invalid: an integer >= {least}")
    if any(b < 1 for b in args.batches):
        parser.error(f"--batches {args.batches} is invalid: positive integers")
    opts = Options(
        device=torch.device("cpu") if smoke else torch.device("cuda", torch.cuda.current_device()),
        smoke=smoke, families=families, hf_families=hf, parts=args.parts, checks=args.checks,
        warmup_steps=pick(args.warmup_steps, 4, 1), windows=pick(args.windows, 5, 2),
        window_steps=pick(args.window_steps, 5, 1), prompt=pick(args.prompt, 128, 8), new=pick(args.new, 128, 4),
        batches=args.batches, repeats=pick(args.repeats, 5, 2), block_length=pick(None, args.block_length, 4),
        decode_compile=args.decode_compile, budget_s=pick(args.budget_s, 560.0, 0.0),
        min_train_s=pick(None, 150.0, 0.0), min_decode_s=pick(None, 30.0, 0.0), min_hf_s=pick(None, 90.0, 0.0))
    out = args.json or Path(__file__).resolve().parent / "out" / ("gpu_smoke.json" if smoke else "gpu.json")
    report = run(opts, points, out)
    return 1 if report["checks_failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
