"""`slm-import-hf <transformers model dir> <out dir> [--force]`: convert a saved transformers causal LM into
an slm checkpoint directory (config.json + model.safetensors), offline.

    slm-import-hf ./tiny-llama ./ckpt/tiny-llama        # prints: ./ckpt/tiny-llama: llama3, 1,234,567 parameters

Supported: GPT-2, Llama, Qwen3, Gemma2, Gemma3 (text), LFM2; see slm.interop.hf. Bad input (missing directory,
unsupported architecture, a non-empty out dir without --force) is one line on stderr and exit code 2,
and nothing is written.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

PROG = "slm-import-hf"


def _fail(message: str) -> None:
    """One line on stderr, exit 2 (the convention of every slm CLI)."""
    line = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    print(f"{PROG}: error: {line}", file=sys.stderr)
    sys.exit(2)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would print the usage first: keep it to one line
        _fail(f"{message} (see {PROG} --help)")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = _Parser(prog=PROG, description="Convert a saved transformers causal LM (GPT-2, Llama, Qwen3, LFM2, "
                     "Gemma2, Gemma3 text) into an slm checkpoint directory, offline.")
    parser.add_argument("model_dir", type=Path, help="directory written by transformers' save_pretrained")
    parser.add_argument("out_dir", type=Path, help="slm checkpoint directory to write")
    parser.add_argument("--force", action="store_true", help="write into a non-empty out_dir (replacing its "
                        "config.json and model.safetensors)")
    return parser.parse_args(argv)


def _check_paths(model_dir: Path, out_dir: Path, force: bool) -> None:
    """Refuse, before loading anything, what would fail or overwrite something unasked."""
    if not model_dir.is_dir():
        _fail(f"{model_dir}: no such directory")
    if out_dir.exists() and not out_dir.is_dir():
        _fail(f"{out_dir}: exists and is not a directory")
    if out_dir.is_dir() and out_dir.resolve() == model_dir.resolve():
        _fail(f"{out_dir}: is the input directory; choose another out_dir")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        _fail(f"{out_dir}: exists and is not empty (use --force to write into it)")


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    _check_paths(args.model_dir, args.out_dir, args.force)

    os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: never touch the network
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from slm.interop.hf import from_hf
    from slm.model.weights import save_model

    hf_logging.disable_progress_bar()  # keep stderr to warnings and our one error line
    try:
        hf_model = AutoModelForCausalLM.from_pretrained(args.model_dir, local_files_only=True)
        model = from_hf(hf_model)
    except (OSError, ValueError, KeyError) as err:  # no/invalid checkpoint, unknown or unsupported model
        _fail(f"{args.model_dir}: {err}")
    save_model(model, args.out_dir)
    print(f"{args.out_dir}: {model.cfg.family}, {model.num_params():,} parameters")


if __name__ == "__main__":
    main()
