"""One rank of a distributed run, as torchrun starts it (``python -m repro_check.child.process.rank_supervisor``).

torchrun starts each rank in a session of its own and does not pass on the runner's pipe, so each
rank writes its trace lines to a file of its own in the run's events folder, which the runner
tails. This small supervisor (no torch import) opens that file, starts the usual run entry
(:mod:`repro_check.child.main`) with the file as its event stream, and appends how and when the rank
ended: an exit status and a signal survive even a rank killed with SIGKILL, and the times name the
rank that failed first. If torchrun itself dies, the supervisor stops its whole process group, so
no rank is left behind in a collective.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from repro_check.trace import runconfig
from repro_check.trace.exits import EXIT_PROTOCOL
from repro_check.child.main import PARENT_VAR
from repro_check.trace.protocol import ProtocolError

#: name of the events file of rank R in the events folder
EVENTS_NAME = "rank-{rank}.events"
#: seconds between checks that torchrun is still there
_WATCH = 0.5


def _write(fd: int, record: dict[str, Any]) -> None:
    data = (json.dumps(record, separators=(",", ":")) + "\n").encode("utf-8")
    while data:
        data = data[os.write(fd, data):]


def _watch_parent(parent: int) -> None:
    """Stop this rank's whole process group once torchrun is gone (reparented)."""
    while True:
        time.sleep(_WATCH)
        if os.getppid() != parent:
            os.killpg(os.getpgrp(), signal.SIGKILL)


#: signals this process leaves as they are (its own above, and those that harm nothing)
_KEPT = {"SIGTERM", "SIGINT", "SIGHUP", "SIGCHLD", "SIGKILL", "SIGSTOP", "SIGCONT", "SIGWINCH",
         "SIGURG"}


def _shrug_off_signals() -> None:
    """A rank's target may signal its parent (this process, as ``os.kill(os.getppid(), ...)``):
    no other signal ends it, so it still reports how the rank ended (the same rule as the run
    supervisor's in :mod:`repro_check.run.procs`, which the child side cannot import)."""
    for sig in signal.valid_signals():
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = ""
        if name in _KEPT:
            continue
        try:
            if signal.getsignal(sig) == signal.SIG_DFL:
                signal.signal(sig, lambda signum, frame: None)
        except (OSError, ValueError, RuntimeError):
            pass


def main() -> int:
    try:
        config = runconfig.read_config(os.environ, keep=True)
    except ProtocolError as e:
        sys.stderr.write(f"repro-check: {e}\n")
        return EXIT_PROTOCOL
    rank = int(os.environ.get("RANK", "0"))
    folder = config.distributed
    if folder is None:
        sys.stderr.write("repro-check: the rank supervisor runs only under torchrun\n")
        return EXIT_PROTOCOL
    path = os.path.join(folder, EVENTS_NAME.format(rank=rank))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    parent = os.getppid()
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()

    stopped: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        stopped.append(signum)  # torchrun stops the group; the run entry gets the signal too

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    _shrug_off_signals()

    config_fd = runconfig.config_file(config.replace(event_fd=fd))
    env = dict(os.environ)
    env[runconfig.RUN_VAR] = runconfig.by_descriptor(config_fd)
    env[PARENT_VAR] = str(os.getpid())  # the run entry dies with this process
    env["REPRO_CHECK_RANK"] = str(rank)
    _write(fd, {"info": {"rank_process": {
        "rank": rank, "pid": os.getpid(), "pgid": os.getpgrp(),
        "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
    }}})
    proc = subprocess.Popen([sys.executable, "-m", "repro_check.child"], env=env,
                            pass_fds=(fd, config_fd))
    os.close(config_fd)
    returncode = proc.wait()
    _write(fd, {"info": {"rank_exit": {
        "returncode": returncode, "time": time.time(),
        "stopped_by": signal.Signals(stopped[0]).name if stopped else None,
    }}})
    os.close(fd)
    return 128 - returncode if returncode < 0 else returncode


if __name__ == "__main__":
    sys.exit(main())
