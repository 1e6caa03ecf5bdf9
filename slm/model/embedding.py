"""The token embedding and the output head of a transformer: the `model.embedding` settings (tying, scaling,
the special token ids the network reads, the head's bias and soft-cap) and their parameter count. Plain
PyTorch; slm.model.transformer builds the modules (`tok_emb`, `lm_head`) from these settings."""

from __future__ import annotations

from dataclasses import dataclass

from slm.components import POSITIONS
from slm.settings import Settings, require, setting


@dataclass
class EmbeddingSettings(Settings):
    """`model.embedding`: the token embedding, the output head, and the token ids the network treats specially."""

    tie: bool = True
    """Share the input embedding matrix with the output head."""
    scale: bool = False
    """Multiply token embeddings by sqrt(d_model) (Gemma)."""
    padding_idx: int | None = setting(None, ge=0, null="none")
    """Embedding row that starts at zero and gets no gradient from the lookup (transformers' padding_idx,
    set by its pad_token_id); None: none."""
    mask_token_id: int | None = setting(None, ge=0, null="an autoregressive model")
    """Masked diffusion: the token id the model fills in (slm-train sets it from the tokenizer when the
    objective needs one); None for an autoregressive model."""
    document_end_id: int | None = setting(None, ge=0, null="attention crosses documents")
    """Packed documents: the token id that ends a document, itself included (slm-train sets the tokenizer's
    end-of-text id when data.pack_documents=true). A whole-sequence forward attends only within each document;
    positions stay global, conv mixers and Canon layers still see kernel - 1 tokens across an end, a KV cache
    ignores it. None: attention crosses documents."""
    head_bias: bool = False
    """A bias on the output head (arXiv 2512.20877's models have one)."""
    logit_softcap: float | None = setting(None, gt=0, null="disabled")
    """Soft-cap output logits as cap * tanh(z / cap); None disables."""

    def check(self, key: str, cfg) -> None:
        """Token ids inside the vocabulary; packed documents only where every mixer keeps to them."""
        top = cfg.vocab_size - 1
        require(*((getattr(self, name) is None or getattr(self, name) <= top, f"{key}.{name}", getattr(self, name),
                   f"must be null or a token id in 0..{top}") for name in ("padding_idx", "mask_token_id",
                                                                         "document_end_id")),
                (self.document_end_id is None or (cfg.kind == "transformer" and "mac" not in cfg.layer_types),
                 f"{key}.document_end_id", self.document_end_id, "packed documents need kind=transformer without "
                 "mac layers (a window model or a Titans memory reads across document ends); set null"))


def embedding_params(cfg) -> int:
    """The token embedding, learned positions, and the head's weight when untied and its bias."""
    rows = cfg.vocab_size * cfg.d_model
    return (rows + POSITIONS.get(cfg.position.kind).num_params(cfg) + (0 if cfg.embedding.tie else rows)
            + (cfg.vocab_size if cfg.embedding.head_bias else 0))
