"""Benchmark: generation of one shape decoded autoregressively and by masked diffusion, at several batch sizes.

An AR model (llama3) and a masked diffusion model (dllm) of the same shape, in one process:
  ar            causal, KV cache, one token per row a forward (slm.model.generate.Decoder)
  dllm/<cache>  bidirectional (slm.model.diffusion), low-confidence remasking (`--steps` in all, default
                new/4: four tokens a step) and, as dllm/<cache>+thr, the confidence threshold (`--threshold`,
                Fast-dLLM's 0.9); cache none (the whole canvas each step, exact), prefix or dual (Fast-dLLM's
                approximate caches, refreshed at each block)
  dhara         the dllm's weights run block-causal (attention_block = block_length; committed blocks cached
                exactly), batch 1 only (its rows decode one after another), fixed steps: a speed reference only
With `--runs DIR` the models are the trained depth-`--depth` dllm and llama3 of a study (the run directories
whose names hold model=dllm / model=llama3 and model.n_layers=<depth>), the prompts `--prompt`-token windows of
the tiny Shakespeare test split; otherwise random weights of the default study's depth-4 shape (or --layers,
--width, ...) and random prompts, which time a fixed-step sampler faithfully but not a threshold sampler (how
many tokens pass the threshold depends on the weights) and say nothing about accuracy.

Speed: each round runs, per batch size and variant, the AR decoder then the variant (pairs, fixed threads);
the ratio variant / ar of end-to-end tokens/s is taken per pair, and the median (min-max) over `--rounds` is
printed, with the tokens committed per denoising step (per row). The study (arXiv 2512.20877) reports Dhara-70M
at 3.8x its AR model's throughput on a GPU.

Accuracy (trained models only): for every prompt (batch 1, greedy), the tokens committed per step of each
sampler (also at `--more-thresholds`), the fraction of generated tokens equal to the exact sampler's (cache
none, same commit rule) at the same position, and the mean NLL per token of the continuations under the
trained llama3 -- a proxy for quality, not a measure of it (a model's own greedy text scores well under
itself; the test split's true continuations are printed beside for scale).

    python bench/diffusion_decode.py --threads 1 --runs /tmp/sweep-clone/runs/cpu_default
    python bench/diffusion_decode.py --threads 1 --batches 1,16 --rounds 3          # random weights
    python bench/diffusion_decode.py --layers 32 --width 384 --heads 8 --kv-heads 4 --vocab 50304 \\
        --context 1024 --prompt 128 --new 128 --batches 1 --no-threshold           # the 70M shape
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from importlib import resources
from pathlib import Path

import torch

from slm.cpu_busy import OtherWork
from slm.model import ModelConfig, Transformer
from slm.model.diffusion import DiffusionSampler
from slm.model.generate import Decoder
from slm.settings import nested

STUDY_SHAPE = dict(layers=4, width=96, heads=6, kv_heads=2, d_ff=344, vocab=65, context=128)  # cpu_default depth 4
CACHES = ("none", "prefix", "dual")


def run_keys(name: str) -> dict:
    """A run directory's name as its overrides: 'model.n_layers=4,model=dllm' -> {'model.n_layers': '4', ...}."""
    return dict(part.split("=", 1) for part in name.split(",") if "=" in part)


def find_run(runs: Path, family: str, depth: int) -> Path:
    found = [d for d in sorted(runs.iterdir()) if (d / "model").is_dir()
             and run_keys(d.name).get("model") == family and run_keys(d.name).get("model.n_layers") == str(depth)]
    if len(found) != 1:
        raise SystemExit(f"--runs {runs}: {len(found)} run directories with model={family} and model.n_layers={depth} "
                         f"(need exactly one): {[d.name for d in found]}")
    return found[0]


def trained(args) -> tuple[Transformer, Transformer, list[list[int]], list[list[int]], dict]:
    """The trained llama3 and dllm, prompts and true continuations from the test split."""
    from slm.data import load_tokenizer
    from slm.data.sources import CORPORA
    from slm.model.weights import load_model

    runs = Path(args.runs)
    dirs = {family: find_run(runs, family, args.depth) for family in ("llama3", "dllm")}
    ar, dllm = (load_model(dirs[f] / "model").eval() for f in ("llama3", "dllm"))
    tok, dtok = load_tokenizer(dirs["llama3"] / "model"), load_tokenizer(dirs["dllm"] / "model")
    if dtok.decode(list(range(tok.vocab_size))) != tok.decode(list(range(tok.vocab_size))):
        raise SystemExit("the dllm's and llama3's tokenizers differ: their ids cannot be compared")
    text = resources.files("slm.data").joinpath(f"{CORPORA}/tiny_shakespeare/test.txt").read_text()
    ids = tok.encode(text)
    count = max(args.batches + [args.prompts])
    span = args.prompt + args.new
    starts = [i * (len(ids) - span) // count for i in range(count)]
    prompts = [ids[s:s + args.prompt] for s in starts]
    truth = [ids[s + args.prompt:s + span] for s in starts]
    info = {"weights": "trained", "runs": {f: str(d) for f, d in dirs.items()}, "prompts_from": "tiny_shakespeare test"}
    return ar, dllm, prompts, truth, info


def random_models(args) -> tuple[Transformer, Transformer, list[list[int]], list[list[int]], dict]:
    shape = {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in STUDY_SHAPE.items()}

    def build(**kind) -> Transformer:
        torch.manual_seed(0)  # the same weights for both (the dllm's extra row is its mask token)
        cfg = ModelConfig(family="llama3", n_layers=shape["layers"], d_model=shape["width"],
                          context_length=shape["context"], mlp=dict(d_ff=shape["d_ff"]),
                          parametrization=dict(init="normal"), **nested({
                              "attention.n_heads": shape["heads"], "attention.n_kv_heads": shape["kv_heads"], **kind}))
        return Transformer(cfg).eval()

    V = shape["vocab"]
    ar = build(vocab_size=V)
    dllm = build(vocab_size=V + 1, **{"attention.causal": False, "embedding.mask_token_id": V})
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, V, (args.prompt,), generator=gen).tolist() for _ in range(max(args.batches))]
    return ar, dllm, prompts, [], {"weights": "random", "shape": shape}


def nll(model: Transformer, prompt: list[int], cont: list[int]) -> float:
    """Mean NLL per token of `cont` after `prompt` under a causal model."""
    x = torch.tensor([prompt + cont])
    with torch.no_grad():
        logp = model(x[:, :-1]).float().log_softmax(-1)[0, len(prompt) - 1:]
    return float(-logp.gather(-1, torch.tensor(cont)[:, None]).mean())


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", default=None, help="a study's runs directory: trained dllm and llama3 from it")
    parser.add_argument("--depth", type=int, default=4, help="with --runs: the runs' model.n_layers")
    for name in ("layers", "width", "heads", "kv_heads", "d_ff", "vocab", "context"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=None,
                            help=f"random weights: {name} (default {STUDY_SHAPE[name]}, the default study's depth 4)")
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=None, help="denoising steps in all (default new/4)")
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--no-threshold", action="store_true", help="time low-confidence remasking only")
    parser.add_argument("--more-thresholds", default="0.5,0.2,0.1",
                        help="with --runs: further thresholds for the accuracy figures (comma-separated; '' none)")
    parser.add_argument("--batches", default="1,16,64", help="batch sizes, comma-separated")
    parser.add_argument("--prompts", type=int, default=64, help="with --runs: prompts for the accuracy figures")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="bench/out/diffusion_decode.json")
    args = parser.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    torch.set_num_threads(args.threads)
    steps = args.steps or max(1, args.new // 4)
    ar_model, dllm_model, prompts, truth, info = trained(args) if args.runs else random_models(args)
    cfg = dllm_model.cfg
    if args.prompt + args.new > cfg.context_length:
        raise SystemExit(f"--prompt {args.prompt} + --new {args.new} exceeds the models' context {cfg.context_length}")
    rules = {"": None} if args.no_threshold else {"": None, "+thr": args.threshold}
    samplers = {f"dllm/{c}{r}": DiffusionSampler(dllm_model, args.block_length, steps, t, cache=c)
                for r, t in rules.items() for c in CACHES}
    block_causal = dataclasses.replace(cfg, attention=dataclasses.replace(cfg.attention, block=args.block_length))
    dhara = Transformer(block_causal).eval()
    dhara.load_state_dict(dllm_model.state_dict())
    samplers["dhara"] = DiffusionSampler(dhara, args.block_length, steps)
    decoders = {b: Decoder(ar_model, batch_size=b, capacity=args.prompt + args.new - 1) for b in args.batches}

    def run(name: str, batch: int) -> tuple[float, float]:
        """(tokens/s, tokens committed per step per row; AR: 1)."""
        rows = prompts[:batch]
        start = time.perf_counter()
        if name == "ar":
            outs = decoders[batch].generate(rows, args.new)
            per_step = 1.0
        else:
            outs = samplers[name].generate(rows, args.new)
            per_step = args.new / samplers[name].last_timing["forwards"]
        return sum(map(len, outs)) / (time.perf_counter() - start), per_step

    variants = {b: [n for n in samplers if n != "dhara" or b == 1] for b in args.batches}
    for b in args.batches:  # warm-up
        for name in ["ar", *variants[b]]:
            run(name, b)
    rates = {b: {n: [] for n in ["ar", *variants[b]]} for b in args.batches}
    ratios = {b: {n: [] for n in variants[b]} for b in args.batches}
    per_step = {b: {} for b in args.batches}
    with OtherWork() as other:
        for _ in range(args.rounds):
            for b in args.batches:
                for name in variants[b]:
                    a, _ = run("ar", b)
                    d, per_step[b][name] = run(name, b)
                    rates[b]["ar"].append(a)
                    rates[b][name].append(d)
                    ratios[b][name].append(d / a)
    load = other.as_dict()

    title = (f"diffusion decode  {info['weights']} weights, {cfg.n_layers}x{cfg.d_model}, prompt {args.prompt}, "
             f"{args.new} new tokens, {steps} steps (or threshold {args.threshold}) in blocks of {args.block_length}, "
             f"{args.threads} thread(s), {args.rounds} rounds of (ar, variant) pairs")
    print(title)
    busy = load["other_cores_busy"]
    print(f"  load: other processes kept {'an unknown number' if busy is None else f'{busy:.2f}'} of {load['cpus']} "
          "cores busy while timing")
    if info["weights"] == "random":
        print("  random weights (no --runs): threshold rows time these weights' confidences, not a trained model's")
    speed = {}
    for b in args.batches:
        print(f"  batch {b}: ar {statistics.median(rates[b]['ar']):.0f} tok/s")
        speed[b] = {}
        for name in variants[b]:
            r = spread(ratios[b][name])
            speed[b][name] = {**r, "tokens_per_s": statistics.median(rates[b][name]),
                              "tokens_per_step_per_row": per_step[b][name]}
            print(f"    {name:16s} {speed[b][name]['tokens_per_s']:7.0f} tok/s  {r['median']:5.2f}x ar "
                  f"({r['min']:.2f}-{r['max']:.2f})  {per_step[b][name]:.2f} tokens/step")

    accuracy = None
    if info["weights"] == "trained":
        n = args.prompts
        accuracy = {"prompts": n, "nll_of": "continuations under the trained llama3 (a proxy)"}
        exact = {}
        truth_nll = statistics.fmean(nll(ar_model, p, c) for p, c in zip(prompts[:n], truth[:n]))
        greedy = decoders[1]
        ar_outs = [greedy.generate([p], args.new)[0] for p in prompts[:n]]
        accuracy["true_continuation_nll"] = truth_nll
        accuracy["ar_greedy_nll"] = statistics.fmean(nll(ar_model, p, c) for p, c in zip(prompts[:n], ar_outs))
        print(f"  accuracy over {n} prompts (batch 1, greedy): NLL/token under the trained llama3 (a proxy): "
              f"true continuation {truth_nll:.3f}, llama3's own greedy {accuracy['ar_greedy_nll']:.3f}")
        more = {f"dllm/{c}+thr{t}": DiffusionSampler(dllm_model, args.block_length, steps, float(t), cache=c)
                for t in filter(None, args.more_thresholds.split(",")) for c in CACHES}
        for name, sampler in {**samplers, **more}.items():
            if name == "dhara":
                continue
            outs, steps_used = [], []
            for p in prompts[:n]:
                outs.append(sampler.generate([p], args.new)[0])
                steps_used.append(sampler.last_timing["forwards"])
            rule = name.split("/")[1].removeprefix(name.split("/")[1].split("+")[0])  # '', '+thr', '+thr0.5'
            if name.startswith("dllm/none"):
                exact[rule] = outs
            same = sum(a == e for o, x in zip(outs, exact[rule]) for a, e in zip(o, x)) / (n * args.new)
            tps = [args.new / s for s in steps_used]
            accuracy[name] = {"same_as_exact": same, "nll": statistics.fmean(nll(ar_model, p, c)
                                                                             for p, c in zip(prompts[:n], outs)),
                              "tokens_per_step": spread(tps), "tokens_per_step_mean": statistics.fmean(tps)}
            a = accuracy[name]
            print(f"    {name:20s} same as exact {a['same_as_exact']:.3f}  NLL {a['nll']:.3f}  tokens/step "
                  f"{a['tokens_per_step_mean']:.2f} (median {a['tokens_per_step']['median']:.2f}, "
                  f"{a['tokens_per_step']['min']:.2f}-{a['tokens_per_step']['max']:.2f})")

    result = {**info, "shape": {"n_layers": cfg.n_layers, "d_model": cfg.d_model, "n_heads": cfg.attention.n_heads,
                                "n_kv_heads": cfg.attention.n_kv_heads, "context_length": cfg.context_length},
              "prompt_tokens": args.prompt, "new_tokens": args.new, "block_length": args.block_length,
              "steps": steps, "threshold": args.threshold, "threads": args.threads, "rounds": args.rounds,
              "device": "cpu", **load, "tokens_per_s": {str(b): r for b, r in rates.items()},
              "ratio_over_ar": {str(b): s for b, s in speed.items()}, "accuracy": accuracy,
              "study_reference_ratio": 3.8}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
