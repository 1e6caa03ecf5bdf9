"""How every command reports bad input: one line on stderr, `<prog>: error: <message>`, and exit code 2.

Standard library only, so that commands which never load Hydra or torch (the analysis commands) report the
same way; slm/cli/config.py adds Hydra's errors on top.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


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
