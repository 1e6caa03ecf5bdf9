"""`ModelConfig`: one dataclass that fully describes a network (litgpt-style), validated on creation.

Its top level is the network's kind and shape (family, kind, n_layers, d_model, vocab_size, context_length, the
per-layer patterns layer_types and mlp_types); everything else is a settings group owned by the component that
reads it (`model.<group>.<field>`: attention, position, mlp, conv, norm, embedding, block, parametrization, moe,
memory, canon; slm.settings). Creating a config settles it (`Settings.settle`): groups adopted, types and declared
limits checked, sizes left as None derived (heads from head_dim or the reverse, kv heads = heads, d_ff from the MLP
kind, ...), then the checks that read several fields; so a preset can change `d_model` and stay consistent. After
creation every size is filled in, and `ModelConfig(**asdict(cfg)) == cfg`. Named presets live in
`conf/model/*.yaml`; stored configs in any earlier spelling load through `from_dict` (slm.renames).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from slm.components import FFNS, MIXERS
from slm.components.attention import AttentionSettings
from slm.components.canon import CanonSettings
from slm.components.mlp import MlpSettings
from slm.components.moe import MoeSettings
from slm.components.norm import NormSettings
from slm.components.parametrization import ParametrizationSettings
from slm.components.position import PositionSettings
from slm.components.shortconv import ConvSettings
from slm.components.titans import MemorySettings
from slm.model.block import BlockSettings
from slm.model.embedding import EmbeddingSettings
from slm.model.networks import NETWORKS
from slm.renames import RenameError, upgrade_model_fields
from slm.settings import Settings, SettingsError, require, setting

ConfigError = SettingsError
"""An invalid model config (slm.settings.SettingsError: the message names the dotted key, the value and what is
allowed); the name callers have always caught."""


@dataclass
class ModelConfig(Settings):
    family: str = "custom"
    """Label for result tables (gpt2, llama3, ...); does not change the network."""
    kind: str = setting("transformer", choices=NETWORKS)
    """Network (slm.model.networks): transformer, or linear / mlp, next-token models over one flattened window
    of exactly context_length tokens (arXiv 2512.20877's baselines; they read d_model, vocab_size,
    context_length, mlp.window_hidden, block.dropout and parametrization.init, and score the token after the
    window only)."""
    n_layers: int = setting(2, gt=0)
    """Number of distinct transformer blocks (each applied `block.repeat` times)."""
    d_model: int = setting(64, gt=0)
    """Width of the residual stream (hidden size)."""
    vocab_size: int = setting(256, gt=0)
    """Token vocabulary size (rows of the embedding); slm-train sets it to the tokenizer's (padded) vocabulary."""
    context_length: int = setting(128, gt=0)
    """Longest sequence the model takes; sizes learned positions and bounds the sliding window."""
    layer_types: list[str] = setting(factory=lambda: ["attn"], choices=MIXERS, each=True)
    """Sequence mixer per layer: attn, local_attn (sliding window), conv (LFM2 short conv), mac (Titans memory as
    context); n_layers entries, or a shorter unit repeated over the layers, e.g. [local_attn, attn] (a string
    splits at commas)."""
    mlp_types: list[str] = setting(factory=lambda: ["dense"], choices=FFNS, each=True)
    """Feed-forward per layer: dense (one MLP of kind mlp.kind), moe (experts of that kind); given like
    layer_types."""
    attention: AttentionSettings = setting(factory=AttentionSettings)
    """The attention layers (slm.components.attention), model.attention.<field>: n_heads, n_kv_heads, head_dim,
    causal, block, sliding_window, scale, logit_softcap, qk_norm, qk_norm_scope."""
    position: PositionSettings = setting(factory=PositionSettings)
    """Position information (slm.components.position), model.position.<field>: kind, rope_theta, rope_theta_local,
    rotary_fraction."""
    mlp: MlpSettings = setting(factory=MlpSettings)
    """The MLPs (slm.components.mlp), model.mlp.<field>: kind, d_ff, d_ff_multiple, ratio, gelu_approximate,
    window_hidden."""
    conv: ConvSettings = setting(factory=ConvSettings)
    """The conv mixer (slm.components.shortconv), model.conv.<field>: kernel."""
    norm: NormSettings = setting(factory=NormSettings)
    """The norms (slm.components.norm), model.norm.<field>: kind, eps, placement, final."""
    embedding: EmbeddingSettings = setting(factory=EmbeddingSettings)
    """The token embedding and the output head (slm.model.embedding), model.embedding.<field>: tie, scale,
    padding_idx, mask_token_id, document_end_id, head_bias, logit_softcap."""
    block: BlockSettings = setting(factory=BlockSettings)
    """How blocks are built and stacked (slm.model.block), model.block.<field>: bias, dropout, dropout_at, repeat,
    loop_layers, loop_steps."""
    parametrization: ParametrizationSettings = setting(factory=ParametrizationSettings)
    """Init and the scaling of init, learning rates and multipliers with shape (slm.components.parametrization),
    model.parametrization.<field>: kind, init, init_std, base_width, base_depth, depth_alpha, base_head_dim,
    decay."""
    moe: MoeSettings = setting(factory=MoeSettings)
    """The mixture-of-experts layers (slm.components.moe), model.moe.<field>: n_experts, top_k, expert_d_ff,
    shared_expert_d_ff, norm_topk_prob, aux_coef, aux_scope, z_coef."""
    memory: MemorySettings = setting(factory=MemorySettings)
    """Titans' memory-as-context layers (slm.components.titans), model.memory.<field>: layers, segment, chunk,
    depth, hidden, heads, persistent_tokens, lr."""
    canon: CanonSettings = setting(factory=CanonSettings)
    """Canon layers (slm.components.canon), model.canon.<field>: kind, set, b_after_qk_norm, kernel."""

    def __post_init__(self) -> None:
        self.settle("model")

    def check(self, key: str, root) -> None:
        """The per-layer patterns: at least one entry, at most one per layer."""
        for name, registry in (("layer_types", MIXERS), ("mlp_types", FFNS)):
            pattern = getattr(self, name)
            require((bool(pattern), f"{key}.{name}", pattern,
                     f"a non-empty list of {registry.kind}s, e.g. [{registry.keys()[0]}]"),
                    (len(pattern) <= self.n_layers, f"{key}.{name}", pattern, f"has {len(pattern)} entries for "
                     f"n_layers={self.n_layers}: give one per layer or a shorter unit to repeat"))

    # ------------------------------------------------------------------ derived
    @property
    def depth(self) -> int:
        """Block applications per forward pass (block.repeat and the refinement loop included)."""
        return len(self.block_schedule())

    def block_schedule(self) -> list[int]:
        """The block run by each application, in order (BlockSettings.schedule)."""
        return self.block.schedule(self.n_layers)

    @property
    def has_final_norm(self) -> bool:
        """Whether the network normalises before the head (`norm.final`, or its default by placement)."""
        return self.norm.has_final

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
        window = self.attention.sliding_window
        if "local_attn" in self.layer_types and window >= self.context_length:
            notes.append(f"attention.sliding_window={window} >= context_length={self.context_length}: the "
                         "sliding window has no effect at this context (local_attn layers attend like attn layers)")
        routed = [i for i in range(self.n_layers) if self.mlp_type(i) == "moe"]
        if routed and self.moe.top_k == self.moe.n_experts:
            notes.append(f"moe.top_k={self.moe.top_k} = moe.n_experts: every token uses every expert (a dense model)")
        return notes

    @classmethod
    def from_dict(cls, fields_: dict) -> "ModelConfig":
        """A config from stored fields in any spelling ever written (slm.renames.upgrade_model_fields: flat
        fields of today's groups, the legacy attention_pattern)."""
        return cls(**upgrade_fields(fields_))

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


def upgrade_fields(fields_: dict) -> dict:
    """Stored ModelConfig fields brought to the current schema (see ModelConfig.from_dict)."""
    try:
        return upgrade_model_fields(fields_)
    except RenameError as err:
        raise ConfigError(str(err)) from None
