"""`ModelConfig`: one dataclass that fully describes a network (litgpt-style), validated on creation.

Sizes left as None are derived in `__post_init__` (heads from head_dim or the reverse, kv heads = heads,
d_ff from the MLP kind), so a preset can change `d_model` and stay consistent. After creation every size
is filled in, and `ModelConfig(**asdict(cfg)) == cfg`. Named presets live in `conf/model/*.yaml`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

from typing import Literal

from slm.components import FFNS, INITS, MIXERS, MLPS, NORMS, POSITIONS
from slm.components.canon import CanonSettings, CanonSettingsError
from slm.components.moe import MoeSettings, MoeSettingsError
from slm.components.parametrization import PARAMETRIZATIONS, MupSettings, ParametrizationError
from slm.components.registry import UnknownKeyError
from slm.components.titans import MemorySettings, MemorySettingsError
from slm.model.networks import NETWORKS
from slm.renames import RenameError, upgrade_model_fields
from slm.typecheck import check_types, settings_from_node

DROPOUT_SITES = ("embedding", "attention", "mixer", "mlp")
REGISTRY_FIELDS = {"kind": NETWORKS, "norm": NORMS, "position": POSITIONS, "mlp": MLPS, "init": INITS,
                   "parametrization": PARAMETRIZATIONS}
"""Fields whose value is a key of a registry (layer_types and mlp_types: lists of MIXERS and FFNS keys)."""


class ConfigError(ValueError):
    """An invalid model config; the message names the field, the value and what is allowed."""


def _bad(field: str, value, allowed: str) -> ConfigError:
    return ConfigError(f"model.{field}={value!r} is invalid: {allowed}")


@dataclass
class ModelConfig:
    # --- identity
    family: str = "custom"
    """Label for result tables (gpt2, llama3, ...); does not change the network."""
    kind: str = "transformer"
    """Network (slm.model.networks): transformer, or linear / mlp, next-token models over one flattened window
    of exactly context_length tokens (arXiv 2512.20877's baselines; they read d_model, vocab_size,
    context_length, window_hidden, dropout and init, and score the token after the window only)."""
    window_hidden: list[int] = field(default_factory=list)
    """Hidden widths of an mlp window model (Linear, ReLU, dropout each); empty for the other kinds."""

    # --- shape
    n_layers: int = 2
    """Number of distinct transformer blocks (each applied `layer_repeat` times)."""
    d_model: int = 64
    """Width of the residual stream (hidden size)."""
    n_heads: int | None = None
    """Query heads; None derives d_model // head_dim."""
    n_kv_heads: int | None = None
    """Key/value heads (grouped-query attention when < n_heads); None means n_heads (MHA)."""
    head_dim: int | None = None
    """Channels per head; None derives d_model // n_heads. n_heads * head_dim may differ from d_model."""
    d_ff: int | None = None
    """MLP hidden size; None derives mlp_ratio * d, else 4 d (two-matrix MLPs) or 8/3 d (gated), rounded up to
    d_ff_multiple for gated MLPs."""
    d_ff_multiple: int = 64
    """Rounding multiple for a derived gated d_ff (LLaMA's multiple_of)."""
    mlp_ratio: float | None = None
    """A derived d_ff is mlp_ratio * d_model rounded up to d_ff_multiple (LFM2: 3); None: the MLP kind's rule."""
    vocab_size: int = 256
    """Token vocabulary size (rows of the embedding); slm-train sets it to the tokenizer's (padded) vocabulary."""
    context_length: int = 128
    """Longest sequence the model takes; sizes learned positions and bounds the sliding window."""
    tie_embeddings: bool = True
    """Share the input embedding matrix with the output head."""
    layer_repeat: int = 1
    """MobileLLM's immediate block-wise sharing: each block is applied this many times in a row."""
    loop_layers: int = 0
    """The last loop_layers blocks form a recursive refinement module: applied loop_steps times as a group,
    with the same weights each time (0: none)."""
    loop_steps: int = 1
    """Applications of the loop_layers group (1: once, an ordinary stack)."""

    # --- components (registry keys)
    norm: str = "rmsnorm"
    """Normalisation: layernorm, rmsnorm, rmsnorm_gemma (scale by 1 + w)."""
    norm_eps: float = 1e-6
    """Epsilon of every norm."""
    norm_placement: Literal["pre", "post", "sandwich"] = "pre"
    """pre (norm before each sublayer), post (after the residual add), sandwich (before and after)."""
    qk_norm: bool = False
    """Norm (of kind `norm`) on queries and keys, before RoPE (Qwen3, Gemma3, PhysicsLM4)."""
    qk_norm_scope: Literal["head", "all_heads"] = "head"
    """head: one norm per head over head_dim (Qwen3, Gemma3); all_heads: one norm over all heads, H * head_dim
    for q and KV * head_dim for k (the Canon reference, PhysicsLM4)."""
    position: str = "rope"
    """Position information: learned (absolute), rope, none."""
    rope_theta: float = 10000.0
    """RoPE base."""
    rope_theta_local: float | None = None
    """RoPE base of sliding-window layers; None means rope_theta (Gemma3 uses 10k local, 1M global)."""
    rotary_fraction: float = 1.0
    """Fraction of each head's channels that RoPE rotates (partial rotary)."""
    layer_types: list[str] = field(default_factory=lambda: ["attn"])
    """Sequence mixer per layer: attn, local_attn (sliding window), conv (LFM2 short conv), mac (Titans memory as
    context); n_layers entries, or a shorter unit repeated over the layers, e.g. [local_attn, attn] (a string
    splits at commas)."""
    mlp_types: list[str] = field(default_factory=lambda: ["dense"])
    """Feed-forward per layer: dense (one `mlp`), moe (experts of kind `mlp`); given like layer_types."""
    mlp: str = "swiglu"
    """MLP kind (of the dense layers and of every expert): gelu, relu (two matrices), swiglu, geglu (gated)."""
    gelu_approximate: Literal["none", "tanh"] = "tanh"
    """GELU form for gelu/geglu: tanh (GPT-2's gelu_new, Gemma) or none (exact erf)."""
    causal: bool = True
    """Causal (autoregressive) or bidirectional attention."""
    attention_block: int | None = None
    """Block-causal attention (block diffusion, an AR model converted to diffusion): each position sees its
    own block of this many positions, both ways, and every earlier block (1 = causal, >= context = fully
    bidirectional); None: per `causal`. Needs causal=false and causal Canon layers."""
    sliding_window: int | None = None
    """Keys each query of a local_attn layer sees, itself included (required when layer_types has one)."""
    attn_scale: float | None = None
    """Scale of q.k; None means 1 / sqrt(head_dim)."""
    attn_logit_softcap: float | None = None
    """Soft-cap attention logits as cap * tanh(s / cap); None disables."""
    final_logit_softcap: float | None = None
    """Soft-cap output logits as cap * tanh(z / cap); None disables."""
    conv_kernel: int = 3
    """Kernel of the conv mixer (LFM2's conv_L_cache): positions mixed, itself included."""
    moe: MoeSettings = field(default_factory=MoeSettings)
    """The mixture-of-experts layers (slm.components.moe), model.moe.<field>: n_experts, top_k, expert_d_ff,
    shared_expert_d_ff, norm_topk_prob, aux_coef, aux_scope, z_coef."""
    memory: MemorySettings = field(default_factory=MemorySettings)
    """Titans' memory-as-context layers (slm.components.titans), model.memory.<field>: layers, segment, chunk,
    depth, hidden, heads, persistent_tokens, lr."""
    canon: CanonSettings = field(default_factory=CanonSettings)
    """Canon layers (slm.components.canon), model.canon.<field>: kind, set, b_after_qk_norm, kernel."""

    # --- details
    bias: bool = False
    """Biases in every linear layer and in LayerNorm (GPT-2 has them)."""
    mask_token_id: int | None = None
    """Masked diffusion: the token id the model fills in (slm-train sets it from the tokenizer when the
    objective needs one); None for an autoregressive model."""
    document_end_id: int | None = None
    """Packed documents: the token id that ends a document, itself included (slm-train sets the tokenizer's
    end-of-text id when data.pack_documents=true). A whole-sequence forward attends only within each document;
    positions stay global, conv mixers and Canon layers still see kernel - 1 tokens across an end, a KV cache
    ignores it. None: attention crosses documents."""
    embedding_padding_idx: int | None = None
    """Embedding row that starts at zero and gets no gradient from the lookup (transformers' padding_idx,
    set by its pad_token_id); None: none."""
    scale_embeddings: bool = False
    """Multiply token embeddings by sqrt(d_model) (Gemma)."""
    dropout: float = 0.0
    """Dropout probability at each site in `dropout_at` (a window model: after each hidden layer)."""
    dropout_at: list[str] = field(default_factory=lambda: list(DROPOUT_SITES))
    """Where `dropout` applies: embedding (after the position embedding), attention (the probabilities),
    mixer (the mixer's output, before the residual add), mlp (the MLP's output, likewise); mixer or mlp listed
    twice drops out twice (arXiv 2512.20877's RoPE-ablation blocks do this to the FFN output)."""
    init: str = "gpt2"
    """Init scheme (slm.components.init): gpt2 (residual output projections scaled by 1 / sqrt(2 * depth)),
    normal (transformers' LLaMA family: nothing scaled), torch (PyTorch's module defaults) or torch_mha (torch,
    attention as nn.MultiheadAttention's); presets use their reference implementation's."""
    init_std: float = 0.02
    """Std of the normal init of linear, embedding (and, under `normal`, conv-mixer) weights."""
    head_bias: bool = False
    """A bias on the output head (arXiv 2512.20877's models have one)."""
    final_norm: bool | None = None
    """A norm before the head; None: with pre and sandwich placement, not with post (a post-norm block ends
    normalised). arXiv 2512.20877's post-norm models add one."""

    # --- parametrization (slm.components.parametrization)
    parametrization: str = "sp"
    """How init, learning rates and forward multipliers scale with shape: sp (standard: none), mup (μP over
    width, from mup.base_width) or completep (μP and CompleteP's depth rule, from mup.base_depth)."""
    mup: MupSettings = field(default_factory=MupSettings)
    """The base shape mup and completep scale from: base_width, base_depth, depth_alpha, base_head_dim."""

    def __post_init__(self) -> None:
        try:
            for name, cls in GROUPS.items():  # a mapping from YAML or a stored config -> its settings, types checked
                setattr(self, name, settings_from_node(cls, getattr(self, name), f"model.{name}", ConfigError))
        except ParametrizationError as err:  # model.mup's own checks
            raise ConfigError(str(err)) from None
        check_types(self, "model", ConfigError)  # a string in a numeric field, an infinite theta, ...
        self._check_keys()
        self._derive_sizes()
        self._check_values()

    # ------------------------------------------------------------------ derived
    @property
    def depth(self) -> int:
        """Block applications per forward pass (layer_repeat and the refinement loop included)."""
        return len(self.block_schedule())

    def block_schedule(self) -> list[int]:
        """The block run by each application, in order: every block layer_repeat times in a row, and the last
        loop_layers blocks, as a group, loop_steps times (MobileLLM-LS: 0,0,1,1,...; a loop of 2 over 3
        steps at the end of 4 blocks: 0,1,2,3,2,3,2,3)."""
        stack = list(range(self.n_layers - self.loop_layers))
        stack += list(range(self.n_layers - self.loop_layers, self.n_layers)) * self.loop_steps
        return [i for i in stack for _ in range(self.layer_repeat)]

    @property
    def has_final_norm(self) -> bool:
        """Whether the network normalises before the head (`final_norm`, or its default by placement)."""
        return self.norm_placement != "post" if self.final_norm is None else self.final_norm

    def layer_type(self, layer: int) -> str:
        """The mixer (MIXERS key) of block `layer`."""
        return self.layer_types[layer % len(self.layer_types)]

    def mlp_type(self, layer: int) -> str:
        """The feed-forward kind (FFNS key) of block `layer`."""
        return self.mlp_types[layer % len(self.mlp_types)]

    def to_dict(self) -> dict:
        return asdict(self)

    def notes(self) -> list[str]:
        """Settings that are valid but do not do what their name suggests at this shape (for slm-params, the
        dry run and the run record)."""
        notes = []
        if "local_attn" in self.layer_types and self.sliding_window >= self.context_length:
            notes.append(f"sliding_window={self.sliding_window} >= context_length={self.context_length}: the "
                         "sliding window has no effect at this context (local_attn layers attend like attn layers)")
        routed = [i for i in range(self.n_layers) if self.mlp_type(i) == "moe"]
        if routed and self.moe.top_k == self.moe.n_experts:
            notes.append(f"moe.top_k={self.moe.top_k} = moe.n_experts: every token uses every expert (a dense model)")
        return notes

    @classmethod
    def from_dict(cls, fields_: dict) -> "ModelConfig":
        """A config from stored fields in any spelling ever written (slm.renames.upgrade_model_fields: flat
        moe/memory/canon fields, the legacy attention_pattern)."""
        return cls(**upgrade_fields(fields_))

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    # ------------------------------------------------------------------ checks
    def _check_keys(self) -> None:
        for name, registry in REGISTRY_FIELDS.items():  # "model.norm=x: unknown norm 'x'; choose one of: ..."
            registry.check(getattr(self, name), f"model.{name}", ConfigError)
        self.layer_types = self._pattern("layer_types", MIXERS)
        self.mlp_types = self._pattern("mlp_types", FFNS)

    def _pattern(self, name: str, registry) -> list[str]:
        """A per-layer pattern as a list of registry keys (a string is split at commas)."""
        value = getattr(self, name)
        items = [part.strip() for part in value.split(",")] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not items or not all(isinstance(k, str) and k for k in items):
            raise _bad(name, value, f"a non-empty list of {registry.kind}s, e.g. [{registry.keys()[0]}]")
        for key in items:
            try:
                registry.get(key)
            except UnknownKeyError as err:
                raise _bad(name, value, str(err)) from None
        return list(items)

    def _positive(self, *names: str) -> None:
        for name in names:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise _bad(name, value, "must be a positive integer")

    def _nonnegative(self, *names: str) -> None:
        for name in names:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _bad(name, value, "must be an integer >= 0 (0: none)")

    def _derive_sizes(self) -> None:
        self._positive("n_layers", "d_model", "vocab_size", "context_length", "layer_repeat", "d_ff_multiple",
                       "loop_steps")
        if isinstance(self.loop_layers, bool) or not isinstance(self.loop_layers, int) \
                or not 0 <= self.loop_layers <= self.n_layers:
            raise _bad("loop_layers", self.loop_layers, f"must be an integer in 0..n_layers={self.n_layers}")
        if self.n_heads is None and self.head_dim is None:
            if self.kind == "transformer":
                raise _bad("n_heads", None, "set n_heads or head_dim (or both)")
            self.n_heads = 1  # a window model has no attention; the transformer fields only need to be valid
        if self.n_heads is None:
            self._positive("head_dim")
            if self.d_model % self.head_dim:
                raise _bad("d_model", self.d_model, f"must be a multiple of head_dim={self.head_dim} when n_heads is derived")
            self.n_heads = self.d_model // self.head_dim
        if self.head_dim is None:
            self._positive("n_heads")
            if self.d_model % self.n_heads:
                raise _bad("d_model", self.d_model, f"must be a multiple of n_heads={self.n_heads} when head_dim is derived")
            self.head_dim = self.d_model // self.n_heads
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        self._positive("n_heads", "head_dim", "n_kv_heads")
        if self.n_heads % self.n_kv_heads:
            raise _bad("n_kv_heads", self.n_kv_heads, f"must divide n_heads={self.n_heads}")
        if self.d_ff is None and self.mlp_ratio is not None:
            if isinstance(self.mlp_ratio, bool) or not isinstance(self.mlp_ratio, (int, float)) or not self.mlp_ratio > 0:
                raise _bad("mlp_ratio", self.mlp_ratio, "must be a number > 0 (or null)")
            self.d_ff = self.d_ff_multiple * math.ceil(self.mlp_ratio * self.d_model / self.d_ff_multiple)
        elif self.d_ff is None:
            self.d_ff = MLPS.get(self.mlp).default_d_ff(self.d_model, self.d_ff_multiple)
        self._positive("d_ff")

    def _check_kind(self) -> None:
        hidden = self.window_hidden
        if any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in hidden):
            raise _bad("window_hidden", hidden, "a list of positive integer widths")
        if bool(hidden) != (self.kind == "mlp"):
            raise _bad("window_hidden", hidden, f"kind={self.kind!r} " + (
                "needs at least one hidden width, e.g. [256, 256]" if self.kind == "mlp" else "takes none; set []"))

    def _check_values(self) -> None:
        self._check_kind()
        for name in ("layer_types", "mlp_types"):
            if len(getattr(self, name)) > self.n_layers:
                raise _bad(name, getattr(self, name), f"has {len(getattr(self, name))} entries for n_layers="
                           f"{self.n_layers}: give one per layer or a shorter unit to repeat")
        try:
            self.canon.check(self)
            self.moe.check(self)
            self.memory.check(self)  # places memory.layers into layer_types
        except (CanonSettingsError, MoeSettingsError, MemorySettingsError) as err:
            raise ConfigError(str(err)) from None
        if "local_attn" in self.layer_types:
            if self.sliding_window is None:
                raise _bad("sliding_window", None, f"layer_types {self.layer_types} has local_attn layers; set a window")
            self._positive("sliding_window")
            if self.sliding_window > self.context_length:
                raise _bad("sliding_window", self.sliding_window, f"must be <= context_length={self.context_length}")
        elif self.sliding_window is not None:
            raise _bad("sliding_window", self.sliding_window, "layer_types has no local_attn layer to use it; add one or set null")
        self._positive("conv_kernel")
        if self.attention_block is not None:
            self._positive("attention_block")
            if self.causal:
                raise _bad("attention_block", self.attention_block, "block-causal attention needs model.causal=false")
        for name in ("embedding_padding_idx", "mask_token_id", "document_end_id"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not 0 <= value < self.vocab_size):
                raise _bad(name, value, f"must be null or a token id in 0..{self.vocab_size - 1}")
        if self.document_end_id is not None and (self.kind != "transformer" or "mac" in self.layer_types):
            raise _bad("document_end_id", self.document_end_id, "packed documents need kind=transformer without "
                       "mac layers (a window model or a Titans memory reads across document ends); set null")
        if self.position == "rope":
            if not 0 < self.rotary_fraction <= 1:
                raise _bad("rotary_fraction", self.rotary_fraction, "must be in (0, 1]")
            if int(self.head_dim * self.rotary_fraction) < 2:
                raise _bad("rotary_fraction", self.rotary_fraction, f"rotates < 2 of head_dim={self.head_dim} channels")
            for name in ("rope_theta", "rope_theta_local"):
                value = getattr(self, name)
                if value is not None and value <= 0:
                    raise _bad(name, value, "must be > 0")
        for name in ("norm_eps", "init_std", "attn_scale", "attn_logit_softcap", "final_logit_softcap"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise _bad(name, value, "must be > 0 (or null where optional)")
        if not 0 <= self.dropout < 1:
            raise _bad("dropout", self.dropout, "must be in [0, 1)")
        sites = self.dropout_at
        if isinstance(sites, str):  # "mixer,mlp" from the command line
            sites = [part.strip() for part in sites.split(",") if part.strip()]
        if not isinstance(sites, (list, tuple)) or any(site not in DROPOUT_SITES for site in sites):
            raise _bad("dropout_at", self.dropout_at, f"a list of sites from: {', '.join(DROPOUT_SITES)} (may be empty)")
        for site in ("embedding", "attention"):
            if sites.count(site) > 1:
                raise _bad("dropout_at", self.dropout_at, f"'{site}' may appear once (only mixer and mlp may repeat)")
        self.dropout_at = list(sites)
        try:
            PARAMETRIZATIONS.get(self.parametrization).check(self)
        except ParametrizationError as err:
            raise ConfigError(str(err)) from None


GROUPS = {"moe": MoeSettings, "memory": MemorySettings, "canon": CanonSettings, "mup": MupSettings}
"""The nested settings of ModelConfig (model.<group>.<field>), each validated by its component (`check`)."""


def upgrade_fields(fields_: dict) -> dict:
    """Stored ModelConfig fields brought to the current schema (see ModelConfig.from_dict)."""
    try:
        return upgrade_model_fields(fields_)
    except RenameError as err:
        raise ConfigError(str(err)) from None
