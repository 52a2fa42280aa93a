"""A started interpreter with repro-check's command line imported, from which the tests' CLI
invocations fork instead of starting ``python -m repro_check`` afresh (tens of imports each).

Only the command-line process itself is forked: the runs it starts are fresh processes, as they
are for a user (the runner starts them with ``subprocess``), so nothing a check measures comes
from this interpreter. The forked process is what ``python -m repro_check ARGS`` would be: its
working directory, environment, ``sys.argv`` and ``sys.path[0]`` are the request's, its
descriptors 0-2 are /dev/null and the two output files, and it leaves through the interpreter's
own exit (atexit handlers, flushing) with the status ``console_main`` returned.

Protocol, one JSON line each way: the request ``{"argv", "cwd", "env", "stdout", "stderr"}``
is answered with ``{"pid": PID}`` at once and ``{"status": WAIT_STATUS}`` once it has ended.
The server serves one request at a time and ends when its stdin closes.
"""

from __future__ import annotations

import json
import os
import runpy
import sys

# what `python -m repro_check` imports at once, and the modules its commands import on the way
import repro_check.cli.commands  # noqa: F401
import repro_check.cli.main  # noqa: F401
import repro_check.report.ci  # noqa: F401
import repro_check.report.terminal  # noqa: F401
import repro_check.run.runner  # noqa: F401
import repro_check.run.session  # noqa: F401


def _serve() -> dict[str, object] | None:
    """Answer requests until stdin closes; in a forked child, return its request."""
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            return request
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"status": status}), flush=True)
    return None


def _become(request: dict[str, object]) -> None:
    """Turn this forked process into ``python -m repro_check ARGV`` run in ``cwd``."""
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(str(request["stdout"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(str(request["stderr"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    # sys.stdout and sys.stderr keep their objects, now on the files (fds 1 and 2), buffered as
    # a fresh interpreter's are when its output goes to a file
    cwd = str(request["cwd"])
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(request["env"])  # type: ignore[arg-type]
    sys.path[0] = cwd  # as `python -m` puts the working directory first
    sys.argv = ["repro_check", *request["argv"]]  # type: ignore[misc]
    runpy.run_module("repro_check", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    forked = _serve()
    if forked is not None:
        _become(forked)  # ends with sys.exit(console_main()): the interpreter's own exit
