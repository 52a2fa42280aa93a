"""Ctrl-C, SIGTERM and SIGHUP outside the runs: noted, not acted on at once, so that a signal
that arrives while reports are built or written still leaves every report whole; the command
starts no further run (a session that has not started yet reports itself interrupted) and exits
130. While runs are going, the runner's own handling applies (the runs are stopped and what they
recorded is kept). A second signal interrupts at once."""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None))
                if s is not None)


class CaughtSignals:
    """A context in which the signals above are counted (``caught``) instead of acting; a
    signal the caller ignores stays ignored; outside the main thread nothing is installed.

    ``interrupt_after``: the count at which a further signal raises :class:`KeyboardInterrupt`
    (None: never)."""

    def __init__(self, interrupt_after: int | None = None) -> None:
        self.caught: list[int] = []
        self.previous: dict[int, Any] = {}
        self.interrupt_after = interrupt_after

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.caught.append(signum)
        if self.interrupt_after is not None and len(self.caught) > self.interrupt_after:
            raise KeyboardInterrupt

    def __enter__(self) -> CaughtSignals:
        for sig in SIGNALS:
            try:
                if signal.getsignal(sig) == signal.SIG_IGN:
                    continue  # e.g. a background job: the caller chose to ignore it
                self.previous[sig] = signal.signal(sig, self._handle)
            except (ValueError, OSError):  # not the main thread
                pass
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self.previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)

    @property
    def count(self) -> int:
        return len(self.caught)

    @property
    def interrupted(self) -> bool:
        return bool(self.caught)


class DeferredSignals(CaughtSignals):
    """The guard of a whole command: the first signal is noted, a second interrupts at once."""

    def __init__(self) -> None:
        super().__init__(interrupt_after=1)


#: the guards of the commands in force, innermost last
ACTIVE: list[CaughtSignals] = []


def current() -> CaughtSignals | None:
    return ACTIVE[-1] if ACTIVE else None


def stop_requested() -> bool:
    """A signal was noted: start nothing new."""
    guard = current()
    return guard is not None and guard.interrupted
