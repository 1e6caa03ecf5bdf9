"""Packed documents (data.pack_documents, model.embedding.document_end_id): in a packed window a document scores as if it
were alone; the convolutions (conv mixers, Canon) are the documented exception; bad settings are one line; a
tiny training run with packing works end to end."""

from __future__ import annotations

import json

import pytest
import torch

from slm.components.flex import use_backend
from slm.data.config import DataConfig, TokenizerConfig
from slm.model import ModelConfig, config_from_spec
from slm.model.cache import KVCache
from slm.model.config import ConfigError
from slm.model.transformer import Transformer
from slm.settings import SettingsError, nested
from tests.conftest import compose_model_node
from tests.test_train_cli import FAST, record, run_dir, slm_train

END = 7
SMALL = ["model.n_layers=2", "model.d_model=64", "model.attention.head_dim=16", "model.attention.n_kv_heads=2", "model.vocab_size=256",
         "model.context_length=128"]


def _model(preset: str, *overrides: str, end: int | None = END) -> Transformer:
    spec = compose_model_node(f"model={preset}", *(SMALL if preset != "debug" else ()), *overrides)
    spec.pop("objective", None)
    return Transformer(config_from_spec(nested({**spec, "embedding.document_end_id": end}))).eval()


def _documents(*lengths: int) -> list[torch.Tensor]:
    """Documents of random tokens (never END), each ending with END but the last."""
    docs = []
    for i, n in enumerate(lengths):
        d = torch.randint(8, 256, (n,))
        if i < len(lengths) - 1:
            d[-1] = END
        docs.append(d)
    return docs


def _packed_and_alone(model: Transformer, docs: list[torch.Tensor]):
    """Logits of each document inside the packed window, and of it run alone."""
    with torch.no_grad():
        packed = model(torch.cat(docs)[None])[0]
        alone = [model(d[None])[0] for d in docs]
    parts = packed.split([len(d) for d in docs])
    return list(parts), alone


@pytest.mark.parametrize("backend", ["auto", "flex_eager"])
def test_a_packed_document_scores_as_if_alone_and_not_without_packing(backend):
    """llama3's shape (model=debug): RoPE is relative, so global positions give the same scores; causal, so
    only the second document could see the first."""
    model = _model("debug")
    docs = _documents(50, 60)
    with use_backend(backend):
        packed, alone = _packed_and_alone(model, docs)
    assert torch.allclose(packed[1], alone[1], atol=2e-5, rtol=1e-5), (packed[1] - alone[1]).abs().max()
    assert torch.allclose(packed[0], alone[0], atol=2e-5, rtol=1e-5)
    off = _model("debug", end=None)
    off.load_state_dict(model.state_dict())
    packed_off, _ = _packed_and_alone(off, docs)
    assert not torch.allclose(packed_off[1], alone[1], atol=1e-3)


def test_a_bidirectional_model_keeps_both_documents_to_themselves():
    """The dllm preset's shape (bidirectional): without packing the first document would see the second."""
    model = _model("dllm")
    docs = _documents(40, 30, 50)
    packed, alone = _packed_and_alone(model, docs)
    for p, a in zip(packed, alone):
        assert torch.allclose(p, a, atol=2e-5, rtol=1e-5), (p - a).abs().max()
    off = _model("dllm", end=None)
    off.load_state_dict(model.state_dict())
    packed_off, _ = _packed_and_alone(off, docs)
    assert not torch.allclose(packed_off[0], alone[0], atol=1e-3)


@pytest.mark.parametrize("preset,weights,overrides", [("llama3_canon", ".canon_", []),
                                                      ("lfm2", ".conv.conv.weight", ["model.layer_types=[conv,attn]"])])
def test_convolutions_see_across_a_document_end(preset, weights, overrides):
    """Documented: Canon layers and conv mixers still mix kernel - 1 tokens of the document before; with their
    convolution weights at zero the packed document scores exactly as alone again."""
    model = _model(preset, *overrides)
    docs = _documents(50, 60)
    packed, alone = _packed_and_alone(model, docs)
    assert not torch.allclose(packed[1], alone[1], atol=1e-4)
    with torch.no_grad():
        zeroed = [p.zero_() for name, p in model.named_parameters() if weights in name and name.endswith("weight")]
    assert zeroed
    packed, alone = _packed_and_alone(model, docs)
    assert torch.allclose(packed[1], alone[1], atol=2e-5, rtol=1e-5), (packed[1] - alone[1]).abs().max()


def test_a_kv_cache_ignores_document_ends():
    """As the field says: prefill then decode over a packed sequence equals the whole forward without packing."""
    model = _model("debug")
    off = _model("debug", end=None)
    off.load_state_dict(model.state_dict())
    idx = torch.cat(_documents(20, 12))[None]
    cache = KVCache(model.cfg, batch=1, capacity=32)
    with torch.no_grad():
        steps = [model(idx[:, :24], cache)] + [model(idx[:, t:t + 1], cache) for t in range(24, 32)]
        assert torch.allclose(torch.cat(steps, 1), off(idx), atol=2e-5, rtol=1e-5)


def test_bad_document_settings_are_one_line():
    base = {"n_layers": 2, "d_model": 32, "attention.n_heads": 4, "vocab_size": 61, "context_length": 16}
    with pytest.raises(ConfigError, match=r"model.embedding.document_end_id=61 is invalid: must be null or a token id in 0..60"):
        ModelConfig(**nested({**base, "embedding.document_end_id": 61}))
    with pytest.raises(ConfigError, match="model.embedding.document_end_id=3 is invalid: packed documents need kind=transformer"):
        ModelConfig(**nested({**base, "embedding.document_end_id": 3, "memory": dict(layers=[0], segment=4)}))
    with pytest.raises(ConfigError, match="model.embedding.document_end_id=3 is invalid: packed documents need kind=transformer"):
        ModelConfig(**nested({**{**base, "n_layers": 1}, "kind": "linear", "embedding.document_end_id": 3}))
    with pytest.raises(SettingsError, match=r"^data.pack_documents=True is invalid: needs tokenizer.eot=true .*; set tokenizer.eot"):
        DataConfig.from_node({"pack_documents": True}).check_tokenizer(TokenizerConfig())
    DataConfig.from_node({"pack_documents": True}).check_tokenizer(TokenizerConfig(eot=True))
    with pytest.raises(SettingsError, match=r"data.pack_documents='yes' is invalid: expected true or false"):
        DataConfig.from_node({"pack_documents": "yes"})


def _corpus(tmp_path):
    path = tmp_path / "docs.jsonl"
    lines = [json.dumps({"text": f"document {i}: " + "the quick brown fox jumps over the lazy dog. " * (3 + i % 5)})
             for i in range(200)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_training_with_packed_documents_end_to_end(tmp_path):
    corpus = _corpus(tmp_path)
    data = ["data=local", f"data.sources.0.paths=[{corpus}]", "tokenizer.eot=true"]
    out = slm_train(tmp_path, *FAST, *data, "data.pack_documents=true", "train.length.steps=6", "train.validation.interval=6")
    assert out.returncode == 0, out.stderr[-2000:]
    path = run_dir(tmp_path)
    r = record(path)
    assert r["status"] == "completed" and 0 < r["eval"]["val_nll"] < 6
    eot = r["data"]["tokenizer"]["eot_id"]
    assert eot is not None and json.loads((path / "model" / "config.json").read_text())["embedding"]["document_end_id"] == eot
    out = slm_train(tmp_path, *FAST, "data=local", f"data.sources.0.paths=[{corpus}]", "data.pack_documents=true",
                    "train.length.steps=6", group="refused")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        "slm-train: error: data.pack_documents=True is invalid: needs tokenizer.eot=true (documents are told apart "
        "by the end-of-text id); set tokenizer.eot=true or data.pack_documents=false")
