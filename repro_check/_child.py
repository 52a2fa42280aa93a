"""The entry point of one run: seed, install capture, run the target, stream the trace.

Started by the runner as ``python -m repro_check._child`` with its configuration in the
``REPRO_CHECK_RUN`` environment variable and a pipe on which every trace line is written as it
happens (unbuffered, so steps survive ``os._exit`` and crashes). The target's own output goes to
this process's stdout/stderr, which the runner keeps a tail of.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

#: exit status of a run whose target could not be resolved
EXIT_RESOLVE = 97
#: exit status of a run whose target raised
EXIT_RAISED = 98


class Emitter:
    """Writes one trace line at a time to the runner's pipe."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> None:
        from .trace import dumps

        data = dumps(event).encode("utf-8")
        with self.lock:
            try:
                while data:
                    n = os.write(self.fd, data)
                    data = data[n:]
            except (BrokenPipeError, OSError):
                os._exit(EXIT_RAISED)  # the runner is gone: nobody reads our results


def main() -> int:
    config = json.loads(os.environ.pop("REPRO_CHECK_RUN"))
    emit = Emitter(int(config["event_fd"]))
    started = time.time()

    from . import capture, environment, seeding, targets

    seed = config.get("seed")
    components = config.get("components", [])
    done = seeding.apply(seed, components, config.get("threads"), config.get("warn_only", False)) \
        if seed is not None else {}
    target = targets.Target(**config["target"])
    source = target.path
    if source is None and target.module:
        try:
            source = targets.find_module(target.module, targets.search_path(os.getcwd())).origin
        except targets.TargetNotFound:
            source = None
    header = {
        "target": target.text,
        "args": config.get("args", []),
        "run": config.get("run", 1),
        "seed": seed,
        "components": list(components),
        "seeding": done,
        "max_steps": config.get("max_steps"),
        "probe_step": config.get("probe_step"),
        "environment": environment.fingerprint(source),
        "started": started,
    }
    from .trace import header_line

    emit(header_line(header))
    flag_ops = bool(config.get("warn_only")) and "deterministic_algorithms" in components
    recorder = capture.Recorder(emit, config.get("max_steps"), probe_step=config.get("probe_step"),
                                flag_ops=flag_ops).install()
    status, code = "completed", 0
    try:
        run = targets.resolve(target, config.get("args", []))
    except targets.TargetNotFound as e:
        emit({"error": {"kind": "resolve", "message": str(e), "traceback": e.detail}})
        return EXIT_RESOLVE
    try:
        result = run()
    except capture.StopTraining:
        status = "stopped"
    except SystemExit as e:
        if e.code in (None, 0):
            status = "exited"
        else:
            tb = targets.target_traceback(e)
            sys.stderr.write(tb)
            emit({"error": {"kind": "exit", "message": f"the target called sys.exit({e.code!r})",
                            "traceback": tb}})
            recorder.flush()
            return EXIT_RAISED
    except BaseException as e:  # noqa: BLE001 - the target's failure, reported to the user
        tb = targets.target_traceback(e)
        sys.stderr.write(tb)
        sys.stderr.flush()
        recorder.flush()
        emit({"error": {"kind": "raised", "type": type(e).__name__, "message": str(e)[:2000],
                        "traceback": tb[-20000:]}})
        return EXIT_RAISED
    else:
        recorder.metrics_from_return(result)
    recorder.flush()
    if recorder.metrics and status != "stopped":
        emit({"metrics": recorder.metrics})
    emit({"info": {"status": status, "steps": recorder.step, "backward_calls": recorder.backward_calls,
                   "seconds": time.time() - started}})
    return code


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code) if code else sys.exit(0)
