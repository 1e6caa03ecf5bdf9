"""Building blocks chosen by string key. Importing this package fills every registry."""

from slm.components.attention import ATTENTIONS
from slm.components.canon import CANON_POSITIONS, CANONS
from slm.components.mlp import MLPS
from slm.components.norm import NORMS
from slm.components.position import POSITIONS
from slm.components.registry import Registry, UnknownKeyError

REGISTRIES = {r.kind: r for r in (NORMS, POSITIONS, MLPS, ATTENTIONS, CANONS)}

__all__ = [
    "ATTENTIONS", "CANONS", "CANON_POSITIONS", "MLPS", "NORMS", "POSITIONS", "REGISTRIES", "Registry",
    "UnknownKeyError",
]
