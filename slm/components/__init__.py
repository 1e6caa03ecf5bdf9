"""Building blocks chosen by string key. Importing this package fills every registry: it imports every module beside
it, so a new component (a mixer in its own file, say) registers itself without an edit here."""

import importlib
import pkgutil

from slm.components.attention import MultiHeadAttention, SlidingWindowAttention
from slm.components.canon import CANON_POSITIONS, CANONS
from slm.components.init import INITS
from slm.components.mixer import MIXERS
from slm.components.mlp import FFNS, MLPS
from slm.components.moe import MoE
from slm.components.norm import NORMS
from slm.components.parametrization import PARAMETRIZATIONS
from slm.components.position import POSITIONS
from slm.components.registry import Registry, UnknownKeyError
from slm.components.shortconv import ShortConv
from slm.components.titans import MemoryAsContext

for _module in pkgutil.iter_modules(__path__):  # the files not named above: a new component's registers it
    importlib.import_module(f"{__name__}.{_module.name}")

REGISTRIES = {r.kind: r for r in (NORMS, POSITIONS, MLPS, FFNS, MIXERS, CANONS, INITS, PARAMETRIZATIONS)}

__all__ = [
    "CANONS", "CANON_POSITIONS", "FFNS", "INITS", "MIXERS", "MLPS", "MemoryAsContext", "MoE", "MultiHeadAttention",
    "NORMS", "PARAMETRIZATIONS", "POSITIONS",
    "REGISTRIES", "Registry", "ShortConv", "SlidingWindowAttention", "UnknownKeyError",
]
