"""`ModelConfig`: one dataclass that fully describes a network (litgpt-style), validated on creation.

Sizes left as None are derived in `__post_init__` (heads from head_dim or the reverse, kv heads = heads,
d_ff from the MLP kind), so a preset can change `d_model` and stay consistent. After creation every size
is filled in, and `ModelConfig(**asdict(cfg)) == cfg`. Named presets live in `conf/model/*.yaml`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

from slm.components import CANON_POSITIONS, CANONS, FFNS, INITS, MIXERS, MLPS, NORMS, POSITIONS
from slm.components.moe import MOE_AUX_SCOPES
from slm.components.parametrization import PARAMETRIZATIONS, MupSettings, ParametrizationError
from slm.components.registry import UnknownKeyError
from slm.model.networks import NETWORKS
from slm.typecheck import check_types

NORM_PLACEMENTS = ("pre", "post", "sandwich")
QK_NORM_SCOPES = ("head", "all_heads")
DROPOUT_SITES = ("embedding", "attention", "mixer", "mlp")
GELU_APPROXIMATIONS = ("none", "tanh")
REGISTRY_FIELDS = {"kind": NETWORKS, "norm": NORMS, "position": POSITIONS, "mlp": MLPS, "canon": CANONS,
                   "init": INITS, "parametrization": PARAMETRIZATIONS}
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
    norm_placement: str = "pre"
    """pre (norm before each sublayer), post (after the residual add), sandwich (before and after)."""
    qk_norm: bool = False
    """Norm (of kind `norm`) on queries and keys, before RoPE (Qwen3, Gemma3, PhysicsLM4)."""
    qk_norm_scope: str = "head"
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
    n_experts: int = 0
    """Experts in each moe layer (mlp_types); 0 when there is no moe layer."""
    top_k: int = 2
    """Experts each token is routed to in a moe layer."""
    expert_d_ff: int | None = None
    """Hidden size of each expert; None: d_ff."""
    shared_expert_d_ff: int = 0
    """Hidden size of an always-on shared expert added to each moe layer (DeepSeekMoE-style); 0: none."""
    norm_topk_prob: bool = True
    """Renormalise each token's top_k router probabilities to sum to 1 (Qwen3-MoE, Mixtral)."""
    moe_aux_coef: float = 0.01
    """Weight of the load-balancing loss E * sum_i f_i * P_i (Switch Transformer) in the training loss."""
    moe_aux_scope: str = "layer"
    """layer: the balancing loss per moe layer, averaged (Switch); pooled: over all layers' tokens at once
    (transformers' load_balancing_loss_func, Qwen3-MoE / Mixtral)."""
    moe_z_coef: float = 0.0
    """Weight of the router z-loss, mean logsumexp(router logits)^2 (ST-MoE); 0: off."""
    gelu_approximate: str = "tanh"
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
    memory_layers: list[int] = field(default_factory=list)
    """Blocks (0-based) whose mixer is Titans' memory as context (`mac`, slm.components.titans) whatever
    layer_types says; [] none. The study's Titans-MAC: [0, 7, 14, 21]."""
    memory_segment: int | None = None
    """Positions per segment of a mac layer: attention runs within the segment (plus the persistent and
    retrieved tokens), the neural memory carries what came before (required when there is a mac layer)."""
    memory_chunk: int | None = None
    """Tokens whose memory gradients are taken at the same weights (Titans' chunked training); divides
    memory_segment (1: token by token); None: memory_segment."""
    memory_depth: int = 2
    """Layers of the memory MLP (1: a linear memory)."""
    memory_hidden: int | None = None
    """Hidden width of the memory MLP; None: its input width, d_model / memory_heads."""
    memory_heads: int = 1
    """Independent memories, each over d_model / memory_heads channels."""
    persistent_tokens: int = 0
    """Learned tokens prepended to every segment's attention in a mac layer (Titans' persistent memory)."""
    memory_lr: float = 0.5
    """Inner learning rate of a mac layer's memory: a token's step is memory_lr * sigmoid(gate), and a chunk
    (memory_chunk tokens) whose steps sum to more than memory_lr is scaled down to sum to memory_lr."""
    canon: str = "conv"
    """Canon layer kind: conv (depthwise causal conv1d, residual) or conv_centered (the window centred on each
    position: a bidirectional model's choice)."""
    canon_set: str = ""
    """Canon positions, any of ABCD: A before the mixer, B on attention's fused qkv, C before the MLP, D inside it."""
    canon_b_after_qk_norm: bool = False
    """Canon B on cat(q, k, v) after the qk-norm, as the Canon reference (PhysicsLM4) orders them; false: on the
    fused projection before it. The two coincide without qk_norm."""
    canon_kernel: int = 4
    """Canon convolution width (positions mixed, itself included)."""

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
        if routed and self.top_k == self.n_experts:
            notes.append(f"top_k={self.top_k} = n_experts: every token uses every expert (a dense model)")
        return notes

    @classmethod
    def from_dict(cls, fields_: dict) -> "ModelConfig":
        """A config from stored fields, including those written before `layer_types` existed (config.json of
        older runs): `attention: mha` is dropped and `attention_pattern` (L local, G global) becomes
        layer_types."""
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
        if self.qk_norm_scope not in QK_NORM_SCOPES:
            raise _bad("qk_norm_scope", self.qk_norm_scope, f"choose one of: {', '.join(QK_NORM_SCOPES)}")
        if self.norm_placement not in NORM_PLACEMENTS:
            raise _bad("norm_placement", self.norm_placement, f"choose one of: {', '.join(NORM_PLACEMENTS)}")
        if self.gelu_approximate not in GELU_APPROXIMATIONS:
            raise _bad("gelu_approximate", self.gelu_approximate, f"choose one of: {', '.join(GELU_APPROXIMATIONS)}")

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
        if self.expert_d_ff is None:
            self.expert_d_ff = self.d_ff
        self._positive("expert_d_ff")

    def _check_moe(self) -> None:
        if "moe" not in self.mlp_types:
            if self.n_experts != 0:
                raise _bad("n_experts", self.n_experts, "mlp_types has no moe layer to use it; add one or set 0")
            return
        if isinstance(self.n_experts, bool) or not isinstance(self.n_experts, int) or self.n_experts < 1:
            raise _bad("n_experts", self.n_experts, f"mlp_types {self.mlp_types} has moe layers: a positive number "
                       "of experts is needed")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or not 1 <= self.top_k <= self.n_experts:
            raise _bad("top_k", self.top_k, f"must be an integer in 1..n_experts={self.n_experts}")
        self._nonnegative("shared_expert_d_ff")
        if self.moe_aux_scope not in MOE_AUX_SCOPES:
            raise _bad("moe_aux_scope", self.moe_aux_scope, f"choose one of: {', '.join(MOE_AUX_SCOPES)}")
        for name in ("moe_aux_coef", "moe_z_coef"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise _bad(name, value, "must be a finite number >= 0")
        if self.bias:
            raise _bad("bias", self.bias, "moe layers have no biases (router and experts); set false")
        if "D" in self.canon_set:
            raise _bad("canon_set", self.canon_set, "Canon D sits inside a dense MLP; moe layers have none")

    def _check_memory(self) -> None:
        """Place `memory_layers` into layer_types (one entry per block) and check the mac settings."""
        layers = self.memory_layers
        if not isinstance(layers, (list, tuple)) or len(set(layers)) != len(layers) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < self.n_layers for i in layers):
            raise _bad("memory_layers", layers, f"distinct block indices in 0..{self.n_layers - 1} (n_layers - 1)")
        self.memory_layers = sorted(layers)
        if layers:
            types = [self.layer_type(i) for i in range(self.n_layers)]
            self.layer_types = ["mac" if i in layers else t for i, t in enumerate(types)]
        if "mac" not in self.layer_types:
            if self.memory_segment is not None:
                raise _bad("memory_segment", self.memory_segment, "no mac layer to use it; set memory_layers or null")
            return
        if self.memory_segment is None:
            raise _bad("memory_segment", None, "mac layers need a segment length (positions per segment)")
        self._positive("memory_segment", "memory_depth", "memory_heads")
        if self.memory_segment > self.context_length:
            raise _bad("memory_segment", self.memory_segment, f"must be <= context_length={self.context_length}")
        if self.memory_chunk is None:
            self.memory_chunk = self.memory_segment
        self._positive("memory_chunk")
        if self.memory_segment % self.memory_chunk:
            raise _bad("memory_chunk", self.memory_chunk, f"must divide memory_segment={self.memory_segment}")
        if self.d_model % self.memory_heads:
            raise _bad("memory_heads", self.memory_heads, f"must divide d_model={self.d_model}")
        if self.memory_hidden is None:
            self.memory_hidden = self.d_model // self.memory_heads
        self._positive("memory_hidden")
        self._nonnegative("persistent_tokens")
        if isinstance(self.memory_lr, bool) or not isinstance(self.memory_lr, (int, float)) \
                or not 0 < self.memory_lr < math.inf:
            raise _bad("memory_lr", self.memory_lr, "must be a finite number > 0")
        if not self.causal:
            raise _bad("causal", self.causal, "mac layers (a memory learned left to right) need causal=true")
        if "B" in self.canon_set:
            raise _bad("canon_set", self.canon_set, "Canon B sits inside plain attention; mac layers have none")

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
        self._check_moe()
        self._check_memory()
        if "local_attn" in self.layer_types:
            if self.sliding_window is None:
                raise _bad("sliding_window", None, f"layer_types {self.layer_types} has local_attn layers; set a window")
            self._positive("sliding_window")
            if self.sliding_window > self.context_length:
                raise _bad("sliding_window", self.sliding_window, f"must be <= context_length={self.context_length}")
        elif self.sliding_window is not None:
            raise _bad("sliding_window", self.sliding_window, "layer_types has no local_attn layer to use it; add one or set null")
        if len(set(self.canon_set)) != len(self.canon_set) or set(self.canon_set) - set(CANON_POSITIONS):
            raise _bad("canon_set", self.canon_set, f"distinct letters from {CANON_POSITIONS!r}, e.g. 'AC'")
        self._positive("canon_kernel", "conv_kernel")
        if self.attention_block is not None:
            self._positive("attention_block")
            if self.causal:
                raise _bad("attention_block", self.attention_block, "block-causal attention needs model.causal=false")
            if self.canon_set and not CANONS.get(self.canon).causal:
                raise _bad("canon", self.canon, "reads the next block: block-causal attention needs canon=conv")
        if self.canon_set and self.causal and not CANONS.get(self.canon).causal:
            raise _bad("canon", self.canon, "reads future positions: a causal model needs canon=conv "
                       "(conv_centered is for bidirectional models, model.causal=false)")
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
            self.mup = MupSettings.from_node(self.mup)
            PARAMETRIZATIONS.get(self.parametrization).check(self)
        except ParametrizationError as err:
            raise ConfigError(str(err)) from None


_LEGACY_LETTERS = {"L": "local_attn", "G": "attn"}


def upgrade_fields(fields_: dict) -> dict:
    """Stored ModelConfig fields brought to the current schema (see ModelConfig.from_dict)."""
    fields_ = dict(fields_)
    attention = fields_.pop("attention", "mha")
    if attention != "mha":
        raise _bad("attention", attention, "the only attention kind ever stored is 'mha'")
    pattern = fields_.pop("attention_pattern", None)
    if pattern is not None:
        if "layer_types" in fields_:
            raise _bad("attention_pattern", pattern, "set layer_types instead (not both)")
        if not pattern or set(pattern) - set(_LEGACY_LETTERS):
            raise _bad("attention_pattern", pattern, "a non-empty string of L (local) and G (global)")
        fields_["layer_types"] = [_LEGACY_LETTERS[c] for c in pattern]
    return fields_
