"""The tool catalogue: small integer functions a model may call, each with the one-line signature it is shown.

    TOOLS["sub"].call([137, 48]) == 89        TOOLS["sub"].signature == "sub(a,b)"

Arguments and results are Python ints (JSON integers). `call` raises ToolError for a call it cannot make (a wrong
number of arguments, a non-integer, a division by zero, a result too large to be an answer), never anything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

MAX_RESULT_DIGITS = 40
"""A result with more digits is refused (ToolError): no tool here makes one from arguments a question holds, and a
model's garbage (a 4000-digit argument squared) must not cost time."""


class ToolError(ValueError):
    """A call that cannot be made (arity, types, division by zero, a huge result)."""


@dataclass(frozen=True)
class Tool:
    """One tool: its name, arity, function and the signature shown in a prompt."""

    name: str
    arity: int
    fn: Callable[..., int]
    doc: str
    """What it computes, in words (docs and the BFCL-style description)."""

    @property
    def signature(self) -> str:
        return f"{self.name}({','.join('ab'[:self.arity])})"

    def call(self, args: list) -> int:
        """The result of this tool on `args`; ToolError if the call cannot be made."""
        if len(args) != self.arity:
            raise ToolError(f"{self.name} takes {self.arity} argument(s), got {len(args)}")
        if not all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            raise ToolError(f"{self.name} takes integers")
        if any(len(str(abs(a))) > MAX_RESULT_DIGITS for a in args):
            raise ToolError(f"{self.name}: an argument over {MAX_RESULT_DIGITS} digits")
        try:
            result = self.fn(*args)
        except ZeroDivisionError:
            raise ToolError(f"{self.name}: division by zero") from None
        if len(str(abs(result))) > MAX_RESULT_DIGITS:
            raise ToolError(f"{self.name}: a result over {MAX_RESULT_DIGITS} digits")
        return result


TOOLS: dict[str, Tool] = {t.name: t for t in (
    Tool("add", 2, lambda a, b: a + b, "a plus b"),
    Tool("sub", 2, lambda a, b: a - b, "a minus b"),
    Tool("mul", 2, lambda a, b: a * b, "a times b"),
    Tool("div", 2, lambda a, b: a // b, "a divided by b, rounded down"),
    Tool("mod", 2, lambda a, b: a % b, "the remainder of a divided by b"),
    Tool("max", 2, max, "the larger of a and b"),
    Tool("min", 2, min, "the smaller of a and b"),
    Tool("neg", 1, lambda a: -a, "minus a"),
    Tool("abs", 1, abs, "the absolute value of a"),
    Tool("sq", 1, lambda a: a * a, "a squared"),
)}
"""Every tool, by name (the order is the catalogue's: it fixes which pairs are held out, slm.toolcall.items)."""

BINARY = tuple(name for name, t in TOOLS.items() if t.arity == 2)
UNARY = tuple(name for name, t in TOOLS.items() if t.arity == 1)


def tools_line(names: list[str]) -> str:
    """The prompt's first line: `tools: add(a,b) neg(a)`."""
    return "tools: " + " ".join(TOOLS[n].signature for n in names)
