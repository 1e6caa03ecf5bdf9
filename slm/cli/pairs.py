"""`slm-pairs <teacher run> <out.jsonl> --items <items.jsonl>`: preference pairs from a teacher's own samples on the
function-calling task (docs/toolcall.md), each sample labelled by the verifier.

    slm-pairs runs/train/<teacher> pairs.jsonl --items task/items_train.jsonl -k 8 --temperature 0.8 --seed 0
    slm-pairs teacher pairs.jsonl --items task/items_train.jsonl --limit 200 --device cpu

For each item, k completions of its prompt are sampled from the run's model (its own tokenizer; temperature as
given, stopped at the first newline), verified (slm.toolcall.verifier), and one pair kept: a verified-correct
completion (chosen) and a verified-incorrect one (rejected) of the same prompt (slm.toolcall.teacher). Writes,
each atomically: <out.jsonl> (TRL prompt/chosen/rejected records), <out>.correct.jsonl (every prompt's distinct
correct samples as prompt/completion records: rejection-sampling fine-tuning's data) and <out>.summary.json (the
teacher run, items, k, temperature, seed, counts, the prompts without a pair and why, the correct rate). Progress
on stderr: `prompt i of n`. Bad input (a missing run, an items file that is not one, a prompt the tokenizer cannot
encode, a number out of range) is one line on stderr and exit code 2, with nothing written.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from pathlib import Path

from slm.bad_input import doc_parser
from slm.cli.config import reports_user_errors
from slm.cli.generate import DTYPES, _number
from slm.pipes import quiet_on_closed_pipe

PROG = "slm-pairs"
MAX_NEW_TOKENS = 96
"""The longest completion sampled (the lm-eval tasks' max_gen_toks; every gold answer is under 70 characters)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = doc_parser(PROG, __doc__)
    parser.add_argument("run", help="the teacher: a finished run directory (or a run under $SLM_RUNS)")
    parser.add_argument("out", type=Path, help="the pairs file to write (JSONL); its .summary.json and "
                        ".correct.jsonl go beside it")
    parser.add_argument("--items", type=Path, required=True, help="items_<split>.jsonl from slm-toolcall")
    parser.add_argument("-k", type=_number(int, 2, 1024, what="must be in 2..1024 (a pair needs two samples)"),
                        default=8, help="samples per prompt (default 8)")
    parser.add_argument("--temperature", "-t", type=_number(float, 0, low_open=True, what="must be > 0 (greedy "
                        "samples of one prompt are all the same)"), default=0.8, help="sampling temperature "
                        "(default 0.8)")
    parser.add_argument("--seed", type=_number(int, 0, what="must be >= 0"), default=0,
                        help="sampling seed (each prompt's draw is seeded by it and the item's id; default 0)")
    parser.add_argument("--limit", type=_number(int, 1, what="must be >= 1"), default=None,
                        help="the first N items only (default: all)")
    parser.add_argument("--max-new-tokens", type=_number(int, 1, what="must be >= 1"), default=MAX_NEW_TOKENS,
                        help=f"tokens per sample at most (default {MAX_NEW_TOKENS})")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    parser.add_argument("--dtype", choices=DTYPES, default="auto",
                        help="weights' dtype (default: bfloat16 on a GPU that has it, else float32)")
    return parser.parse_args(argv)


def _teacher(args):
    """(model, tokenizer, model dir) of the run; ValueError for a model that cannot sample left to right."""
    from slm.cli.generate import load_tokenizer_dir, resolve_device
    from slm.cli.paths import resolve_run
    from slm.model.diffusion import is_diffusion
    from slm.model.weights import load_model, resolve_model_dir

    model_dir = resolve_model_dir(resolve_run(args.run, PROG))
    tok = load_tokenizer_dir(model_dir)
    model = load_model(model_dir, *resolve_device(args.device, args.dtype)).eval()
    if is_diffusion(model.cfg) or not getattr(model, "every_position", True):
        raise ValueError(f"{model_dir} holds a {model.cfg.family} model that does not decode left to right; a "
                         "teacher must be an autoregressive model")
    if tok.vocab_size > model.cfg.vocab_size:
        raise ValueError(f"tokenizer {tok.name} has {tok.vocab_size} ids but the model in {model_dir} only "
                         f"{model.cfg.vocab_size}: not this model's tokenizer")
    return model, tok, model_dir


def _encode(tok, items: list[dict], context: int, items_file: Path) -> list[list[int]]:
    """Every prompt's ids, checked before any sampling: encodable, and leaving room for a token."""
    from slm.cli.generate import unknown_symbols

    encoded = []
    for item in items:
        unknown = unknown_symbols(tok, item["prompt"])
        if unknown:
            raise ValueError(f"{items_file}: item {item['id']}'s prompt has characters outside the teacher's "
                             f"vocabulary: {', '.join(map(repr, unknown[:10]))}; the teacher was not trained on "
                             "this task's text")
        ids = tok.encode(item["prompt"])
        if len(ids) >= context:
            raise ValueError(f"{items_file}: item {item['id']}'s prompt is {len(ids)} tokens, the teacher's "
                             f"context {context}: no room to answer")
        encoded.append(ids)
    return encoded


def sample_all(model, tok, items, encoded, args) -> list[list[str]]:
    """k sampled texts per item (cut at the first newline), with a progress line about every 5%."""
    from slm.model.generate import generate

    every = max(1, len(items) // 20)
    started = time.perf_counter()
    eot = set() if tok.eot_id is None else {tok.eot_id}
    out = []
    for i, (item, ids) in enumerate(zip(items, encoded), 1):
        room = model.cfg.context_length - len(ids) + 1
        rows = generate(model, [ids] * args.k, min(args.max_new_tokens, room), temperature=args.temperature,
                        seed=zlib.crc32(f"{args.seed}/{item['id']}".encode()), stop_tokens=eot,
                        stop=lambda row, new: "\n" in tok.decode(new))
        out.append([tok.decode(r) for r in rows])
        if i % every == 0 or i == len(items):
            print(f"{PROG}: prompt {i} of {len(items)} ({time.perf_counter() - started:.1f} s)", file=sys.stderr,
                  flush=True)
    return out


def _write(path: Path, text: str) -> None:
    from slm.atomic import atomic_write

    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


@reports_user_errors(PROG)
def run(argv: list[str] | None = None) -> dict:
    """Sample, label, pair and write; the summary."""
    args = parse_args(argv)
    from slm.toolcall.files import read_items
    from slm.toolcall.teacher import correct_records, label, make_pairs

    if args.out.is_dir():
        raise ValueError(f"{args.out} is a directory: give the pairs file to write (e.g. {args.out / 'pairs.jsonl'})")
    items = read_items(args.items)[:args.limit]
    model, tok, model_dir = _teacher(args)
    encoded = _encode(tok, items, model.cfg.context_length, args.items)
    started = time.perf_counter()
    samples = sample_all(model, tok, items, encoded, args)
    labelled = [label(item, texts) for item, texts in zip(items, samples)]
    records, counts = make_pairs(labelled, args.seed)
    correct = correct_records(labelled)
    summary = {"teacher_run": str(model_dir.parent if model_dir.name == "model" else model_dir),
               "items": str(args.items), "k": args.k, "temperature": args.temperature, "seed": args.seed,
               "max_new_tokens": args.max_new_tokens, **counts, "correct_records": len(correct),
               "seconds": round(time.perf_counter() - started, 2)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    stem = args.out.with_suffix("")
    _write(args.out, "".join(json.dumps(r) + "\n" for r in records))
    _write(stem.with_name(stem.name + ".correct.jsonl"), "".join(json.dumps(r) + "\n" for r in correct))
    _write(stem.with_name(stem.name + ".summary.json"), json.dumps(summary, indent=2) + "\n")
    no_pair = ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in counts["no_pair"].items() if n)
    print(f"{PROG}: wrote {args.out}: {len(records)} pairs from {len(items)} prompts (k {args.k}, temperature "
          f"{args.temperature}); correct rate {counts['correct_rate']:.3f}"
          + (f"; no pair: {no_pair}" if no_pair else ""))
    return summary


@quiet_on_closed_pipe
def main() -> None:
    run(sys.argv[1:])


if __name__ == "__main__":
    main()
