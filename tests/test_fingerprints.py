"""One logit fingerprint per preset: a refactor must leave every preset's function bit-identical.

Each preset is built at its full size from seed 0 (on one thread, so the float summation order is fixed)
and run on a fixed batch of token ids; the fingerprint is the SHA-256 of the float32 logits plus a few
values, their sum and their L2 norm. On the machine the file was recorded on (same CPU model and
instruction set, same torch), the digest must match exactly. On another, the BLAS may pick other kernels
and round differently (CI's AVX-512 machines and this project's AVX2 ones disagree on the large-vocabulary
heads of qwen3 and lfm2 in the 7th digit), so only the numbers are compared: the values to 1e-5, and the
sum to 1e-4 of the logits' L2 norm. Rounding errors of relative size e per element move the sum by about
e times the norm when their signs are random, more when a whole row shares one (a norm's scale); between
an AVX2 and an AVX-512 machine the sum moved by up to 9e-6 of the norm (titans_mac), so 1e-4 leaves a
tenfold margin, and a change to the function moves the sum by far more.

A change that is meant to alter a preset (a new init scheme, a fixed bug) re-records the file:
`python -m tests.test_fingerprints` — and says in its commit why the numbers moved.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from tests.conftest import PRESETS, compose_model_node

FILE = Path(__file__).parent / "data" / "logit_fingerprints.json"

# Tiny configurations that reach code paths no preset uses (post-norm, learned positions with sharing,
# every Canon position, soft-caps, partial rotary, bidirectional attention, a Titans memory that learns).
TINY = {"n_layers": 3, "d_model": 32, "attention.n_heads": 4, "vocab_size": 61, "context_length": 16}
VARIANTS = {
    "post_norm_shared_learned": {"norm.placement": "post", "norm.kind": "layernorm", "block.bias": True,
                                 "position.kind": "learned", "block.repeat": 2, "mlp.kind": "relu"},
    "canon_abcd_gelu_untied": {"canon": dict(set="ABCD"), "mlp.kind": "gelu", "embedding.tie": False,
                               "attention.n_kv_heads": 2},
    "window_softcaps": {"attention.sliding_window": 4, "layer_types": ["local_attn", "attn"],
                        "attention.logit_softcap": 5.0, "embedding.logit_softcap": 3.0,
                        "position.rope_theta_local": 100.0},
    "partial_rotary_bidirectional": {"position.rotary_fraction": 0.5, "attention.causal": False,
                                     "attention.qk_norm": True, "attention.scale": 0.3},
    "titans_mac_learning": {"memory": dict(layers=[0, 2], segment=4, chunk=2, persistent_tokens=2,
                                            heads=2),
                            "attention.n_kv_heads": 2},
}


def _config(name: str):
    from slm.model import ModelConfig, config_from_spec
    from slm.settings import nested

    if name in VARIANTS:
        return ModelConfig(**nested({**TINY, **VARIANTS[name]}))
    return config_from_spec(compose_model_node(f"model={name}"))


def fingerprint(name: str) -> dict:
    from slm.model import Transformer, count

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = _config(name)
        torch.manual_seed(0)
        model = Transformer(cfg).eval()
        idx = torch.randint(0, cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            logits = model(idx).float()
    finally:
        torch.set_num_threads(threads)
    return {"params_total": count(cfg).params_total,
            "sha256": hashlib.sha256(logits.numpy().tobytes()).hexdigest(),
            "values": [round(v, 7) for v in logits[:, -1, :4].flatten().tolist()],
            "sum": float(logits.double().sum()),
            "norm": float(logits.double().norm())}


def machine() -> str:
    """What decides the float rounding of a CPU forward: instruction set, CPU model, torch build."""
    cpu = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            cpu.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    model = " / ".join(cpu.get(k, "?") for k in ("model name", "cpu family", "model", "stepping", "cache size"))
    return f"{torch.backends.cpu.get_cpu_capability()} | {model} | torch {torch.__version__}"


def _recorded() -> dict:
    return json.loads(FILE.read_text())


@pytest.mark.parametrize("name", PRESETS + list(VARIANTS))
def test_logits_are_unchanged(name):
    recorded = _recorded()
    assert name in recorded["models"], f"no fingerprint for {name}: run python -m tests.test_fingerprints"
    _compare(name, recorded["models"][name], fingerprint(name), recorded.get("machine"))


def _compare(name: str, want: dict, got: dict, recorded_on: str | None) -> None:
    """Exact digest on the recording machine; elsewhere the values and the sum within rounding noise."""
    assert got["params_total"] == want["params_total"]
    assert got["values"] == pytest.approx(want["values"], abs=1e-5)
    assert got["sum"] == pytest.approx(want["sum"], rel=0, abs=1e-4 * got["norm"])
    if recorded_on == machine():
        assert got["sha256"] == want["sha256"], f"{name}: the logits differ from the recorded ones"


if __name__ == "__main__":
    FILE.parent.mkdir(exist_ok=True)
    data = {"machine": machine(), "models": {name: fingerprint(name) for name in PRESETS + list(VARIANTS)}}
    FILE.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {FILE} ({len(data['models'])} models)")
