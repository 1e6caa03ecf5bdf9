"""A job's config checked and its data prepared before anything is written: `prepare` makes a PreparedJob.

prepare checks the settings (loggers, accelerator, the eval suite, the objective against the model, the length and
the decay branches it can have, the memory a step needs, train.init_from's source, train.block_curriculum's spec, data.records
and the objective that trains on them) and
prepares the data and the model's config and counts; bad input raises one line here, before the run directory holds
anything of the run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

import slm.data
from slm.data import PreparedData
from slm.data.records import PreparedRecords, prepare_records
from slm.eval import run as eval_run
from slm.model import ModelConfig, build_model, config_from_spec, count, weights
from slm.model.counting import Counts
from slm.objectives import OBJECTIVES, tokenizer_node_for
from slm.runs.branches import Branch, plan
from slm.runs.layout import CHECKPOINT
from slm.settings import nested, require
from slm.training.checkpoints import PREVIOUS
from slm.training.config import TrainConfig, TrainConfigError
from slm.training.init_from import InitSource, check_same_network, check_shapes, check_tokenizer, find_source


@dataclass
class PreparedJob:
    """What `prepare` makes of a job's config, before anything is written; the later steps read it."""

    cfg: dict
    """The resolved config (model, tokenizer, data, train, eval, ...), as recorded."""
    run_dir: Path
    train_cfg: TrainConfig
    data: PreparedData
    """The tokenizer and the cached token shards."""
    model_cfg: ModelConfig
    """The model to train: the spec with the tokenizer's vocabulary (and mask / document-end ids)."""
    counts: Counts
    max_steps: int
    init: InitSource | None
    """train.init_from's weights, checked against the model; None for random weights and for a resumed run."""
    branches: list[Branch] = field(default_factory=list)
    """train.schedule.decay_branches: the runs that branch off this one's stable phase (slm.runs.branches)."""
    began: float = field(default_factory=time.monotonic)
    """When this session's work on the job began (the data prepared): the record's training.session_job_seconds."""
    records: PreparedRecords | None = None
    """data.records, tokenized (train.objective sft or preference); None for a run on token windows."""
    reference: InitSource | None = None
    """The preference losses' reference model (train.init_from's weights, resumed runs included); None without."""

    @property
    def tokens_per_step(self) -> int:
        """Tokens a step trains on: batch x context for windows; batch x the records' mean tokens (unpadded, a pair's
        two sequences) for records."""
        if self.records is not None:
            return round(self.train_cfg.batch_size * self.records.train.mean_tokens())
        return self.train_cfg.batch_size * self.model_cfg.context_length


def prepare(cfg: dict, run_dir: Path) -> PreparedJob:
    """Check the config (settings, loggers, accelerator, eval suite, objective against model, length, memory,
    init source) and prepare the data; raises one line for bad input, before anything is written."""
    train_cfg = TrainConfig.from_node(cfg["train"])
    train_cfg.logging.check_installed()  # a logger whose package is missing (wandb): one line, before the data
    train_cfg.parallel.check_machine(train_cfg.precision)  # an accelerator or precision this machine cannot run
    eval_run.preflight(cfg.get("eval"))  # hub tasks while offline, unknown tasks, bad fields: fail before training
    data = slm.data.prepare(cfg["data"], tokenizer_node_for(train_cfg.objective, cfg["tokenizer"]))
    ids = {"embedding.mask_token_id": data.tokenizer.mask_id} if data.tokenizer.mask_id is not None else {}
    if data.config.pack_documents:  # attention within documents: they end at the end-of-text id
        ids["embedding.document_end_id"] = data.tokenizer.eot_id
    spec = nested({**cfg["model"], "vocab_size": data.vocab_size, **ids})
    model_cfg = config_from_spec(spec)
    OBJECTIVES.get(train_cfg.objective)().check(model_cfg)  # e.g. causal_lm with a bidirectional model
    if train_cfg.block_curriculum is not None:
        model_cfg = config_from_spec(_curriculum_spec(spec, train_cfg.block_curriculum, model_cfg.context_length))
    eval_run.check_model(cfg.get("eval"), model_cfg)  # e.g. a diffusion sampler's cache the saved model cannot use
    if train_cfg.validation.windows is not None:
        data.check_first_windows(train_cfg.validation.windows, model_cfg.context_length)
    counts = count(model_cfg)
    records = _records(train_cfg, data, model_cfg)
    max_steps = train_cfg.max_steps(model_cfg.context_length)
    train_cfg.check_length(max_steps)
    branches = plan(cfg, run_dir, train_cfg, model_cfg.context_length)  # checked here, before the memory
    _check_memory(train_cfg, counts.params_total, model_cfg)
    init = None
    resuming = any((run_dir / CHECKPOINT.parent / name).exists() for name in (CHECKPOINT.name, PREVIOUS))
    if train_cfg.init_from is not None and not resuming:  # a resumed run has its weights
        init = _init_source(train_cfg.init_from, model_cfg, data.tokenizer)
    if records is not None and train_cfg.init_from is not None:  # a post-training stage trains its parent's model
        check_same_network(init or find_source(train_cfg.init_from), model_cfg)
    reference = None
    if records is not None and records.kind == "preference" and train_cfg.preference.needs_reference:
        reference = init or _init_source(train_cfg.init_from, model_cfg, data.tokenizer)
    return PreparedJob(cfg, run_dir, train_cfg, data, model_cfg, counts, max_steps, init, branches, records=records,
                       reference=reference)


TRAIN_BYTES_PER_PARAM = 16
"""The least a parameter costs in training: float32 weight, gradient and AdamW's two moments (activations on top)."""


def _check_memory(train_cfg, params: int, model_cfg=None) -> None:
    """Refuse, before anything is allocated, a run that cannot fit in the memory free on the device it would train
    on: a model whose weights, gradients and optimizer state alone exceed it (a typo such as d_model=65536 would
    otherwise allocate until the kernel kills the job), or a batch whose activations alone do (batch_size=10**7
    would otherwise tokenize, sample and allocate for minutes first); see activation_bytes."""
    gpu = train_cfg.parallel.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    free = weights.available_memory(device)
    need = params * TRAIN_BYTES_PER_PARAM
    if free is not None and need > free:
        raise TrainConfigError(f"the model has {params:,} parameters: training needs at least {need / 2**30:,.1f} GiB "
                               f"(float32 weights, gradients and AdamW's two moments) and the {device} has "
                               f"{free / 2**30:,.1f} GiB available; make the model smaller")
    if free is None or model_cfg is None:
        return
    rows, context = train_cfg.micro_batch(), model_cfg.context_length
    activations = activation_bytes(model_cfg, rows)
    if need + activations > free:
        name, value = (("train.parallel.micro_batch_size", train_cfg.parallel.micro_batch_size) if train_cfg.parallel.micro_batch_size
                       else ("train.batch_size", train_cfg.batch_size))
        per_device = f" per device (of {train_cfg.world_size})" if train_cfg.world_size > 1 else ""
        raise TrainConfigError(
            f"{name}={value} is too large for this {device}: one forward/backward of {rows:,} x {context:,} tokens"
            f"{per_device} holds at least {_size(activations)} of activations (each layer's input kept "
            f"for the backward pass), beside {_size(need)} of weights, gradients and optimizer state, and "
            f"the {device} has {_size(free)} available; lower {name}"
            + ("" if train_cfg.parallel.micro_batch_size else " or set train.parallel.micro_batch_size (gradients accumulated over "
               "smaller micro-batches)"))


def _size(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


ACTIVATION_BYTES_PER_TOKEN = 16
"""A token's input and target ids (int64 each), per sequence position of a micro-batch."""


def activation_bytes(model_cfg, rows: int) -> int:
    """A lower bound on the memory one forward/backward of `rows` sequences holds: each layer's d_model-wide input
    at 2 bytes an element (kept for the backward pass in any precision) and the ids; the attention, MLP and
    logits memory is on top. A bound, not an estimate: it refuses only batches that cannot fit."""
    tokens = rows * model_cfg.context_length
    layers = int(getattr(model_cfg, "n_layers", 0) or 0)
    width = int(getattr(model_cfg, "d_model", 0) or 0)
    return tokens * (ACTIVATION_BYTES_PER_TOKEN + 2 * layers * width)


def _curriculum_spec(spec: dict, curriculum, context: int) -> dict:
    """The model spec under a block curriculum: attention.block is the curriculum's (its decay block, which the
    saved model keeps, or none); a model that cannot attend block-causally is refused before training."""
    given = (spec.get("attention") or {}).get("block")
    if given is not None:
        raise TrainConfigError(f"model.attention.block={given} is set with train.block_curriculum, which chooses "
                               "the block of every step and the saved model's (its decay_block): leave "
                               "model.attention.block null")
    curriculum.check_context(context)
    smallest = min([*curriculum.warmup_blocks(context), curriculum.decay_block or context])
    if smallest < context:  # ModelConfig's own checks of block-causal attention (causal, Canon)
        try:
            config_from_spec(nested({**spec, "attention.block": smallest}))
        except ValueError as err:
            raise TrainConfigError(f"train.block_curriculum trains with attention blocks down to {smallest}: "
                                   f"{err}") from None
    return nested({**spec, "attention.block": curriculum.decay_block})


def _records(train_cfg, data: PreparedData, model_cfg) -> PreparedRecords | None:
    """data.records read and tokenized for an objective that trains on records (sft, preference), and the run's
    length in records (train.length.epochs: passes over them); one line where the objective and the data disagree,
    or where a preference loss has no reference to start from."""
    kind = OBJECTIVES.get(train_cfg.objective).records
    settings = data.config.records
    if kind is None:
        if settings is not None:
            raise TrainConfigError.invalid("data.records", settings.train, f"train.objective={train_cfg.objective} "
                                           "trains on token windows: use train.objective=sft or preference, or "
                                           "data.records=null")
        if train_cfg.length.epochs is not None and train_cfg.length.windows_per_epoch is None:
            raise TrainConfigError.invalid("train.length.windows_per_epoch", None, "set it with train.length.epochs "
                                           "(training windows per epoch); only a records run counts its records")
        return None
    length, preference = train_cfg.length, train_cfg.preference
    require((settings is not None, "data.records", None,
             f"train.objective={train_cfg.objective} trains on records: set data.records.train to a JSONL file"),
            (length.steps is not None or length.epochs is not None, "train.length.steps", None,
             "a records run is measured in train.length.steps or train.length.epochs (passes over the records)"),
            (kind != "preference" or not preference.needs_reference or train_cfg.init_from is not None,
             "train.init_from", None, f"train.preference.loss={preference.loss} needs a reference model, the weights "
             "the run starts from: set train.init_from (e.g. the SFT run), or use reference-free losses (simpo, orpo, "
             "sft)"))
    records = prepare_records(settings, kind, data.tokenizer, model_cfg.context_length)
    if length.epochs is not None:
        require((length.windows_per_epoch in (None, len(records.train)), "train.length.windows_per_epoch",
                 length.windows_per_epoch, f"null in a records run (an epoch is its {len(records.train)} records)"))
        length.windows_per_epoch = len(records.train)
    return records


def _init_source(path: str, model_cfg, tokenizer):
    """train.init_from resolved and checked against the model about to be built (on the meta device: shapes
    only) and the run's tokenizer; raises with one line before anything is written."""
    source = find_source(path)
    check_tokenizer(source, tokenizer)
    with torch.device("meta"):
        check_shapes(source, build_model(model_cfg), model_cfg.embedding.mask_token_id)
    return source
