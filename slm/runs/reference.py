"""A records run's data module, with the preference losses' reference (train.preference.reference) made ready.

The reference is the model the run starts from (train.init_from; a resumed run reads it again from there). `cached`:
its summed log-probs of every training and validation pair are computed once per (records file, rows, tokenizer, start
token, reference weights) and kept in `<data cache>/reference/` (slm.objectives.reference_cache), then attached to
the records, so each batch carries them (`ref`) and no second model sits in memory; `frozen`: a copy of the starting
weights, frozen, scores each batch beside the policy.
"""

from __future__ import annotations

import hashlib
import json

import torch

from slm.data.cache import cache_root
from slm.data.records import EncodedRecords
from slm.data.records_module import RecordsDataModule
from slm.model import build_model
from slm.objectives.reference_cache import cache_key, cached_logprobs
from slm.training.distributed import is_rank_zero
from slm.training.init_from import InitSource, load_weights

REFERENCE_BATCH = 16
"""Rows per forward when the reference's log-probs are computed."""


def reference_model(job) -> torch.nn.Module:
    """The reference: the run's model with the starting weights (job.reference), in eval mode, frozen."""
    model = build_model(job.model_cfg)
    load_weights(model, job.reference, job.model_cfg.embedding.mask_token_id)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def _reference_files(source: InitSource) -> list:
    """The files that hold the reference's config and weights (the cache key hashes them)."""
    return [source.checkpoint] if source.checkpoint is not None else [source.model_dir / "config.json", source.weights]


def attach_cached(job, split: EncodedRecords, label: str) -> None:
    """Set split.ref from the cache (computing and caching it on a miss; rank 0 announces it)."""
    tokenizer = job.data.tokenizer
    rows = hashlib.sha256(json.dumps(split.lines.tolist()).encode()).hexdigest()
    key = cache_key(split.path, tokenizer.fingerprint(), _reference_files(job.reference), tokenizer.eot_id,
                    rows=rows)
    prompts = split.prompts + split.prompts
    completions = [c[0] for c in split.completions] + [c[1] for c in split.completions]
    def load():
        if is_rank_zero():
            print(f"slm-train: reference log-probs of the {label} pairs ({len(split):,}) from "
                  f"{job.reference.given}, cached", flush=True)
        return reference_model(job)

    out = cached_logprobs(key, prompts, completions, cache_dir=cache_root(job.data.config.cache_dir) / "reference",
                          pad_id=_pad_id(job), load=load, batch_size=REFERENCE_BATCH,
                          what=f"{split.path} ({label}, {len(split)} pairs)")
    split.ref = torch.stack([out.chosen, out.rejected], dim=1)  # (n, 2)


def _pad_id(job) -> int:
    eot = job.data.tokenizer.eot_id
    return eot if eot is not None else 0


def records_datamodule(job, module) -> RecordsDataModule:
    """The data module of a records run, the reference made ready first where the preference losses need one."""
    if job.reference is not None:
        if job.train_cfg.preference.reference == "cached":
            attach_cached(job, job.records.train, "training")
            attach_cached(job, job.records.valid, "validation")
        else:
            module.objective.reference = reference_model(job)
    cfg = job.train_cfg
    return RecordsDataModule(job.records, cfg.batch_size, job.model_cfg.context_length, cfg.seed, _pad_id(job),
                             micro_batch_size=cfg.micro_batch())
