"""The decoder network assembled from the component registries. Plain PyTorch; takes only a ModelConfig.

`Transformer(cfg)(idx)` scores a whole sequence. Given a `slm.model.cache.KVCache`, the same call appends
`idx` to the cached sequence instead (prefill, then one token at a time), each block application reading
and writing its own slot of the cache.
"""

from __future__ import annotations


import torch
from torch import nn

from slm.components import INITS, POSITIONS
from slm.components.flex import Masking, document_ids
from slm.components.norm import make_norm
from slm.components.parametrization import rescale_init, scheme_of
from slm.model.block import Block
from slm.model.config import ModelConfig
from slm.model.counting import stack_breakdown, stack_counts
from slm.model.networks import NETWORKS


class SequenceContext:
    """What every block of one forward shares, built on first use: RoPE tables per layer kind (`rotary`),
    attention masks per window (`mask`), and the auxiliary statistics layers `record` (e.g. routing).

    documents (B, T): the document of each position (`slm.components.flex.document_ids`; packed documents,
    `embedding.document_end_id`), or None; the whole-sequence masks keep attention within a document."""

    def __init__(self, cfg: ModelConfig, position: nn.Module, pos: torch.Tensor, dtype: torch.dtype, cache=None,
                 attention_block: int | None = None, documents: torch.Tensor | None = None):
        self.cfg, self.position, self.pos, self.dtype, self.cache = cfg, position, pos, dtype, cache
        self.block = cfg.attention.block if attention_block is None else attention_block
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
                self._masks[window] = Masking(T, self.cfg.attention.causal, window, self.block, self.documents,
                                              self.pos.device, full_context=T == self.cfg.context_length)
            else:
                self._masks[window] = self.cache.mask(window)
        return self._masks[window]

    def record(self, kind: type, stats) -> None:
        """Keep one layer's auxiliary statistics; `kind.reduce_aux(cfg, [stats, ...])` reduces them."""
        self.aux.setdefault(kind, []).append(stats)


@NETWORKS.register("transformer")
class Transformer(nn.Module):
    """Token ids (B, T) -> next-token logits (B, T, vocab_size)."""

    every_position = True
    counts = staticmethod(stack_counts)
    parts = staticmethod(stack_breakdown)

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        emb = cfg.embedding
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=emb.padding_idx)
        self.position = POSITIONS.get(cfg.position.kind).from_config(cfg)
        self.drop = nn.Dropout(cfg.block.dropout if "embedding" in cfg.block.dropout_at else 0.0)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        # post-norm blocks end normalised; pre and sandwich need a final norm before the head (model.norm.final)
        self.norm = make_norm(cfg, cfg.d_model) if cfg.norm.has_final else None
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=emb.head_bias)
        if emb.tie:
            self.lm_head.weight = self.tok_emb.weight
        self.scheme = scheme_of(cfg)
        self.readout_scale = self.scheme.readout_multiplier()  # μP: base_width / d_model; else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise the weights by the config's scheme (`parametrization.init`: gpt2 or normal,
        slm.components.init); norms and Canon convolutions keep their own init, learned positions are
        normal(0, init_std); then the parametrization rescales what it scales (μP: hidden matrices by
        sqrt(base_width / d_model))."""
        init = INITS.get(self.cfg.parametrization.init)(self.cfg, self.scheme.init_depth())
        for module in self.modules():
            init.module(module)
        for p in self.position.parameters():
            init.position(p)
        padding = self.cfg.embedding.padding_idx
        if padding is not None:
            with torch.no_grad():
                self.tok_emb.weight[padding].zero_()
        rescale_init(self, self.scheme)

    def forward(self, idx: torch.Tensor, cache=None, lengths: torch.Tensor | None = None, return_aux: bool = False,
                attention_block: int | None = None, head: bool = True):
        """idx (B, T) -> logits (B, T, V). With `cache`, idx continues the cached sequences; `lengths` (B,)
        marks the first lengths[b] tokens of row b as real and the rest as padding (see KVCache.begin).
        attention_block: block-causal attention with this block size for this call (a bidirectional model's
        conversion curriculum; None: the config's `attention.block`).

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
        if self.cfg.embedding.scale:  # Gemma: x sqrt(d_model) (μP: sqrt(base_width), a width-free input)
            h = h * torch.tensor(self.scheme.embedding_scale(self.cfg.d_model**0.5), dtype=h.dtype)
        h = self.drop(self.position.embed(h, pos))
        if attention_block is not None and (cache is not None or self.cfg.attention.causal):
            raise ValueError("attention_block applies to a bidirectional model's whole-sequence forward only")
        # packed documents: attention stays within a document in a whole-sequence forward (positions stay global);
        # a KV cache ignores document ends (a prompt and its continuation are one document)
        documents = None
        if cache is None and self.cfg.embedding.document_end_id is not None:
            documents = document_ids(idx, self.cfg.embedding.document_end_id)
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
        cap = self.cfg.embedding.logit_softcap
        if cap is not None:
            logits = cap * torch.tanh(logits / cap)
        return logits

    def num_params(self) -> int:
        """Distinct trainable parameters (tied and shared weights counted once)."""
        return sum(p.numel() for p in self.parameters())
