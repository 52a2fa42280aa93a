"""Typed errors under one root, so the CLI can turn each into its documented exit code."""

from __future__ import annotations

import enum
from typing import Any


class ExitCode(enum.IntEnum):
    """The process exit codes of every repro-check command."""

    REPRODUCIBLE = 0
    NOT_REPRODUCIBLE = 1
    USAGE_ERROR = 2
    TARGET_FAILED = 3
    INTERNAL_ERROR = 4
    INTERRUPTED = 130


class ReproCheckError(Exception):
    """Root of every error repro-check raises on purpose."""

    exit_code: ExitCode = ExitCode.INTERNAL_ERROR


class UsageError(ReproCheckError):
    """Bad arguments or configuration given to repro-check."""

    exit_code = ExitCode.USAGE_ERROR


class TargetNotFound(UsageError):
    """The TARGET names a file, module or attribute that cannot be resolved."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        #: the target's own traceback, when resolving it ran the target's code
        self.detail = detail


class TraceFileError(UsageError):
    """A trace, golden or report file given to us is unreadable, corrupt or foreign."""


class TargetFailed(ReproCheckError):
    """The target itself raised, crashed, timed out or produced nothing to compare."""

    exit_code = ExitCode.TARGET_FAILED


class Interrupted(ReproCheckError):
    """Ctrl-C or SIGTERM: the runs were stopped; what they recorded so far is kept."""

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, message: str, results: list[Any] | None = None) -> None:
        super().__init__(message)
        self.results = results or []
