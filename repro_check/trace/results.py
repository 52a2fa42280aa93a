"""How a run ended, as the parent reads it from the run's trace and exit: what the runner,
the comparisons, the reports and the golden files all take.

Below every parent-side package (the runner fills these in, the comparison and the report read
them), so that none of them imports another's module for a type.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from repro_check.trace.jsonfields import JsonRecord, json_field
from repro_check.trace.payloads import (EnvCall, GeneratorNote, LoaderNote, Location,
                                        ModelBuilt, RunError, SeedOverride, TraceHeader)
from repro_check.trace.protocol import (EndedInfo, ErrorRecord, HeaderRecord, MetricsRecord,
                                        ModelsInfo, Record, StepRecord, WarningRecord)

__all__ = ["Location"]  # where it was first defined: readers import it from here too

#: how a run, a rank or a process the target started ended: ``pending`` (not yet known),
#: completed, stopped (``--max-steps``), exited (early, with status 0), failed (raised or exited
#: non-zero), crashed (killed by a signal), timeout, cancelled (fail-fast or an interrupt),
#: unresolved (no such target), terminated (a rank stopped after another failed), killed (a
#: process the target started that ended without saying)
Status = Literal["pending", "completed", "stopped", "exited", "failed", "crashed", "timeout",
                 "cancelled", "unresolved", "terminated", "killed"]
STATUSES: frozenset[str] = frozenset(Status.__args__)  # type: ignore[attr-defined]

#: the statuses of a run (or a rank) that failed: the target raised, crashed, hung or could not
#: be found (a cancelled, stopped or early-exited run did not fail)
FAILED_STATUSES: frozenset[str] = frozenset({"failed", "crashed", "timeout", "unresolved"})


def status_of(text: object) -> Status:
    """A status a child recorded, as one of :data:`Status` (anything else: ``failed``)."""
    return text if isinstance(text, str) and text in STATUSES else "failed"  # type: ignore[return-value]
#: the statuses of a run whose printed metrics count (as its own metrics do): it ran to its end
PRINTED_STATUSES = frozenset({"completed", "exited"})


@dataclass
class ProcessResult(JsonRecord):
    """What one process the target started recorded, and how it ended. ``status`` is the one the
    process recorded (completed, stopped at ``--max-steps``, exited, failed), or ``killed`` when
    it ended without saying (a signal, or stopped with the run). Its JSON
    (``process_results``) is how it ended."""

    index: int = json_field(key="process")
    status: Status = "killed"
    steps: int = 0
    backward_calls: int = 0
    metrics: bool = json_field(default=False, skip=True)
    exitcode: int | None = None
    error: RunError | None = None
    header: TraceHeader | None = json_field(default=None, skip=True)
    warnings: list[str] = json_field(default_factory=list, skip=True)
    #: warnings that say a record of the process was left out
    incomplete: list[str] = json_field(default_factory=list, skip=True)
    trace_path: str | None = json_field(default=None, key="trace")
    #: the top-level models whose parameters went into its step 1, and how many of those
    #: parameters were in memory shared with other processes
    models: list[ModelBuilt] = json_field(default_factory=list, skip=True)
    shared_params: int = json_field(default=0, skip=True)

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
        elif isinstance(ev, EndedInfo):
            self.status = status_of(ev.status)
            self.backward_calls = ev.backward_calls
            self.exitcode = ev.exitcode
        elif isinstance(ev, ModelsInfo):
            self.models = list(ev.models)
            self.shared_params = ev.shared_params



@dataclass
class RunResult:
    """How one run ended; ``status`` is one of completed, stopped (max-steps), exited (early, with
    status 0), failed (raised or exited non-zero), crashed (killed by a signal), timeout,
    cancelled (stopped by fail-fast or an interrupt), unresolved."""

    index: int
    status: Status = "pending"
    returncode: int | None = None
    signal: str | None = None
    error: RunError | None = None
    output_tail: str = ""
    steps: int = 0
    header: TraceHeader | None = None
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    trace_path: str | None = None
    #: seeding components the target overrode, and seeds it set itself: the seeding watch's
    #: records
    overrides: list[SeedOverride] = field(default_factory=list)
    #: the top-level models whose parameters went into step 1, and how many of those
    #: parameters were in memory shared with other processes
    models: list[ModelBuilt] = field(default_factory=list)
    shared_params: int = 0
    #: the private generators the target made: creation, seeding and first-draw records
    generators: list[GeneratorNote] = field(default_factory=list)
    #: the DataLoaders the target made and the epochs they started
    loaders: list[LoaderNote] = field(default_factory=list)
    #: the first calls of an RL environment's reset and step the target made
    env_calls: list[EnvCall] = field(default_factory=list)
    #: the global random streams its DataLoader fetches drew from (``--across workers=``,
    #: ``start=``): (stream, whether in a worker), once each, as the run noted them
    draws: list[tuple[str, bool]] = field(default_factory=list)
    #: metrics picked from the run's output (``printed:NAME``), encoded
    printed_metrics: dict[str, Any] = field(default_factory=dict)
    #: the processes the target started, in index order (with ``RunSpec.processes``)
    processes: list[ProcessResult] = field(default_factory=list)
    #: a run stopped by --max-steps: the metrics it had recorded by then (not final, not compared)
    held_metrics: list[str] = field(default_factory=list)
    #: why what the run recorded is incomplete (records it wrote that could not be taken)
    incomplete: list[str] = field(default_factory=list)
    #: the samples of its step 1 (of all its ranks under torchrun; None: not seen)
    batch_samples: int | None = None

    @property
    def failed(self) -> bool:
        return self.status in FAILED_STATUSES

    def rank_results(self) -> list[RankResult]:
        """How each rank ended, for a run that was a torchrun job (none for any other run)."""
        return []

    def first_failed_rank(self) -> int | None:
        """The rank that failed first, for a run that was a torchrun job."""
        return None

    @property
    def failed_at(self) -> FailurePoint | None:
        """Where a failed run stopped (while importing a module, before the target's first line,
        or a line of the target), from its traceback or the fault handler's stack."""
        if not self.failed or self.status == "timeout":
            return None
        tb = (self.error or {}).get("traceback")
        return failure_point(tb if isinstance(tb, str) and tb else self.output_tail)

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


#: a frame of a traceback (``File "f", line 3, in g``) or of the fault handler's stack
#: (``File "f", line 3 in g``)
_FRAME = re.compile(r'^\s*File "(?P<file>[^"\n]+)", line (?P<line>\d+),? in (?P<function>\S+)',
                    re.MULTILINE)
#: where the fault handler's stack of the crashing thread starts
_CURRENT_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+ .*most recent call first\):",
                             re.MULTILINE)
_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent) + os.sep
_MACHINERY = ("<frozen importlib", "<frozen runpy>", "<frozen zipimport>")


def _library_dirs() -> tuple[str, ...]:
    """Where the standard library and installed packages live: a frame there is not the
    target's own code."""
    import sysconfig  # only to read a failed run's stack

    dirs = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(str(Path(d).resolve()) + os.sep for d in dirs if d)


@dataclass(frozen=True)
class FailurePoint(JsonRecord):
    """Where a failed run stopped, read from its traceback or the fault handler's stack: in
    the target's own code (``at``), while importing a module (``importing``, and the target's
    line that imported it, ``imported_at``), or before the target's first line ran
    (``before_target``). Its JSON is ``run_results[].failed_at``."""

    before_target: bool = False
    importing: str | None = json_field(default=None, omit_none=True)
    imported_at: Location | None = json_field(default=None, omit_none=True)
    at: Location | None = json_field(default=None, omit_none=True)

    def describe(self) -> str:
        """``while importing pandas (imported at train.py:3)``, or where it stopped."""
        if self.before_target:
            return "before the target's first line ran"
        if self.importing is not None:
            where = f" (imported at {self.imported_at.site})" if self.imported_at else ""
            return f"while importing {self.importing}{where}"
        return f"at {self.at.site}" if self.at is not None else ""


def _frames(text: str) -> list[Location]:
    """The frames of the last traceback in ``text``, or of the crashing thread's stack the fault
    handler wrote, outermost first."""
    threads = list(_CURRENT_THREAD.finditer(text))
    current = [m for m in threads if m[0].startswith("Current")] or threads
    if current:  # the fault handler: most recent call first
        block = text[current[-1].end():]
        block = block.split("\n\n", 1)[0]
        found = [Location(m["file"], int(m["line"]), m["function"]) for m in _FRAME.finditer(block)]
        return found[::-1]
    at = text.rfind("Traceback (most recent call last):")
    if at < 0:
        return []
    return [Location(m["file"], int(m["line"]), m["function"]) for m in _FRAME.finditer(text[at:])]


def _module_of(file: str) -> str:
    """The importable name a file of a module most likely has: its top-level package where it is
    installed (``site-packages/pandas/_libs/x.py`` -> ``pandas``), else its own name."""
    parts = Path(file).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            rest = parts[parts.index(marker) + 1:]
            if rest:
                return rest[0].removesuffix(".py").split(".")[0]
    path = Path(file)
    return path.parent.name if path.name == "__init__.py" else path.stem


def failure_point(text: str) -> FailurePoint | None:
    """Where a failed run stopped, from its traceback or fault handler output (``text``); None
    where ``text`` holds no stack."""
    frames = _frames(text)
    if not frames:
        return None
    ours = [i for i, f in enumerate(frames)
            if not f.file.startswith("<") and os.path.realpath(f.file).startswith(_PACKAGE_DIR)]
    user = [f for f in frames[(ours[-1] + 1 if ours else 0):]]
    if not [f for f in user if not f.file.startswith(_MACHINERY)]:
        return FailurePoint(before_target=True)
    code = [f for f in user if not f.file.startswith(_MACHINERY)]
    libraries = _library_dirs()
    at = next((f for f in reversed(code) if not f.file.startswith(libraries)), code[-1])
    for i, frame in enumerate(user[:-1]):
        if frame.file.startswith(_MACHINERY) or not user[i + 1].file.startswith("<frozen importlib"):
            continue
        imported = next((f for f in user[i + 1:] if not f.file.startswith(_MACHINERY)), None)
        if imported is not None:
            return FailurePoint(importing=_module_of(imported.file), imported_at=frame, at=at)
    return FailurePoint(at=at)


#: what a rank's error says when its collective failed because another rank went away
_PEER_FAILURE = re.compile(
    r"closed by peer|reset by peer|remote worker|remote process|Broken pipe|"
    r"communicator was aborted|NCCL communicator|DistNetworkError|DistBackendError",
    re.IGNORECASE,
)


@dataclass
class RankResult(JsonRecord):
    """How one rank of a run ended. ``status`` as for a run, plus ``terminated`` (stopped by
    torchrun after another rank failed). Its JSON (``rank_results``) is how it ended; what it
    recorded on the way (``skip``) the report shows elsewhere."""

    rank: int
    status: Status = "pending"
    returncode: int | None = None
    signal: str | None = None
    stopped_by: str | None = json_field(default=None, skip=True)
    steps: int = 0
    error: RunError | None = None
    header: TraceHeader | None = json_field(default=None, skip=True)
    warnings: list[str] = json_field(default_factory=list, skip=True)
    overrides: list[SeedOverride] = json_field(default_factory=list, skip=True)
    models: list[ModelBuilt] = json_field(default_factory=list, skip=True)
    shared_params: int = json_field(default=0, skip=True)
    generators: list[GeneratorNote] = json_field(default_factory=list, skip=True)
    loaders: list[LoaderNote] = json_field(default_factory=list, skip=True)
    env_calls: list[EnvCall] = json_field(default_factory=list, skip=True)
    #: as for a run (:class:`~repro_check.run.runner.RunResult`)
    held_metrics: list[str] = json_field(default_factory=list, skip=True)
    incomplete: list[str] = json_field(default_factory=list, skip=True)
    batch_samples: int | None = json_field(default=None, skip=True)
    trace_path: str | None = json_field(default=None, key="trace")
    pid: int | None = None
    pgid: int | None = None
    exit_time: float | None = json_field(default=None, skip=True)

    @property
    def failed(self) -> bool:
        return self.status in FAILED_STATUSES

    @property
    def peer_failure(self) -> bool:
        """Whether its error is a collective that failed because another rank went away."""
        if not self.error:
            return False
        text = f"{self.error.get('type', '')}: {self.error.get('message', '')}"
        return _PEER_FAILURE.search(text) is not None

    @property
    def failure_order(self) -> tuple[int, float, int]:
        """Sorts the rank that failed first to the front: a rank whose collective failed because
        a peer went away comes after the ranks that failed on their own; then by time (an error
        record is written before the rank exits, so before its peers can notice)."""
        t = (self.error or {}).get("time")
        if not isinstance(t, (int, float)):
            t = self.exit_time if self.exit_time is not None else float("inf")
        return (1 if self.peer_failure else 0, float(t), self.rank)


class Listener(Protocol):
    """Receives what happens in the runs (progress display, streaming comparison)."""

    def run_started(self, index: int) -> None: ...

    def event(self, index: int, event: Record) -> None: ...

    def run_finished(self, result: RunResult) -> None: ...


