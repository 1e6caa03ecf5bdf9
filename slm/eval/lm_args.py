"""The `slm` lm-eval model's arguments as a `key=value,key=value` string, with paths that hold commas.

A run directory is named after its job key, e.g. `runs/train/model.d_model=384,model.n_layers=32`, so
`pretrained=runs/train/model.d_model=384,model.n_layers=32` is one path to a human and two arguments to
lm-eval, which splits model_args at every comma. The rule here, used by `slm-lm-eval`, `python -m slm.eval`,
`slm-eval --model_args` and `SLMLM.create_from_arg_string` (each passes the model's argument names,
slm.eval.lm.model_arg_names):

  * the string is split at the commas outside quotes and brackets, as lm-eval splits it;
  * the value of a path argument (`pretrained`, `tokenizer`) takes the following pieces too, as many as make
    the longest path that exists (`pretrained=runs/g/a=1,b=2,batch_size=8` with `runs/g/a=1,b=2` on disk
    is that directory and batch_size=8); when no such path exists, it runs up to the first piece that
    starts with one of the model's own argument names (`batch_size=`, `device=`, ...), so that the error
    names the whole path;
  * a quoted value (`pretrained="runs/g/a=1,b=2"` or with single quotes) is taken as it is, exists or not.

Only when two run directories differ by a trailing `,<argument>=<value>` (`runs/g/a=1` and
`runs/g/a=1,tokenizer=gpt2`) does the rule have to choose: it takes the longer. Quote the path, or put the
other arguments before it (`tokenizer=gpt2,pretrained=runs/g/a=1`), to mean the shorter.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

PATH_ARGS = ("pretrained", "tokenizer")
"""Arguments whose values are paths (and may hold commas)."""


def split_top_level(text: str) -> list[str]:
    """`text` cut at the commas that are outside quotes and brackets (empty pieces dropped)."""
    pieces, current, depth, quote = [], [], 0, None
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif char == "," and depth == 0:
            pieces.append("".join(current))
            current = []
            continue
        current.append(char)
    pieces.append("".join(current))
    return [p for p in pieces if p]


def literal(value: str) -> Any:
    """A value as a Python literal when it is one (true/false too), else the string."""
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def _unquoted(value: str) -> str | None:
    """The inside of a quoted value, or None when it is not quoted."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return None


def _key(piece: str) -> str:
    return piece.partition("=")[0].strip()


def _path_extent(value: str, rest: list[str], names: Collection[str] | Callable[[], Collection[str]]) -> int:
    """How many of the pieces after a path value belong to it (see the module's docstring)."""
    extent = None
    for n in range(len(rest) + 1):
        if Path(",".join([value, *rest[:n]])).expanduser().exists():
            extent = n
    if extent is not None:
        return extent
    if callable(names):
        names = names()
    n = 0
    while n < len(rest) and _key(rest[n]) not in names:
        n += 1
    return n


def parse_model_args(text: str, names: Collection[str] | Callable[[], Collection[str]],
                     convert: Callable[[str], Any] = literal) -> dict[str, Any]:
    """{key: value} of a model_args string by the rule of this module; other values go through `convert`
    (lm-eval's own conversion, in its CLI). `names`: the model's argument names, or a function that gives
    them (called only for a path value that names nothing on disk). ValueError for a piece that is not
    key=value."""
    pieces = split_top_level(text.strip())
    out: dict[str, Any] = {}
    i = 0
    while i < len(pieces):
        key, sep, value = pieces[i].partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"expected key=value, got {pieces[i]!r}")
        if key in PATH_ARGS:
            inner = _unquoted(value)
            if inner is None:
                extent = _path_extent(value, pieces[i + 1:], names)
                inner = ",".join([value, *pieces[i + 1:i + 1 + extent]])
                i += extent
            out[key] = inner
        else:
            out[key] = convert(value)
        i += 1
    return out
