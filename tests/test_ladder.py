"""arXiv 2512.20877's ladder (linear -> MLP -> self-attention -> transformer, and the RoPE ablation): the
presets' parameter counts against the paper's published counts, the post-LN and pre-LN blocks against
torch.nn.TransformerEncoderLayer (an independent implementation), the window models against plain torch.nn
stacks, and the last_token objective."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from slm.model import ModelConfig, build_model, config_from_spec, count
from slm.model.config import ConfigError
from slm.model.counting import breakdown
from slm.objectives import OBJECTIVES, ObjectiveError
from slm.settings import nested
from tests.conftest import compose_model_node

# Published parameter counts: Table 1 and the RoPE ablation of arXiv 2512.20877, and the counts its reference
# notebook prints for the sweeps (linear context, MLP width, transformer depth).
PUBLISHED = [
    ("ladder_linear", [], 1_073_345),
    ("ladder_mlp", [], 4_285_377),
    ("ladder_attention", [], 231_617),
    ("ladder_transformer", [], 430_785),
    ("ladder_rope", [], 414_401),
    ("ladder_rope", ["model.position.kind=learned"], 430_785),
    ("ladder_linear", ["model.context_length=32"], 274_625),
    ("ladder_linear", ["model.context_length=64"], 540_865),
    ("ladder_mlp", ["model.mlp.window_hidden=[128,128]"], 2_130_497),
    ("ladder_mlp", ["model.mlp.window_hidden=[512,512]"], 8_693_441),
    ("ladder_transformer", ["model.n_layers=2"], 298_305),
    ("ladder_transformer", ["model.n_layers=4"], 563_265),
]


def preset(name: str, *overrides: str) -> ModelConfig:
    return config_from_spec(compose_model_node(f"model={name}", *overrides))


@pytest.mark.parametrize("name, overrides, published", PUBLISHED)
def test_counts_match_the_paper(name, overrides, published):
    cfg = preset(name, *overrides)
    model = build_model(cfg)
    assert count(cfg).params_total == published == sum(p.numel() for p in model.parameters())
    assert sum(breakdown(cfg).values()) == published


@pytest.mark.parametrize("vocab, published", [(9_999, 2_975_631), (33_277, 8_958_077)])
def test_word_level_counts_match_the_paper(vocab, published):
    """The word-level Transformer as sweeps/arxiv2512_word.yaml composes it, at PTB's and WikiText-2's vocabularies."""
    cfg = config_from_spec(compose_model_node("sweep=arxiv2512_word", f"model.vocab_size={vocab}"))
    assert (cfg.context_length, cfg.n_layers, cfg.mlp.d_ff) == (64, 3, 256)
    assert count(cfg).params_total == published


def reference_stack(cfg: ModelConfig, norm_first: bool) -> nn.ModuleDict:
    """The paper's Self-Attention / Transformer built from torch.nn: embeddings + learned positions,
    TransformerEncoderLayer blocks (causal mask), a final LayerNorm, a biased head."""
    layer = lambda: nn.TransformerEncoderLayer(cfg.d_model, cfg.attention.n_heads, cfg.mlp.d_ff, dropout=0.0,  # noqa: E731
                                               activation="relu", batch_first=True, norm_first=norm_first)
    return nn.ModuleDict({"tok": nn.Embedding(cfg.vocab_size, cfg.d_model),
                          "pos": nn.Embedding(cfg.context_length, cfg.d_model),
                          "blocks": nn.ModuleList(layer() for _ in range(cfg.n_layers)),
                          "norm": nn.LayerNorm(cfg.d_model), "head": nn.Linear(cfg.d_model, cfg.vocab_size)})


def copy_into(ref: nn.ModuleDict, model, norm_first: bool) -> None:
    with torch.no_grad():
        ref["tok"].weight.copy_(model.tok_emb.weight)
        ref["pos"].weight.copy_(model.position.weight)
        for r, b in zip(ref["blocks"], model.blocks):
            r.self_attn.in_proj_weight.copy_(b.attn.qkv.weight)  # (q; k; v), as ours
            r.self_attn.in_proj_bias.copy_(b.attn.qkv.bias)
            r.self_attn.out_proj.weight.copy_(b.attn.proj.weight)
            r.self_attn.out_proj.bias.copy_(b.attn.proj.bias)
            r.linear1.load_state_dict(b.mlp.fc_in.state_dict())
            r.linear2.load_state_dict(b.mlp.fc_out.state_dict())
            mixer_norm, mlp_norm = (b.attn_norm, b.mlp_norm) if norm_first else (b.attn_out_norm, b.mlp_out_norm)
            r.norm1.load_state_dict(mixer_norm.state_dict())
            r.norm2.load_state_dict(mlp_norm.state_dict())
        ref["norm"].load_state_dict(model.norm.state_dict())
        ref["head"].load_state_dict(model.lm_head.state_dict())


def run_reference(ref: nn.ModuleDict, idx: torch.Tensor) -> torch.Tensor:
    T = idx.shape[1]
    h = ref["tok"](idx) + ref["pos"](torch.arange(T))
    mask = nn.Transformer.generate_square_subsequent_mask(T)
    for block in ref["blocks"]:
        h = block(h, src_mask=mask, is_causal=True)
    return ref["head"](ref["norm"](h))


@pytest.mark.parametrize("name, overrides, norm_first", [("ladder_attention", [], False),
                                                          ("ladder_transformer", [], False),
                                                          ("ladder_rope", ["model.position.kind=learned"], True)])
def test_blocks_equal_torch_transformer_encoder_layers(name, overrides, norm_first):
    cfg = preset(name, *overrides, "model.block.dropout=0.0")
    model = build_model(cfg).eval()
    ref = reference_stack(cfg, norm_first).eval()
    copy_into(ref, model, norm_first)
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.context_length))
    with torch.no_grad():
        torch.testing.assert_close(model(idx), run_reference(ref, idx), rtol=1e-4, atol=1e-4)


def test_window_models_equal_plain_torch_stacks():
    for name in ("ladder_linear", "ladder_mlp"):
        cfg = preset(name, "model.context_length=16")
        model = build_model(cfg).eval()
        layers = [nn.Embedding(cfg.vocab_size, cfg.d_model), nn.Flatten()]
        widths = [16 * cfg.d_model, *cfg.mlp.window_hidden]
        for a, b in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        ref = nn.Sequential(*layers, nn.Linear(widths[-1], cfg.vocab_size)).eval()
        ref.load_state_dict(dict(zip(ref.state_dict(), model.state_dict().values())))
        idx = torch.randint(0, cfg.vocab_size, (3, 16))
        with torch.no_grad():
            assert model(idx).shape == (3, 1, cfg.vocab_size)
            torch.testing.assert_close(model(idx)[:, 0], ref(idx))
        with pytest.raises(ValueError, match="exactly context_length=16"):
            model(idx[:, :8])


def test_torch_init_is_pytorch_defaults():
    cfg = preset("ladder_transformer")
    model = build_model(cfg)
    assert 0.8 < model.tok_emb.weight.std() < 1.2 and 0.8 < model.position.weight.std() < 1.2  # N(0, 1)
    fc = model.blocks[0].mlp.fc_in
    bound = cfg.d_model ** -0.5  # Kaiming-uniform(a=sqrt 5) and the bias: U(+-1/sqrt(fan_in))
    assert fc.weight.abs().max() <= bound and fc.bias.abs().max() <= bound and fc.bias.abs().max() > bound / 2


@pytest.mark.parametrize("name", ["ladder_linear", "ladder_transformer"])
def test_last_token_scores_the_token_after_the_window(name):
    cfg = preset(name, "model.context_length=16", "model.block.dropout=0.0")
    model = build_model(cfg).eval()
    objective = OBJECTIVES.get("last_token")()
    objective.check(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (4, 17))
    with torch.no_grad():
        expected = F.cross_entropy(model(tokens[:, :16])[:, -1], tokens[:, 16], reduction="sum")
        nll, n = objective.nll(model, tokens)
        torch.testing.assert_close(nll, expected)
        torch.testing.assert_close(objective.loss(model, tokens), expected / 4)
    assert n == 4


def test_causal_lm_refuses_a_window_model():
    with pytest.raises(ObjectiveError, match="model.kind='linear'.*last_token"):
        OBJECTIVES.get("causal_lm")().check(preset("ladder_linear"))


@pytest.mark.parametrize("kw, match", [
    (dict(kind="cnn"), "model.kind='cnn' is invalid: one of: transformer, linear, mlp"),
    ({"kind": "linear", "mlp.window_hidden": [8]}, "window_hidden"),
    (dict(kind="mlp"), "window_hidden.*at least one"),
    ({"kind": "mlp", "mlp.window_hidden": [0]}, "window_hidden"),
])
def test_bad_kind_settings_name_the_field(kw, match):
    with pytest.raises(ConfigError, match=match):
        ModelConfig(**nested(kw))


def dropout_calls(model: nn.Module, idx: torch.Tensor, monkeypatch) -> list[tuple[int, ...]]:
    """Shapes of the tensors F.dropout drops out in one training-mode forward (nn.Dropout calls it)."""
    calls, real = [], F.dropout

    def recording(x, p=0.5, training=True, inplace=False):
        if training and p > 0:
            calls.append(tuple(x.shape))
        return real(x, p, training, inplace)

    monkeypatch.setattr(F, "dropout", recording)
    model.train()(idx)
    return calls


@pytest.mark.parametrize("name, sublayer_drops, attention_p", [
    ("ladder_attention", 1, 0.1),   # nn.MultiheadAttention(dropout=0.1) and the FFN's trailing nn.Dropout
    ("ladder_transformer", 1, 0.1),
    ("ladder_rope", 3, 0.0),        # x + drop(out_proj(...)); x + drop(ff(...)) where ff ends in nn.Dropout
])
def test_dropout_sits_where_the_reference_puts_it(name, sublayer_drops, attention_p, monkeypatch):
    """The paper's post-LN models drop out the attention probabilities and the FFN output only (no embedding
    dropout); its RoPE-ablation blocks the attention output once and the FFN output twice."""
    cfg = preset(name, "model.context_length=16")
    model = build_model(cfg)
    assert [block.attn.dropout for block in model.blocks] == [attention_p] * cfg.n_layers
    calls = dropout_calls(model, torch.randint(0, cfg.vocab_size, (2, 16)), monkeypatch)
    assert calls == [(2, 16, cfg.d_model)] * (sublayer_drops * cfg.n_layers)


def test_default_dropout_sites_are_every_site(monkeypatch):
    """Every other preset keeps dropout on the embeddings, attention probabilities and both sublayer outputs."""
    cfg = ModelConfig(vocab_size=32, d_model=16, n_layers=2, attention=dict(n_heads=2), context_length=8,
                      block=dict(dropout=0.1))
    model = build_model(cfg)
    assert [block.attn.dropout for block in model.blocks] == [0.1, 0.1]
    assert dropout_calls(model, torch.randint(0, 32, (1, 8)), monkeypatch) == [(1, 8, 16)] * 5
    off = build_model(ModelConfig(vocab_size=32, d_model=16, n_layers=2, attention=dict(n_heads=2), context_length=8,
                                  block=dict(dropout=0.1, dropout_at=[])))
    assert dropout_calls(off, torch.randint(0, 32, (1, 8)), monkeypatch) == []
    assert [block.attn.dropout for block in off.blocks] == [0.0, 0.0]


def test_torch_mha_init_is_multihead_attentions():
    """q/k/v and the output projection as torch.nn.MultiheadAttention initialises them (its in_proj is our
    fused qkv: Xavier-uniform over the (3d, d) matrix, zero biases), the rest PyTorch's Linear defaults."""
    cfg = preset("ladder_attention")
    attn = build_model(cfg).blocks[0].attn
    peer = nn.MultiheadAttention(cfg.d_model, cfg.attention.n_heads, bias=True, batch_first=True)
    bound = (6 / sum(peer.in_proj_weight.shape)) ** 0.5  # Xavier-uniform's bound
    for w in (attn.qkv.weight, peer.in_proj_weight):
        assert w.shape == (3 * cfg.d_model, cfg.d_model) and 0.97 * bound < w.abs().max() <= bound
    assert attn.qkv.bias.abs().max() == 0 == peer.in_proj_bias.abs().max()
    assert attn.proj.bias.abs().max() == 0 == peer.out_proj.bias.abs().max()
    linear_bound = cfg.d_model ** -0.5  # Kaiming-uniform(a=sqrt 5), as peer.out_proj
    for w in (attn.proj.weight, peer.out_proj.weight):
        assert 0.97 * linear_bound < w.abs().max() <= linear_bound
