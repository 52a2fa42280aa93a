"""How a run's process writes its trace lines: one JSON line at a time, to the runner's pipe or to
an events file (a torchrun rank's, or a process the target started)."""

from __future__ import annotations

import os
import threading
from typing import Any

from repro_check.child.exits import EXIT_RAISED


class Emitter:
    """Writes one trace line at a time to ``fd``, from the process that made it only: a forked
    process inherits it, and must not write into another process's stream."""

    def __init__(self, fd: int) -> None:
        from repro_check.trace.format import MAX_LINE_BYTES, dumps

        self.fd = fd
        self.max_bytes = MAX_LINE_BYTES
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self._dumps = dumps

    def __call__(self, event: dict[str, Any]) -> None:
        if os.getpid() != self.pid:
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
                while data:
                    n = os.write(self.fd, data)
                    data = data[n:]
            except (BrokenPipeError, OSError):
                os._exit(EXIT_RAISED)  # the runner is gone: nobody reads our results
