"""Sequence mixers: the sublayer a block runs before its MLP, chosen per layer by `ModelConfig.layer_types`.

A mixer is one `Mixer` subclass registered in MIXERS. The block builds it as `cls(cfg)` and stores it under
its `slot` name (so `slot` is its state-dict prefix: blocks.<i>.<slot>.*, its norms <slot>_norm and
<slot>_out_norm). The class reports, without being built:

    num_params(cfg)          its parameter count
    param_parts(cfg)         that count by part, {name: count} ({} for one part), for slm-params
    flops_per_token(cfg)     training FLOPs per token beyond 6 x its parameters (PaLM's convention; attention's
                             12 * H * hd * T, 0 for a mixer whose work is all in its weights)
    new_state(cfg, cache)    its slot in a KV cache (`slm.model.cache.KVCache`), or None if it keeps nothing
    static_cache             False if it cannot run on a static cache (CUDA-graph / compiled decoding)

and runs `forward(x, seq, kv)`: x (B, T, d) -> (B, T, d). `seq` is what the whole forward shares (duck-typed,
built by the model): `seq.rotary(local)` RoPE tables or None, `seq.mask(window)` the attention mask (a
`slm.components.flex.Masking` in a whole-sequence forward; with a KV cache a boolean tensor or None),
`seq.record(cls, stats)` for auxiliary statistics (see `slm.components.moe`), `seq.cache` the KV cache
or None. `kv` is this block
application's `LayerCache` (its `state` from `new_state`, and the Canon inputs it keeps), or None for a
whole-sequence forward.

A state object (returned by `new_state`) reads the cache's per-chunk fields (static, slots, filled, visible,
ragged, lengths) and provides `select(cache, rows)` (a copy for a subset of rows), `reset()` and
`tensors()` (its buffers, for the memory count).
"""

from __future__ import annotations

from torch import nn

from slm.components.registry import Registry

MIXERS: Registry[type["Mixer"]] = Registry("mixer")


class Mixer(nn.Module):
    """Base class of the MIXERS entries (see the module docstring for the interface)."""

    slot = "mixer"
    static_cache = True

    @staticmethod
    def num_params(cfg) -> int:
        raise NotImplementedError

    @classmethod
    def param_parts(cls, cfg) -> dict[str, int]:
        return {}

    @staticmethod
    def flops_per_token(cfg) -> int:
        return 0

    @classmethod
    def new_state(cls, cfg, cache):
        return None
