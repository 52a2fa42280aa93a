"""How a run's process writes its trace lines: one JSON line at a time, to the runner's pipe or to
an events file (a torchrun rank's, or a process the target started).

The target owns the process's file descriptors: it may close every one it inherited (daemonizing
code does ``os.closerange(3, ...)``) and open files of its own, which then get the numbers it
closed. So the trace channel is moved to a high number at once (the lowest free numbers are what
the target's own files get), and before every write one ``fstat`` checks that the number still
names the very file or pipe it named at the start. When it does not, nothing is written: the run
ends with :data:`~repro_check.trace.exits.EXIT_CHANNEL`, a failed run, never a short one.
"""

from __future__ import annotations

import os
import threading
from typing import Any, NoReturn

from repro_check.trace.exits import EXIT_CHANNEL, EXIT_RAISED

#: ``os._exit`` as it was before the run entry wrapped it (the wrapper writes the pending steps,
#: which would come back here); the calls below are bound at import too, so that a target that
#: patches ``os`` cannot take the channel over
_REAL_EXIT = os._exit
_fstat, _write, _getpid = os.fstat, os.write, os.getpid
#: the trace channel goes at or above this number (or half the descriptor limit, if lower)
HIGH_FD = 1000


def move_high(fd: int) -> int:
    """``fd`` moved to a high free number (close-on-exec: a program the target executes does not
    hold the run's pipe), the old number closed; ``fd`` itself when the limit leaves no room."""
    # Unix only
    import fcntl

    try:
        # Unix only
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY or soft < 0:
            soft = 2 * HIGH_FD
    except (ImportError, OSError, ValueError):
        soft = 256
    low = min(HIGH_FD, soft // 2)
    if fd >= low:
        return fd
    try:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, low)
    except OSError:
        return fd
    os.close(fd)
    return high


class Emitter:
    """Writes one trace line at a time to ``fd``, from the process that made it only: a forked
    process inherits it, and must not write into another process's stream. ``high``: move the
    descriptor out of the target's way first (see :func:`move_high`)."""

    def __init__(self, fd: int, high: bool = True) -> None:
        # after start-up: the run entry reads its configuration before the trace format loads
        from repro_check.trace.format import MAX_LINE_BYTES, dumps

        self.fd = move_high(fd) if high else fd
        st = os.fstat(self.fd)
        #: what the descriptor must still name before each write
        self.identity = (st.st_dev, st.st_ino)
        self.max_bytes = MAX_LINE_BYTES
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self._dumps = dumps

    def __call__(self, event: dict[str, Any]) -> None:
        if _getpid() != self.pid:
            return  # a forked process: it records in a stream of its own, or not at all
        data = self._dumps(event).encode("utf-8")
        if len(data) > self.max_bytes:  # no reader takes it: say so instead, never silently
            kind = next(iter(event), "record")
            data = self._dumps({"warning": f"a {kind} record of {len(data):,} bytes is over the "
                                           f"{self.max_bytes:,}-byte line limit of a trace and "
                                           "was left out: the comparison is incomplete",
                                "incomplete": True}).encode("utf-8")
        with self.lock:
            try:
                st = _fstat(self.fd)
            except OSError:
                self._broken("closed")
            if (st.st_dev, st.st_ino) != self.identity:
                self._broken("reused")
            try:
                while data:
                    n = _write(self.fd, data)
                    data = data[n:]
            except (BrokenPipeError, OSError):
                _REAL_EXIT(EXIT_RAISED)  # the runner is gone: nobody reads our results

    def _broken(self, how: str) -> NoReturn:
        """The target took the channel away: say so on stderr and end the run as failed."""
        try:
            os.write(2, f"repro-check: the target {how} file descriptor {self.fd}, the run's "
                        "trace channel: the run cannot be recorded\n".encode())
        except OSError:
            pass
        _REAL_EXIT(EXIT_CHANNEL)
        raise AssertionError  # not reached
