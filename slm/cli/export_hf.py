"""`slm-export-hf <run dir> <out dir>`: write a trained slm model as a transformers model directory, offline.

    slm-export-hf runs/train/model=debug exported/debug            # prints: exported/debug: LlamaForCausalLM ...
    slm-export-hf runs/families_70m/model=llama3 exported/llama3 --dtype bfloat16

    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained("exported/debug")
    tokenizer = AutoTokenizer.from_pretrained("exported/debug")

The weights go through slm.interop.hf.to_hf (the families transformers has: GPT-2 style -> GPT2LMHeadModel,
LLaMA style -> LlamaForCausalLM, LFM2 -> Lfm2ForCausalLM, mixture of experts -> MixtralForCausalLM or
Qwen3MoeForCausalLM) and are saved with save_pretrained (config.json, model.safetensors, generation_config.json);
the export is then loaded back with from_pretrained and its logits compared with slm's (--no-check skips).
The run's tokenizer is written for AutoTokenizer where transformers can express it: GPT-2 BPE (tokenizer.json
from the shipped ranks), character level (a WordLevel tokenizer over the characters), a Hugging Face tokenizer
(its files); a word-level tokenizer has no transformers form. slm's own tokenizer file is written beside it
either way (slm.data.load_tokenizer reads the directory).

Bad input (a missing or damaged run, a model transformers cannot represent, a non-empty out dir without
--force, no tokenizer beside the model without --no-tokenizer) is one line on stderr and exit code 2, and
nothing is written.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from slm.bad_input import doc_parser, fail
from slm.cli.config import reports_user_errors
from slm.pipes import quiet_on_closed_pipe

PROG = "slm-export-hf"
EXPORTABLE = ("gpt2 (GPT2LMHeadModel); llama3 and the LLaMA-shaped debug, design_40m, mobilellm (LlamaForCausalLM); "
              "lfm2 (Lfm2ForCausalLM); moe (MixtralForCausalLM, Qwen3MoeForCausalLM with qk-norm)")
"""The presets transformers has a class for (tests/test_cli_verbs.py exports each at a tiny size)."""
DTYPES = ("float32", "bfloat16", "float16")
CHECK_TOLERANCE = 1e-4  # max |logit difference| allowed, relative to the largest |logit| (at least 1)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = doc_parser(PROG, __doc__, examples=2)
    parser.add_argument("run", type=Path, help="run directory or checkpoint directory: a path, or a run under "
                        "$SLM_RUNS (default runs/) such as cpu_default/<job key>, or a run group of one run")
    parser.add_argument("out_dir", type=Path, help="transformers model directory to write")
    parser.add_argument("--dtype", choices=DTYPES, default="float32",
                        help="dtype of the saved weights (default float32)")
    parser.add_argument("--force", action="store_true", help="write into a non-empty out_dir (its files of the same "
                        "names are replaced)")
    parser.add_argument("--no-check", action="store_true", help="skip loading the export back and comparing logits")
    parser.add_argument("--no-tokenizer", action="store_true", help="export the model without a tokenizer (needed "
                        "when none is saved beside it; AutoTokenizer then has nothing to load)")
    return parser.parse_args(argv)


def _check_paths(run: Path, out_dir: Path, force: bool) -> None:
    """Refuse, before loading anything, what would fail or overwrite something unasked."""
    if out_dir.exists() and not out_dir.is_dir():
        fail(PROG, f"{out_dir}: exists and is not a directory")
    if out_dir.is_dir() and run.exists() and out_dir.resolve() in (run.resolve(), (run / "model").resolve()):
        fail(PROG, f"{out_dir}: is the run's own directory; choose another out_dir")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        fail(PROG, f"{out_dir}: exists and is not empty (use --force to write into it)")


def hf_tokenizer(tok):
    """A transformers PreTrainedTokenizerFast encoding as `tok` does, or None where transformers has no form
    for it (word level). Its end-of-text token, if any, is the eos token."""
    from transformers import PreTrainedTokenizerFast

    from slm.data.tokenizers import CharTokenizer, GPT2Tokenizer, HFTokenizer

    if isinstance(tok, HFTokenizer):
        return None  # its own files are copied (write_tokenizer)
    if isinstance(tok, GPT2Tokenizer):
        from importlib import resources

        import tiktoken_ext.openai_public as openai_public
        from transformers.convert_slow_tokenizer import TikTokenConverter

        from slm.data.tokenizers import GPT2_RANKS

        ranks = str(resources.files("slm.data").joinpath(GPT2_RANKS))
        backend = TikTokenConverter(vocab_file=ranks, pattern=openai_public.r50k_pat_str,
                                    extra_special_tokens=["<|endoftext|>"]).converted()
        special = {"eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>"} if tok.eot_id is not None else {}
        return PreTrainedTokenizerFast(tokenizer_object=backend, **special)
    if isinstance(tok, CharTokenizer):
        from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

        from slm.data.tokenizers import EOT, UNK

        vocab = {s: i for i, s in enumerate(tok._strings)}
        unknown = UNK if tok.unk_id is not None else None
        backend = Tokenizer(models.WordLevel(vocab, unk_token=unknown))
        backend.pre_tokenizer = pre_tokenizers.Split(Regex("(?m:.)"), behavior="isolated")  # every character
        backend.decoder = decoders.Fuse()  # characters joined with nothing between them
        special = {"unk_token": UNK} if unknown else {}
        if tok.eot_id is not None:
            special["eos_token"] = EOT
        return PreTrainedTokenizerFast(tokenizer_object=backend, **special)
    return None


def write_tokenizer(tok, out_dir: Path) -> str:
    """Write `tok` into out_dir for AutoTokenizer where it can be, and as slm's own file; what was written."""
    from slm.data.tokenizers import HFTokenizer

    tok.save(out_dir)  # slm_tokenizer.json (+ hf_tokenizer/ for an hf tokenizer)
    if isinstance(tok, HFTokenizer):
        for name in tok.files:
            shutil.copyfile(tok.path / name, out_dir / name)
        return f"{tok.name} (its files)"
    fast = hf_tokenizer(tok)
    if fast is None:
        return f"{tok.name}: no transformers form; slm_tokenizer.json only (slm.data.load_tokenizer)"
    fast.save_pretrained(out_dir)
    return f"{tok.name} (tokenizer.json)"


def check_logits(model, out_dir: Path, dtype) -> float:
    """Load the export with transformers and compare its logits with slm's on random tokens (after the same dtype
    round trip of the parameters, in place); the largest difference. ValueError if it exceeds CHECK_TOLERANCE."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.no_grad():  # the weights as saved; buffers (RoPE tables) stay float32, as transformers computes them
        for param in model.parameters():
            param.copy_(param.to(dtype).float())
    reference = model.eval()
    loaded = AutoModelForCausalLM.from_pretrained(out_dir, local_files_only=True, dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(0)
    length = min(model.cfg.context_length, 64)
    idx = torch.randint(0, model.cfg.vocab_size, (2, length), generator=generator)
    with torch.no_grad():
        ours, theirs = reference(idx), loaded(idx, use_cache=False).logits
    diff = (ours - theirs).abs().max().item()
    if not diff <= CHECK_TOLERANCE * max(1.0, ours.abs().max().item()):
        raise ValueError(f"{out_dir}: transformers' logits differ from slm's by {diff:.3g} after loading the export; "
                         "this is a bug in slm.interop, please report it (the directory is left for inspection)")
    return diff


@reports_user_errors(PROG)
def run(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    from slm.cli.paths import resolve_run

    args.run = resolve_run(args.run, PROG)  # a path, or a run (group) under $SLM_RUNS
    _check_paths(args.run, args.out_dir, args.force)

    os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: never touch the network
    import torch
    from transformers.utils import logging as hf_logging

    from slm.cli.generate import load_tokenizer_dir
    from slm.interop.hf import to_hf
    from slm.model.transformer import Transformer
    from slm.model.weights import load_model, resolve_model_dir

    hf_logging.disable_progress_bar()
    model_dir = resolve_model_dir(args.run)
    model = load_model(model_dir).eval()  # config and weights checked first; float32 on the CPU
    cfg = model.cfg
    tok = None
    if not args.no_tokenizer:
        try:
            tok = load_tokenizer_dir(model_dir)
        except FileNotFoundError:  # refused before anything is written: an export AutoTokenizer cannot read
            raise ValueError(f"{model_dir}: no tokenizer beside the model (slm_tokenizer.json or Hugging Face "
                             "tokenizer files), so the export would have none; copy the run's tokenizer there, or "
                             "pass --no-tokenizer to export the model alone") from None
    if not isinstance(model, Transformer):
        reason = f"a window model (model.kind={cfg.kind}) has no transformers class"
    else:
        try:
            hf_model = to_hf(model)
            reason = None
        except ValueError as err:
            reason = " ".join(str(err).split())
    if reason is not None:
        raise ValueError(f"{model_dir}: {cfg.family} cannot be exported to transformers: {reason}. The presets "
                         f"that can: {EXPORTABLE}")
    dtype = getattr(torch, args.dtype)
    if tok is not None and tok.eot_id is not None:
        hf_model.config.eos_token_id = tok.eot_id
        hf_model.generation_config.eos_token_id = tok.eot_id
    args.out_dir.mkdir(parents=True, exist_ok=True)
    hf_model.to(dtype).save_pretrained(args.out_dir)
    written = write_tokenizer(tok, args.out_dir) if tok is not None else "none (--no-tokenizer)"
    check = "" if args.no_check else f"; logits checked (max difference {check_logits(model, args.out_dir, dtype):.1e})"
    print(f"{args.out_dir}: {type(hf_model).__name__} from {cfg.family}, {model.num_params():,} parameters in "
          f"{args.dtype}; tokenizer {written}{check}")
    return args.out_dir


@quiet_on_closed_pipe
def main() -> None:
    run(sys.argv[1:])


if __name__ == "__main__":
    main()
