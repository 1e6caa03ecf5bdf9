"""`SLMDataModule`: Lightning data for a `PreparedData`.

Training batches are a pure function of (seed, batch index) (see `slm.data.mix`), so the loader needs no
state: it starts at the batch the trainer is at (global_step, restored by Lightning before it asks for the
loader) and a resumed run continues exactly. Tokens consumed per source are a function of the same index.
Batches are (batch_size, context_length + 1) int64; the objective shifts.

Data parallel and accumulation: the batch of step s is the same whatever the device count. Rank r of a job of
W processes trains on rows [r * batch_size / W, (r + 1) * batch_size / W) of it, in micro-batches of
micro_batch_size consecutive rows (`TrainBatches`), so the global batch, the data order and a resume do not
depend on W or on the micro-batch size.
"""

from __future__ import annotations

import itertools
from typing import Iterator

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from slm.data.errors import DataError
from slm.data.mix import TrainSampler, first_windows, validation_batches
from slm.data.prepare import SPLIT_LABELS, PreparedData


class TrainBatches(IterableDataset):
    """Micro-batches of steps start, start + 1, ... forever: for each step, this rank's rows of the step's batch
    (`rank` of `world` equal shares) in slices of `micro` rows. With several workers, worker w yields every
    w-th micro-batch (the DataLoader reads workers round-robin, so the order is kept)."""

    def __init__(self, sampler: TrainSampler, start: int, rank: int = 0, world: int = 1, micro: int | None = None):
        share = sampler.B // world
        self.sampler, self.start = sampler, start
        self.first, self.micro = rank * share, micro or share
        self.per_step = share // self.micro

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = get_worker_info()
        item, stride = (0, 1) if info is None else (info.id, info.num_workers)
        for i in itertools.count(item, stride):
            step, j = divmod(i, self.per_step)
            lo = self.first + j * self.micro
            yield torch.from_numpy(self.sampler.rows(self.start + step, lo, lo + self.micro))


class FixedBatches(Dataset):
    """A list of ready batches as a map-style dataset."""

    def __init__(self, batches: list[torch.Tensor]):
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.batches[i]


def _own_generator() -> torch.Generator:
    """A generator for a DataLoader's own seed draw: without one, every iterator a loader starts (each
    validation, the training loader after a resume) draws from torch's global generator, which dropout
    also uses, so a resumed run's dropout masks would differ from an uninterrupted run's."""
    return torch.Generator().manual_seed(0)


class SLMDataModule(pl.LightningDataModule):
    """Training batches from the mixed training shards, fixed validation batches from the validation shards.

    num_workers defaults to 0 (a batch is a few memmap slices, ~50 us); pin_memory is on only with CUDA.
    """

    def __init__(self, prepared: PreparedData, batch_size: int, context_length: int, seed: int, val_batches: int,
                 num_workers: int = 0, sampling: str = "tiled", eval_windows: int | None = None,
                 micro_batch_size: int | None = None):
        super().__init__()
        for name, value, low in (("batch_size", batch_size, 1), ("context_length", context_length, 1),
                                 ("val_batches", val_batches, 0), ("num_workers", num_workers, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise DataError(f"{name}={value!r} is invalid: must be an integer >= {low}")
        self.prepared = prepared
        self.batch_size, self.context_length, self.seed = batch_size, context_length, seed
        self.val_batches, self.num_workers, self.eval_windows = val_batches, num_workers, eval_windows
        self.micro_batch_size = micro_batch_size  # rows per forward/backward on one device (None: its whole share)
        if eval_windows is not None:  # every source's validation and test splits hold their first windows
            prepared.check_first_windows(eval_windows, context_length)
        need = context_length + 1
        for s in prepared.sources:
            for split, shard, needed in (("train", s.train, True), ("valid", s.valid, val_batches > 0)):
                if needed and shard.n_tokens < need:
                    origin = f"{s.origin(split)}; " if s.origin(split) else ""
                    raise DataError(f"source {s.name!r} has {shard.n_tokens} {SPLIT_LABELS[split]} tokens; it needs at "
                                    f"least context_length + 1 = {need} ({origin}use a shorter context or more data)")
        self.names = [s.name for s in prepared.sources]
        self.weights = [s.weight for s in prepared.sources]
        self.sampler = TrainSampler.of(prepared.sources, batch_size, context_length, seed, sampling)
        self._val: list[torch.Tensor] | None = None
        self._restored: dict | None = None

    # ---------------------------------------------------------------- position in the stream
    def batches_done(self) -> int:
        """Training batches (whole, all devices) consumed by completed optimizer steps (trainer attached), else the
        restored count."""
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            return trainer.global_step
        return int((self._restored or {}).get("batches", 0))

    def tokens_per_source(self, batches: int | None = None) -> dict[str, int]:
        """Training tokens (context_length per sample) drawn from each source in the first `batches`
        batches (default: `batches_done()`)."""
        done = self.batches_done() if batches is None else batches
        counts = self.sampler.mixer.counts_before(done * self.batch_size)
        return {name: int(c) * self.context_length for name, c in zip(self.names, counts)}

    def state_dict(self) -> dict:
        return {"batches": self.batches_done(), "tokens_per_source": self.tokens_per_source()}

    def load_state_dict(self, state_dict: dict) -> None:
        self._restored = dict(state_dict)

    # ---------------------------------------------------------------- loaders
    def train_dataloader(self) -> DataLoader:
        """Endless micro-batches of this rank from `batches_done()` on; Lightning's max_steps ends training."""
        trainer = getattr(self, "trainer", None)
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        batches = TrainBatches(self.sampler, self.batches_done(), rank, world, self.micro_batch_size)
        return DataLoader(batches, batch_size=None,
                          num_workers=self.num_workers, pin_memory=torch.cuda.is_available(),
                          generator=_own_generator(), persistent_workers=self.num_workers > 0)

    def validation_batches(self) -> list[torch.Tensor]:
        """The fixed validation batches (computed once): the same for every call, seed and run. With
        eval_windows, the first eval_windows windows at stride 1; else val_batches batches spread evenly."""
        if self._val is None:
            tokens = [s.valid.tokens() for s in self.prepared.sources]
            if self.eval_windows is not None:
                batches = first_windows(tokens, self.weights, self.batch_size, self.context_length, self.eval_windows)
            else:
                batches = validation_batches(tokens, self.weights, self.batch_size, self.context_length,
                                             self.val_batches)
            self._val = [torch.from_numpy(b) for b in batches]
        return self._val

    def test_batches(self) -> list[torch.Tensor]:
        """The first eval_windows windows of every source's test split at stride 1 (needs eval_windows)."""
        if self.eval_windows is None:
            raise DataError("test batches need train.validation.windows (the first N windows of the test split)")
        tokens = [s.test.tokens() for s in self.prepared.sources]  # present and long enough: checked in __init__
        batches = first_windows(tokens, self.weights, self.batch_size, self.context_length, self.eval_windows)
        return [torch.from_numpy(b) for b in batches]

    def test_dataloader(self) -> DataLoader:
        return DataLoader(FixedBatches(self.test_batches()), batch_size=None, shuffle=False,
                          pin_memory=torch.cuda.is_available(), generator=_own_generator())

    def val_dataloader(self) -> DataLoader:
        """The validation batches in order, wrapped in a DataLoader (Lightning reads a bare list as a list of loaders)."""
        return DataLoader(FixedBatches(self.validation_batches()), batch_size=None, shuffle=False,
                          pin_memory=torch.cuda.is_available(), generator=_own_generator())
