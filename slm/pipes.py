"""A command whose output is piped into a reader that stops early (`slm-params --json | head`, `slm-status | less`
quit at once) ends quietly, as Unix tools do, instead of with a BrokenPipeError traceback.

Standard library only: every command's entry point is wrapped (`@quiet_on_closed_pipe`), the analysis ones too.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from typing import Callable

CLOSED_PIPE_EXIT = 128 + signal.SIGPIPE
"""The exit status of a command whose reader closed the pipe: that of a Unix tool killed by SIGPIPE (141)."""


def quiet_on_closed_pipe(main: Callable) -> Callable:
    """Wrap a command's entry point: when stdout's reader has gone, stop writing, print nothing more, and exit with
    CLOSED_PIPE_EXIT (Python's own flush at exit would otherwise report the pipe again)."""

    @functools.wraps(main)
    def inner(*args, **kwargs):
        try:
            result = main(*args, **kwargs)
            sys.stdout.flush()  # output still buffered fails here, inside the handler, not at interpreter exit
            return result
        except BrokenPipeError:
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())  # what is still buffered goes nowhere
            except (OSError, ValueError):
                pass
            sys.exit(CLOSED_PIPE_EXIT)

    inner.quiet_on_closed_pipe = True  # kept by wrappers made with functools.wraps: tests find it
    return inner
