"""`slm-import-hf <transformers model dir> <out dir> [--tokenizer auto|gpt2|none|<dir>] [--force]`: convert a
saved transformers causal LM into an slm checkpoint directory (config.json + model.safetensors + its
tokenizer), offline.

    slm-import-hf ./tiny-llama ./ckpt/tiny-llama        # prints: ./ckpt/tiny-llama: llama3, 1,234,567 parameters; tokenizer hf:tiny-llama
    slm-eval ./ckpt/tiny-llama --tasks offline         # scores it with the tokenizer it carries

Supported: GPT-2, Llama, Qwen3, Gemma2, Gemma3 (text), LFM2; see slm.interop.hf. Bad input (missing directory,
unsupported architecture, a non-empty out dir without --force, a tokenizer that cannot be loaded from local
files) is one line on stderr and exit code 2, and nothing is written.

The tokenizer (--tokenizer, default auto) is saved as an slm tokenizer next to the weights, where slm-eval
and the `slm` lm-eval model find it: auto takes the tokenizer files saved in the model directory
(save_pretrained of the tokenizer), gpt2 the GPT-2 BPE shipped with slm, a directory a local Hugging Face
tokenizer (or a saved slm one), none nothing. A Hugging Face tokenizer that is GPT-2's byte-level BPE (the
same 50257 tokens at the same ids, the same ids for a probe text) is saved as slm's `gpt2` tokenizer; any
other as the `hf` kind, its files copied into <out dir>/hf_tokenizer. With auto and no tokenizer files the
checkpoint gets none, with a warning on stderr (slm-eval then needs --model_args tokenizer=<dir> or
tokenizer=gpt2). Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from slm.bad_input import OneLineParser, fail
from slm.pipes import quiet_on_closed_pipe

PROG = "slm-import-hf"

PROBE = ("Hello, world! It's 2024: naïve café, 日本語 and emoji 🙂.\n\n    indented\tcode(x) == 42  # done"
         "\r\nThe end.")
"""Text both tokenizers must encode identically (contractions, digits, accents, CJK, whitespace runs)."""


def _byte_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the character that stands for each byte in its vocabulary -> the byte.
    Printable Latin-1 bytes stand for themselves; the others, in order, for chr(256), chr(257), ..."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    out, spare = {}, 0
    for byte in range(256):
        if byte in printable:
            out[chr(byte)] = byte
        else:
            out[chr(256 + spare)] = byte
            spare += 1
    return out


def _hf_vocab(tok) -> dict[str, int]:
    """token string -> id of an slm HFTokenizer, added tokens included."""
    if tok._rust is not None:
        return tok._rust.get_vocab(with_added_tokens=True)
    return dict(tok._auto.get_vocab())


def is_gpt2_bpe(tok) -> bool:
    """Whether an slm HFTokenizer is GPT-2's byte-level BPE: 50257 tokens, each at the id the shipped GPT-2
    ranks give it (<|endoftext|> at 50256), and the same ids for PROBE."""
    from slm.data.tokenizers import GPT2_EOT, GPT2Tokenizer

    if tok.vocab_size != GPT2_EOT + 1:
        return False
    vocab = _hf_vocab(tok)
    if len(vocab) != GPT2_EOT + 1 or vocab.get("<|endoftext|>") != GPT2_EOT:
        return False
    alphabet = _byte_alphabet()
    gpt2 = GPT2Tokenizer(eot=True)
    for token, i in vocab.items():
        if i == GPT2_EOT:
            continue
        if not 0 <= i < GPT2_EOT or any(ch not in alphabet for ch in token):
            return False
        if bytes(alphabet[ch] for ch in token) != gpt2.enc.decode_single_token_bytes(i):
            return False
    try:
        return tok.encode(PROBE) == gpt2.encode(PROBE)
    except Exception:  # noqa: BLE001 - a tokenizer that cannot encode the probe is not GPT-2's
        return False


def _from_directory(directory: Path, what: str):
    """An slm tokenizer from a saved slm tokenizer directory or a local Hugging Face one; None if it has no
    tokenizer files. ValueError when its files cannot be loaded."""
    from slm.data.errors import DataError
    from slm.data.tokenizers import (
        HF_FILES,
        META_FILE,
        GPT2Tokenizer,
        HFTokenizer,
        load_tokenizer,
    )

    try:
        if (directory / META_FILE).is_file():
            return load_tokenizer(directory)
        if not any((directory / f).is_file() for f in HF_FILES):
            return None
        tok = HFTokenizer(directory, eot=False)
        if tok.eot_token is not None:
            tok = HFTokenizer(directory, eot=True)
    except (OSError, ValueError, KeyError, TypeError, DataError) as err:
        text = " ".join(str(err).split())[:300] or type(err).__name__
        raise ValueError(f"{what} {directory}: cannot load its tokenizer from local files ({type(err).__name__}: "
                         f"{text}); pass --tokenizer <dir>, --tokenizer gpt2 or --tokenizer none") from None
    return GPT2Tokenizer(eot=True) if is_gpt2_bpe(tok) else tok


def import_tokenizer(model_dir: str | Path, spec: str = "auto", vocab_size: int | None = None):
    """The slm tokenizer to save with a model imported from `model_dir` (see the module's docstring), or None
    (`none`, or `auto` and the directory holds no tokenizer files). ValueError (one line) when the tokenizer
    asked for cannot be loaded, or has more ids than the model's `vocab_size`."""
    from slm.data.tokenizers import GPT2Tokenizer

    spec = str(spec or "auto")
    if spec == "none":
        return None
    if spec == "auto":
        tok = _from_directory(Path(model_dir), "the model directory")
    elif spec == "gpt2" and not Path(spec).is_dir():
        tok = GPT2Tokenizer(eot=True)
    else:
        directory = Path(spec).expanduser()
        if not directory.is_dir():
            raise ValueError(f"--tokenizer {spec}: no such directory (a tokenizer directory, gpt2, auto or none)")
        tok = _from_directory(directory, "--tokenizer")
        if tok is None:
            raise ValueError(f"--tokenizer {spec}: no tokenizer files in it (tokenizer.json, vocab.json, ... or "
                             "slm_tokenizer.json)")
    if tok is not None and vocab_size is not None and tok.vocab_size > vocab_size:
        raise ValueError(f"tokenizer {tok.name} has {tok.vocab_size} ids but the model only {vocab_size}; pass "
                         "the model's own tokenizer with --tokenizer <dir>, or --tokenizer none")
    return tok


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = OneLineParser(prog=PROG, description="Convert a saved transformers causal LM (GPT-2, Llama, Qwen3, "
                           "LFM2, Gemma2, Gemma3 text) into an slm checkpoint directory, offline.")
    parser.add_argument("model_dir", type=Path, help="directory written by transformers' save_pretrained")
    parser.add_argument("out_dir", type=Path, help="slm checkpoint directory to write")
    parser.add_argument("--force", action="store_true", help="write into a non-empty out_dir (replacing its "
                        "config.json, model.safetensors and tokenizer)")
    parser.add_argument("--tokenizer", default="auto", metavar="auto|gpt2|none|DIR",
                        help="the tokenizer saved with the checkpoint: auto (default) = the tokenizer files in "
                        "model_dir, gpt2 = the shipped GPT-2 BPE, none, or a local tokenizer directory")
    return parser.parse_args(argv)


def _check_paths(model_dir: Path, out_dir: Path, force: bool) -> None:
    """Refuse, before loading anything, what would fail or overwrite something unasked."""
    if not model_dir.is_dir():
        fail(PROG, f"{model_dir}: no such directory")
    if out_dir.exists() and not out_dir.is_dir():
        fail(PROG, f"{out_dir}: exists and is not a directory")
    if out_dir.is_dir() and out_dir.resolve() == model_dir.resolve():
        fail(PROG, f"{out_dir}: is the input directory; choose another out_dir")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        fail(PROG, f"{out_dir}: exists and is not empty (use --force to write into it)")


def _check_weights(model_dir: Path) -> None:
    """Each *.safetensors file in model_dir opens (a header that is JSON naming tensors inside the file), else
    one line naming the file, before transformers builds the model."""
    from safetensors import SafetensorError, safe_open

    for path in sorted(model_dir.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as f:
                f.keys()
        except (SafetensorError, OSError, ValueError) as err:
            reason = " ".join(str(err).split())[:200] or type(err).__name__
            fail(PROG, f"{path}: not a readable safetensors file ({reason}); replace it with the model's own "
                       "weights (save_pretrained writes them)")


@quiet_on_closed_pipe
def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    _check_paths(args.model_dir, args.out_dir, args.force)

    os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: never touch the network
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from slm.data.tokenizers import HF_SUBDIR, META_FILE
    from slm.interop.hf import from_hf
    from slm.model.weights import save_model

    hf_logging.disable_progress_bar()  # keep stderr to warnings and our one error line
    _check_weights(args.model_dir)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # transformers' multi-line load report: what matters in it is said below
    try:
        hf_model, info = AutoModelForCausalLM.from_pretrained(args.model_dir, local_files_only=True,
                                                              output_loading_info=True)
        unexpected = sorted(info.get("unexpected_keys") or [])
        if unexpected:
            print(f"{PROG}: warning: {args.model_dir} holds {len(unexpected)} tensor(s) the model does not use "
                  f"({', '.join(unexpected[:3])}{', ...' if len(unexpected) > 3 else ''}); they are left out",
                  file=sys.stderr)
        missing = sorted(info.get("missing_keys") or [])
        if missing:  # transformers would initialise them at random: an import of noise
            fail(PROG, f"{args.model_dir}: the weights lack {len(missing)} of the model's tensors "
                       f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); save the whole model with "
                       "save_pretrained and import that")
        model = from_hf(hf_model)
    except (OSError, ValueError, KeyError, SafetensorError) as err:  # no/invalid checkpoint, unknown model
        fail(PROG, f"{args.model_dir}: {err}")
    finally:
        hf_logging.set_verbosity(verbosity)
    try:  # before anything is written
        tok = import_tokenizer(args.model_dir, args.tokenizer, vocab_size=model.cfg.vocab_size)
    except ValueError as err:
        fail(PROG, str(err))
    save_model(model, args.out_dir)
    for stale in (args.out_dir / META_FILE, args.out_dir / HF_SUBDIR):  # --force over an earlier import
        if stale.is_dir():
            shutil.rmtree(stale)
        elif stale.exists():
            stale.unlink()
    if tok is not None:
        tok.save(args.out_dir)
    elif args.tokenizer == "auto":
        print(f"{PROG}: warning: {args.model_dir} holds no tokenizer files, so {args.out_dir} has no tokenizer; "
              "pass --tokenizer <dir> or --tokenizer gpt2 here, or --model_args tokenizer=<dir>|gpt2 to slm-eval",
              file=sys.stderr)
    line = f"{args.out_dir}: {model.cfg.family}, {model.num_params():,} parameters"
    print(line + (f"; tokenizer {tok.name}" if tok is not None else ""))


if __name__ == "__main__":
    main()
