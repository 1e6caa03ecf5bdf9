"""A second stop signal ends the process, even while Python cannot run its signal handlers.

CPython runs a signal's Python handler only between bytecodes of the main thread. During one long operation in C
(a step's backward pass, a bfloat16 matrix product emulated on a CPU, a wait for a child process) the handler
waits, and signals of one kind that arrive meanwhile are handled once: two SIGTERMs during a slow step were one
SIGTERM, seen when the step ended. `StopGuard` keeps the promise that a second Ctrl-C or SIGTERM stops at once in
every phase of a run: CPython's C-level handler also writes each signal's number to the wakeup fd
(signal.set_wakeup_fd), which a watcher thread reads as the signals come. At the second stop signal the process
has `grace` seconds to end by itself (SignalCheckpoint's handler raises SystemExit as soon as Python runs); then
the watcher ends it: one line on stderr and exit 128 + the signal, without cleanup (what a kill leaves: saves are
atomic, and the run resumes from its last checkpoint).

Only a signal that has a Python handler reaches the wakeup fd: an ignored one stays ignored, and a SIGTERM under
its default action ends the process at once anyway. Standard library only; the main thread installs it.
"""

from __future__ import annotations

import os
import signal
import threading
import time

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_S = 2.0
"""Seconds the process has after a second stop signal to end by itself before the watcher ends it."""


class StopGuard:
    """Context manager: while it is entered, a second SIGINT or SIGTERM ends the process within `grace` seconds.

    Entered outside the main thread (where no wakeup fd can be set) it does nothing. On exit the wakeup fd that was
    there before is put back and the watcher ends; a second signal whose grace has not run out by then is left to
    the code that is unwinding."""

    def __init__(self, prog: str = "slm-train", grace: float = GRACE_S) -> None:
        self.prog, self.grace = prog, grace
        self.stops = 0
        self._pipe: tuple[int, int] | None = None
        self._previous_fd = -1
        self._thread: threading.Thread | None = None
        self._active = threading.Event()

    def __enter__(self) -> "StopGuard":
        if threading.current_thread() is not threading.main_thread():
            return self
        read, write = os.pipe()
        os.set_blocking(write, False)  # set_wakeup_fd needs a non-blocking fd
        self._previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        self._pipe = (read, write)
        self._active.set()
        self._thread = threading.Thread(target=self._watch, args=(read,), name="slm-stop-guard", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._pipe is None:
            return
        self._active.clear()
        signal.set_wakeup_fd(self._previous_fd)
        read, write = self._pipe
        self._pipe = None
        os.close(write)  # the watcher's read returns b"": it ends
        self._thread.join(timeout=1.0)
        os.close(read)

    def _watch(self, read: int) -> None:
        while True:
            try:
                data = os.read(read, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum in STOP_SIGNALS:
                    self.stops += 1
                    if self.stops >= 2:
                        self._end(signum)

    def _end(self, signum: int) -> None:
        """The second stop signal: give the main thread `grace` seconds to stop, then stop the process."""
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline:
            if not self._active.is_set():
                return  # the guarded code ended: the process is stopping by itself
            time.sleep(0.05)
        if not self._active.is_set():
            return
        name = signal.Signals(signum).name
        try:
            os.write(2, f"{self.prog}: {name} again: stopping now, without a checkpoint (the process was busy in one "
                        "long operation; the run resumes from its last checkpoint)\n".encode())
        except OSError:
            pass
        os._exit(128 + signum)
