"""`RecordsDataModule`: Lightning data for a records run (data.records: SFT or preference records, slm.data.records).

As with the token windows (slm.data.datamodule), step s's batch is a pure function of (seed, s) (`RecordOrder`), so
the loader keeps no state and a resumed run continues exactly; rank r of W trains on its share of each step's
records, in micro-batches of consecutive rows. Validation walks the held-out records in order, batch_size at a time.
"""

from __future__ import annotations

import itertools
from typing import Iterator

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, IterableDataset

from slm.data.datamodule import FixedBatches, _own_generator
from slm.data.records import PreparedRecords, RecordOrder


class RecordBatches(IterableDataset):
    """Micro-batches of steps start, start + 1, ... forever: this rank's records of each step, `micro` at a time."""

    def __init__(self, records: PreparedRecords, order: RecordOrder, start: int, pad_id: int, context_length: int,
                 rank: int = 0, world: int = 1, micro: int | None = None):
        share = order.B // world
        self.records, self.order, self.start = records, order, start
        self.pad_id, self.context_length = pad_id, context_length
        self.first, self.micro = rank * share, micro or share
        self.per_step = share // self.micro

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for i in itertools.count():
            step, j = divmod(i, self.per_step)
            lo = self.first + j * self.micro
            rows = self.order.rows(self.start + step, lo, lo + self.micro)
            yield self.records.train.batch(rows, self.pad_id, self.context_length)


class RecordsDataModule(pl.LightningDataModule):
    """Training batches of records in a seeded order, fixed validation batches of the held-out records."""

    def __init__(self, records: PreparedRecords, batch_size: int, context_length: int, seed: int, pad_id: int,
                 micro_batch_size: int | None = None):
        super().__init__()
        self.records, self.batch_size, self.context_length = records, batch_size, context_length
        self.seed, self.pad_id, self.micro_batch_size = seed, pad_id, micro_batch_size
        self.order = RecordOrder(len(records.train), batch_size, seed)
        self._restored: dict | None = None
        self._val: list[dict] | None = None

    def batches_done(self) -> int:
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            return trainer.global_step
        return int((self._restored or {}).get("batches", 0))

    def tokens_per_source(self, batches: int | None = None) -> dict[str, int]:
        """Records trained on so far, as {"records_trained": n} (the record's data section)."""
        done = self.batches_done() if batches is None else batches
        return {"records_trained": done * self.batch_size}

    def state_dict(self) -> dict:
        return {"batches": self.batches_done()}

    def load_state_dict(self, state_dict: dict) -> None:
        self._restored = dict(state_dict)

    def train_dataloader(self) -> DataLoader:
        trainer = getattr(self, "trainer", None)
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        batches = RecordBatches(self.records, self.order, self.batches_done(), self.pad_id, self.context_length,
                                rank, world, self.micro_batch_size)
        return DataLoader(batches, batch_size=None, pin_memory=torch.cuda.is_available(), generator=_own_generator())

    def validation_batches(self) -> list[dict]:
        """The held-out records in file order, batch_size per batch (computed once)."""
        if self._val is None:
            n = len(self.records.valid)
            self._val = [self.records.valid.batch(range(lo, min(lo + self.batch_size, n)), self.pad_id,
                                                  self.context_length) for lo in range(0, n, self.batch_size)]
        return self._val

    def val_dataloader(self) -> DataLoader:
        return DataLoader(FixedBatches(self.validation_batches()), batch_size=None, shuffle=False,
                          pin_memory=torch.cuda.is_available(), generator=_own_generator())
