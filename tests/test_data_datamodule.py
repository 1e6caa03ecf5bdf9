"""SLMDataModule: batch shapes, stateless batches (step s is the same from 0 or from s), non-overlapping
windows per epoch, realised mix shares, fixed validation batches, tokens per source, exact resume under a
real Lightning Trainer, and the cost of a batch."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from slm.data import SLMDataModule, prepare
from slm.data.mix import Mixer, RandomStarts, TrainSampler, Windows, first_windows, floor_sum

WEIGHTS = {"a": 0.5, "b": 0.3, "c": 0.2}


@pytest.fixture(scope="module")
def shakespeare(tmp_path_factory):
    return prepare({"cache_dir": str(tmp_path_factory.mktemp("cache"))}, {"kind": "char"})


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    """Three sources whose text is one repeated letter each, so a row shows where it came from."""
    root = tmp_path_factory.mktemp("mix")
    sources = []
    for name, weight in WEIGHTS.items():
        for split, n in (("train", 3000 + 1000 * len(sources)), ("valid", 700)):
            (root / f"{name}.{split}.txt").write_text((name * 60 + "\n") * (n // 61))
        sources.append({"name": name, "kind": "local", "weight": weight, "paths": [str(root / f"{name}.train.txt")],
                        "valid_paths": [str(root / f"{name}.valid.txt")]})
    return prepare({"cache_dir": str(root / "cache"), "sources": sources}, {"kind": "char"})


def _dm(prepared, seed=0, step=None, batch_size=16, context_length=64, val_batches=4, **kw):
    dm = SLMDataModule(prepared, batch_size=batch_size, context_length=context_length, seed=seed, val_batches=val_batches, **kw)
    if step is not None:
        dm.trainer = SimpleNamespace(global_step=step, accumulate_grad_batches=1, global_rank=0, world_size=1)
    return dm


def _take(loader, n):
    it = iter(loader)
    return [next(it) for _ in range(n)]


def test_batch_shape_and_content(shakespeare):
    batch = next(iter(_dm(shakespeare, context_length=256).train_dataloader()))
    assert batch.shape == (16, 257) and batch.dtype == torch.int64
    assert 0 <= batch.min() and batch.max() < 65
    text = shakespeare.tokenizer.decode(batch[0].tolist())
    train = shakespeare.tokenizer.decode(shakespeare.sources[0].train.tokens().tolist())
    assert text in train


def test_batches_are_a_function_of_seed_and_step(shakespeare):
    from_zero = _take(_dm(shakespeare).train_dataloader(), 40)
    resumed = _take(_dm(shakespeare, step=25).train_dataloader(), 15)
    for a, b in zip(from_zero[25:], resumed):
        assert torch.equal(a, b)
    assert torch.equal(from_zero[3], _take(_dm(shakespeare).train_dataloader(), 4)[3])
    assert not torch.equal(from_zero[0], next(iter(_dm(shakespeare, seed=1).train_dataloader())))
    # random access far ahead, then back: the memo of sequential access does not leak
    dm = _dm(shakespeare)
    far = dm.sampler.batch(10_000)
    assert np.array_equal(dm.sampler.batch(3), from_zero[3].numpy())
    assert np.array_equal(_dm(shakespeare).sampler.batch(10_000), far)


def test_two_workers_keep_the_order(shakespeare):
    one = _take(_dm(shakespeare, step=7).train_dataloader(), 6)
    two = _take(_dm(shakespeare, step=7, num_workers=2).train_dataloader(), 6)
    assert all(torch.equal(a, b) for a, b in zip(one, two))


def test_windows_tile_each_epoch_without_overlap():
    L, n = 16, 1000
    w = Windows(n, L, seed=3, name="x")
    assert w.n_windows == (n - 1) // L - 1
    for epoch in range(3):
        starts = w.starts(np.arange(epoch * w.n_windows, (epoch + 1) * w.n_windows))
        assert len(set((starts - starts.min()) % L)) == 1  # one tiling per epoch
        assert len(set(starts.tolist())) == w.n_windows  # each window once
        assert starts.min() >= 0 and starts.max() + L + 1 <= n
    assert not np.array_equal(w.starts(np.arange(5)), w.starts(np.arange(5) + w.n_windows))


def test_random_starts_are_uniform_over_every_window_that_fits_and_stateless():
    """arXiv 2512.20877's sampler: starts uniform over the n - L windows of L + 1 tokens, with replacement,
    each a function of (seed, source, sample number) alone."""
    windows = RandomStarts(1000, 8, seed=0, name="a")
    starts = windows.starts(np.arange(200_000))
    counts = np.bincount(starts, minlength=992)
    assert starts.min() == 0 and starts.max() == 991 and len(counts) == 992
    assert abs(counts.std() / counts.mean() - (1 / counts.mean()) ** 0.5) < 0.01  # Poisson spread: uniform
    assert np.array_equal(windows.starts(np.arange(5, 9)), starts[5:9])
    assert not np.array_equal(RandomStarts(1000, 8, seed=1, name="a").starts(np.arange(50)), starts[:50])
    tokens = np.arange(1000)
    a = TrainSampler([tokens], ["a"], [1.0], 4, 8, 0, "random")
    batch = a.batch(3)
    assert (np.diff(batch, axis=1) == 1).all()  # whole windows
    assert np.array_equal(batch, TrainSampler([tokens], ["a"], [1.0], 4, 8, 0, "random").batch(3))


def test_first_windows_are_consecutive_at_stride_one():
    """arXiv 2512.20877's validation and test sets: windows starting at 0, 1, 2, ..., in batches."""
    tokens = np.arange(100)
    batches = first_windows([tokens], [1.0], 4, 8, 10)
    assert [len(b) for b in batches] == [4, 4, 2]
    rows = np.concatenate(batches)
    assert np.array_equal(rows[:, 0], np.arange(10)) and rows.shape == (10, 9)
    with pytest.raises(ValueError, match="93 windows"):
        first_windows([tokens], [1.0], 4, 8, 93)


def test_mixer_counts_match_enumeration():
    mixer = Mixer([0.5, 0.3, 0.2], seed=7)
    src = mixer.sources(0, 5000)
    for g in (0, 1, 17, 999, 5000):
        assert mixer.counts_before(g).tolist() == np.bincount(src[:g], minlength=3).tolist()
    assert mixer.counts_before(10**12).sum() == 10**12
    assert floor_sum(10, 7, 3, 2) == sum((3 * i + 2) // 7 for i in range(10))


def test_mix_shares_match_weights(mix):
    steps, dm = 200, _dm(mix, seed=5)
    letters = {mix.tokenizer.encode(name)[0]: name for name in WEIGHTS}
    counts = dict.fromkeys(WEIGHTS, 0)
    for batch in _take(dm.train_dataloader(), steps):
        for row in batch:
            counts[letters[int(row[0])] if int(row[0]) in letters else letters[int(row[1])]] += 1
    total = steps * 16
    for name, weight in WEIGHTS.items():
        assert abs(counts[name] / total - weight) < 0.03, counts
    dm.trainer = SimpleNamespace(global_step=steps, accumulate_grad_batches=1, global_rank=0, world_size=1)
    assert dm.tokens_per_source() == {name: c * 64 for name, c in counts.items()}
    assert sum(dm.tokens_per_source().values()) == total * 64


def test_tokens_per_source_follows_the_trainer_and_survives_resume(mix):
    dm = _dm(mix)
    assert dm.tokens_per_source() == dict.fromkeys(WEIGHTS, 0)
    # batch_size is the global batch: accumulation splits it into micro-batches, it does not add batches
    dm.trainer = SimpleNamespace(global_step=10, accumulate_grad_batches=2, global_rank=0, world_size=1)
    state = dm.state_dict()
    assert state["batches"] == 10 and sum(state["tokens_per_source"].values()) == 10 * 16 * 64
    fresh = _dm(mix)
    fresh.load_state_dict(state)
    assert fresh.tokens_per_source() == state["tokens_per_source"]
    assert torch.equal(next(iter(fresh.train_dataloader())), torch.from_numpy(dm.sampler.batch(10)))


def test_validation_batches_are_fixed(mix):
    val = list(_dm(mix, val_batches=5).val_dataloader())
    assert len(val) == 5 and all(b.shape == (16, 65) and b.dtype == torch.int64 for b in val)
    dm = _dm(mix, seed=123, val_batches=5)
    other = list(dm.val_dataloader())
    assert all(torch.equal(a, b) for a, b in zip(other, dm.val_dataloader()))
    assert all(torch.equal(a, b) for a, b in zip(val, other))
    letters = {mix.tokenizer.encode(name)[0]: name for name in WEIGHTS}
    rows = [letters.get(int(r[0]), letters.get(int(r[1]))) for b in val for r in b]
    assert {n: rows.count(n) for n in WEIGHTS} == {"a": 40, "b": 24, "c": 16}
    assert list(_dm(mix, val_batches=0).val_dataloader()) == []


def test_bad_arguments(shakespeare):
    from slm.data import DataError

    with pytest.raises(DataError, match=r"^batch_size=0 is invalid: must be an integer >= 1$"):
        _dm(shakespeare, batch_size=0)


def test_batch_cost_is_tiny(shakespeare, mix):
    for prepared in (shakespeare, mix):
        dm = _dm(prepared, context_length=256 if prepared is shakespeare else 64)
        it = iter(dm.train_dataloader())
        next(it)
        start = time.perf_counter()
        for _ in range(300):
            next(it)
        per_batch = (time.perf_counter() - start) / 300
        assert per_batch < 2e-3, f"{per_batch * 1e6:.0f} us per batch"


def test_resume_under_lightning_continues_exactly(shakespeare, tmp_path):
    import lightning.pytorch as pl

    class Recorder(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.seen: dict[int, torch.Tensor] = {}
            self.val_seen: list[torch.Tensor] = []

        def training_step(self, batch, batch_idx):
            self.seen[self.global_step] = batch.clone()
            return (self.w * batch.float().mean()).sum()

        def validation_step(self, batch, batch_idx):
            assert batch.shape == (4, 33) and batch.dtype == torch.int64
            self.val_seen.append(batch.clone())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def fit(max_steps, ckpt=None):
        model, dm = Recorder(), _dm(shakespeare, seed=11, batch_size=4, context_length=32, val_batches=3)
        trainer = pl.Trainer(max_steps=max_steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, val_check_interval=4,
                             check_val_every_n_epoch=None, num_sanity_val_steps=0, use_distributed_sampler=False)
        trainer.fit(model, datamodule=dm, ckpt_path=ckpt)
        return trainer, model, dm

    _, whole, whole_dm = fit(8)
    trainer, _, _ = fit(4)
    trainer.save_checkpoint(tmp_path / "half.ckpt")
    _, resumed, resumed_dm = fit(8, str(tmp_path / "half.ckpt"))
    assert sorted(resumed.seen) == [4, 5, 6, 7]
    for step in range(4, 8):
        assert torch.equal(resumed.seen[step], whole.seen[step])
    assert resumed_dm.tokens_per_source() == whole_dm.tokens_per_source() == {"tiny_shakespeare": 8 * 4 * 32}
    assert len(whole.val_seen) == 2 * 3  # at steps 4 and 8, val_batches=3 each, identical
    assert all(torch.equal(a, b) for a, b in zip(whole.val_seen[:3], whole.val_seen[3:]))
    assert all(torch.equal(a, b) for a, b in zip(whole.val_seen[3:], resumed.val_seen))
