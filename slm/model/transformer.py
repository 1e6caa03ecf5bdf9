"""The decoder network assembled from the component registries. Plain PyTorch; takes only a ModelConfig.

`Transformer(cfg)(idx)` scores a whole sequence. Given a `slm.model.cache.KVCache`, the same call appends
`idx` to the cached sequence instead (prefill, then one token at a time), each block application reading
and writing its own slot of the cache.
"""

from __future__ import annotations


import torch
from torch import nn

from slm.components import FFNS, INITS, MIXERS, NORMS, POSITIONS
from slm.components.canon import make_canon
from slm.components.flex import Masking, document_ids
from slm.components.parametrization import rescale_init, scheme_of
from slm.model.config import ModelConfig
from slm.model.counting import stack_breakdown, stack_counts
from slm.model.networks import NETWORKS


class SequenceContext:
    """What every block of one forward shares, built on first use: RoPE tables per layer kind (`rotary`),
    attention masks per window (`mask`), and the auxiliary statistics layers `record` (e.g. routing).

    documents (B, T): the document of each position (`slm.components.flex.document_ids`; packed documents,
    `document_end_id`), or None; the whole-sequence masks keep attention within a document."""

    def __init__(self, cfg: ModelConfig, position: nn.Module, pos: torch.Tensor, dtype: torch.dtype, cache=None,
                 attention_block: int | None = None, documents: torch.Tensor | None = None):
        self.cfg, self.position, self.pos, self.dtype, self.cache = cfg, position, pos, dtype, cache
        self.block = cfg.attention_block if attention_block is None else attention_block
        self.documents = documents
        self._rotary: dict = {}
        self._masks: dict = {}
        self.aux: dict[type, list] = {}

    def rotary(self, local: bool):
        """(cos, sin) for global or sliding-window layers (their RoPE bases may differ), or None."""
        if local not in self._rotary:
            self._rotary[local] = self.position.rotary(self.pos, local, self.dtype)
        return self._rotary[local]

    def mask(self, window: int | None) -> Masking | torch.Tensor | None:
        """The attention mask for keys within `window` (None: all): a `Masking` (causal, window, block,
        documents) in a whole-sequence forward; with a KV cache the cache's boolean (B, 1, T, S) mask, or None
        where SDPA's own causal mask does."""
        if window not in self._masks:
            if self.cache is None:
                T = self.pos.shape[-1]
                self._masks[window] = Masking(T, self.cfg.causal, window, self.block, self.documents,
                                              self.pos.device, full_context=T == self.cfg.context_length)
            else:
                self._masks[window] = self.cache.mask(window)
        return self._masks[window]

    def record(self, kind: type, stats) -> None:
        """Keep one layer's auxiliary statistics; `kind.reduce_aux(cfg, [stats, ...])` reduces them."""
        self.aux.setdefault(kind, []).append(stats)


class Block(nn.Module):
    """One block: a sequence mixer (attention, short conv, ... from MIXERS by `layer_types`), then a
    feed-forward (dense or mixture of experts, from FFNS by `mlp_types`), each a residual sublayer with norms
    placed per config:

    pre:      h = h + f(norm(h))
    post:     h = norm(h + f(h))
    sandwich: h = h + norm_out(f(norm_in(h)))          (Gemma3)
    A parametrization may multiply each branch before the add (completep: f(...) x (base_depth / depth)^alpha).
    Canon A / C mix the sublayer input right before the mixer / the MLP (B and D sit inside them).
    The mixer sits at `self.<slot>` (attn, conv) with its norms at `<slot>_norm` and `<slot>_out_norm`.
    `kv` is this application's slot of a KV cache, or None (whole-sequence forward).
    """

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        mixer = MIXERS.get(cfg.layer_type(layer))
        self.slot = mixer.slot
        self.placement = cfg.norm_placement

        def norm(where: str) -> nn.Module | None:
            wanted = {"before": ("pre", "sandwich"), "after": ("post", "sandwich")}[where]
            if cfg.norm_placement not in wanted:
                return None
            return NORMS.get(cfg.norm)(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)

        setattr(self, f"{self.slot}_norm", norm("before"))
        setattr(self, f"{self.slot}_out_norm", norm("after"))
        self.canon_a = make_canon(cfg, "A", cfg.d_model)
        setattr(self, self.slot, mixer(cfg))
        self.mlp_norm, self.mlp_out_norm = norm("before"), norm("after")
        self.canon_c = make_canon(cfg, "C", cfg.d_model)
        self.mlp = FFNS.get(cfg.mlp_type(layer)).build(cfg)
        self.drop = nn.Dropout(cfg.dropout)
        # times each sublayer's output is dropped out (cfg.dropout_at: usually 1 each, or 0)
        self.drops = {"A": cfg.dropout_at.count("mixer"), "C": cfg.dropout_at.count("mlp")}
        self.branch_scale = scheme_of(cfg).residual_multiplier()  # completep: (base_depth / depth)^alpha; else None

    @property
    def mixer(self) -> nn.Module:
        return getattr(self, self.slot)

    def _sublayer(self, h, norm_in, canon, where, fn, norm_out, seq, kv) -> torch.Tensor:
        x = h if norm_in is None else norm_in(h)
        if canon is not None:
            x = canon(x) if kv is None else kv.canon(where, canon, x)
        y = fn(x, seq, kv)
        for _ in range(self.drops[where]):
            y = self.drop(y)
        if self.placement == "post":
            return norm_out(h + y)
        if norm_out is not None:
            y = norm_out(y)
        return h + (y if self.branch_scale is None else y * self.branch_scale)

    def forward(self, h: torch.Tensor, seq: SequenceContext, kv=None) -> torch.Tensor:
        mixer_norm, mixer_out_norm = getattr(self, f"{self.slot}_norm"), getattr(self, f"{self.slot}_out_norm")
        h = self._sublayer(h, mixer_norm, self.canon_a, "A", self.mixer, mixer_out_norm, seq, kv)
        return self._sublayer(h, self.mlp_norm, self.canon_c, "C", self.mlp, self.mlp_out_norm, seq, kv)


@NETWORKS.register("transformer")
class Transformer(nn.Module):
    """Token ids (B, T) -> next-token logits (B, T, vocab_size)."""

    every_position = True
    counts = staticmethod(stack_counts)
    parts = staticmethod(stack_breakdown)

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.embedding_padding_idx)
        self.position = POSITIONS.get(cfg.position).from_config(cfg)
        self.drop = nn.Dropout(cfg.dropout if "embedding" in cfg.dropout_at else 0.0)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        # post-norm blocks end normalised; pre and sandwich need a final norm before the head (cfg.has_final_norm)
        self.norm = NORMS.get(cfg.norm)(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias) if cfg.has_final_norm else None
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.head_bias)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        self.scheme = scheme_of(cfg)
        self.readout_scale = self.scheme.readout_multiplier()  # μP: base_width / d_model; else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise the weights by the config's scheme (`init`: gpt2 or normal, slm.components.init); norms
        and Canon convolutions keep their own init, learned positions are normal(0, init_std); then the
        parametrization rescales what it scales (μP: hidden matrices by sqrt(base_width / d_model))."""
        init = INITS.get(self.cfg.init)(self.cfg)
        for module in self.modules():
            init.module(module)
        for p in self.position.parameters():
            init.position(p)
        if self.cfg.embedding_padding_idx is not None:
            with torch.no_grad():
                self.tok_emb.weight[self.cfg.embedding_padding_idx].zero_()
        rescale_init(self, self.scheme)

    def forward(self, idx: torch.Tensor, cache=None, lengths: torch.Tensor | None = None, return_aux: bool = False,
                attention_block: int | None = None, head: bool = True):
        """idx (B, T) -> logits (B, T, V). With `cache`, idx continues the cached sequences; `lengths` (B,)
        marks the first lengths[b] tokens of row b as real and the rest as padding (see KVCache.begin).
        attention_block: block-causal attention with this block size for this call (a bidirectional model's
        conversion curriculum; None: the config's `attention_block`).

        return_aux: also return the layers' auxiliary terms, {name: tensor} ({} for most models): keys
        "loss/<name>" are weighted terms for the training loss, the others metrics (slm.components.moe).
        head=False: the final hidden states (B, T, d), after the final norm, in place of the logits (a loss that
        applies the head itself, chunk by chunk: slm.objectives.linear_ce)."""
        h, seq = self._run(idx, cache, lengths, attention_block)
        logits = self.head(h) if head else h
        if not return_aux:
            return logits
        aux: dict[str, torch.Tensor] = {}
        for kind, stats in seq.aux.items():
            aux.update(kind.reduce_aux(self.cfg, stats))
        return logits, aux

    def hidden(self, idx: torch.Tensor, cache=None, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """idx (B, T) -> final hidden states (B, T, d), after the final norm: `head` turns them into logits."""
        return self._run(idx, cache, lengths)[0]

    def _run(self, idx: torch.Tensor, cache, lengths, attention_block=None) -> tuple[torch.Tensor, SequenceContext]:
        B, T = idx.shape
        if cache is None:
            if T > self.cfg.context_length:
                raise ValueError(f"sequence length {T} exceeds context_length={self.cfg.context_length}")
            pos = torch.arange(T, device=idx.device)
        else:
            pos = cache.begin(T, lengths)  # (B, T); the cache builds the masks of this chunk
        h = self.tok_emb(idx)  # (B, T, d)
        if self.cfg.scale_embeddings:  # Gemma: x sqrt(d_model) (μP: sqrt(base_width), a width-free input)
            h = h * torch.tensor(self.scheme.embedding_scale(self.cfg.d_model**0.5), dtype=h.dtype)
        h = self.drop(self.position.embed(h, pos))
        if attention_block is not None and (cache is not None or self.cfg.causal):
            raise ValueError("attention_block applies to a bidirectional model's whole-sequence forward only")
        # packed documents: attention stays within a document in a whole-sequence forward (positions stay global);
        # a KV cache ignores document ends (a prompt and its continuation are one document)
        documents = None
        if cache is None and self.cfg.document_end_id is not None:
            documents = document_ids(idx, self.cfg.document_end_id)
        seq = SequenceContext(self.cfg, self.position, pos, h.dtype, cache, attention_block, documents)
        for application, i in enumerate(self.cfg.block_schedule()):  # repeats and loops reuse a block's weights
            kv = None if cache is None else cache.layers[application]
            h = self.blocks[i](h, seq, kv)
        if self.norm is not None:
            h = self.norm(h)
        return h, seq

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Final hidden states (..., d) -> logits (..., V), soft-capped if the config says so (μP's readout
        multiplier scales h, so the logits, before the head)."""
        if self.readout_scale is not None:
            h = h * self.readout_scale
        logits = self.lm_head(h)  # (..., V)
        if self.cfg.final_logit_softcap is not None:
            cap = self.cfg.final_logit_softcap
            logits = cap * torch.tanh(logits / cap)
        return logits

    def num_params(self) -> int:
        """Distinct trainable parameters (tied and shared weights counted once)."""
        return sum(p.numel() for p in self.parameters())
