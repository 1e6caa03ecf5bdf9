"""conf/model_base/base.yaml and conf/train/default.yaml are generated from the config dataclasses (`make conf`):
each field's value is its default and its comment the first sentence of its docstring."""

from __future__ import annotations

import dataclasses

import yaml

from slm.cli.conf_defaults import CONF_DIR, FILES, field_docs, first_sentence, stale
from slm.model.config import ModelConfig


def test_the_generated_files_are_current():
    assert stale() == [], "run `make conf`: the config dataclasses changed since the files were written"


def test_every_field_has_its_docstring_as_comment_and_its_default_as_value():
    text = (CONF_DIR / "model_base" / "base.yaml").read_text()
    base = yaml.safe_load(text)
    for f in dataclasses.fields(ModelConfig):
        doc = field_docs(ModelConfig)[f.name]
        assert first_sentence(doc)[:40] in " ".join(text.split()), f.name
        value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        assert base[f.name] == (dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value), f.name
    assert base["moe"]["aux_scope"] == "layer" and base["memory"]["lr"] == 0.5 and base["canon"]["kernel"] == 4


def test_first_sentence_keeps_abbreviations():
    assert first_sentence("Mixer per layer, e.g. [attn]. More.") == "Mixer per layer, e.g. [attn]"
    assert first_sentence("As in (Yang et al. 2023). Then") == "As in (Yang et al. 2023)"
    assert first_sentence("One sentence.") == "One sentence"


def test_a_stale_file_is_named(tmp_path):
    for path in FILES:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(FILES[path]())
    (tmp_path / "train" / "default.yaml").write_text("seed: 0\n")
    assert [str(p) for p in stale(tmp_path)] == ["train/default.yaml"]
