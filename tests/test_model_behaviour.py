"""Masking, Canon, layer sharing, tying, init and the checkpoint format."""

import pytest
import torch

from slm.components.canon import CausalConvCanon, CenteredConvCanon
from slm.model.config import ConfigError
from slm.model import ModelConfig, Transformer
from slm.model.weights import load_model, save_model
from slm.settings import nested

TINY = {"n_layers": 2, "d_model": 32, "attention.n_heads": 4, "vocab_size": 50, "context_length": 32}
CAUSAL_VARIANTS = [
    dict(),
    {"position.kind": "learned", "norm.kind": "layernorm", "mlp.kind": "gelu", "block.bias": True},
    {"attention.n_kv_heads": 2, "attention.qk_norm": True, "norm.kind": "rmsnorm_gemma",
     "norm.placement": "sandwich", "mlp.kind": "geglu"},
    {"attention.sliding_window": 4, "layer_types": "local_attn,attn", "attention.logit_softcap": 10.0},
    dict(canon=dict(set="ABCD")),
    {"block.repeat": 2, "norm.placement": "post", "position.kind": "none"},
]


def _logits_after_changing(cfg: ModelConfig, t: int) -> tuple[torch.Tensor, torch.Tensor]:
    model = Transformer(cfg).eval()
    idx = torch.randint(0, cfg.vocab_size, (1, 20))
    changed = idx.clone()
    changed[0, t] = (idx[0, t] + 1) % cfg.vocab_size
    with torch.no_grad():
        return model(idx), model(changed)


@pytest.mark.parametrize("variant", CAUSAL_VARIANTS)
def test_causal_masking(variant):
    t = 11
    a, b = _logits_after_changing(ModelConfig(**nested({**TINY, **variant})), t)
    assert torch.equal(a[:, :t], b[:, :t]), "a logit before t changed"
    assert not torch.allclose(a[:, t:], b[:, t:]), "changing token t changed nothing after it"


def test_bidirectional_attention_sees_the_future():
    t = 11
    a, b = _logits_after_changing(ModelConfig(**nested({**TINY, "attention.causal": False})), t)
    assert not torch.allclose(a[:, :t], b[:, :t])


def test_block_causal_attention_sees_its_block_and_the_ones_before():
    cfg = ModelConfig(**nested({**TINY, "attention.causal": False, "attention.block": 4}))
    t = 9  # block 2 = positions 8..11
    a, b = _logits_after_changing(cfg, t)
    diff = (a - b).abs().amax(dim=-1)[0]
    assert torch.all(diff[:8] == 0) and torch.all(diff[8:] > 0)
    plain = Transformer(ModelConfig(**nested({**TINY, "attention.causal": False}))).eval()  # the same weights, per-call block sizes
    idx = torch.randint(0, 50, (1, 12))
    with torch.no_grad():
        assert torch.equal(plain(idx, attention_block=12), plain(idx))  # one block: fully bidirectional
        one = plain(idx, attention_block=1)
    causal = Transformer(ModelConfig(**nested(TINY))).eval()
    causal.load_state_dict(plain.state_dict())
    with torch.no_grad():
        assert torch.allclose(one, causal(idx), atol=1e-6)  # blocks of one: causal
    with pytest.raises(ConfigError, match="model.attention.block=4 is invalid: .*causal=false"):
        ModelConfig(**nested({**TINY, "attention.block": 4}))
    with pytest.raises(ConfigError, match="canon"):
        ModelConfig(**nested({**TINY, "attention.causal": False, "attention.block": 4,
                              "canon": dict(set="A", kind="conv_centered")}))


def test_sliding_window_limits_what_a_token_sees():
    # one local layer of window 4: position p sees only p-3..p, so a change at t reaches t..t+3
    cfg = ModelConfig(**nested({**{**TINY, "n_layers": 1}, "attention.sliding_window": 4,
                                "layer_types": ["local_attn"]}))
    t = 5
    a, b = _logits_after_changing(cfg, t)
    diff = (a - b).abs().amax(dim=-1)[0]
    assert torch.all(diff[:t] == 0) and torch.all(diff[t : t + 4] > 0) and torch.all(diff[t + 4 :] == 0)


def test_canon_is_causal_residual_depthwise():
    canon = CausalConvCanon(channels=6, kernel=4)
    assert canon.conv.bias is None and canon.conv.groups == 6
    # PyTorch's default init: kaiming-uniform with bound 1/sqrt(fan_in), fan_in = kernel
    assert canon.conv.weight.abs().max() <= 0.5 and canon.conv.weight.std() > 0.1
    h = torch.randn(2, 10, 6)
    out = canon(h)
    h2 = h.clone()
    h2[:, 6] += 1.0
    out2 = canon(h2)
    assert torch.equal(out[:, :6], out2[:, :6])
    assert not torch.allclose(out[:, 6:10], out2[:, 6:10])
    with torch.no_grad():
        canon.conv.weight.zero_()
    assert torch.equal(canon(h), h)  # residual: a zero conv is the identity


def test_centred_canon_sees_two_before_and_one_after():
    canon = CenteredConvCanon(channels=6, kernel=4)
    h = torch.randn(2, 10, 6)
    h2 = h.clone()
    h2[:, 5] += 1.0
    diff = (canon(h) - canon(h2)).abs().amax(dim=(0, 2))
    assert torch.all(diff[4:8] > 0) and torch.all(diff[:4] == 0) and torch.all(diff[8:] == 0)  # outputs 4..7 read 5
    # the weights line up with the causal layer's: position p mixes p-2..p+1 = the causal layer at p+1
    causal = CausalConvCanon(channels=6, kernel=4)
    causal.load_state_dict(canon.state_dict())
    assert torch.allclose((canon(h) - h)[:, :-1], (causal(h) - h)[:, 1:], atol=1e-6)


def test_centred_canon_is_for_bidirectional_models_only():
    with pytest.raises(ConfigError, match="canon.*conv_centered"):
        ModelConfig(**nested({**TINY, "canon": dict(set="A", kind="conv_centered")}))
    cfg = ModelConfig(**nested({**TINY, "canon": dict(set="A", kind="conv_centered"), "attention.causal": False}))
    t = 11
    a, b = _logits_after_changing(cfg, t)
    assert not torch.allclose(a[:, :t], b[:, :t])


def test_model_init_leaves_canon_default():
    model = Transformer(ModelConfig(**nested({**TINY, "canon": dict(set="A")})))
    w = model.blocks[0].canon_a.conv.weight
    assert w.abs().max() <= 0.5 and w.std() > 0.1  # not the 0.02 normal of linear layers


def _assert_equals_unrolled(shared: Transformer, order: list[int]) -> None:
    """A model that reuses blocks equals a plain model holding copies of its blocks in `order`."""
    unrolled = Transformer(ModelConfig(**nested({**TINY, "n_layers": len(order)}))).eval()
    sd = {k: v for k, v in shared.state_dict().items() if not k.startswith("blocks.")}
    for i, src in enumerate(order):
        for k, v in shared.blocks[src].state_dict().items():
            sd[f"blocks.{i}.{k}"] = v
    unrolled.load_state_dict(sd)
    idx = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        assert torch.allclose(shared(idx), unrolled(idx), atol=1e-6)


def test_layer_sharing_applies_each_block_k_times():
    shared = Transformer(ModelConfig(**nested({**TINY, "block.repeat": 2}))).eval()
    plain = Transformer(ModelConfig(**nested(TINY))).eval()
    assert shared.num_params() == plain.num_params()
    _assert_equals_unrolled(shared, [0, 0, 1, 1])  # the same weights applied twice in a row


def test_refinement_loop_reapplies_the_last_blocks_as_a_group():
    assert ModelConfig(**nested({**{**TINY, "n_layers": 4}, "block.loop_layers": 2, "block.loop_steps": 3})).block_schedule() == [0, 1, 2, 3, 2, 3, 2, 3]
    assert ModelConfig(**nested({**TINY, "block.repeat": 2, "block.loop_layers": 1, "block.loop_steps": 2})).block_schedule() == [0, 0, 1, 1, 1, 1]
    looped = Transformer(ModelConfig(**nested({**{**TINY, "n_layers": 3}, "block.loop_layers": 2,
                                               "block.loop_steps": 2}))).eval()
    assert looped.num_params() == Transformer(ModelConfig(**nested({**TINY, "n_layers": 3}))).num_params()
    _assert_equals_unrolled(looped, [0, 1, 2, 1, 2])
    with pytest.raises(ConfigError, match="loop_layers"):
        ModelConfig(**nested({**TINY, "block.loop_layers": 3}))


def test_tying():
    tied = Transformer(ModelConfig(**nested(TINY)))
    assert tied.lm_head.weight is tied.tok_emb.weight
    untied = Transformer(ModelConfig(**nested({**TINY, "embedding.tie": False})))
    assert untied.lm_head.weight is not untied.tok_emb.weight
    assert untied.num_params() == tied.num_params() + 50 * 32


def test_residual_projections_scaled_at_init():
    model = Transformer(ModelConfig(**nested({**TINY, "n_layers": 8, "d_model": 128})))
    assert model.blocks[0].attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert model.blocks[0].attn.proj.weight.std().item() == pytest.approx(0.02 / 4, rel=0.1)


def test_init_schemes_follow_each_reference():
    """gpt2 scales residual output projections by 1 / sqrt(2 * depth) (GPT2LMHeadModel); normal keeps every
    weight at init_std, mixer convolutions included (transformers' LLaMA / LFM2 / Mixtral _init_weights);
    Canon layers keep PyTorch's conv init under both (PhysicsLM4 resets them to it)."""
    big = {**TINY, "n_layers": 8, "d_model": 128, "canon": {"set": "A"}, "layer_types": ["conv", "attn"],
           "mlp_types": ["dense", "moe"], "moe": {"n_experts": 4, "expert_d_ff": 256}}
    gpt2 = Transformer(ModelConfig(**nested({**big, "parametrization.init": "gpt2"})))
    normal = Transformer(ModelConfig(**nested({**big, "parametrization.init": "normal"})))
    scaled = 0.02 / 4  # 0.02 / sqrt(2 * 8)
    for model, out in ((gpt2, scaled), (normal, 0.02)):
        attn, conv = model.blocks[1], model.blocks[0]
        assert attn.attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.1)
        assert attn.attn.proj.weight.std().item() == pytest.approx(out, rel=0.1)
        assert conv.conv.out_proj.weight.std().item() == pytest.approx(out, rel=0.1)
        assert attn.mlp.w_out.std().item() == pytest.approx(out, rel=0.1)
        assert attn.mlp.w_in.std().item() == pytest.approx(0.02, rel=0.1)
        assert conv.canon_a.conv.weight.std().item() > 0.1  # Kaiming-uniform, bound 1/sqrt(kernel)
    assert normal.blocks[0].conv.conv.weight.std().item() == pytest.approx(0.02, rel=0.15)
    assert gpt2.blocks[0].conv.conv.weight.std().item() > 0.1  # PyTorch's default under gpt2


@pytest.mark.parametrize("preset, scheme", [("gpt2", "gpt2"), ("llama3", "normal"), ("qwen3", "normal"),
                                            ("gemma3", "normal"), ("llama3_canon", "normal"), ("mobilellm", "normal"),
                                            ("lfm2", "normal"), ("moe", "normal")])
def test_presets_use_their_reference_init(preset, scheme):
    from tests.conftest import compose_model_node

    assert compose_model_node(f"model={preset}")["parametrization"]["init"] == scheme


def test_sequence_longer_than_context_rejected():
    model = Transformer(ModelConfig(**nested(TINY)))
    with pytest.raises(ValueError, match="exceeds context_length=32"):
        model(torch.zeros(1, 33, dtype=torch.long))


def test_checkpoint_roundtrip_without_pickle(tmp_path):
    model = Transformer(ModelConfig(**nested({**TINY, "embedding.tie": True, "canon": dict(set="AC")}))).eval()
    save_model(model, tmp_path / "ckpt")
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["config.json", "model.safetensors"]
    loaded = load_model(tmp_path / "ckpt").eval()
    assert loaded.cfg == model.cfg
    idx = torch.randint(0, 50, (1, 10))
    with torch.no_grad():
        assert torch.equal(model(idx), loaded(idx))
    assert loaded.lm_head.weight is loaded.tok_emb.weight


def test_load_model_missing_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="not an slm checkpoint directory"):
        load_model(tmp_path)
