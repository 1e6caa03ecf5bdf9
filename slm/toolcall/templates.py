"""The question templates of the function-calling task: per tool, the templates training sees and those held out for
the `test_templates` split; the phrases of two-step questions ("add 3 and 4, then multiply that by 5.").

Every character of a held-out template also appears in the training text (tests/test_toolcall_items.py), so a
character tokenizer fitted on the training corpus encodes every split.
"""

from __future__ import annotations

SINGLE: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # tool: (training templates, held-out templates); {a} and {b} are the call's arguments in order
    "add": (("what is {a} plus {b}?", "add {a} and {b}.", "what is the sum of {a} and {b}?", "{a} + {b} = ?"),
            ("if i have {a} and get {b} more, how many do i have?", "combine {a} with {b}.")),
    "sub": (("what is {a} minus {b}?", "subtract {b} from {a}.", "what is {a} - {b}?"),
            ("take {b} away from {a}.", "how much is left when {b} is removed from {a}?")),
    "mul": (("what is {a} times {b}?", "multiply {a} by {b}.", "what is the product of {a} and {b}?"),
            ("what do {a} groups of {b} make?", "{a} multiplied by {b} is what?")),
    "div": (("what is {a} divided by {b}, rounded down?", "divide {a} by {b}.", "how many whole {b}s fit in {a}?"),
            ("how many times does {b} go into {a}?",)),
    "mod": (("what is {a} mod {b}?", "what is the remainder of {a} divided by {b}?"),
            ("what is left over when {a} is split into groups of {b}?",)),
    "max": (("which is larger, {a} or {b}?", "what is the maximum of {a} and {b}?", "pick the bigger of {a} and {b}."),
            ("what is the greater number: {a} or {b}?",)),
    "min": (("which is smaller, {a} or {b}?", "what is the minimum of {a} and {b}?", "pick the lesser of {a} and {b}."),
            ("what is the least number: {a} or {b}?",)),
    "neg": (("what is the negative of {a}?", "negate {a}.", "flip the sign of {a}."),
            ("what is {a} with its sign changed?",)),
    "abs": (("what is the absolute value of {a}?", "how far is {a} from zero?"),
            ("give the size of {a} without its sign.",)),
    "sq": (("what is {a} squared?", "square {a}."),
           ("what is {a} times itself?",)),
}

FIRST: dict[str, str] = {
    # a two-step question's first call, as an order
    "add": "add {a} and {b}", "sub": "subtract {b} from {a}", "mul": "multiply {a} by {b}",
    "div": "divide {a} by {b}", "mod": "take {a} mod {b}", "max": "take the larger of {a} and {b}",
    "min": "take the smaller of {a} and {b}", "neg": "negate {a}", "abs": "take the absolute value of {a}",
    "sq": "square {a}",
}

THEN: dict[str, tuple[tuple[str, int], ...]] = {
    # a two-step question's second call: (phrase, the argument position of the first call's result, "that");
    # {b} is the other argument
    "add": (("add {b} to that", 0),), "sub": (("subtract {b} from that", 0), ("subtract that from {b}", 1)),
    "mul": (("multiply that by {b}", 0),), "div": (("divide that by {b}", 0),), "mod": (("take that mod {b}", 0),),
    "max": (("take the larger of that and {b}", 0),), "min": (("take the smaller of that and {b}", 0),),
    "neg": (("negate that", 0),), "abs": (("take the absolute value of that", 0),), "sq": (("square that", 0),),
}
