"""`train.init_from`: start a run from another run's weights (e.g. an AR model converted to masked diffusion).

Weights only: the optimizer, the schedule and the data position start afresh. The source is a run directory (its
`model/`), an slm checkpoint directory (`config.json` + `model.safetensors`), or a training checkpoint file slm-
train wrote (`<run>/checkpoints/step-<N>.ckpt`, kept by train.checkpoint.keep_every / keep_steps, or last.ckpt): its
records are CRC-checked and it is read weights-only (torch's restricted unpickler: no code in the file runs), the
model's tensors taken from its state dict and its config and tokenizer fingerprint from what the run stored beside
them (`slm_meta`). Every tensor is checked against the model being built before anything is written: the same names
and the same shapes, and tied weights tied in both. Config fields that change no shape may differ (attention.causal
-> bidirectional, attention.block, embedding.mask_token_id, block.dropout, ...). The source's tokenizer, when its
directory has one, must give the same ids as the run's (a mask token added for diffusion is allowed: it is a new
last id).

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
from slm.settings import differing_fields, field_at

EMBEDDING_TENSORS = ("tok_emb.weight", "lm_head.weight")


class InitFromError(ValueError):
    """train.init_from names weights this model cannot start from; the message says which and why."""


CHECKPOINT_SUFFIX = ".ckpt"
MODEL_PREFIX = "model."
"""LanguageModelModule's state-dict prefix of the network's tensors in a training checkpoint."""


@dataclass
class InitSource:
    """Where the weights come from."""

    given: str
    """train.init_from as written."""
    model_dir: Path | None
    """The checkpoint directory (absolute): config.json + model.safetensors; None for a training checkpoint file."""
    run_dir: Path | None
    """The run directory when `given` named one (model_dir = run_dir / model), or the run that wrote the training
    checkpoint file (<run>/checkpoints/<file>, when it has a result.json); else None."""
    checkpoint: Path | None = None
    """The training checkpoint file (absolute) when `given` named one, else None."""

    @property
    def weights(self) -> Path:
        return self.checkpoint if self.checkpoint is not None else self.model_dir / WEIGHTS_FILE

    def _checkpoint(self) -> dict:
        return torch.load(self.checkpoint, map_location="cpu", weights_only=True, mmap=True)

    def step(self) -> int | None:
        """The optimizer step of a training checkpoint file (None for a model directory)."""
        return self._checkpoint()["global_step"] if self.checkpoint is not None else None

    def meta(self) -> dict:
        """What the run stored beside the weights of a training checkpoint file (slm_meta: model_config,
        tokenizer); {} for a model directory or a checkpoint written before slm stored it."""
        return dict(self._checkpoint().get("slm_meta") or {}) if self.checkpoint is not None else {}

    def config(self) -> dict:
        if self.checkpoint is None:
            return json.loads((self.model_dir / CONFIG_FILE).read_text())
        return dict(self.meta().get("model_config") or {})  # {}: a checkpoint written before slm stored it

    def tensors(self) -> dict[str, torch.Tensor]:
        """The model's tensors by state-dict name, each shared tensor once (tied weights: the first name)."""
        if self.checkpoint is None:
            from safetensors.torch import load_file

            return load_file(str(self.weights))
        seen, out = set(), {}
        for name, tensor in self._checkpoint()["state_dict"].items():
            if not name.startswith(MODEL_PREFIX):
                continue
            key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
                   tuple(tensor.stride()))
            if key in seen:  # the same tensor under a second name (a tied head)
                continue
            seen.add(key)
            out[name.removeprefix(MODEL_PREFIX)] = tensor
        return out

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Tensor name -> shape, read from the safetensors header (no tensor is loaded) or the checkpoint's state
        dict (memory-mapped)."""
        if self.checkpoint is not None:
            return {name: tuple(t.shape) for name, t in self.tensors().items()}
        from safetensors import safe_open

        with safe_open(str(self.weights), framework="pt") as f:
            return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}

    def sha256(self) -> str:
        digest = hashlib.sha256()
        with self.weights.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                digest.update(chunk)
        return digest.hexdigest()


def _checkpoint_source(given: str, where: Path) -> InitSource:
    """A training checkpoint file slm-train wrote, checked (CRC, weights-only load, a state dict of a model)."""
    from slm.training.checkpoints import inspect_checkpoint

    _, problem = inspect_checkpoint(where)
    if problem is not None:
        raise InitFromError(f"train.init_from={given}: {problem}")
    run_dir = where.parent.parent if (where.parent.parent / "result.json").is_file() else None
    source = InitSource(given, None, run_dir, where)
    if not source.tensors():
        raise InitFromError(f"train.init_from={given}: the checkpoint holds no model tensors ({MODEL_PREFIX}*): not "
                            "a checkpoint slm-train wrote")
    return source


def find_source(path: str | os.PathLike) -> InitSource:
    """The checkpoint directory of a run directory (`<run>/model`) or of a checkpoint directory itself, or a
    training checkpoint file (`<run>/checkpoints/step-<N>.ckpt`)."""
    given = str(path)
    where = Path(path).expanduser().absolute()
    if where.suffix == CHECKPOINT_SUFFIX and where.is_file():
        return _checkpoint_source(given, where)
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


def tokenizer_meta(tokenizer) -> dict:
    """What a training checkpoint stores of its run's tokenizer (slm_meta.tokenizer), for check_tokenizer."""
    return {"name": tokenizer.name, "ids": tokenizer.vocab_size - (tokenizer.mask_id is not None),
            "fingerprint": tokenizer.fingerprint()}


def check_tokenizer(source: InitSource, tokenizer) -> None:
    """Refuse a source trained with other token ids than `tokenizer` (skipped when the source holds no slm
    tokenizer, e.g. an imported checkpoint). A mask token is not part of the comparison."""
    from slm.data.tokenizers import META_FILE, load_tokenizer

    ours = tokenizer_meta(tokenizer)
    theirs = source.meta().get("tokenizer")
    if theirs is None:
        directory = source.model_dir or (source.run_dir / "model" if source.run_dir is not None else None)
        if directory is None or not (directory / META_FILE).is_file():
            return
        theirs = tokenizer_meta(load_tokenizer(directory))
    if theirs.get("fingerprint") != ours["fingerprint"]:
        def describe(meta: dict) -> str:
            return f"{meta.get('name')}, {meta.get('ids')} ids"

        raise InitFromError(f"train.init_from={source.given}: the source was trained with another tokenizer "
                            f"({describe(theirs)}) than this run ({describe(ours)}); the same ids must mean the "
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
                                "ties (model.embedding.tie)")


STAGE_MAY_CHANGE = ("block.dropout", "context_length")
"""Model fields a post-training stage may set apart from its parent's (train.objective sft or preference): dropout,
and the context (the positions are not weights under RoPE; a learned position table keeps its shape check)."""


def check_same_network(source: InitSource, model_cfg) -> None:
    """Refuse (one line, the first field that differs, both values) a post-training stage whose model is not its
    parent's: every field of the stored model config equal, but STAGE_MAY_CHANGE. Skipped where the source stored no
    config (an old training checkpoint)."""
    from slm.renames import RenameError, upgrade_model_fields

    theirs = source.config()
    if not theirs:
        return
    try:
        theirs = upgrade_model_fields(theirs)
    except RenameError:
        return
    ours = model_cfg.to_dict()
    for name in differing_fields(theirs, ours):
        if name not in STAGE_MAY_CHANGE:
            raise InitFromError(f"model.{name}={field_at(ours, name)!r} differs from train.init_from's model, which has "
                                f"{field_at(theirs, name)!r}; a post-training stage trains its parent's model: give the "
                                f"parent's model settings (parent: {source.given})")


def load_weights(model: nn.Module, source: InitSource, mask_token_id: int | None = None) -> None:
    """Check, then copy the source's tensors into `model` (tied tensors are filled through either name)."""
    check_shapes(source, model, mask_token_id)
    tensors = source.tensors()
    params = model.state_dict(keep_vars=True)
    with torch.no_grad():
        for name, value in tensors.items():
            params[name].copy_(value)
