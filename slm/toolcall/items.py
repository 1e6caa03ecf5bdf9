"""Items of the function-calling task, generated deterministically by (split, seed, n): a tool list, a templated
question, and the gold answer as one rigid call. The format (docs/toolcall.md):

    prompt      "tools: add(a,b) sub(a,b) max(a,b)\nQ: what is 137 minus 48?\nA: "
    completion  '{"fn":"sub","args":[137,48]}' + "\n"          (the answer ends at the first newline)

    two steps   '[{"fn":"add","args":[3,4]},{"fn":"mul","args":["$1",5]}]'   "$1": the first call's result
    no call     '{"fn":null}'                                              no shown tool answers the question

An item is a dict: id, split, kind (single | two_step | no_call), tools (the names shown, in order), question,
prompt, answer (the gold completion without its newline), calls (the gold calls: [{"fn", "args"}], [] for no
call) and result (the last call's value; null for no call). Splits (SPLITS): train, valid and test share one
distribution and are disjoint by a hash of the prompt; test_templates asks with templates training never uses,
test_long with 4-5 digit numbers (training: 1-3), test_combos two-step questions over pairs of tools
(HELD_OUT_PAIRS) that no training item shows together.
"""

from __future__ import annotations

import hashlib
import json
import random

from slm.toolcall.templates import FIRST, SINGLE, THEN
from slm.toolcall.tools import BINARY, TOOLS, tools_line

SPLITS = ("train", "valid", "test", "test_templates", "test_long", "test_combos")
EVAL_SPLITS = SPLITS[2:]
NO_CALL = {"fn": None}
REF = "$1"
"""A two-step answer's reference to the first call's result."""

HELD_OUT_PAIRS = frozenset(frozenset(p) for p in (("add", "mul"), ("sub", "min"), ("div", "sq"), ("mod", "neg"),
                                                   ("max", "abs"), ("mul", "sub")))
"""Tools never shown together in train, valid or test; every test_combos item calls one such pair in two steps."""

KINDS = {  # split: (kind, weight) ...
    "train": (("single", 0.55), ("two_step", 0.3), ("no_call", 0.15)),
    "test_templates": (("single", 0.85), ("no_call", 0.15)),
    "test_combos": (("two_step", 1.0),),
}
DIGITS = {"short": (1, 3), "long": (4, 5)}
BUCKETS = 20
"""train, valid and test are disjoint: a prompt's hash modulo BUCKETS picks its split (0-1 test, 2 valid)."""


def bucket_split(prompt: str) -> str:
    """Which of train, valid and test a prompt belongs to."""
    b = int(hashlib.sha256(prompt.encode()).hexdigest()[:8], 16) % BUCKETS
    return "test" if b < 2 else "valid" if b == 2 else "train"


def answer_text(calls: list[dict]) -> str:
    """The rigid answer: one call as an object, two as a list, no call as {"fn":null}; no spaces."""
    value = NO_CALL if not calls else calls[0] if len(calls) == 1 else calls
    return json.dumps(value, separators=(",", ":"))


def execute(calls: list[dict], shown: list[str] | None = None) -> int | None:
    """The last call's result, each "$k" argument replaced by call k's; None for no call. ToolError (a ValueError)
    for a call that cannot be made (a "$k" naming no earlier call included), KeyError for a tool that is not in
    `shown` (or not a tool)."""
    results: list[int] = []
    for call in calls:
        if call["fn"] not in TOOLS or (shown is not None and call["fn"] not in shown):
            raise KeyError(call["fn"])
        args = [results[ref - 1] if (ref := reference(a)) and ref <= len(results) else a for a in call["args"]]
        results.append(TOOLS[call["fn"]].call(args))
    return results[-1] if results else None


def reference(arg) -> int | None:
    """k for an argument "$k" (k >= 1), else None."""
    if isinstance(arg, str) and arg[:1] == "$" and arg[1:].isdigit() and arg[1:] == str(int(arg[1:])) != "0":
        return int(arg[1:])
    return None


class _Draw:
    """The random choices of one split and seed."""

    def __init__(self, split: str, seed: int):
        self.split, self.rng = split, random.Random(f"slm.toolcall/{split}/{seed}")
        self.digits = DIGITS["long" if split == "test_long" else "short"]
        self.held_templates = split == "test_templates"
        self.combos = split == "test_combos"

    def number(self, low: int = 0) -> int:
        d = self.rng.randint(*self.digits)
        return self.rng.randint(max(low, 0 if d == 1 else 10 ** (d - 1)), 10 ** d - 1)

    def args(self, tool: str) -> list[int]:
        return [self.number(), self.number(low=1 if tool in ("div", "mod") else 0)][:TOOLS[tool].arity]

    def allowed(self, names) -> bool:
        """Whether a tool list may be shown: test_combos shows anything; the others no held-out pair."""
        return self.combos or not any(pair <= set(names) for pair in HELD_OUT_PAIRS)

    def tool_list(self, needed: list[str], exclude: str | None = None) -> list[str]:
        """`needed` plus 0-2 distractors (no_call: 1-3 tools other than `exclude`), shuffled."""
        others = [t for t in TOOLS if t not in needed and t != exclude]
        k = self.rng.randint(1, 3) if exclude else self.rng.randint(0, 2)
        for _ in range(100):
            names = needed + self.rng.sample(others, k)
            if self.allowed(names):
                self.rng.shuffle(names)
                return names
        raise AssertionError("no allowed tool list")  # cannot happen: one tool alone is always allowed

    def template(self, tool: str) -> str:
        return self.rng.choice(SINGLE[tool][1 if self.held_templates else 0])


def _single(d: _Draw) -> tuple[list[str], str, list[dict]]:
    tool = d.rng.choice(list(TOOLS))
    args = d.args(tool)
    return d.tool_list([tool]), d.template(tool).format(a=args[0], b=args[-1]), [{"fn": tool, "args": args}]


def _no_call(d: _Draw) -> tuple[list[str], str, list[dict]]:
    tool = d.rng.choice(list(TOOLS))
    args = d.args(tool)
    return d.tool_list([], exclude=tool), d.template(tool).format(a=args[0], b=args[-1]), []


def _two_step(d: _Draw) -> tuple[list[str], str, list[dict]]:
    while True:
        first, second = d.rng.choice(list(TOOLS)), d.rng.choice(list(TOOLS))
        held = frozenset((first, second)) in HELD_OUT_PAIRS
        if first != second and held == d.combos:
            break
    args = d.args(first)
    phrase, at = d.rng.choice(THEN[second])
    other = d.number(low=1 if second in ("div", "mod") else 0)
    later = [other, other][:TOOLS[second].arity]
    later[at] = REF
    question = f"{FIRST[first].format(a=args[0], b=args[-1])}, then {phrase.format(b=other)}."
    return d.tool_list([first, second]), question, [{"fn": first, "args": args}, {"fn": second, "args": later}]


MAKERS = {"single": _single, "no_call": _no_call, "two_step": _two_step}


def prompt_text(tools: list[str], question: str) -> str:
    return f"{tools_line(tools)}\nQ: {question}\nA: "


def generate(split: str, seed: int = 0, n: int = 100) -> list[dict]:
    """`n` distinct items of `split`, the same for the same (split, seed, n) (a longer list starts with a shorter
    one's items); ValueError for an unknown split."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is invalid: one of {', '.join(SPLITS)}")
    d = _Draw(split, seed)
    kinds, weights = zip(*KINDS.get(split, KINDS["train"]))
    items, seen = [], set()
    while len(items) < n:
        kind = d.rng.choices(kinds, weights)[0]
        tools, question, calls = MAKERS[kind](d)
        prompt = prompt_text(tools, question)
        if prompt in seen or (split in ("train", "valid", "test") and bucket_split(prompt) != split):
            continue
        try:
            result = execute(calls)
        except ValueError:  # a division by zero in a second step: draw again
            continue
        seen.add(prompt)
        items.append({"id": f"{split}-{seed}-{len(items)}", "split": split, "kind": kind, "tools": tools,
                      "question": question, "prompt": prompt, "answer": answer_text(calls), "calls": calls,
                      "result": result})
    return items
