"""How every command reports bad input: one line on stderr, `<prog>: error: <message>`, and exit code 2.

Standard library only, so that commands which never load Hydra or torch (the analysis commands) report the
same way; slm/cli/config.py adds Hydra's errors on top.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Iterable, NoReturn


def fail(prog: str, message: str, code: int = 2) -> NoReturn:
    """Print the message folded into one line and exit (Hydra's messages span several lines)."""
    text = str(message).split("Config search path:")[0]  # Hydra's search-path dump is noise here
    line = " ".join(part.strip() for part in text.splitlines() if part.strip())
    print(f"{prog}: error: {line}", file=sys.stderr)
    sys.exit(code)


def describe(err: BaseException) -> str:
    """One line for an error: an OSError as `<file>: <reason>`, anything else as its message on one line."""
    if isinstance(err, OSError) and err.strerror:
        return f"{err.filename}: {err.strerror}" if err.filename else err.strerror
    return " ".join(str(err).split()) or type(err).__name__


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser, except that a usage error is one line naming --help (not the usage block), exit 2."""

    def error(self, message: str) -> NoReturn:
        fail(self.prog, f"{message} (see {self.prog} --help)")


def doc_parser(prog: str, doc: str, examples: int = 1) -> OneLineParser:
    """A command's parser from its module docstring `<prog>...: <description>` + paragraphs of examples: the
    description after the first ": ", and the next `examples` paragraphs as the epilog, kept as written."""
    parts = doc.split("\n\n")
    return OneLineParser(prog=prog, description=parts[0].split(": ", 1)[1],
                         epilog="examples:\n" + "\n\n".join(parts[1:1 + examples]),
                         formatter_class=argparse.RawDescriptionHelpFormatter)


def comma_choices(allowed: Iterable[str]) -> Callable[[str], list[str]]:
    """An argparse type: a comma-separated list of names from `allowed`, each once, in the order given."""
    allowed = list(allowed)

    def parse(text: str) -> list[str]:
        names = [t.strip() for t in text.split(",") if t.strip()]
        if not names or any(n not in allowed for n in names):
            raise argparse.ArgumentTypeError(f"{text!r} is invalid: a comma-separated list of {', '.join(allowed)}")
        return list(dict.fromkeys(names))

    return parse


def whole_number(least: int, most: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer from `least` to `most` (None: no upper bound)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if value < least or (most is not None and value > most):
            raise argparse.ArgumentTypeError(f"{text}: must be >= {least}" if value < least else
                                             f"{text}: must be <= {most}")
        return value

    return parse
