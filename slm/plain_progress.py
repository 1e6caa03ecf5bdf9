"""Progress bars as plain lines where nobody watches them redraw: a file, a pipe, a Slurm log.

tqdm redraws a bar by writing `\\r` and the new state, over and over; in a log file every redraw stays, one
long line of carriage returns. `plain_lines(stream)` wraps a stream that is not a terminal so that only what
a terminal would finally show of each line reaches it: a bar becomes its last state, one line
(`tokenize tiny_shakespeare/train: 892ktok [00:00, 21.9Mtok/s]`), and a bar cleared at its end (`leave=False`)
leaves nothing. Text without `\\r` passes through unchanged and at once. A terminal is returned as it is.

    bar = tqdm(total=n, file=plain_lines(sys.stderr))      # one bar
    with plain_stderr():                                    # every bar that writes to sys.stderr meanwhile
        lm_eval.simple_evaluate(...)

Standard library only: any layer may use it.
"""

from __future__ import annotations

import contextlib
import io
import sys
from typing import TextIO


def is_terminal(stream) -> bool:
    """Whether `stream` is a terminal (False for a closed stream or one without isatty)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class PlainLines(io.TextIOBase):
    """A text stream over `stream` that writes each line as a terminal would end up showing it: the text after
    the line's last `\\r`. A line still being redrawn waits for its newline; a line that a `\\r` left blank (a
    cleared bar) is dropped."""

    def __init__(self, stream: TextIO):
        super().__init__()
        self.stream = stream
        self._pending = ""  # the current line's last redraw, while it has a \r and no newline yet

    def write(self, text: str) -> int:
        buffer = self._pending + text
        *lines, rest = buffer.split("\n")
        out = []
        for line in lines:
            if "\r" not in line:
                out.append(line + "\n")
                continue
            shown = line.rsplit("\r", 1)[1].rstrip()
            if shown:
                out.append(shown + "\n")
        if "\r" in rest:
            self._pending = "\r" + rest.rsplit("\r", 1)[1]
        else:
            self._pending = ""
            out.append(rest)
        if out:
            self.stream.write("".join(out))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"


def plain_lines(stream: TextIO) -> TextIO:
    """`stream` itself on a terminal (or when it already is a PlainLines), else a PlainLines over it."""
    if is_terminal(stream) or isinstance(stream, PlainLines):
        return stream
    return PlainLines(stream)


@contextlib.contextmanager
def plain_stderr():
    """sys.stderr as plain lines (plain_lines) while the block runs, when it is not a terminal."""
    stream = plain_lines(sys.stderr)
    if stream is sys.stderr:
        yield stream
        return
    with contextlib.redirect_stderr(stream):
        yield stream
