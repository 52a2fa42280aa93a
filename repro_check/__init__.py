"""repro-check: is my PyTorch training run reproducible, and if not, why not?

``import repro_check`` is cheap (no torch, no rich, not even :mod:`typing`): a training script
may import it just for :func:`log_metric`, and the console script starts by importing it, so
whatever it loaded would come before the command's signal handlers are in place.
"""

from __future__ import annotations

# `typing` itself is not imported: type checkers treat a name TYPE_CHECKING as theirs
TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

    from repro_check.child.observe.capture import log_metric
    from repro_check.api import across, bisect, check, diff, record, resume, verify
    from repro_check.errors import (
        ExitCode,
        Interrupted,
        ReproCheckError,
        TargetFailed,
        TargetNotFound,
        TraceFileError,
        UsageError,
    )
    from repro_check.report.model import Report
    from repro_check.run.options import RunOptions
    from repro_check.version import __version__

__all__ = [
    "ExitCode",
    "Interrupted",
    "Report",
    "ReproCheckError",
    "RunOptions",
    "TargetFailed",
    "TargetNotFound",
    "TraceFileError",
    "UsageError",
    "across",
    "bisect",
    "check",
    "diff",
    "log_metric",
    "record",
    "resume",
    "verify",
    "__version__",
]

_ERRORS = ("ExitCode", "Interrupted", "ReproCheckError", "TargetFailed", "TargetNotFound",
           "TraceFileError", "UsageError")


def __getattr__(name: str) -> Any:
    if name in _ERRORS:
        # on first use: the console script installs its signal handlers before errors (and
        # enum, typing) load
        from repro_check import errors

        return getattr(errors, name)
    if name == "__version__":
        # on first use, as the errors above
        from repro_check.version import __version__

        return __version__
    if name == "log_metric":
        # loaded on first use: the console script starts without it
        from repro_check.child.observe.capture import log_metric

        return log_metric
    if name in ("across", "bisect", "check", "verify", "record", "diff", "resume"):
        # on first use: ``import repro_check`` loads none of it
        from repro_check import api

        return getattr(api, name)
    if name == "Report":
        # on first use: ``import repro_check`` loads none of it
        from repro_check.report.model import Report

        return Report
    if name == "RunOptions":
        # on first use: ``import repro_check`` loads none of it
        from repro_check.run.options import RunOptions

        return RunOptions
    raise AttributeError(f"module 'repro_check' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
