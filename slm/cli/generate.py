"""`slm-generate <run dir> "prompt"`: text from a trained model, with the run's own tokenizer.

    slm-generate runs/train/model=debug "ROMEO:"                          # 200 new tokens, temperature 0.8
    slm-generate runs/train/model=debug "ROMEO:" --temperature 0 --max-new-tokens 50     # greedy
    slm-generate runs/cpu_default/<job key> "First Citizen:" --top-p 0.9 --seed 1 --num-samples 3
    slm-generate runs/cpu_default/<dllm job> "KING:" --steps 64 --block-length 32       # masked diffusion
    echo "a prompt from stdin" | slm-generate <run dir> -
    slm-generate train "ROMEO:"              # a run group of one run under $SLM_RUNS (runs/train/<its job key>)

The run directory's model/ (or a checkpoint directory: config.json + model.safetensors, safetensors only) is
checked before it is loaded; the tokenizer is the one saved beside the weights (slm_tokenizer.json, or Hugging
Face tokenizer files; --tokenizer names another directory). Every family generates: autoregressive ones with
the KV cache (slm.model.generate: temperature, top-k, top-p), Titans' memory layers on the eager cache, masked
diffusion models (model.attention.causal=false with a mask token) with their sampler (slm.model.diffusion: --steps,
--block-length, --threshold; temperature 0 is argmax), and the window models of arXiv 2512.20877
(model.kind=linear|mlp) from the last context_length tokens of the prompt, sliding. An end-of-text token
ends a sample. An empty prompt starts from the tokenizer's end-of-text token, else from a newline.

A prompt with characters (char tokenizer) or words (word) outside the vocabulary fitted in training, which has no
<unk> to map them to, is refused naming them; --unknown drop leaves them out of the prompt instead, with a note.

Prints the prompt followed by each sample (--new-only: the generated text only). Bad input (a missing or
damaged run, a prompt the tokenizer cannot encode, a number out of range, an option the model's decoder does
not have) is one line on stderr and exit code 2; HYDRA_FULL_ERROR=1 shows the traceback.
"""

from __future__ import annotations

import argparse
import math
import secrets
import sys
from pathlib import Path

from slm.bad_input import doc_parser
from slm.cli.config import reports_user_errors
from slm.pipes import quiet_on_closed_pipe

PROG = "slm-generate"
DTYPES = ("auto", "float32", "bfloat16", "float16")
DIFFUSION_OPTIONS = ("steps", "block_length", "threshold")
UNKNOWN = ("error", "drop")


def _number(kind, low=None, high=None, low_open=False, what=""):
    """An argparse type: a finite int or float in [low, high] ((low, high] when low_open)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r}") from None
        if kind is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if (low is not None and (value <= low if low_open else value < low)) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{text}: {what}")
        return value
    return parse


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = doc_parser(PROG, __doc__)
    parser.add_argument("run", help="run directory or checkpoint directory: a path, or a run under $SLM_RUNS "
                        "(default runs/) such as cpu_default/<job key>, or a run group of one run")
    parser.add_argument("prompt", help="the text to continue ('-': read it from stdin; '': start from nothing)")
    parser.add_argument("--max-new-tokens", "-n", type=_number(int, 1, what="must be >= 1"), default=200,
                        help="tokens to generate per sample (fewer at an end-of-text token or the model's context; "
                        "default 200)")
    parser.add_argument("--temperature", "-t", type=_number(float, 0, what="must be >= 0"), default=0.8,
                        help="sampling temperature; 0: greedy (argmax) (default 0.8)")
    parser.add_argument("--top-k", type=_number(int, 1, what="must be >= 1"), default=None,
                        help="sample among the k most likely tokens only (autoregressive models)")
    parser.add_argument("--top-p", type=_number(float, 0, 1, low_open=True, what="must be in (0, 1]"), default=None,
                        help="nucleus sampling: the smallest set of tokens holding this probability (autoregressive "
                        "models)")
    parser.add_argument("--seed", type=_number(int, 0, what="must be >= 0"), default=None,
                        help="random seed, for a repeatable sample (default: a fresh one, printed with --verbose)")
    parser.add_argument("--num-samples", type=_number(int, 1, 1024, what="must be in 1..1024"), default=1,
                        help="samples of the same prompt (one batch)")
    parser.add_argument("--steps", type=_number(int, 1, what="must be >= 1"), default=None,
                        help="masked diffusion: denoising steps in all (default: one per new token)")
    parser.add_argument("--block-length", type=_number(int, 1, what="must be >= 1"), default=None,
                        help="masked diffusion: tokens per left-to-right block (default 32; a block-causal model "
                        "uses its own attention block)")
    parser.add_argument("--threshold", type=_number(float, 0, 1, low_open=True, what="must be in (0, 1]"),
                        default=None, help="masked diffusion: commit every prediction this confident (Fast-dLLM); "
                        "default: low-confidence remasking")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, mps ... (default: cuda if available)")
    parser.add_argument("--dtype", choices=DTYPES, default="auto",
                        help="weights' dtype (default: bfloat16 on a GPU that has it, else float32)")
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help="tokenizer directory (default: the model directory's)")
    parser.add_argument("--unknown", choices=UNKNOWN, default="error",
                        help="prompt characters (char tokenizer) or words (word) outside the vocabulary, which has no "
                        "<unk>: error (name them; the default) or drop (leave them out of the prompt, with a note)")
    parser.add_argument("--new-only", action="store_true", help="print the generated text only, not the prompt")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="say on stderr what was loaded, the seed, and the speed")
    return parser.parse_args(argv)


def load_tokenizer_dir(directory: Path):
    """The slm tokenizer saved in `directory` (slm_tokenizer.json), else its Hugging Face tokenizer files."""
    from slm.data.tokenizers import HF_FILES, HF_SUBDIR, META_FILE, HFTokenizer, load_tokenizer

    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such tokenizer directory")
    try:
        if (directory / META_FILE).is_file():
            return load_tokenizer(directory)
        for where in (directory, directory / HF_SUBDIR):
            if any((where / f).is_file() for f in HF_FILES):
                tok = HFTokenizer(where, eot=False)
                return HFTokenizer(where, eot=True) if tok.eot_token is not None else tok
    except (KeyError, TypeError, UnicodeDecodeError) as err:  # a damaged tokenizer file
        raise ValueError(f"{directory}: cannot load the tokenizer ({type(err).__name__}: "
                         f"{' '.join(str(err).split())[:300]}); restore its files or pass --tokenizer") from None
    raise FileNotFoundError(f"{directory}: no tokenizer ({META_FILE} or Hugging Face tokenizer files); pass "
                            "--tokenizer <dir>")


def resolve_device(name: str, dtype: str):
    """(torch.device, torch.dtype) from --device and --dtype; ValueError for a device this machine lacks."""
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"--device {name}: {' '.join(str(err).split())}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: CUDA is not available on this machine (use --device cpu)")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {name}: MPS is not available on this machine")
    if dtype == "auto":
        dtype = "bfloat16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "float32"
    return device, getattr(torch, dtype)


def _units(tok, text: str) -> list[str]:
    """`text` as the symbols of a fitted vocabulary: characters (char) or words and newlines (word)."""
    if tok.kind == "char":
        return list(text)
    return (tok.pattern if tok.newlines else tok.words_only).findall(text)


def unknown_symbols(tok, prompt: str) -> list[str]:
    """The characters or words of `prompt` that a char or word tokenizer without <unk> cannot encode, in order of
    first appearance; [] for any other tokenizer."""
    if getattr(tok, "kind", None) not in ("char", "word") or tok.unk_id is not None:
        return []
    known = set(tok.symbols)
    return list(dict.fromkeys(u for u in _units(tok, prompt) if u not in known))


def without_unknown(tok, prompt: str, unknown: list[str], policy: str, where) -> str:
    """`prompt` with the unknown symbols dropped (policy drop, with a note), else ValueError naming them."""
    if not unknown:
        return prompt
    kind = "character" if tok.kind == "char" else "word"
    named = ", ".join(map(repr, unknown[:10])) + (f" and {len(unknown) - 10} more" if len(unknown) > 10 else "")
    plural = "s" if len(unknown) > 1 else ""
    if policy == "error":
        raise ValueError(f"the prompt has {len(unknown)} {kind}{plural} outside the {tok.kind} vocabulary of {where} "
                         f"(fitted in training, no <unk>): {named}; leave {'them' if plural else 'it'} out, or pass "
                         f"--unknown drop to generate from the prompt without {'them' if plural else 'it'}")
    drop = set(unknown)
    if tok.kind == "char":
        prompt = "".join(c for c in prompt if c not in drop)
    else:
        prompt = (tok.pattern if tok.newlines else tok.words_only).sub(
            lambda m: "" if m.group() in drop else m.group(), prompt)
    _note(f"note: dropped the {kind}{plural} outside the vocabulary: {named}")
    return prompt


def start_ids(tok, prompt: str) -> tuple[list[int], bool]:
    """The prompt's ids, and whether they are a start token standing in for an empty prompt (the tokenizer's
    end-of-text token, else a newline); ValueError when the tokenizer cannot encode the prompt."""
    try:
        ids = tok.encode(prompt) if prompt else []
    except ValueError as err:  # a tokenizer that refuses the text (char and word: without_unknown first)
        raise ValueError(f"cannot encode the prompt: {' '.join(str(err).split())}") from None
    if ids:
        return ids, False
    if tok.eot_id is not None:
        return [tok.eot_id], True
    try:
        newline = tok.encode("\n")
    except ValueError:
        newline = []
    if len(newline) == 1 and newline[0] != getattr(tok, "unk_id", None):
        return newline, True
    raise ValueError(f"the prompt {prompt!r} gives no tokens, and the {tok.name} tokenizer has no end-of-text "
                     "or newline token to start from; give a prompt")


def _room(cfg, n_prompt: int, diffusion: bool) -> int:
    """How many new tokens fit after an n_prompt-token prompt in the model's context."""
    return cfg.context_length - n_prompt + (0 if diffusion else 1)


def _window_generate(model, ids, n_new, temperature, top_k, top_p, generator, stops, rows) -> list[list[int]]:
    """Sampling from a window model (next token from exactly the last context_length tokens), sliding."""
    import torch

    from slm.model.generate import sample

    device = next(model.parameters()).device
    x = torch.tensor([ids[-model.cfg.context_length:]] * rows, device=device)
    out: list[list[int]] = [[] for _ in range(rows)]
    done = [False] * rows
    with torch.no_grad():
        for _ in range(n_new):
            tokens = sample(model(x)[:, -1].float(), temperature, top_k, top_p, generator)
            for b, t in enumerate(tokens.tolist()):
                if not done[b]:
                    done[b] = t in stops
                    if not done[b]:
                        out[b].append(t)
            if all(done):
                break
            x = torch.cat([x[:, 1:], tokens[:, None]], dim=1)
    return out


def _note(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


@reports_user_errors(PROG)
def run(argv: list[str] | None = None) -> list[str]:
    """Generate; print and return the texts."""
    args = parse_args(argv)
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt

    import time

    import torch

    from slm.model.diffusion import DiffusionSampler, is_diffusion
    from slm.model.generate import generate
    from slm.model.weights import load_model, resolve_model_dir

    from slm.cli.paths import resolve_run

    # a path, or a run (group) under $SLM_RUNS; one line for a missing run, a pickle, an empty model/ ...
    model_dir = resolve_model_dir(resolve_run(args.run, PROG))
    tok = load_tokenizer_dir(args.tokenizer or model_dir)
    device, dtype = resolve_device(args.device, args.dtype)
    model = load_model(model_dir, device, dtype).eval()  # config and header checked before allocating
    cfg = model.cfg
    if tok.vocab_size > cfg.vocab_size:
        raise ValueError(f"tokenizer {tok.name} has {tok.vocab_size} ids but the model in {model_dir} only "
                         f"{cfg.vocab_size}: not this model's tokenizer")
    diffusion = is_diffusion(cfg)
    window = not getattr(model, "every_position", True)
    decoder = "a masked diffusion" if diffusion else "a window" if window else "an autoregressive"
    given = [f"--{o.replace('_', '-')}" for o in DIFFUSION_OPTIONS if getattr(args, o) is not None]
    if given and not diffusion:
        raise ValueError(f"{', '.join(given)}: options of masked diffusion sampling; {model_dir} holds "
                         f"{decoder} model ({cfg.family})")
    if diffusion and (args.top_k is not None or args.top_p is not None):
        raise ValueError(f"--top-k and --top-p apply to autoregressive models; {model_dir} holds a masked diffusion "
                         f"model ({cfg.family}), sampled with --temperature, --steps, --block-length, --threshold")

    prompt = without_unknown(tok, prompt, unknown_symbols(tok, prompt), args.unknown, model_dir)
    ids, synthetic = start_ids(tok, prompt)
    n_new = args.max_new_tokens
    if window:
        if len(ids) < cfg.context_length:
            raise ValueError(f"{model_dir} holds a window model ({cfg.family}, model.kind={cfg.kind}) that predicts "
                             f"from exactly {cfg.context_length} tokens; the prompt has {len(ids)}: give a longer one")
    else:
        room = _room(cfg, len(ids), diffusion)
        if room < 1:
            raise ValueError(f"the prompt is {len(ids)} tokens and the model's context {cfg.context_length}: no room "
                             "for a new token; shorten the prompt")
        if n_new > room:
            _note(f"note: the model's context is {cfg.context_length} tokens: at most {room} new tokens after this "
                  f"{len(ids)}-token prompt")
            n_new = room

    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    stops = {tok.eot_id} if tok.eot_id is not None else set()
    rows = args.num_samples
    if args.verbose:
        _note(f"{model_dir}: {cfg.family}, {model.num_params():,} parameters, {decoder.split(' ', 1)[1]}, on "
              f"{device} in {str(dtype).removeprefix('torch.')}; tokenizer {tok.name}; prompt {len(ids)} token{'' if len(ids) == 1 else 's'}; "
              f"seed {seed}")
    started = time.perf_counter()
    if diffusion:
        sampler = DiffusionSampler(model, block_length=args.block_length or 32, steps=args.steps,
                                   threshold=args.threshold, temperature=args.temperature)
        outs = sampler.generate([ids] * rows, n_new, seed=seed, stop_tokens=stops)
    elif window:
        generator = torch.Generator(device=device).manual_seed(seed)
        outs = _window_generate(model, ids, n_new, args.temperature, args.top_k, args.top_p, generator, stops, rows)
    else:
        outs = generate(model, [ids] * rows, n_new, temperature=args.temperature, top_k=args.top_k,
                        top_p=args.top_p, seed=seed, stop_tokens=stops)
    seconds = time.perf_counter() - started
    if args.verbose:
        made = sum(map(len, outs))
        _note(f"{made} new token{'' if made == 1 else 's'} in {seconds:.2f} s ({made / max(seconds, 1e-9):.1f} tokens/s)")

    head = "" if args.new_only or synthetic else prompt
    texts = [head + tok.decode(out) for out in outs]
    for i, text in enumerate(texts):
        if rows > 1:
            print(f"=== sample {i + 1} of {rows} ===")
        print(text)
    return texts


@quiet_on_closed_pipe
def main() -> None:
    try:
        run(sys.argv[1:])
    except BrokenPipeError:  # e.g. `slm-generate ... | head`
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()
