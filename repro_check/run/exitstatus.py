"""How a run, or a rank of a torchrun job, ended: its exit status read as a status, a signal and
an error. One rule for both, so that a run and a rank that end the same way are named the same.

The statuses (:data:`Status`) are what the JSON report's ``run_results[].status`` and
``rank_results[].ranks[].status`` say.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from repro_check.trace.exits import (CHANNEL_MESSAGE, EXIT_CHANNEL, EXIT_PROTOCOL, EXIT_RAISED,
                                     EXIT_RESOLVE, EXIT_TERMINATED, PROTOCOL_MESSAGE)
from repro_check.trace.payloads import RunError
from repro_check.trace.results import FAILED_STATUSES, STATUSES, Status, status_of

__all__ = ["FAILED_STATUSES", "STATUSES", "Ending", "Status", "classify_exit", "protocol_message",
           "signal_name", "status_of"]


def protocol_message(output: str) -> str:
    """Why a run refused its configuration (:data:`EXIT_PROTOCOL`): the reason it wrote last."""
    said = [line[len("repro-check: "):] for line in output.splitlines()
            if line.startswith("repro-check: ")]
    return f"{PROTOCOL_MESSAGE}: {said[-1]}" if said else PROTOCOL_MESSAGE


def signal_name(code: int) -> str:
    """The name of the signal a negative exit status stands for (``SIGKILL``)."""
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


@dataclass
class Ending:
    """What an exit status says: the status, the signal that ended it, the error."""

    status: Status
    signal: str | None = None
    error: RunError | None = None


def classify_exit(code: int, status: Status, error: RunError | None, *,
                  stopped: bool = False, rank: bool = False, output: str = "") -> Ending:
    """The ending of a process that exited with ``code`` after recording ``status`` (``pending``
    when the target had not returned) and ``error``.

    ``stopped``: a rank that its supervisor stopped (torchrun ended the job after another rank
    failed): a signal or a non-zero status then makes it ``terminated``, not ``crashed``.
    ``rank``: under torchrun, a status after the target returned other than
    :data:`EXIT_RAISED` keeps the status the rank recorded (the job's teardown may exit
    non-zero), and :data:`EXIT_TERMINATED` is any non-zero status (torchrun sends the SIGTERM).
    ``output``: the end of what the process printed (the reason of :data:`EXIT_PROTOCOL`).
    """
    if code == EXIT_RESOLVE:
        return Ending("unresolved", error=error)
    if code < 0:
        return Ending("terminated" if stopped else "crashed", signal_name(code), error)
    if code == EXIT_TERMINATED and status == "pending" and not rank:
        return Ending("failed", error={
            "kind": "exit", "message": "stopped by a SIGTERM repro-check did not send (the "
            f"target signalled itself or its parent?), status {code}"})
    if code == EXIT_CHANNEL:
        # whatever it recorded after that is lost: never a short run
        return Ending("failed", error={"kind": "channel", "message": CHANNEL_MESSAGE})
    if code == EXIT_PROTOCOL:
        return Ending("failed", error={"kind": "protocol", "message": protocol_message(output)})
    if code != 0 and (not rank or code == EXIT_RAISED or status == "pending"):
        if rank and stopped and error is None:
            return Ending("terminated")
        after = " after the target returned" if status != "pending" and not rank else ""
        return Ending("failed", error=error if error is not None else {
            "kind": "exit", "message": f"exited with status {code}{after}"})
    if status == "pending":
        return Ending("exited", error=error)  # os._exit(0) or similar before the target returned
    return Ending(status, error=error)
