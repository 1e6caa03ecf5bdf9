"""Scores a completion of a function-calling item (slm.toolcall.items): parsed up to the first newline, checked for
format, tool names, arguments and the executed result. Never raises on a model's text.

    v = verify(item, '{"fn":"sub","args":[137,48]}\n')     # Verdict(format_valid=True, ..., exact=True)
    rates = aggregate([verify(i, t) for i, t in zip(items, texts)])   # {"n", "format_valid", ..., "exact_match"}

The format (format_valid): the text before the first newline, surrounding whitespace aside, is one JSON value: a
call object {"fn": <tool name>, "args": [<integer or "$k">, ...]} with no other keys, a list of 1 to MAX_CALLS such
objects ("$k" naming an earlier call's result, k from 1), or the no-call answer {"fn": null} (an "args": [] beside
it is allowed). Spacing and key order are free; an integer is a JSON integer (not 3.0, not true); anything after the
value on the line (trailing text) makes it invalid. Then, each False when the format is not valid:
  name_ok    the tool names, in order, are the gold's (no call: the answer is no call)
  args_ok    as many calls as the gold, each with the gold's arguments in order (names aside)
  result_ok  the calls, executed with the item's shown tools, give the gold's result (a commutative tool's swapped
             arguments pass); no call: the answer is no call
  exact      the calls equal the gold's (names and arguments)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from slm.toolcall.items import execute, reference

MAX_CALLS = 4
MAX_LINE = 4096
"""A completion line longer than this many characters is not valid (no answer is near it)."""


@dataclass(frozen=True)
class Verdict:
    """What one completion got right (module docstring)."""

    format_valid: bool = False
    name_ok: bool = False
    args_ok: bool = False
    result_ok: bool = False
    exact: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


def first_line(text) -> str:
    return text.split("\n", 1)[0] if isinstance(text, str) else ""


def _reject_constant(name: str):
    raise ValueError(name)


def _call(value, index: int) -> dict | None:
    """A call object checked: {"fn", "args"} with integer or earlier-"$k" arguments; None if not one."""
    if not isinstance(value, dict) or set(value) != {"fn", "args"}:
        return None
    fn, args = value["fn"], value["args"]
    if not isinstance(fn, str) or not isinstance(args, list):
        return None
    for a in args:
        ref = reference(a)
        if not (isinstance(a, int) and not isinstance(a, bool) or ref is not None and ref <= index):
            return None
    return {"fn": fn, "args": args}


def parse(text) -> list[dict] | None:
    """The calls of a completion ([] for no call), or None when its first line is not in the format."""
    line = first_line(text).strip()
    if not line or len(line) > MAX_LINE:
        return None
    try:
        value = json.loads(line, parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # not JSON, NaN, an integer over Python's digit limit, deep nesting
        return None
    if isinstance(value, dict) and value.get("fn", 0) is None and set(value) <= {"fn", "args"} \
            and value.get("args", []) == []:
        return []
    values = value if isinstance(value, list) and 1 <= len(value) <= MAX_CALLS else [value]
    calls = [_call(v, i) for i, v in enumerate(values)]
    return None if any(c is None for c in calls) else calls


def _result_ok(calls: list[dict], item: dict) -> bool:
    if not calls or not item["calls"]:
        return not calls and not item["calls"]
    try:
        return execute(calls, item["tools"]) == item["result"]
    except (KeyError, ValueError, IndexError, TypeError):
        return False


def verify(item: dict, text) -> Verdict:
    """The verdict on `text` (a completion; only its first line counts) as an answer to `item`."""
    calls = parse(text)
    if calls is None:
        return Verdict()
    gold = item["calls"]
    return Verdict(format_valid=True,
                   name_ok=[c["fn"] for c in calls] == [g["fn"] for g in gold],
                   args_ok=len(calls) == len(gold) and all(c["args"] == g["args"] for c, g in zip(calls, gold)),
                   result_ok=_result_ok(calls, item),
                   exact=calls == [{"fn": g["fn"], "args": g["args"]} for g in gold])


RATES = {"format_valid": "format_valid", "name_acc": "name_ok", "args_acc": "args_ok", "result_acc": "result_ok",
         "exact_match": "exact"}
"""The aggregate's rates and the Verdict field each is the mean of (the lm-eval task's metric names)."""


def scores(verdict: Verdict) -> dict[str, int]:
    """A verdict as the per-item 0/1 scores the aggregate averages (and the lm-eval task reports)."""
    return {rate: int(getattr(verdict, field)) for rate, field in RATES.items()}


def aggregate(verdicts) -> dict:
    """{"n", and each rate of RATES}: the mean over the verdicts (None for none)."""
    verdicts = list(verdicts)
    n = len(verdicts)
    return {"n": n, **{rate: (sum(getattr(v, field) for v in verdicts) / n if n else None)
                       for rate, field in RATES.items()}}
