"""Which window of which source each training sample reads: pure functions of (seed, sample index).

Sample g (= step * batch_size + row) comes from the source whose weight interval holds the Weyl
(golden-ratio) sequence value v_g = (U + g * A) mod 2^32, U seeded. The sequence is equidistributed with
low discrepancy, so the realised shares match the weights to within a few samples at any step, and the
count of each source among the first G samples has a closed form (a floor sum, O(log G)): no state.

The k-th sample of a source reads window perm_e[k mod N] of epoch e = k // N, where perm_e is a seeded
permutation of the source's N non-overlapping windows of context_length + 1 tokens (neighbours share one
token, so no token is a target twice in an epoch), and each epoch tiles the tokens from its own seeded offset
(`tiled`, the default). With `random` sampling (arXiv 2512.20877's protocol) the k-th sample starts at a
position drawn uniformly from every start that fits, with replacement: a hash of (seed, source, k).
"""

from __future__ import annotations

import zlib

import numpy as np

M = 1 << 32
A = 2654435769  # round(2^32 / golden ratio), odd


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """sum_{i < n} floor((a i + b) / m) for n, m > 0 and a, b >= 0 (exact, O(log m))."""
    total = 0
    while True:
        if a >= m:
            total += (n - 1) * n // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        y = a * n + b
        if y < m:
            return total
        n, b, m, a = y // m, y % m, a, m


class Mixer:
    """Assigns sample indices to sources in proportion to `weights`."""

    def __init__(self, weights: list[float], seed: int):
        w = np.asarray(weights, dtype=np.float64)
        cum = np.concatenate([[0.0], np.cumsum(w / w.sum())])
        self.bounds = [int(round(c * M)) for c in cum]  # source s owns [bounds[s], bounds[s+1])
        self.bounds[-1] = M
        self._inner = np.asarray(self.bounds[1:-1], dtype=np.int64)
        self.offset = int(np.random.default_rng([seed, 0x5EED]).integers(M))

    def counts_before(self, g: int) -> np.ndarray:
        """Samples of each source among indices [0, g). Shape (S,), int64."""
        if g <= 0:
            return np.zeros(len(self.bounds) - 1, dtype=np.int64)
        base = floor_sum(g, M, A, self.offset)
        below = [g if t == M else base - floor_sum(g, M, A, self.offset - t + M) + g for t in self.bounds]
        return np.diff(np.asarray(below, dtype=np.int64))

    def sources(self, g: int, n: int) -> np.ndarray:
        """Source of samples g .. g+n-1. Shape (n,), int64."""
        idx = np.arange(g, g + n, dtype=np.uint64)
        v = (idx * np.uint64(A) + np.uint64(self.offset)) & np.uint64(M - 1)  # uint64 wraps mod 2^64, a multiple of M
        return np.searchsorted(self._inner, v.astype(np.int64), side="right")


class Windows:
    """The epochs of non-overlapping windows over one source's training tokens."""

    def __init__(self, n_tokens: int, context_length: int, seed: int, name: str):
        L = context_length
        full = (n_tokens - 1) // L  # windows that fit at offset 0
        self.n_windows = full - 1 if full >= 2 else full  # one fewer leaves room for a random offset
        self.slack = n_tokens - 1 - self.n_windows * L  # largest offset that still fits them all
        self.L = L
        self.seed = [seed, zlib.crc32(name.encode())]
        self._epochs: dict[int, tuple[int, np.ndarray]] = {}

    def _epoch(self, e: int) -> tuple[int, np.ndarray]:
        if e not in self._epochs:
            rng = np.random.default_rng([*self.seed, e])
            offset = int(rng.integers(self.slack + 1))
            if len(self._epochs) >= 2:
                self._epochs.pop(min(self._epochs))
            self._epochs[e] = (offset, rng.permutation(self.n_windows))
        return self._epochs[e]

    def starts(self, k: np.ndarray) -> np.ndarray:
        """Token offsets of the windows read by this source's samples number k (ascending). Shape like k."""
        first, last = int(k[0]) // self.n_windows, int(k[-1]) // self.n_windows
        if first == last:  # the usual case: one epoch
            offset, perm = self._epoch(first)
            return offset + perm[k - first * self.n_windows] * self.L
        epochs, pos = np.divmod(k, self.n_windows)
        out = np.empty_like(k)
        for e in range(first, last + 1):
            offset, perm = self._epoch(e)
            sel = epochs == e
            out[sel] = offset + perm[pos[sel]] * self.L
        return out


class RandomStarts:
    """Windows at uniformly random starts, with replacement, as a pure function of the sample number."""

    def __init__(self, n_tokens: int, context_length: int, seed: int, name: str):
        self.n_starts = n_tokens - context_length  # windows of context_length + 1 tokens that fit
        self.key = np.uint64((seed * 0x9E3779B97F4A7C15 + zlib.crc32(name.encode())) % (1 << 64))

    def starts(self, k: np.ndarray) -> np.ndarray:
        """Token offsets of the windows read by this source's samples number k. Shape like k."""
        with np.errstate(over="ignore"):  # splitmix64: uint64 arithmetic wraps by design
            z = np.asarray(k, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + self.key
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z ^= z >> np.uint64(31)
        return (z % np.uint64(self.n_starts)).astype(np.int64)


SAMPLINGS = {"tiled": Windows, "random": RandomStarts}
"""How training windows are drawn (train.window_sampling)."""


def gather(tokens: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """Rows tokens[s : s + length] for each start. Shape (len(starts), length), int64."""
    return tokens[starts[:, None] + np.arange(length)].astype(np.int64)


class TrainSampler:
    """Training batches as a pure function of (seed, batch index)."""

    def __init__(self, tokens: list[np.ndarray], names: list[str], weights: list[float], batch_size: int,
                 context_length: int, seed: int, sampling: str = "tiled"):
        self.tokens, self.names = tokens, names
        self.B, self.L = batch_size, context_length
        seed = int(seed) % (1 << 64)  # any int; numpy seeds must be >= 0
        self.mixer = Mixer(weights, seed)
        self.windows = [SAMPLINGS[sampling](len(t), context_length, seed, n) for t, n in zip(tokens, names)]
        self._next: tuple[int, np.ndarray] = (0, self.mixer.counts_before(0))  # memo for sequential access

    @classmethod
    def of(cls, sources, batch_size: int, context_length: int, seed: int, sampling: str = "tiled") -> "TrainSampler":
        """The sampler of prepared sources (slm.data.prepare's PreparedSource: train shard, name, weight)."""
        return cls([s.train.tokens() for s in sources], [s.name for s in sources], [s.weight for s in sources],
                   batch_size, context_length, seed, sampling)

    def samples_before(self, batch: int) -> np.ndarray:
        """Samples of each source in batches [0, batch). Shape (S,)."""
        if self._next[0] == batch:
            return self._next[1]
        return self.mixer.counts_before(batch * self.B)

    def batch(self, index: int) -> np.ndarray:
        """Batch number `index`. Shape (batch_size, context_length + 1), int64."""
        return self.rows(index, 0, self.B)

    def rows(self, index: int, lo: int, hi: int) -> np.ndarray:
        """Rows lo..hi-1 of batch number `index` (a device's share, or a micro-batch), equal to
        `batch(index)[lo:hi]` but reading only those windows. Shape (hi - lo, context_length + 1), int64."""
        before = self.samples_before(index)
        if len(self.tokens) == 1:
            out = gather(self.tokens[0], self.windows[0].starts(before[0] + np.arange(lo, hi)), self.L + 1)
            self._next = (index + 1, before + self.B)
            return out
        src = self.mixer.sources(index * self.B, self.B)
        counts = np.bincount(src, minlength=len(self.tokens))
        out = np.empty((hi - lo, self.L + 1), dtype=np.int64)
        for s in np.flatnonzero(counts):
            rows = np.flatnonzero(src == s)  # the batch's rows from source s; its k-th is sample before[s] + k
            wanted = (rows >= lo) & (rows < hi)
            if wanted.any():
                k = before[s] + np.flatnonzero(wanted)
                out[rows[wanted] - lo] = gather(self.tokens[s], self.windows[s].starts(k), self.L + 1)
        self._next = (index + 1, before + counts)
        return out


def shares(weights: list[float], n: int) -> np.ndarray:
    """n split in proportion to the weights, exactly (largest remainders). Shape (S,), sums to n."""
    w = np.asarray(weights, dtype=np.float64)
    exact = w / w.sum() * n
    counts = np.floor(exact).astype(np.int64)
    counts[np.argsort(-(exact - counts), kind="stable")[: n - counts.sum()]] += 1
    return counts


def validation_batches(tokens: list[np.ndarray], weights: list[float], batch_size: int, context_length: int,
                       n_batches: int) -> list[np.ndarray]:
    """A fixed list of batches, shape (batch_size, context_length + 1): each source contributes its share
    of the rows (exactly, interleaved evenly), windows spread evenly over its validation tokens. No seed."""
    n = n_batches * batch_size
    if n == 0:
        return []
    counts = shares(weights, n)
    # interleave: the i-th row of source s sits at (i + 0.5) / count_s along the list
    position = np.concatenate([(np.arange(c) + 0.5) / c for c in counts if c])
    src = np.concatenate([np.full(c, s) for s, c in enumerate(counts) if c])
    src = src[np.argsort(position, kind="stable")]
    flat = np.empty((n, context_length + 1), dtype=np.int64)
    for s in np.unique(src):
        rows = np.flatnonzero(src == s)
        n_windows = (len(tokens[s]) - 1) // context_length
        picks = (np.arange(len(rows)) * n_windows) // len(rows)
        flat[rows] = gather(tokens[s], picks * context_length, context_length + 1)
    return list(flat.reshape(n_batches, batch_size, context_length + 1))


def first_windows(tokens: list[np.ndarray], weights: list[float], batch_size: int, context_length: int,
                  n_windows: int) -> list[np.ndarray]:
    """The first windows of each split at stride 1 (starts 0, 1, 2, ...: arXiv 2512.20877's validation and
    test sets), each source its share of `n_windows`, in batches of batch_size (the last may be shorter)."""
    rows = []
    for t, n in zip(tokens, shares(weights, n_windows)):
        fits = len(t) - context_length  # windows of context_length + 1 tokens that fit
        if n > fits:
            raise ValueError(f"{n} windows of {context_length + 1} tokens asked of a split of {len(t)} tokens")
        rows.append(gather(t, np.arange(n), context_length + 1))
    flat = np.concatenate(rows)
    return [flat[i:i + batch_size] for i in range(0, len(flat), batch_size)]
