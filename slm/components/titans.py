"""Titans' memory as context (Behrouz, Zhong, Mirrokni 2025, arXiv 2501.00663, Sec. 4.1), the `mac` mixer.

The sequence is cut into segments of `memory.segment` positions. For each segment, in order:

    h   = M(q)                      q = rms(x W_Q): a read of the neural memory for every segment token
    y   = Attn([P || h || x])       persistent tokens P, the reads, the segment; causal within the segment
    M  <- learn(M, k = rms(u W_K), v = u W_V)     u = x + y; slm.components.memory: momentum, decay, chunked

and y (after the attention's output projection) is the layer's output. Attention never looks past its
segment: what came before reaches it through the memory only. Keys and values of P, h and x use the
attention's own projections (and its qk-norm); h and x are rotated at their token's position, P not.

Where this differs from the paper, and why:
- the paper puts a depthwise causal convolution after each of the q, k and v projections (Sec. 4.4); here it is
  an option, model.memory.qkv_conv=<width>, off by default. The study's Titans-MAC count (67.76M,
  conf/model/titans_mac.yaml: 67,757,964 without them) leaves no room for them: three width-k convolutions in
  each of the 4 mac layers add 3 x 384 x k x 4 parameters, 67.77M already at k = 2. With it, q is convolved over
  the tokens and k, v over the written tokens u, both across segment ends (the carry and the KV cache keep the
  last width - 1 projections);
- the paper's SiLU on q, k and v is an option, model.memory.qkv_activation=silu, off by default: the study count
  does not tell, and the recall check (bench/titans_recall.py) was measured without it;
- a token sees the reads of its own and earlier segment tokens only: a read is a function of its token, so
  reading later ones would show it the future (the paper's figure draws the reads as a prefix);
- the paper's last step o = y * M*(y) is left out: it reads the memory after it has learned the whole
  segment, later tokens included;
- the memory learns from u = x + y (the layer's input plus the attention output) rather than y alone: at
  initialisation y is a near-uniform average over the segment with no token identity to key on, and on the
  synthetic recall task (bench/titans_recall.py) a memory learning from y alone did not start to learn;
- the step size is theta_t = memory.lr * sigmoid(.), and a chunk whose steps sum to more than memory.lr is
  scaled down to sum to memory.lr (slm.components.memory.learn's budget). A chunk's update adds up its
  tokens' gradients, all taken at the chunk's first weights, so with similar keys its summed step is what
  moves each of them: with one key repeated, a linear memory with momentum 0.5 converges at a summed step
  of 0.5 and diverges over segments at 0.7 (a 2-layer one stayed bounded to 1.0). Without the budget, a
  long chunk of similar keys would sum past that. With it, every chunk stays below it whatever the keys,
  and the gates decide how the budget is shared: one token may take all of it (a strong write), filler
  none. At initialisation every gate is equal, so each token of a chunk steps memory.lr / memory.chunk;
- each token's gradient is clipped to the norm of the memory's initial weights (sqrt of their number, for
  N(0, 1) entries): a step cap alone does not keep an MLP memory stable, since the first layer's curvature
  grows with the second layer's weights (without the clip, a tiny 2-layer memory stepping 0.25 per token
  overflowed within 20 tokens); with it a token moves the weights by at most memory.lr times their initial
  norm, so they grow at most linearly, never exponentially.
The gates come from the token written: theta as above, eta = sigmoid(.), alpha = sigmoid(.), one linear
map d -> 3 per memory head, whose zero-initialised bias is offset so that the memory starts at theta =
0.5 memory.lr (before the budget), eta = 0.5, alpha = 0.0025 (GATE_START).

With a KV cache, each row keeps its memory (weights and momentum), the current segment's keys and values
and its attention outputs, which the memory learns once the segment is complete (before the next token):
prefill then one token at a time computes what the whole-sequence forward does. Rows at different positions
(padded batches) run one at a time. No static cache: the segment bookkeeping is Python-side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

import slm.components.memory as memory
from slm.components.attention import MultiHeadAttention
from slm.components.mixer import MIXERS, Mixer
from slm.components.position import apply_rotary
from slm.settings import Settings, require, setting


@dataclass
class MemorySettings(Settings):
    """`model.memory`: Titans' memory-as-context layers (the `mac` mixer)."""

    layers: list[int] = setting(factory=list, ge=0, each=True)
    """Blocks (0-based) whose mixer is a mac layer whatever model.layer_types says; [] none. The study's
    Titans-MAC: [0, 7, 14, 21]."""
    segment: int | None = setting(None, gt=0, null="no mac layer")
    """Positions per segment: attention runs within the segment (plus the persistent and retrieved tokens), the
    neural memory carries what came before (required when there is a mac layer)."""
    chunk: int | None = setting(None, gt=0, null="segment")
    """Tokens whose memory gradients are taken at the same weights (Titans' chunked training); divides segment
    (1: token by token); null: segment."""
    depth: int = setting(2, gt=0)
    """Layers of the memory MLP (1: a linear memory)."""
    hidden: int | None = setting(None, gt=0, null="d_model / heads")
    """Hidden width of the memory MLP; null: its input width, d_model / heads."""
    heads: int = setting(1, gt=0)
    """Independent memories, each over d_model / heads channels."""
    persistent_tokens: int = setting(0, ge=0)
    """Learned tokens prepended to every segment's attention (Titans' persistent memory)."""
    lr: float = setting(0.5, gt=0)
    """Inner learning rate: a token's step is lr * sigmoid(gate), and a chunk whose steps sum to more than lr is
    scaled down to sum to lr."""
    qkv_conv: int = setting(0, ge=0)
    """Width of a depthwise causal convolution after each of the memory's q, k and v projections (the paper's,
    Sec. 4.4, width not given; 4 is Mamba's); 0 (the default): none, as the study count has (67.76M)."""
    qkv_activation: Literal["none", "silu"] = "none"
    """Activation on the memory's query, key and value projections before the RMS norm of q and k: silu is the
    paper's (Sec. 4.4); none (the default) is what the study count and bench/titans_recall.py were measured with."""

    def derive(self, cfg) -> None:
        """`layers` sorted and placed into cfg.layer_types (one entry per block); with mac layers, chunk and hidden
        where left null."""
        self.layers = sorted(self.layers)
        if self.layers and cfg.layer_types and len(cfg.layer_types) <= cfg.n_layers:
            cfg.layer_types = ["mac" if i in self.layers else cfg.layer_type(i) for i in range(cfg.n_layers)]
        if "mac" in cfg.layer_types and self.segment is not None:
            self.chunk = self.segment if self.chunk is None else self.chunk
            if self.hidden is None and cfg.d_model % self.heads == 0:
                self.hidden = cfg.d_model // self.heads

    def check(self, key: str, cfg) -> None:
        """Against the model `cfg` (n_layers, context_length, d_model, attention.causal, canon.set)."""
        layers, used = self.layers, "mac" in cfg.layer_types
        require((len(set(layers)) == len(layers) and all(i < cfg.n_layers for i in layers), f"{key}.layers", layers,
                 f"distinct block indices in 0..{cfg.n_layers - 1} (n_layers - 1)"),
                (used or self.segment is None, f"{key}.segment", self.segment,
                 "no mac layer to use it; set memory.layers or null"))
        require((not used or self.segment is not None, f"{key}.segment", None,
                 "mac layers need a segment length (positions per segment)"))
        if not used:
            return
        require((self.segment <= cfg.context_length, f"{key}.segment", self.segment,
                 f"must be <= context_length={cfg.context_length}"),
                (self.segment % self.chunk == 0, f"{key}.chunk", self.chunk,
                 f"must be a positive integer dividing segment={self.segment}"),
                (cfg.d_model % self.heads == 0, f"{key}.heads", self.heads, f"must divide d_model={cfg.d_model}"),
                (cfg.attention.causal, "model.attention.causal", cfg.attention.causal,
                 "mac layers (a memory learned left to right) need causal=true"),
                ("B" not in cfg.canon.set, "model.canon.set", cfg.canon.set,
                 "Canon B sits inside plain attention; mac layers have none"))


GATE_START = {"theta": 0.5, "eta": 0.5, "alpha": 0.0025}
"""Gate values at initialisation (theta as a fraction of memory.lr, before the chunk budget)."""


def _wide(x: torch.Tensor) -> torch.Tensor:
    """x in float32 at least: the memory learns and reads in float32 (float64 stays float64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


@dataclass
class Carry:
    """What a mac layer carries from one segment to the next, for a group of rows at the same position."""

    weights: list[torch.Tensor]
    """The memory, (B, Hm, d_in, d_out) per layer."""
    momentum: list[torch.Tensor]
    """Its surprise S, same shapes."""
    seen: int
    """Tokens seen so far."""
    keys: torch.Tensor
    """Keys of the current segment's reads and tokens, interleaved h_0, x_0, h_1, x_1, ...: (B, KV, 2 n, hd)."""
    values: torch.Tensor
    """Their values, likewise."""
    outputs: torch.Tensor
    """The current segment's attention outputs y (B, n, d): what the memory learns when the segment ends."""
    tails: torch.Tensor | None = None
    """With memory.qkv_conv = K: the last K - 1 projections before the convolution, (B, 3, K - 1, d) for q (of
    the tokens read) and k, v (of the tokens learned); zeros at the start. None without a convolution."""


class MemoryState:
    """A mac layer's slot in a KV cache: per row, the memory, its momentum, the tokens seen, and the current
    segment's keys, values and outputs (buffers for a whole segment). Eager caches only."""

    def __init__(self, cache, cfg, buffers: dict):
        self.cache, self.segment = cache, cfg.memory.segment
        self.weights, self.momentum = buffers["weights"], buffers["momentum"]
        self.keys, self.values, self.outputs = buffers["keys"], buffers["values"], buffers["outputs"]
        self.tails = buffers.get("tails")  # (B, 3, K - 1, d) with a q/k/v convolution, else None
        self.seen = [0] * cache.batch  # tokens per row

    def load(self, rows: slice, initial: list[torch.Tensor]) -> Carry:
        """The carry of rows (all at one position). A row that has seen nothing holds the initial memory; one
        that has holds the outputs of its current segment, a complete one until the next token learns it."""
        seen = self.seen[rows.start]
        n = (seen - 1) % self.segment + 1 if seen else 0
        if not seen:
            B = rows.stop - rows.start
            weights = [w.expand(B, *w.shape) for w in initial]
            momentum = [torch.zeros_like(w) for w in weights]
        else:
            weights, momentum = [w[rows] for w in self.weights], [s[rows] for s in self.momentum]
        tails = None if self.tails is None else (self.tails[rows] if seen else torch.zeros_like(self.tails[rows]))
        return Carry(weights, momentum, seen, self.keys[rows, :, :2 * n], self.values[rows, :, :2 * n],
                     self.outputs[rows, :n], tails)

    def store(self, rows: slice, carry: Carry) -> None:
        n = carry.outputs.shape[1]
        for buf, new in zip(self.weights + self.momentum, carry.weights + carry.momentum):
            buf[rows] = new
        self.keys[rows, :, :2 * n] = carry.keys
        self.values[rows, :, :2 * n] = carry.values
        self.outputs[rows, :n] = carry.outputs
        if self.tails is not None:
            self.tails[rows] = carry.tails
        self.seen[rows] = [carry.seen] * (rows.stop - rows.start)

    def select(self, cache, rows: torch.Tensor) -> "MemoryState":
        out = MemoryState.__new__(MemoryState)
        out.cache, out.segment = cache, self.segment
        pick = lambda t: t.index_select(0, rows)  # noqa: E731
        out.weights, out.momentum = [pick(w) for w in self.weights], [pick(s) for s in self.momentum]
        out.keys, out.values, out.outputs = pick(self.keys), pick(self.values), pick(self.outputs)
        out.tails = None if self.tails is None else pick(self.tails)
        out.seen = [self.seen[i] for i in rows.tolist()]
        return out

    def reset(self) -> None:
        self.seen = [0] * len(self.seen)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        tails = () if self.tails is None else (self.tails,)
        return (*self.weights, *self.momentum, self.keys, self.values, self.outputs, *tails)


@MIXERS.register("mac")
class MemoryAsContext(Mixer):
    """Segment attention over [persistent tokens || memory reads || segment], and a neural memory learned
    from each segment's outputs (see the module docstring)."""

    slot = "mac"
    static_cache = False

    def __init__(self, cfg):
        super().__init__()
        d, heads = cfg.d_model, cfg.memory.heads
        self.segment, self.chunk = cfg.memory.segment, cfg.memory.chunk
        self.lr = cfg.memory.lr  # largest step of a token, and of a chunk's tokens together
        self.act = F.silu if cfg.memory.qkv_activation == "silu" else (lambda t: t)
        self.max_norm = math.sqrt(sum(i * o for i, o in memory.layer_shapes(cfg)))  # |initial weights| of a head
        self.heads, self.width, self.eps = heads, d // heads, cfg.norm.eps
        self.attn = MultiHeadAttention(cfg)  # the segment attention (its projections also see P and the reads)
        self.to_q = nn.Linear(d, d, bias=cfg.block.bias)  # memory queries, keys and values
        self.to_k = nn.Linear(d, d, bias=cfg.block.bias)
        self.to_v = nn.Linear(d, d, bias=cfg.block.bias)
        self.gates = nn.Linear(d, 3 * heads)  # theta, eta, alpha per memory head
        self.register_buffer("gate_offset", torch.tensor(
            [_logit(GATE_START["theta"]), _logit(GATE_START["eta"]), _logit(GATE_START["alpha"])]), persistent=False)
        self.memory = nn.ParameterList(nn.Parameter(torch.empty(heads, i, o)) for i, o in memory.layer_shapes(cfg))
        self.persistent = nn.Parameter(torch.empty(cfg.memory.persistent_tokens, d)) if cfg.memory.persistent_tokens else None
        K = cfg.memory.qkv_conv  # depthwise causal convolutions after the q, k, v projections (PyTorch's conv init)
        self.qkv_conv = nn.ModuleList(nn.Conv1d(d, d, K, groups=d, bias=False) for _ in range(3)) if K else None
        self.init_weights(None)

    def init_weights(self, init) -> None:
        """The memory's initial weights N(0, 1) (each layer scales by 1/sqrt(d_in)), persistent tokens N(0, 1)
        (like normalised inputs): neither follows init_std."""
        for w in self.memory:
            nn.init.normal_(w)
        if self.persistent is not None:
            nn.init.normal_(self.persistent)

    @staticmethod
    def memory_params(cfg) -> int:
        """The memory MLP's initial weights (its state has as many numbers per row)."""
        return cfg.memory.heads * sum(i * o for i, o in memory.layer_shapes(cfg))

    @classmethod
    def param_parts(cls, cfg) -> dict[str, int]:
        d = cfg.d_model
        return {"attention": MultiHeadAttention.num_params(cfg),
                "memory q/k/v projections": 3 * (d * d + (d if cfg.block.bias else 0)),
                "memory MLP (initial weights)": cls.memory_params(cfg),
                "memory gates": 3 * cfg.memory.heads * (d + 1),
                "persistent tokens": cfg.memory.persistent_tokens * d,
                "memory q/k/v convolutions": 3 * d * cfg.memory.qkv_conv}

    @classmethod
    def num_params(cls, cfg) -> int:
        return sum(cls.param_parts(cfg).values())

    @staticmethod
    def flops_per_token(cfg) -> int:
        """Attention within a segment (12 H hd per key: P, the reads and the segment's tokens), plus the
        memory beyond the 6 x its weights that 6N counts as one application: learning a token runs the MLP
        forward and back and forms two weighted gradient sums, about 4 applications, 3x for the outer
        backward: 24 - 6 = 18 per weight."""
        keys = cfg.memory.persistent_tokens + 2 * cfg.memory.segment
        return 12 * cfg.attention.n_heads * cfg.attention.head_dim * keys + 18 * MemoryAsContext.memory_params(cfg)

    @classmethod
    def new_state(cls, cfg, cache) -> MemoryState:
        if cache.static:
            raise ValueError("mac layers (Titans memory) keep Python-side segment bookkeeping: they need an "
                             "eager KV cache, not a static one (no CUDA graph or compiled decoding)")
        B, S, heads = cache.batch, cfg.memory.segment, cfg.memory.heads
        wide = torch.promote_types(cache.dtype, torch.float32)
        zeros = lambda *shape: torch.zeros(shape, device=cache.device, dtype=wide)  # noqa: E731
        a = cfg.attention
        kv = lambda: torch.zeros(B, a.n_kv_heads, 2 * S, a.head_dim, device=cache.device, dtype=cache.dtype)  # noqa: E731
        return MemoryState(cache, cfg, {
            "weights": [zeros(B, heads, i, o) for i, o in memory.layer_shapes(cfg)],
            "momentum": [zeros(B, heads, i, o) for i, o in memory.layer_shapes(cfg)],
            "keys": kv(), "values": kv(),
            "outputs": torch.zeros(B, S, cfg.d_model, device=cache.device, dtype=cache.dtype),
            **({"tails": torch.zeros(B, 3, cfg.memory.qkv_conv - 1, cfg.d_model, device=cache.device,
                                     dtype=cache.dtype)} if cfg.memory.qkv_conv else {})})

    # ------------------------------------------------------------------ pieces
    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N, d) -> unit-RMS (B, Hm, N, d / Hm), in float32 (the memory runs in float32 or wider)."""
        B, N, _ = x.shape
        x = _wide(x).view(B, N, self.heads, self.width).transpose(1, 2)
        with torch.autocast(x.device.type, enabled=False):
            return F.rms_norm(x, (self.width,), eps=self.eps)

    def _learn(self, carry: Carry) -> Carry:
        """The memory after the current segment's outputs; the segment's keys and outputs cleared."""
        y = carry.outputs
        B, n, _ = y.shape
        (k, v), tails = self._convolve(carry.tails, (1, 2), self.to_k(y), self.to_v(y))
        k = self._split(self.act(k))
        v = _wide(self.act(v)).view(B, n, self.heads, self.width).transpose(1, 2)
        g = (_wide(self.gates(y)).view(B, n, 3, self.heads) + self.gate_offset[:, None]).permute(2, 0, 3, 1)
        with torch.autocast(y.device.type, enabled=False):
            theta, log_eta, log_keep = self.lr * torch.sigmoid(g[0]), F.logsigmoid(g[1]), F.logsigmoid(-g[2])
            weights, momentum = memory.learn(carry.weights, carry.momentum, k, v, theta, log_eta, log_keep,
                                             self.chunk, budget=self.lr,
                                             max_norm=self.max_norm)
        empty = carry.keys[:, :, :0]
        return Carry(weights, momentum, carry.seen, empty, empty, y[:, :0], tails)

    def _read(self, carry: Carry, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Memory reads for tokens x (B, n, d) -> (B, n, d), in x's dtype, and the carry's tails after them."""
        B, n, d = x.shape
        (q,), tails = self._convolve(carry.tails, (0,), self.to_q(x))
        q = self._split(self.act(q))
        with torch.autocast(x.device.type, enabled=False):
            h = memory.read(carry.weights, q)  # (B, Hm, n, width)
        return h.transpose(1, 2).reshape(B, n, d).to(x.dtype), tails

    def _convolve(self, tails, which: tuple[int, ...], *projections: torch.Tensor):
        """The projections (B, n, d) each through its causal convolution (memory.qkv_conv; `which`: 0 q, 1 k,
        2 v), continuing the sequence whose last K - 1 projections are tails[:, i], and the tails after them.
        Without a convolution: the projections as they are, tails None."""
        if self.qkv_conv is None:
            return projections, None
        tails = tails.clone()
        out = []
        for i, p in zip(which, projections):
            n, K = p.shape[1], self.qkv_conv[i].kernel_size[0]
            full = torch.cat([tails[:, i].to(p.dtype), p], dim=1)  # (B, K - 1 + n, d)
            weight = self.qkv_conv[i].weight[:, 0, :]  # (d, K): position t sees t - K + 1 .. t
            out.append(sum(full[:, j:j + n] * weight[:, j] for j in range(K)))
            tails[:, i] = full[:, n:]
        return out, tails

    def initial(self) -> list[torch.Tensor]:
        """The memory's learned initial weights, in float32 (the memory runs in float32 or wider)."""
        return [_wide(w) for w in self.memory]

    def _run(self, x: torch.Tensor, rotary, carry: Carry) -> tuple[torch.Tensor, Carry]:
        """x (B, T, d), rows at position carry.seen, RoPE tables for its T positions (or None) -> y (B, T, d)
        and the carry after it."""
        B, T, _ = x.shape
        S = self.segment
        q, k, v = self.attn.project(x)  # (B, heads, T, hd)
        if self.persistent is not None:
            _, pk, pv = self.attn.project(self.persistent[None].to(x.dtype))  # (1, KV, P, hd), no rotation
            pk, pv = pk.expand(B, -1, -1, -1), pv.expand(B, -1, -1, -1)
        out, at = [], 0
        while at < T:
            if carry.outputs.shape[1] == S:  # a complete segment not yet learned
                carry = self._learn(carry)
            local = carry.seen % S
            n = min(T - at, S - local)
            part = slice(at, at + n)
            reads, tails = self._read(carry, x[:, part])
            _, hk, hv = self.attn.project(reads)
            qi, ki = q[:, :, part], k[:, :, part]
            if rotary is not None:
                rot = tuple(t[..., part, :] for t in rotary)
                qi, ki, hk = apply_rotary(qi, rot), apply_rotary(ki, rot), apply_rotary(hk, rot)
            keys = torch.cat([carry.keys, torch.stack([hk, ki], dim=3).flatten(2, 3)], dim=2)  # (B, KV, 2 m, hd)
            values = torch.cat([carry.values, torch.stack([hv, v[:, :, part]], dim=3).flatten(2, 3)], dim=2)
            slot = torch.arange(keys.shape[2], device=x.device) // 2  # segment position of each key
            mask = slot[None, :] <= torch.arange(local, local + n, device=x.device)[:, None]  # (n, 2 m)
            all_keys, all_values = keys, values
            if self.persistent is not None:
                all_keys, all_values = torch.cat([pk, keys], dim=2), torch.cat([pv, values], dim=2)
                mask = torch.cat([mask.new_ones(n, pk.shape[2]), mask], dim=1)
            y = self.attn.proj(self.attn.attend(qi, all_keys, all_values, mask, causal=False))  # (B, n, d)
            written = x[:, part] + y  # what the memory learns: the token after attention (see module docstring)
            carry = Carry(carry.weights, carry.momentum, carry.seen + n, keys, values,
                          torch.cat([carry.outputs, written], dim=1), tails)
            out.append(y)
            at += n
        return torch.cat(out, dim=1), carry

    def _fresh(self, batch: int, x: torch.Tensor) -> Carry:
        weights = [w.expand(batch, *w.shape) for w in self.initial()]
        H, hd = self.attn.n_kv_heads, self.attn.head_dim
        empty = x.new_zeros(batch, H, 0, hd)
        tails = None if self.qkv_conv is None else x.new_zeros(batch, 3, self.qkv_conv[0].kernel_size[0] - 1,
                                                                 x.shape[-1])
        return Carry(weights, [torch.zeros_like(w) for w in weights], 0, empty, empty, x[:, :0], tails)

    def forward(self, x: torch.Tensor, seq, kv=None) -> torch.Tensor:
        rotary = seq.rotary(False)
        if kv is None:
            return self._run(x, rotary, self._fresh(x.shape[0], x))[0]
        state: MemoryState = kv.state
        B, T, _ = x.shape
        lengths = seq.cache.lengths
        counts = [T] * B if lengths is None else lengths.tolist()
        if len(set(state.seen)) == 1 and set(counts) == {T}:
            y, carry = self._run(x, rotary, state.load(slice(0, B), self.initial()))
            state.store(slice(0, B), carry)
            return y
        y = torch.zeros_like(x)  # rows at different positions: one at a time (padding outputs stay 0)
        for b, n in enumerate(counts):
            if n == 0:
                continue
            rows = slice(b, b + 1)
            rot = None if rotary is None else tuple(t[rows if t.dim() == 4 else slice(None)][..., :n, :]
                                                    for t in rotary)
            y[rows, :n], carry = self._run(x[rows, :n], rot, state.load(rows, self.initial()))
            state.store(rows, carry)
        return y
