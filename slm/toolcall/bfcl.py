"""A reader of BFCL-format items (the Berkeley Function Calling Leaderboard, Apache-2.0), for evaluation only: its
`simple` and `multiple` categories from local files the user gives (BFCL's own package is not needed).

    items = read_bfcl("data/BFCL_v3_simple.json", "data/possible_answer/BFCL_v3_simple.json")
    verdict = check(items[0], '{"fn":"calculate_triangle_area","args":{"base":10,"height":5}}')

The question file is JSON lines {"id", "question", "function"}: `question` a string or BFCL v3's [[{"role", "content"},
...]] (the last user turn is asked), `function` one function document or a list ({"name", "description",
"parameters": {"properties": {name: {"type", ...}}, "required": [...]}}). The answer file is JSON lines {"id",
"ground_truth": [{function name: {parameter: [allowed values]}}]}; an empty string among a parameter's allowed
values means it may be left out. An item (slm.toolcall.items' shape where it can be) has id, split ("bfcl"),
kind ("bfcl_simple" / "bfcl_multiple", by the number of functions), tools, functions, question,
prompt ("tools: name(p1,p2)\\nQ: <question>\\nA: ") and possible (the ground truth).

The completion is one JSON call with named arguments, {"fn": <name>, "args": {<parameter>: <value>}}, before the
first newline. `check` follows BFCL's AST checker for these categories: the name is one the ground truth allows;
every required parameter is given, none that the function does not have; each value is among the allowed ones
(strings compared case-free without spaces and , . / - _ * ^, an integer accepted for a float, lists and objects
compared element by element), and a parameter left out must allow "".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from slm.toolcall.verifier import first_line

_STRIP = re.compile(r"[ ,./\-_*^]")


@dataclass(frozen=True)
class BfclVerdict:
    format_valid: bool = False
    name_ok: bool = False
    args_ok: bool = False
    exact: bool = False


def _lines(path: Path) -> dict[str, dict]:
    """{id: record} of a JSON-lines file; ValueError naming the file and line."""
    out = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot read the BFCL file ({getattr(err, 'strerror', None) or err})") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise ValueError(f"{path}:{number}: not JSON") from None
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            raise ValueError(f"{path}:{number}: not a BFCL record (a JSON object with an \"id\")")
        out[row["id"]] = row
    return out


def _question(value, where: str) -> str:
    if isinstance(value, str):
        return value
    turns = [t for turn in (value if isinstance(value, list) else [])
             for t in (turn if isinstance(turn, list) else [turn])]
    users = [t.get("content") for t in turns if isinstance(t, dict) and t.get("role") == "user"]
    if not users or not isinstance(users[-1], str):
        raise ValueError(f"{where}: question is neither a string nor BFCL's [[{{\"role\": \"user\", \"content\"}}]]")
    return users[-1]


def _item(row: dict, answer: dict, where: str) -> dict:
    functions = row.get("function")
    functions = [functions] if isinstance(functions, dict) else functions
    if not isinstance(functions, list) or not all(isinstance(f, dict) and isinstance(f.get("name"), str)
                                                  for f in functions):
        raise ValueError(f"{where}: function is not a function document or a list of them")
    possible = answer.get("ground_truth")
    if not isinstance(possible, list) or not all(isinstance(c, dict) and len(c) == 1 for c in possible):
        raise ValueError(f"{where}: ground_truth is not a list of {{function name: {{parameter: [values]}}}}")
    question = _question(row.get("question"), where)
    sigs = " ".join(f"{f['name']}({','.join((f.get('parameters') or {}).get('properties') or {})})"
                    for f in functions)
    return {"id": row["id"], "split": "bfcl", "kind": "bfcl_simple" if len(functions) == 1 else "bfcl_multiple",
            "tools": [f["name"] for f in functions], "functions": functions, "question": question,
            "prompt": f"tools: {sigs}\nQ: {question}\nA: ", "possible": possible}


def read_bfcl(questions: str | Path, answers: str | Path) -> list[dict]:
    """Items from a BFCL question file and its possible-answer file (module docstring), in the question file's
    order; ValueError (one line, naming the file and line or id) for anything else."""
    rows, truth = _lines(Path(questions)), _lines(Path(answers))
    missing = [i for i in rows if i not in truth]
    if missing:
        raise ValueError(f"{answers}: no possible answer for {len(missing)} question(s) of {questions} "
                         f"(first: {missing[0]})")
    if not rows:
        raise ValueError(f"{questions}: no questions")
    return [_item(row, truth[i], f"{questions}: {i}") for i, row in rows.items()]


def _same(value, option) -> bool:
    """BFCL's comparison of a value with one allowed value (module docstring)."""
    if isinstance(value, bool) or isinstance(option, bool):
        return value is option
    if isinstance(option, str):
        return isinstance(value, str) and _STRIP.sub("", value).lower() == _STRIP.sub("", option).lower()
    if isinstance(option, float):
        return isinstance(value, (int, float)) and float(value) == option
    if isinstance(option, int):
        return isinstance(value, int) and value == option
    if isinstance(option, list):
        return isinstance(value, list) and len(value) == len(option) and all(map(_same, value, option))
    if isinstance(option, dict):  # a nested object: each key's allowed values
        return isinstance(value, dict) and _args_ok(None, value, {k: v if isinstance(v, list) else [v]
                                                                 for k, v in option.items()})
    return value == option


def _allowed(value, options) -> bool:
    """Whether `value` is one of the allowed `options` (a list; "" means the parameter may be left out)."""
    return isinstance(options, list) and any(_same(value, o) for o in options if o != "")


def _args_ok(function: dict | None, args: dict, allowed: dict) -> bool:
    params = (function or {}).get("parameters") or {}
    known, required = params.get("properties") or {}, params.get("required") or []
    if function is not None and (any(a not in known for a in args) or any(r not in args for r in required)):
        return False
    for name, options in allowed.items():
        if name not in args:
            if not isinstance(options, list) or "" not in options:
                return False
        elif not _allowed(args[name], options):
            return False
    return all(name in allowed for name in args)


def check(item: dict, text) -> BfclVerdict:
    """The verdict on a completion of a BFCL item (module docstring); never raises on a model's text."""
    try:
        value = json.loads(first_line(text).strip())
    except (ValueError, RecursionError):
        return BfclVerdict()
    if not isinstance(value, dict) or set(value) != {"fn", "args"} or not isinstance(value["fn"], str) \
            or not isinstance(value["args"], dict):
        return BfclVerdict()
    truth = [next(iter(c.items())) for c in item["possible"]]
    matches = [allowed for name, allowed in truth if name == value["fn"]]
    function = next((f for f in item["functions"] if f["name"] == value["fn"]), None)
    args_ok = any(_args_ok(function, value["args"], allowed) for allowed in matches if isinstance(allowed, dict))
    return BfclVerdict(format_valid=True, name_ok=bool(matches), args_ok=args_ok, exact=bool(matches) and args_ok)
