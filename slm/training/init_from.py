"""`train.init_from`: start a run from another run's weights (e.g. an AR model converted to masked diffusion).

Weights only: the optimizer, the schedule and the data position start afresh. The source is a run directory
(its `model/`) or an slm checkpoint directory (`config.json` + `model.safetensors`). Every tensor is checked
against the model being built before anything is written: the same names and the same shapes, and tied
weights tied in both. Config fields that change no shape may differ (causal -> bidirectional,
attention_block, mask_token_id, dropout, ...). The source's tokenizer, when its directory has one, must give
the same ids as the run's (a mask token added for diffusion is allowed: it is a new last id).

A masked-diffusion run needs a row for its mask token: with the GPT-2 vocabulary padded to 50304 the mask
id 50257 is a spare row of the same embedding, so the shapes agree; a char or word vocabulary grows by one
row, which is refused (train the source with `tokenizer.mask=true`, or pad the vocabulary) rather than
guessed.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from slm.model.weights import CONFIG_FILE, WEIGHTS_FILE, resolve_model_dir

EMBEDDING_TENSORS = ("tok_emb.weight", "lm_head.weight")


class InitFromError(ValueError):
    """train.init_from names weights this model cannot start from; the message says which and why."""


@dataclass
class InitSource:
    """Where the weights come from."""

    given: str
    """train.init_from as written."""
    model_dir: Path
    """The checkpoint directory (absolute): config.json + model.safetensors."""
    run_dir: Path | None
    """The run directory when `given` named one (model_dir = run_dir / model), else None."""

    @property
    def weights(self) -> Path:
        return self.model_dir / WEIGHTS_FILE

    def config(self) -> dict:
        return json.loads((self.model_dir / CONFIG_FILE).read_text())

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Tensor name -> shape, read from the safetensors header (no tensor is loaded)."""
        from safetensors import safe_open

        with safe_open(str(self.weights), framework="pt") as f:
            return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}

    def sha256(self) -> str:
        digest = hashlib.sha256()
        with self.weights.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                digest.update(chunk)
        return digest.hexdigest()


def find_source(path: str | os.PathLike) -> InitSource:
    """The checkpoint directory of a run directory (`<run>/model`) or of a checkpoint directory itself."""
    given = str(path)
    where = Path(path).expanduser().absolute()
    try:
        model_dir = resolve_model_dir(where)
    except FileNotFoundError as err:
        if (where / "result.json").is_file():
            raise FileNotFoundError(f"train.init_from={given}: a run directory without model/{CONFIG_FILE}: a run "
                                    "writes it when it completes (is it still training, or did it fail? slm-status "
                                    "shows it)") from None
        raise FileNotFoundError(f"train.init_from={err}") from None
    if not (model_dir / WEIGHTS_FILE).is_file():
        raise FileNotFoundError(f"train.init_from={given}: {model_dir} has {CONFIG_FILE} but no {WEIGHTS_FILE}")
    return InitSource(given, model_dir, where if model_dir != where else None)


def check_tokenizer(source: InitSource, tokenizer) -> None:
    """Refuse a source trained with other token ids than `tokenizer` (skipped when the source directory holds
    no slm tokenizer, e.g. an imported checkpoint). A mask token is not part of the comparison."""
    from slm.data.tokenizers import META_FILE, load_tokenizer

    if not (source.model_dir / META_FILE).is_file():
        return
    theirs = load_tokenizer(source.model_dir)
    if theirs.fingerprint() != tokenizer.fingerprint():
        def describe(tok) -> str:
            return f"{tok.name}, {tok.vocab_size - (tok.mask_id is not None)} ids"

        raise InitFromError(f"train.init_from={source.given}: the source was trained with another tokenizer "
                            f"({describe(theirs)}) than this run ({describe(tokenizer)}); the same ids must mean the "
                            "same tokens: use the source's tokenizer settings")


def _tie_groups(model: nn.Module) -> list[list[str]]:
    """State-dict names grouped by the tensor they share (tied weights: one group of two names)."""
    groups: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), []).append(name)
    return list(groups.values())


def check_shapes(source: InitSource, model: nn.Module, mask_token_id: int | None = None) -> None:
    """Raise InitFromError (one line: which tensor, both shapes) unless every tensor of the source has a
    place of the same shape in `model` (built on any device, "meta" included) and fills all of it."""
    theirs = source.shapes()
    ours = {name: tuple(t.shape) for name, t in model.state_dict(keep_vars=True).items()}
    head = f"train.init_from={source.given}:"
    extra = sorted(set(theirs) - set(ours))
    if extra:
        raise InitFromError(f"{head} the source has tensor {extra[0]} {list(theirs[extra[0]])}, which this model "
                            f"lacks ({len(extra)} such tensors): a different architecture (layers, Canon, MLP kind)")
    for name in sorted(theirs):
        if theirs[name] != ours[name]:
            hint = ""
            if (name in EMBEDDING_TENSORS and len(ours[name]) == 2 and ours[name][0] == theirs[name][0] + 1
                    and mask_token_id == theirs[name][0]):
                hint = (": this run's mask token adds a row to the vocabulary; train the source with "
                        "tokenizer.mask=true, or pad the vocabulary (tokenizer.pad_vocab_multiple) so the mask "
                        "token takes a spare row")
            raise InitFromError(f"{head} tensor {name} is {list(theirs[name])} in the source and {list(ours[name])} "
                                f"in this model{hint}")
    for group in _tie_groups(model):
        present = [name for name in group if name in theirs]
        if not present:
            raise InitFromError(f"{head} this model's tensor {group[0]} {list(ours[group[0]])} is not in the source: "
                                "a different architecture (layers, Canon, untied head)")
        if len(present) > 1:
            raise InitFromError(f"{head} the source has separate {present[0]} and {present[1]}, which this model "
                                "ties (model.tie_embeddings)")


def load_weights(model: nn.Module, source: InitSource, mask_token_id: int | None = None) -> None:
    """Check, then copy the source's tensors into `model` (tied tensors are filled through either name)."""
    from safetensors.torch import load_file

    check_shapes(source, model, mask_token_id)
    tensors = load_file(str(source.weights))
    params = model.state_dict(keep_vars=True)
    with torch.no_grad():
        for name, value in tensors.items():
            params[name].copy_(value)
