"""repro-check: is my PyTorch training run reproducible, and if not, why not?

``import repro_check`` is cheap (no torch, no rich): a training script may import it just for
:func:`log_metric`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from repro_check.child.capture import log_metric
from repro_check.errors import (
    ExitCode,
    Interrupted,
    ReproCheckError,
    TargetFailed,
    TargetNotFound,
    TraceFileError,
    UsageError,
)

__version__ = "0.1.0"

if TYPE_CHECKING:
    from repro_check.api import check, diff, record, verify
    from repro_check.report.model import Report

__all__ = [
    "ExitCode",
    "Interrupted",
    "Report",
    "ReproCheckError",
    "TargetFailed",
    "TargetNotFound",
    "TraceFileError",
    "UsageError",
    "check",
    "diff",
    "log_metric",
    "record",
    "verify",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name in ("check", "verify", "record", "diff"):
        from repro_check import api

        return getattr(api, name)
    if name == "Report":
        from repro_check.report.model import Report

        return Report
    raise AttributeError(f"module 'repro_check' has no attribute {name!r}")
