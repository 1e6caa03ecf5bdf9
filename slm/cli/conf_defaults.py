"""The default config files written from the config dataclasses: one source for every default and its comment.

`conf/model_base/base.yaml` (every ModelConfig field, its nested groups and the budget solver's keys),
`conf/train/default.yaml` (every TrainConfig field) and `conf/hydra/sweeper/grid.yaml` (every SweepSettings field,
the grid sweeper's `hydra.sweeper.*`) are generated: each field's value is its dataclass default
and its comment the first sentence of its docstring. Change a field in the dataclass, then run `make conf`
(`python -m slm.cli.conf_defaults --write`); tests/test_conf_defaults.py fails while a file is stale.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
import sys
import textwrap
from pathlib import Path

import yaml

from slm.pipes import quiet_on_closed_pipe

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
COLUMN = 26  # comments start here (or one space after a longer `key: value`)
WIDTH = 118  # a comment longer than this continues on `#` lines below


def field_docs(cls) -> dict[str, str]:
    """Each field's docstring (the string literal under its annotation), whitespace collapsed; a class made at run time
    (train.optim's, from the optimizer registry) has none, and its groups are described by their own class's."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    tree = ast.parse(textwrap.dedent(source))
    body = tree.body[0].body
    docs = {}
    for node, after in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr) \
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def first_sentence(doc: str) -> str:
    """The docstring up to its first sentence end: a full stop before a capital letter (not "e.g. [x]", "et al.
    2023"), or the end."""
    match = re.search(r"\.(?=\s+[A-Z])", doc)
    return doc[: match.start()] if match else doc.rstrip(".")


def _scalar(value) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text[: -len("...")].strip() if text.endswith("...") else text


def _line(indent: str, key: str, value: str | None, comment: str) -> list[str]:
    head = f"{indent}{key}:" + (f" {value}" if value is not None else "")
    if not comment:
        return [head]
    pad = max(COLUMN, len(head) + 1)
    first, *rest = textwrap.wrap(comment, WIDTH - pad - 2) or [""]
    lines = [f"{head.ljust(pad)}# {first}"]
    lines += [f"{' ' * pad}# {part}" for part in rest]
    return lines


def default(f: dataclasses.Field):
    """A dataclass field's default value (its factory's product), without building the class (whose checks may
    need fields that have no default)."""
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def render(cls, indent: str = "", special: dict | None = None, groups: dict | None = None) -> list[str]:
    """`key: value  # comment` for every field of the dataclass `cls` at its default (`special` gives a field's
    raw YAML text instead, e.g. an interpolation); a nested dataclass becomes an indented block, and so does a
    field named in `groups`, rendered from its settings class (or from {key: settings class})."""
    special, groups = special or {}, groups or {}
    docs = field_docs(cls)
    lines = []
    for f in dataclasses.fields(cls):
        value = default(f)
        doc = docs.get(f.name) or (" ".join((type(value).__doc__ or "").split()) if dataclasses.is_dataclass(value)
                                    else "")
        comment = first_sentence(doc)
        if f.name in special:
            lines += _line(indent, f.name, special[f.name], comment)
        elif f.name in groups:
            lines += _line(indent, f.name, None, comment)
            group = groups[f.name]
            if isinstance(group, dict):
                for key, settings in group.items():
                    lines += [f"{indent}  {key}:"] + render(settings, indent + "    ")
            else:
                lines += render(group, indent + "  ")
        elif dataclasses.is_dataclass(value):
            lines += _line(indent, f.name, None, comment)
            lines += render(type(value), indent + "  ")
        else:
            lines += _line(indent, f.name, _scalar(value), comment)
    return lines


HEADER = "# Generated from {source} by `make conf` (slm.cli.conf_defaults): edit the dataclass, not this file.\n"


def model_base_yaml() -> str:
    from slm.model.budget import SOLVER_DOCS, SOLVER_KEYS, SOLVER_LEAD
    from slm.model.config import ModelConfig

    lines = [HEADER.format(source="slm.model.config.ModelConfig").rstrip(),
             "# Every model field with its default. Not a preset: the presets in conf/model/ are small deltas over it",
             "# (defaults: /model_base@_here_: base). Sizes left null are derived.", *render(ModelConfig)]
    lines += [f"# {line}" for line in textwrap.wrap(SOLVER_LEAD, WIDTH - 2)]
    for key, value in SOLVER_KEYS.items():
        lines += _line("", key, _scalar(value), SOLVER_DOCS[key])
    return "\n".join(lines) + "\n"


def train_default_yaml() -> str:
    from slm.training.config import TrainConfig

    lines = [HEADER.format(source="slm.training.config.TrainConfig").rstrip(),
             "# Every training field with its default.",
             *render(TrainConfig, special={"objective": "${oc.select:model.objective,causal_lm}"})]
    return "\n".join(lines) + "\n"


def grid_sweeper_yaml() -> str:
    from slm.sweeps.settings import SweepSettings

    lines = [HEADER.format(source="slm.sweeps.settings.SweepSettings").rstrip(),
             "# slm's default sweeper (hydra_plugins/slm_sweeps, the layer slm/sweeps): Hydra's basic sweeper plus paired",
             "# points, per-job outcomes (a failed job never stops the others) and a dry run.",
             "_target_: hydra_plugins.slm_sweeps.grid_sweeper.GridSweeper", *render(SweepSettings)]
    return "\n".join(lines) + "\n"


FILES = {Path("model_base/base.yaml"): model_base_yaml, Path("train/default.yaml"): train_default_yaml,
         Path("hydra/sweeper/grid.yaml"): grid_sweeper_yaml}
"""Each generated file under conf/ and the function that writes it."""


def stale(conf_dir: Path = CONF_DIR) -> list[Path]:
    """The generated files whose text differs from what the dataclasses give."""
    return [path for path, make in FILES.items() if (conf_dir / path).read_text() != make()]


@quiet_on_closed_pipe
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slm.cli.conf_defaults", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the stale files (default: list them, exit 1)")
    args = parser.parse_args(argv)
    old = stale()
    for path in old:
        if args.write:
            from slm.atomic import atomic_write

            text = FILES[path]().encode()
            atomic_write(CONF_DIR / path, lambda f: f.write(text))
            print(f"wrote conf/{path}")
        else:
            print(f"conf/{path} is stale: run `make conf`")
    return 0 if args.write or not old else 1


if __name__ == "__main__":
    sys.exit(main())
