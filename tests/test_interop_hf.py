"""slm.interop.hf and slm-import-hf, checked against transformers itself: random-init tiny HF models
(norm weights and biases perturbed so they are not 1/0) must give the same logits once converted."""

from __future__ import annotations

import pytest
import torch
import transformers as tf

from slm.cli.import_hf import main as import_hf
from slm.interop.hf import from_hf, to_hf
from slm.model import ModelConfig, Transformer
from slm.model.weights import load_model
from slm.settings import nested

V, D, CTX, WINDOW = 128, 64, 64, 8
T = 3 * WINDOW  # >= 2x the window, so sliding layers really drop keys
TOL = 1e-4

DECODER = dict(vocab_size=V, hidden_size=D, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=CTX, bos_token_id=None, eos_token_id=None,
               pad_token_id=None, initializer_range=0.1)


def _perturb(model: torch.nn.Module) -> torch.nn.Module:
    """Random norm weights/biases and biases (random init leaves them at 1 / 0), in place; eval mode."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:  # every norm weight/bias and every linear bias
                p.normal_(0.0, 0.5).add_(0.0 if "bias" in name or "gemma" in type(model).__name__.lower() else 1.0)
    return model.eval()


def _tokens(batch: int = 2, length: int = T) -> torch.Tensor:
    return torch.randint(0, V, (batch, length))


def _max_diff(hf_model, model: Transformer, idx: torch.Tensor) -> float:
    with torch.no_grad():
        return (hf_model(idx, use_cache=False).logits - model.eval()(idx)).abs().max().item()


HF_CASES = {
    "gpt2": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(
        vocab_size=V, n_positions=CTX, n_embd=D, n_layer=2, n_head=4, layer_norm_epsilon=1e-3,
        initializer_range=0.1, bos_token_id=None, eos_token_id=None)),
    "gpt2_untied_exact_gelu": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(
        vocab_size=V, n_positions=CTX, n_embd=D, n_layer=2, n_head=4, n_inner=80, activation_function="gelu",
        initializer_range=0.1, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)),
    "llama_gqa_untied": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
        **DECODER, rope_parameters={"rope_type": "default", "rope_theta": 500.0}, rms_norm_eps=1e-5,
        tie_word_embeddings=False)),
    "llama_tied_bias_head_dim": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
        **DECODER, head_dim=24, attention_bias=True, mlp_bias=True, tie_word_embeddings=True)),
    "qwen3_gqa_sliding": lambda: tf.Qwen3ForCausalLM(tf.Qwen3Config(
        **DECODER, head_dim=16, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1,
        rope_parameters={"rope_type": "default", "rope_theta": 1000.0}, tie_word_embeddings=True)),
    "gemma3_local_global": lambda: tf.Gemma3ForCausalLM(tf.Gemma3TextConfig(
        **DECODER, head_dim=16, query_pre_attn_scalar=24, sliding_window=WINDOW,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 20000.0}},
        attn_logit_softcapping=5.0, final_logit_softcapping=3.0, attn_implementation="eager")),
    "gemma2_softcaps": lambda: tf.Gemma2ForCausalLM(tf.Gemma2Config(
        **DECODER, head_dim=16, query_pre_attn_scalar=24, sliding_window=WINDOW, rope_parameters={
            "rope_type": "default", "rope_theta": 300.0}, attn_logit_softcapping=0.5,
        final_logit_softcapping=3.0, attn_implementation="eager")),
}


@pytest.mark.parametrize("case", HF_CASES)
def test_from_hf_matches_transformers(case):
    hf_model = _perturb(HF_CASES[case]())
    model = from_hf(hf_model)
    assert model.num_params() == sum(p.numel() for p in hf_model.parameters())
    assert _max_diff(hf_model, model, _tokens()) < TOL


def test_from_hf_maps_the_config():
    """The mapped fields that decide the function: checked directly, so a mapping that is wrong but
    harmless on the tiny cases above still fails here."""
    gpt2 = from_hf(HF_CASES["gpt2"]()).cfg
    assert (gpt2.family, gpt2.position.kind, gpt2.norm.kind, gpt2.mlp.kind, gpt2.mlp.gelu_approximate, gpt2.block.bias) == (
        "gpt2", "learned", "layernorm", "gelu", "tanh", True)
    llama = from_hf(HF_CASES["llama_gqa_untied"]()).cfg
    assert (llama.attention.n_heads, llama.attention.n_kv_heads, llama.position.rope_theta, llama.embedding.tie) == (4, 2, 500.0, False)
    qwen = from_hf(HF_CASES["qwen3_gqa_sliding"]()).cfg
    assert (qwen.attention.qk_norm, qwen.layer_types, qwen.attention.sliding_window) == (True, ["attn", "local_attn", "local_attn"], WINDOW)
    gemma = from_hf(HF_CASES["gemma3_local_global"]()).cfg
    assert (gemma.layer_types, gemma.position.rope_theta, gemma.position.rope_theta_local) == (["local_attn", "local_attn", "attn"], 20000.0, 100.0)
    assert (gemma.norm.placement, gemma.embedding.scale, gemma.embedding.logit_softcap) == ("sandwich", True, 3.0)
    assert gemma.attention.scale == pytest.approx(24**-0.5)


def test_gemma3_pattern_is_shortened_to_its_repeating_unit():
    hf_model = tf.Gemma3ForCausalLM(tf.Gemma3TextConfig(**{**DECODER, "num_hidden_layers": 8}, head_dim=16,
                                                        sliding_window=WINDOW, sliding_window_pattern=3))
    model = from_hf(_perturb(hf_model))
    assert model.cfg.layer_types == ["local_attn", "local_attn", "attn"]
    assert [block.mixer.local for block in model.blocks] == [t == "sliding_attention" for t in hf_model.config.layer_types]
    assert _max_diff(hf_model, model, _tokens(1)) < TOL


@pytest.mark.parametrize("make, match", [
    (lambda: tf.LlamaForCausalLM(tf.LlamaConfig(**DECODER, rope_parameters={
        "rope_type": "linear", "factor": 2.0, "rope_theta": 1e4})), "rope_type='linear'"),
    (lambda: tf.LlamaForCausalLM(tf.LlamaConfig(**DECODER, mlp_bias=True)), "mlp_bias=True with attention_bias=False"),
    (lambda: tf.Qwen3ForCausalLM(tf.Qwen3Config(**DECODER, attention_bias=True)), "attention_bias=True"),
    (lambda: tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=V, n_positions=CTX, n_embd=D, n_layer=1, n_head=4,
                                              scale_attn_by_inverse_layer_idx=True)), "scale_attn_by_inverse"),
    (lambda: tf.GPT2Model(tf.GPT2Config(vocab_size=V, n_positions=CTX, n_embd=D, n_layer=1, n_head=4)),
     "cannot convert GPT2Model: supported"),
])
def test_from_hf_refuses_what_it_cannot_represent(make, match):
    with pytest.raises(ValueError, match=match):
        from_hf(make())


SLM_CASES = {
    "gpt2_style": {"position.kind": "learned", "norm.kind": "layernorm", "norm.eps": 1e-5, "mlp.kind": "gelu",
                   "block.bias": True, "norm.placement": "pre"},
    "gpt2_style_untied_no_bias_relu": {"position.kind": "learned", "norm.kind": "layernorm", "mlp.kind": "relu",
                                       "block.bias": False, "embedding.tie": False},
    "llama_style": {"position.kind": "rope", "norm.kind": "rmsnorm", "mlp.kind": "swiglu", "attention.n_kv_heads": 2,
                    "position.rope_theta": 777.0},
    "llama_style_untied_bias": {"position.kind": "rope", "norm.kind": "rmsnorm", "mlp.kind": "swiglu",
                                "attention.head_dim": 24, "block.bias": True, "embedding.tie": False},
}


@pytest.mark.parametrize("case", SLM_CASES)
def test_to_hf_round_trip(case):
    model = _perturb(Transformer(ModelConfig(**nested({"n_layers": 2, "d_model": D, "attention.n_heads": 4,
                                                       "vocab_size": V, "context_length": CTX, **SLM_CASES[case]}))))
    hf_model = to_hf(model)
    expected = tf.GPT2LMHeadModel if model.cfg.position.kind == "learned" else tf.LlamaForCausalLM
    assert type(hf_model) is expected and not hf_model.training
    assert (hf_model.lm_head.weight is hf_model.get_input_embeddings().weight) == model.cfg.embedding.tie
    assert _max_diff(hf_model, model, _tokens()) < TOL
    back = from_hf(hf_model)
    assert _max_diff(hf_model, back, _tokens()) < TOL


@pytest.mark.parametrize("change, match", [
    (dict(canon=dict(set="AC")), "Canon layers"),
    ({"block.repeat": 2}, "block.repeat=2"),
    ({"attention.qk_norm": True}, "qk_norm=True"),
    ({"attention.sliding_window": 8, "layer_types": ["local_attn"]}, "layer_types=.*needs attn only"),
    ({"norm.kind": "rmsnorm_gemma", "norm.placement": "sandwich"}, "norm.placement='sandwich'.*norm.kind='rmsnorm_gemma'"),
    ({"position.kind": "none"}, "position.kind='none'"),
    ({"position.rotary_fraction": 0.5}, "partial rotary"),
    ({"parametrization.kind": "mup", "parametrization.base_width": D}, "parametrization.kind=mup multiplies the logits"),
])
def test_to_hf_refuses_what_it_cannot_represent(change, match):
    model = Transformer(ModelConfig(**nested({"n_layers": 1, "d_model": D, "attention.n_heads": 4, "vocab_size": V,
                                              "context_length": CTX, **change})))
    with pytest.raises(ValueError, match=match):
        to_hf(model)


def test_import_hf_cli_writes_a_loadable_checkpoint(tmp_path, capsys):
    hf_model = _perturb(HF_CASES["llama_gqa_untied"]())
    hf_model.save_pretrained(tmp_path / "hf")
    capsys.readouterr()
    import_hf([str(tmp_path / "hf"), str(tmp_path / "slm")])
    out = capsys.readouterr().out
    model = load_model(tmp_path / "slm")
    assert out.strip() == f"{tmp_path / 'slm'}: llama3, {model.num_params():,} parameters"
    assert _max_diff(hf_model, model, _tokens()) < TOL

    # a second import into the now non-empty directory is refused, and leaves it untouched
    before = (tmp_path / "slm" / "model.safetensors").read_bytes()
    with pytest.raises(SystemExit) as exit_:
        import_hf([str(tmp_path / "hf"), str(tmp_path / "slm")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("slm-import-hf: error:") and "--force" in err
    assert (tmp_path / "slm" / "model.safetensors").read_bytes() == before
    import_hf([str(tmp_path / "hf"), str(tmp_path / "slm"), "--force"])


@pytest.mark.parametrize("problem", ["missing", "not_a_model", "unsupported_architecture"])
def test_import_hf_cli_bad_input_is_one_line(tmp_path, capsys, problem):
    source = tmp_path / "in"
    if problem == "not_a_model":
        source.mkdir()
        (source / "notes.txt").write_text("no config.json here")
    if problem == "unsupported_architecture":
        tf.MistralForCausalLM(tf.MistralConfig(**{**DECODER, "num_hidden_layers": 1})).save_pretrained(source)
    capsys.readouterr()  # drop save_pretrained's progress output
    with pytest.raises(SystemExit) as exit_:
        import_hf([str(source), str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert exit_.value.code == 2 and captured.out == ""
    assert captured.err.startswith(f"slm-import-hf: error: {source}") and captured.err.count("\n") == 1
    assert not (tmp_path / "out").exists()
    if problem == "unsupported_architecture":
        assert "cannot convert MistralForCausalLM: supported transformers models are GPT2LMHeadModel" in captured.err


# ------------------------------------------------------------------------------------------------ LFM2
def _lfm2(layer_types=("conv", "conv", "full_attention", "conv"), **change) -> "tf.Lfm2ForCausalLM":
    """A tiny random Lfm2ForCausalLM with transformers' own defaults for everything not named here:
    pad_token_id=0, block_auto_adjust_ff_dim=True, RoPE base 1e6."""
    config = tf.Lfm2Config(vocab_size=V, hidden_size=D, intermediate_size=96, num_hidden_layers=len(layer_types),
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CTX,
                           layer_types=list(layer_types), initializer_range=0.1, bos_token_id=None,
                           eos_token_id=None, **change)
    return _perturb(tf.Lfm2ForCausalLM(config))


@pytest.mark.parametrize("change", [dict(), dict(conv_L_cache=4, tie_word_embeddings=False, pad_token_id=None,
                                                 block_auto_adjust_ff_dim=False)])
def test_lfm2_from_hf_matches_transformers(change):
    hf_model = _lfm2(**change)
    model = from_hf(hf_model)
    assert model.num_params() == sum(p.numel() for p in hf_model.parameters())
    assert _max_diff(hf_model, model, _tokens(batch=3)) < TOL  # T = 24 > the conv kernel


def test_lfm2_config_traps_are_mapped():
    """transformers' defaults that would silently differ: the rescaled MLP width, the padding row, RoPE 1e6."""
    hf_model = _lfm2()
    cfg = from_hf(hf_model).cfg
    assert cfg.mlp.d_ff == hf_model.model.layers[0].feed_forward.w1.weight.shape[0] == 256  # 96 -> 64 -> up to 256
    assert (cfg.embedding.padding_idx, cfg.position.rope_theta, cfg.conv.kernel) == (0, 1e6, 3)
    assert (cfg.family, cfg.layer_types, cfg.attention.qk_norm) == ("lfm2", ["conv", "conv", "attn"], True)  # repeating unit
    assert [cfg.layer_type(i) for i in range(4)] == ["conv", "conv", "attn", "conv"]
    assert from_hf(_lfm2(layer_types=["full_attention", "conv"] * 2)).cfg.layer_types == ["attn", "conv"]
    with pytest.raises(ValueError, match="conv_bias=True"):
        from_hf(_lfm2(conv_bias=True))


def test_lfm2_padding_row_gets_no_gradient_from_the_lookup():
    model = Transformer(ModelConfig(n_layers=2, d_model=D, attention=dict(n_heads=4), vocab_size=V,
                                    layer_types=["conv", "attn"], embedding=dict(padding_idx=3, tie=False)))
    assert torch.all(model.tok_emb.weight[3] == 0)
    model(torch.tensor([[3, 5, 3, 7]])).sum().backward()
    assert torch.all(model.tok_emb.weight.grad[3] == 0) and model.tok_emb.weight.grad[5].abs().sum() > 0


@pytest.mark.parametrize("layer_types", [["conv", "conv", "attn"], ["conv"]])
def test_lfm2_to_hf_round_trip(layer_types):
    model = _perturb(Transformer(ModelConfig(n_layers=4, d_model=D,
                                             attention=dict(n_heads=4, n_kv_heads=2, qk_norm=True),
                                             vocab_size=V, context_length=CTX, layer_types=layer_types,
                                             mlp=dict(d_ff=80),
                                             position=dict(rope_theta=5000.0),
                                             embedding=dict(tie=False))))
    hf_model = to_hf(model)
    assert type(hf_model) is tf.Lfm2ForCausalLM and hf_model.config.pad_token_id is None
    assert hf_model.model.embed_tokens.padding_idx is None
    assert _max_diff(hf_model, model, _tokens()) < TOL
    assert from_hf(hf_model).cfg.layer_types == layer_types


def test_lfm2_greedy_generation_equals_transformers():
    """Token for token, slm's KV-cached decoding (conv state + attention K/V) against transformers'
    generate with its own hybrid cache, for a batch of two prompts."""
    from slm.model.generate import generate

    hf_model = _lfm2(pad_token_id=None)
    model = from_hf(hf_model).eval()
    prompts = _tokens(batch=2, length=7)
    with torch.no_grad():
        theirs = hf_model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=12,
                                   do_sample=False, pad_token_id=V - 1)[:, 7:]
    assert generate(model, prompts.tolist(), 12) == theirs.tolist()


def test_lfm2_to_hf_refuses_what_it_cannot_represent():
    base = {"n_layers": 3, "d_model": D, "attention.n_heads": 4, "vocab_size": V, "context_length": CTX,
            "layer_types": ["conv", "conv", "attn"]}
    for change, match in [({"attention.qk_norm": False}, "qk_norm=False"),
                          ({"attention.qk_norm": True, "block.bias": True}, "block.bias=True"),
                          ({"attention.qk_norm": True, "mlp.kind": "gelu"}, "mlp.kind='gelu'"),
                          ({"attention.qk_norm": True, "layer_types": ["conv", "local_attn"],
                            "attention.sliding_window": 4},
                           "needs conv, attn only")]:
        with pytest.raises(ValueError, match=match):
            to_hf(Transformer(ModelConfig(**nested({**base, **change}))))


def test_import_hf_cli_lfm2(tmp_path, capsys):
    hf_model = _lfm2()
    hf_model.save_pretrained(tmp_path / "hf")
    capsys.readouterr()
    import_hf([str(tmp_path / "hf"), str(tmp_path / "slm")])
    model = load_model(tmp_path / "slm")
    assert capsys.readouterr().out.strip() == f"{tmp_path / 'slm'}: lfm2, {model.num_params():,} parameters"
    assert model.cfg.embedding.padding_idx == 0 and _max_diff(hf_model, model, _tokens()) < TOL


# ----------------------------------------------------------------------------------- mixtures of experts
MOE = dict(vocab_size=V, hidden_size=D, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
           num_experts_per_tok=2, max_position_embeddings=CTX, initializer_range=0.1, bos_token_id=None,
           eos_token_id=None, pad_token_id=None)


def _qwen3_moe(**change) -> "tf.Qwen3MoeForCausalLM":
    config = tf.Qwen3MoeConfig(**{**MOE, "intermediate_size": 80, "moe_intermediate_size": 24, "num_experts": 6,
                                  "norm_topk_prob": True, "mlp_only_layers": [0], "router_aux_loss_coef": 0.02,
                                  **change})
    return _perturb(tf.Qwen3MoeForCausalLM(config))


def _mixtral(**change) -> "tf.MixtralForCausalLM":
    config = tf.MixtralConfig(**{**MOE, "intermediate_size": 24, "num_local_experts": 5, **change})
    return _perturb(tf.MixtralForCausalLM(config))


@pytest.mark.parametrize("make", [
    lambda: _qwen3_moe(), lambda: _qwen3_moe(norm_topk_prob=False, mlp_only_layers=[], tie_word_embeddings=True),
    lambda: _qwen3_moe(decoder_sparse_step=2, mlp_only_layers=[]),
    lambda: _qwen3_moe(use_sliding_window=True, sliding_window=WINDOW),
    lambda: _mixtral(), lambda: _mixtral(num_experts_per_tok=1, sliding_window=WINDOW),
], ids=["qwen3_moe", "qwen3_moe_unnormalised_tied", "qwen3_moe_sparse_step", "qwen3_moe_window", "mixtral",
        "mixtral_top1_window"])
def test_moe_from_hf_matches_transformers(make):
    hf_model = make()
    model = from_hf(hf_model)
    assert model.num_params() == sum(p.numel() for p in hf_model.parameters())
    assert _max_diff(hf_model, model, _tokens(batch=3)) < TOL


def test_moe_config_is_mapped():
    cfg = from_hf(_qwen3_moe()).cfg
    assert (cfg.mlp_types, cfg.moe.n_experts, cfg.moe.top_k, cfg.moe.expert_d_ff, cfg.mlp.d_ff) == (["dense", "moe", "moe"], 6, 2, 24, 80)
    assert (cfg.moe.norm_topk_prob, cfg.moe.aux_coef, cfg.moe.aux_scope, cfg.attention.qk_norm) == (True, 0.02, "pooled", True)
    assert from_hf(_qwen3_moe(decoder_sparse_step=2, mlp_only_layers=[])).cfg.mlp_types == ["dense", "moe"]
    mixtral = from_hf(_mixtral(sliding_window=WINDOW)).cfg
    assert (mixtral.layer_types, mixtral.attention.sliding_window, mixtral.attention.qk_norm) == (["local_attn"], WINDOW, False)
    with pytest.raises(ValueError, match="router_jitter_noise=0.1"):
        from_hf(_mixtral(router_jitter_noise=0.1))


def test_moe_aux_loss_equals_transformers():
    """With output_router_logits=True transformers adds router_aux_loss_coef * load_balancing_loss_func(all
    layers' router logits) to the loss: slm's pooled balancing term is that number. The per-layer scope is
    the mean of the same function applied to each layer alone."""
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

    from slm.objectives import OBJECTIVES

    hf_model = _qwen3_moe(mlp_only_layers=[])
    model = from_hf(hf_model)
    tokens = _tokens(batch=2, length=T + 1)
    inputs = tokens[:, :-1]
    with torch.no_grad():
        out = hf_model(inputs, use_cache=False, labels=inputs, output_router_logits=True)
        terms = OBJECTIVES.get("causal_lm")().terms(model, tokens)
        assert terms["moe_balance_loss"].item() == pytest.approx(0.02 * out.aux_loss.item(), rel=1e-5)
        # transformers' total is its LM loss (over T - 1 predictions) plus the weighted aux loss
        lm = torch.nn.functional.cross_entropy(model(inputs)[:, :-1].flatten(0, 1), inputs[:, 1:].flatten())
        assert out.loss.item() == pytest.approx((lm + terms["moe_balance_loss"]).item(), rel=1e-5)
        per_layer = [load_balancing_loss_func((logits,), 6, 2) for logits in out.router_logits]
        model.cfg.moe.aux_scope = "layer"
        _, aux = model(inputs, return_aux=True)
    assert aux["moe_balance"].item() == pytest.approx(torch.stack(per_layer).mean().item(), rel=1e-5)


@pytest.mark.parametrize("change, expected", [
    ({"attention.qk_norm": True, "mlp_types": ["dense", "moe"], "moe": dict(norm_topk_prob=False)}, tf.Qwen3MoeForCausalLM),
    ({"attention.qk_norm": False, "mlp_types": ["moe"], "embedding.tie": False}, tf.MixtralForCausalLM),
    ({"attention.qk_norm": True, "mlp_types": ["moe"], "layer_types": ["local_attn"], "attention.sliding_window": 6}, tf.Qwen3MoeForCausalLM),
])
def test_moe_to_hf_round_trip(change, expected):
    change = dict(change)
    moe = dict(n_experts=4, top_k=2, expert_d_ff=20, **change.pop("moe", {}))
    model = _perturb(Transformer(ModelConfig(**nested({"n_layers": 3, "d_model": D, "attention.n_heads": 4,
                                                       "attention.n_kv_heads": 2, "vocab_size": V,
                                                       "context_length": CTX, "mlp.d_ff": 72, "moe": moe, **change}))))
    hf_model = to_hf(model)
    assert type(hf_model) is expected
    assert _max_diff(hf_model, model, _tokens()) < TOL
    back = from_hf(hf_model)
    assert (back.cfg.mlp_types, back.cfg.moe.n_experts) == (model.cfg.mlp_types, 4)
    assert _max_diff(hf_model, back, _tokens()) < TOL


def test_moe_to_hf_refuses_what_it_cannot_represent():
    base = {"n_layers": 2, "d_model": D, "attention.n_heads": 4, "vocab_size": V, "context_length": CTX,
            "moe": dict(n_experts=4, expert_d_ff=16)}
    for change, match in [(dict(mlp_types=["moe"], moe=dict(n_experts=4, expert_d_ff=16, shared_expert_d_ff=8)), "shared_expert_d_ff=8"),
                          (dict(mlp_types=["dense", "moe"]), "Mixtral routes every layer"),
                          (dict(mlp_types=["moe"], moe=dict(n_experts=4, expert_d_ff=16, norm_topk_prob=False)), "norm_topk_prob=False"),
                          ({"mlp_types": ["moe"], "layer_types": ["local_attn", "attn"],
                            "attention.sliding_window": 4, "attention.qk_norm": True},
                           "one sliding window for all layers")]:
        with pytest.raises(ValueError, match=match):
            to_hf(Transformer(ModelConfig(**nested({**base, **change}))))


def test_moe_preset_converts_to_mixtral():
    """The study's moe preset (no qk-norm) has a transformers twin: MixtralForCausalLM (counted on meta)."""
    from tests.conftest import compose_model_node
    from slm.interop.hf_moe import moe_to_hf
    from slm.model import config_from_spec

    cfg = config_from_spec(compose_model_node("model=moe"))
    with torch.device("meta"):
        hf_model = moe_to_hf(cfg)
    assert type(hf_model) is tf.MixtralForCausalLM
    assert sum(p.numel() for p in hf_model.parameters()) == 327_371_136
