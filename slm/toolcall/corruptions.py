"""Controlled corruptions of a gold answer, one failure mode each, for preference pairs whose rejected side is known
to be wrong in one way (an ablation asks which negatives help):

  wrong_tool        a call names another tool of the same arity (one the prompt shows, where there is one); a
                    no-call item gets a call of a shown tool on the question's numbers           format-valid
  swapped_args      a call of sub, div or mod with its two arguments swapped (they must differ)   format-valid
  off_by_one_digit  one digit of one integer argument moved by one (never a leading zero)        format-valid
  broken_brace      one brace of the JSON removed                                                not format-valid
  trailing_text     text after the JSON on the same line                                         not format-valid

    text = corrupt(item, "swapped_args", seed=0)     # the answer line, or None when the mode does not apply
    mode, text = pick(item, ["wrong_tool", "off_by_one_digit"], seed=0)   # one applicable mode, seeded

Each result differs from the gold answer and is not exact under slm.toolcall.verifier (tests/test_toolcall_files.py);
its characters all occur in the training corpus, so a character tokenizer fitted on it encodes them.
Deterministic by (item id, mode, seed).
"""

from __future__ import annotations

import random
import re

from slm.toolcall.items import answer_text
from slm.toolcall.tools import TOOLS

MODES = ("wrong_tool", "swapped_args", "off_by_one_digit", "broken_brace", "trailing_text")
FORMAT_VALID = ("wrong_tool", "swapped_args", "off_by_one_digit")
"""The modes whose result is still in the answer format (a wrong call, not a malformed one)."""
ORDERED = ("sub", "div", "mod")
"""The tools whose arguments' order matters (swapping a commutative tool's is no error)."""
TRAILING = (" then", " done", " is it", ".", " = ?")


def _calls(item: dict) -> list[dict]:
    return [{"fn": c["fn"], "args": list(c["args"])} for c in item["calls"]]


def _wrong_tool(item: dict, rng: random.Random) -> str | None:
    calls = _calls(item)
    if not calls:  # no tool applies: calling one of the shown tools anyway
        tool = rng.choice(item["tools"])
        numbers = [int(n) for n in re.findall(r"\d+", item["question"])] or [0]
        return answer_text([{"fn": tool, "args": (numbers * 2)[:TOOLS[tool].arity]}])
    call = rng.choice(calls)
    arity = len(call["args"])
    same = [t for t in TOOLS if t != call["fn"] and TOOLS[t].arity == arity]
    shown = [t for t in same if t in item["tools"]]
    call["fn"] = rng.choice(shown or same)
    return answer_text(calls)


def _swapped_args(item: dict, rng: random.Random) -> str | None:
    calls = _calls(item)
    pairs = [c for c in calls if c["fn"] in ORDERED and c["args"][0] != c["args"][1]]
    if not pairs:
        return None
    call = rng.choice(pairs)
    call["args"].reverse()
    return answer_text(calls)


def _off_by_one_digit(item: dict, rng: random.Random) -> str | None:
    calls = _calls(item)
    places = [(c, i) for c in calls for i, a in enumerate(c["args"]) if isinstance(a, int)]
    if not places:
        return None
    call, i = rng.choice(places)
    digits = list(str(call["args"][i]))
    at = rng.randrange(len(digits))
    low = 1 if at == 0 and len(digits) > 1 else 0
    moves = [m for m in (-1, 1) if low <= int(digits[at]) + m <= 9]
    digits[at] = str(int(digits[at]) + rng.choice(moves))
    call["args"][i] = int("".join(digits))
    return answer_text(calls)


def _broken_brace(item: dict, rng: random.Random) -> str | None:
    text = item["answer"]
    at = rng.choice([i for i, ch in enumerate(text) if ch in "{}"])
    return text[:at] + text[at + 1:]


def _trailing_text(item: dict, rng: random.Random) -> str | None:
    return item["answer"] + rng.choice(TRAILING)


CORRUPT = {"wrong_tool": _wrong_tool, "swapped_args": _swapped_args, "off_by_one_digit": _off_by_one_digit,
           "broken_brace": _broken_brace, "trailing_text": _trailing_text}


def corrupt(item: dict, mode: str, seed: int = 0) -> str | None:
    """The gold answer corrupted by `mode` (the answer line, no newline), or None when the mode does not apply to
    the item (swapped_args without a call of sub, div or mod on two different arguments, off_by_one_digit without an
    integer argument). ValueError for an unknown mode."""
    if mode not in CORRUPT:
        raise ValueError(f"corruption {mode!r} is invalid: one of {', '.join(MODES)}")
    return CORRUPT[mode](item, random.Random(f"slm.toolcall.corrupt/{seed}/{item['id']}/{mode}"))


def pick(item: dict, modes, seed: int = 0) -> tuple[str, str] | None:
    """(mode, corrupted answer) for one of `modes` that applies to the item, drawn uniformly (seeded by the item);
    None when none applies."""
    rng = random.Random(f"slm.toolcall.pick/{seed}/{item['id']}")
    options = [(m, t) for m in modes if (t := corrupt(item, m, seed)) is not None]
    return rng.choice(options) if options else None
