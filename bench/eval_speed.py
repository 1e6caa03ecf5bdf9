"""Benchmark: slm's generation and lm-eval scoring against transformers on the same weights, in one process.

1. Decode at batch 1: slm's `Decoder` (static KV cache; eager, and with `--compile` also torch.compile'd)
   against transformers' `generate` (greedy, default dynamic cache) on the model converted with
   `slm.interop.hf.to_hf`; same random prompt, same number of new tokens, runs alternating, the
   median of each reported. Goal: slm >= 2x transformers on CPU.
2. lm-eval log-likelihood throughput: our `slm` model against lm-eval's `hf` model (HFLM) on the same
   weights and tokenizer, for the multiple-choice requests of the offline task (shared contexts) and for
   rolling perplexity windows. Goal: >= 1x.

    python bench/eval_speed.py --threads 1 --compile          # the cases below
    python bench/eval_speed.py --case llama3_70m --json bench/out/eval_speed.json
    python bench/eval_speed.py --case small --set n_layers=6 position.kind="'learned'"

Cases are LLaMA-3-style (RMSNorm, SwiGLU, RoPE, GQA, tied): `small` (4x128, vocab 512: the size of a
Tiny Shakespeare model), `llama3_19m` (8x256, vocab 50304) and `llama3_70m` (the study's 70M shape,
32x384). The tokenizer is a BPE of 512 ids trained on the Tiny Shakespeare training split; the models
keep their vocabulary, so the output head costs what it costs in the study.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from slm.model import ModelConfig, Transformer  # noqa: E402
from slm.settings import nested  # noqa: E402

LLAMA3 = {"family": "llama3", "attention.head_dim": 48, "attention.n_kv_heads": 4, "norm.kind": "rmsnorm",
          "mlp.kind": "swiglu", "position.kind": "rope", "vocab_size": 50304, "context_length": 512}
CASES = {
    "small": {**LLAMA3, "n_layers": 4, "d_model": 128, "attention.head_dim": 32, "attention.n_kv_heads": 2,
              "vocab_size": 512},
    "llama3_19m": {**LLAMA3, "n_layers": 8, "d_model": 256, "attention.head_dim": 32},
    "llama3_70m": {**LLAMA3, "n_layers": 32, "d_model": 384},
}
"""Model fields, a dotted one inside its group (slm.settings.nested)."""


def build_model(fields: dict) -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(**nested(fields))).eval()


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_decode(model: Transformer, hf_model, prompt_tokens: int, new_tokens: int, repeats: int,
                 compile: bool) -> dict:
    """tokens/s of prefill + greedy decode of new_tokens at batch 1 (time to first token included)."""
    from slm.model.generate import Decoder

    prompt = torch.randint(0, model.cfg.vocab_size, (1, prompt_tokens), generator=torch.Generator().manual_seed(0))
    capacity = prompt_tokens + new_tokens - 1
    runners = {"slm": Decoder(model, batch_size=1, capacity=capacity)}
    if compile:
        runners["slm_compiled"] = Decoder(model, batch_size=1, capacity=capacity, compile=True)
    ids = {}
    for name, dec in runners.items():
        ids[name] = dec.generate([prompt[0].tolist()], new_tokens)[0]  # warm-up (compiles)

    mask = torch.ones_like(prompt)

    def hf_generate():
        with torch.no_grad():
            return hf_model.generate(prompt, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                     do_sample=False, pad_token_id=0)

    ids["transformers"] = hf_generate()[0, prompt_tokens:].tolist()
    times = {name: [] for name in [*runners, "transformers"]}
    for _ in range(repeats):  # alternate, so drifts in machine load hit both
        for name, dec in runners.items():
            start = time.perf_counter()
            dec.generate([prompt[0].tolist()], new_tokens)
            times[name].append(time.perf_counter() - start)
        start = time.perf_counter()
        hf_generate()
        times["transformers"].append(time.perf_counter() - start)
    rates = {name: new_tokens / statistics.median(t) for name, t in times.items()}
    out = {f"{name}_tokens_per_s": rate for name, rate in rates.items()}
    out.update({f"{name}_vs_transformers": rates[name] / rates["transformers"] for name in runners})
    out["same_tokens"] = all(v == ids["transformers"] for v in ids.values())
    return out


def make_tokenizer(directory: Path):
    import transformers as tf
    from tokenizers import Tokenizer, decoders, models, trainers

    text = resources.files("slm.data").joinpath("corpora/tiny_shakespeare/train.txt").read_text()
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.decoder = decoders.Fuse()
    tok.train_from_iterator(text.splitlines(keepends=True), trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<|endoftext|>", "<unk>"], show_progress=False))
    fast = tf.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", unk_token="<unk>")
    fast.save_pretrained(directory)


def bench_loglikelihood(model: Transformer, hf_model, batch_size: int, mc_docs: int, ppl_docs: int,
                        repeats: int) -> dict:
    """Requests per second of lm-eval's hf model and ours on the same requests and weights."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from slm.data.tokenizers import HFTokenizer
    from slm.eval.lm import SLMLM
    from slm.eval.offline_tasks import mc_documents, ppl_documents
    from slm.model.weights import save_model

    with tempfile.TemporaryDirectory() as tmp:
        hf_dir, slm_dir = Path(tmp) / "hf", Path(tmp) / "slm"
        make_tokenizer(hf_dir)
        hf_model.save_pretrained(hf_dir)
        save_model(model, slm_dir)
        HFTokenizer(hf_dir, eot=True).save(slm_dir)
        lms = {"hf": HFLM(pretrained=str(hf_dir), device="cpu", batch_size=batch_size, dtype="float32"),
               "slm": SLMLM(pretrained=str(slm_dir), device="cpu", batch_size=batch_size, dtype="float32")}
        mc = [Instance("loglikelihood", {}, (d["context"], c), i)
              for d in mc_documents()[:mc_docs] for i, c in enumerate(d["choices"])]
        rolling = [Instance("loglikelihood_rolling", {}, (d["text"],), 0) for d in ppl_documents()[:ppl_docs]]
        out, scores = {}, {}
        for kind, requests, method in (("mc", mc, "loglikelihood"), ("rolling", rolling, "loglikelihood_rolling")):
            times = {name: [] for name in lms}
            for _ in range(repeats):
                for name, lm in lms.items():
                    start = time.perf_counter()
                    scores[name] = getattr(lm, method)(requests, disable_tqdm=True)
                    times[name].append(time.perf_counter() - start)
            values = [[s[0] if isinstance(s, tuple) else s for s in scores[name]] for name in lms]
            rates = {name: len(requests) / statistics.median(t) for name, t in times.items()}
            out[f"{kind}_requests"] = len(requests)
            out.update({f"{kind}_{name}_requests_per_s": r for name, r in rates.items()})
            out[f"{kind}_slm_vs_hf"] = rates["slm"] / rates["hf"]
            out[f"{kind}_max_abs_diff"] = max(abs(a - b) for a, b in zip(*values))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", nargs="*", default=["small", "llama3_19m"], choices=list(CASES),
                        help="model cases (default: small llama3_19m)")
    parser.add_argument("--set", nargs="*", default=[],
                        help="override model fields, e.g. n_layers=4 attention.head_dim=32 (a dotted one: its group's)")
    parser.add_argument("--prompt_tokens", type=int, default=64)
    parser.add_argument("--new_tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=16, help="lm-eval batch size (both models)")
    parser.add_argument("--mc_docs", type=int, default=60, help="multiple-choice documents (4 requests each)")
    parser.add_argument("--ppl_docs", type=int, default=10, help="perplexity documents (~1000 characters each)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--compile", action="store_true", help="also time slm's torch.compile'd decode step")
    parser.add_argument("--skip_loglikelihood", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from slm.interop.hf import to_hf

    import ast

    changes = {}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            changes[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            changes[key] = value
    report = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cases": {}}
    for label in args.case:
        model = build_model({**CASES[label], **changes})
        hf_model = to_hf(model).eval()
        case = {"params": model.num_params(), "layers": model.cfg.n_layers, "d_model": model.cfg.d_model,
                "vocab": model.cfg.vocab_size}
        print(f"== {label}: {case['params'] / 1e6:.2f}M parameters, {torch.get_num_threads()} thread(s)", flush=True)
        case["decode"] = bench_decode(model, hf_model, args.prompt_tokens, args.new_tokens, args.repeats, args.compile)
        d = case["decode"]
        line = f"decode batch 1: slm {d['slm_tokens_per_s']:.1f} tok/s"
        if args.compile:
            line += f", slm compiled {d['slm_compiled_tokens_per_s']:.1f} tok/s"
        line += f", transformers {d['transformers_tokens_per_s']:.1f} tok/s -> ratio {d['slm_vs_transformers']:.2f}x"
        if args.compile:
            line += f" (compiled {d['slm_compiled_vs_transformers']:.2f}x)"
        print(line + ("" if d["same_tokens"] else "  [tokens differ]"), flush=True)
        if not args.skip_loglikelihood:
            case["loglikelihood"] = ll = bench_loglikelihood(model, hf_model, args.batch_size, args.mc_docs,
                                                              args.ppl_docs, args.repeats)
            for kind in ("mc", "rolling"):
                print(f"loglikelihood {kind} ({ll[f'{kind}_requests']} requests): "
                      f"slm {ll[f'{kind}_slm_requests_per_s']:.1f}"
                      f" req/s, hf {ll[f'{kind}_hf_requests_per_s']:.1f} req/s -> ratio {ll[f'{kind}_slm_vs_hf']:.2f}x"
                      f" (max |diff| {ll[f'{kind}_max_abs_diff']:.1e})", flush=True)
        report["cases"][label] = case
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    sys.exit(main())
