"""How a run ended, as the parent reads it from the run's trace and exit: what the runner,
the comparisons, the reports and the golden files all take.

Below every parent-side package (the runner fills these in, the comparison and the report read
them), so that none of them imports another's module for a type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from repro_check.trace.protocol import (ErrorRecord, HeaderRecord, InfoRecord, MetricsRecord,
                                        Record, StepRecord, WarningRecord)

#: the statuses of a run (or a rank) that failed: the target raised, crashed, hung or could not
#: be found (a cancelled, stopped or early-exited run did not fail)
FAILED_STATUSES = frozenset({"failed", "crashed", "timeout", "unresolved"})
#: the statuses of a run whose printed metrics count (as its own metrics do): it ran to its end
PRINTED_STATUSES = frozenset({"completed", "exited"})


@dataclass
class ProcessResult:
    """What one process the target started recorded, and how it ended. ``status`` is the one the
    process recorded (completed, stopped at ``--max-steps``, exited, failed), or ``killed`` when
    it ended without saying (a signal, or stopped with the run)."""

    index: int
    status: str = "killed"
    steps: int = 0
    backward_calls: int = 0
    metrics: bool = False
    exitcode: int | None = None
    error: dict[str, Any] | None = None
    header: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    #: warnings that say a record of the process was left out
    incomplete: list[str] = field(default_factory=list)
    trace_path: str | None = None

    @property
    def recorded(self) -> bool:
        """Whether it has anything to compare: a process that did not train is ignored."""
        return bool(self.steps or self.backward_calls or self.metrics)

    @property
    def ended_itself(self) -> bool:
        return self.status != "killed"

    def fold(self, ev: Record) -> None:
        """Take one trace record of the process."""
        if isinstance(ev, HeaderRecord):
            self.header = ev.header
        elif isinstance(ev, StepRecord):
            self.steps = ev.step
        elif isinstance(ev, MetricsRecord):
            self.metrics = self.metrics or bool(ev.metrics)
        elif isinstance(ev, ErrorRecord):
            self.error = ev.error
        elif isinstance(ev, WarningRecord):
            self.warnings.append(ev.warning)
            if ev.incomplete:
                self.incomplete.append(ev.warning)
        elif isinstance(ev, InfoRecord) and ev.status is not None:
            info = ev.info
            self.status = ev.status
            calls = info.get("backward_calls")
            self.backward_calls = calls if isinstance(calls, int) else 0
            self.exitcode = info.get("exitcode")

    def to_dict(self) -> dict[str, Any]:
        return {"process": self.index, "status": self.status, "steps": self.steps,
                "backward_calls": self.backward_calls, "exitcode": self.exitcode,
                "error": self.error, "trace": self.trace_path}


@dataclass
class RunResult:
    """How one run ended; ``status`` is one of completed, stopped (max-steps), exited (early, with
    status 0), failed (raised or exited non-zero), crashed (killed by a signal), timeout,
    cancelled (stopped by fail-fast or an interrupt), unresolved."""

    index: int
    status: str = "pending"
    returncode: int | None = None
    signal: str | None = None
    error: dict[str, Any] | None = None
    output_tail: str = ""
    steps: int = 0
    header: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    trace_path: str | None = None
    #: seeding components the target overrode, and seeds it set itself: the seeding watch's
    #: {"component", "key", "value", "where", "source", "order"} records
    overrides: list[dict[str, Any]] = field(default_factory=list)
    #: the top-level models whose parameters went into step 1: {"class", "where", ...}
    models: list[dict[str, Any]] = field(default_factory=list)
    #: the private generators the target made: creation, seeding and first-draw records
    #: (:func:`repro_check.compare.cause.generator_record`)
    generators: list[dict[str, Any]] = field(default_factory=list)
    #: the DataLoaders the target made and the epochs they started
    #: (:func:`repro_check.compare.cause.loader_record`)
    loaders: list[dict[str, Any]] = field(default_factory=list)
    #: metrics picked from the run's output (``printed:NAME``), encoded
    printed_metrics: dict[str, Any] = field(default_factory=dict)
    #: the processes the target started, in index order (with ``RunSpec.processes``)
    processes: list[ProcessResult] = field(default_factory=list)
    #: a run stopped by --max-steps: the metrics it had recorded by then (not final, not compared)
    held_metrics: list[str] = field(default_factory=list)
    #: why what the run recorded is incomplete (records it wrote that could not be taken)
    incomplete: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.status in FAILED_STATUSES

    def describe_failure(self) -> str:
        if self.status == "timeout":
            limit = (self.error or {}).get("limit")
            took = f"{limit:g}" if isinstance(limit, (int, float)) else f"{self.seconds:.1f}"
            return f"run {self.index} timed out after {took} s"
        if self.status == "crashed":
            return f"run {self.index} was killed by {self.signal}"
        if self.error and self.error.get("kind") == "raised":
            return f"run {self.index} raised {self.error.get('type')}: {self.error.get('message')}"
        if self.error:
            return f"run {self.index}: {self.error.get('message')}"
        return f"run {self.index} exited with status {self.returncode}"


class Listener(Protocol):
    """Receives what happens in the runs (progress display, streaming comparison)."""

    def run_started(self, index: int) -> None: ...

    def event(self, index: int, event: Record) -> None: ...

    def run_finished(self, result: RunResult) -> None: ...


