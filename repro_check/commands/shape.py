"""The shape of a command's runs: how they are started and compared, as one typed seam.

A run is a process of its own (:class:`Plain`, the processes the target starts compared too, a
stream each, where the command asks for them), a torchrun job (:class:`Torchrun`, every rank
compared across runs and the ranks of a run with each other), or something that replays
recorded runs (:class:`Replayed`: the tests' launcher, so everything after the runs' records is
what a command does). ``check`` and ``resume`` take one from :func:`shape_of` and never ask
which it is: what differs between them is what a :class:`RunShape` answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from repro_check.compare.feed import Feed
from repro_check.compare.processes import ProcessComparison, ProcessFeed
from repro_check.compare.steps import ComparisonResult, Policy
from repro_check.distributed.launch import Distributed
from repro_check.report.model import DistributedPart, ProcessesPart
from repro_check.report.processes import processes_part
from repro_check.run.options import RunOptions
from repro_check.run.runner import Launcher
from repro_check.run.session import Session
from repro_check.trace.results import Listener, RunResult


@dataclass
class ShapeParts:
    """What a shape adds to the report of its runs: the part about the processes the target
    started or the ranks, and its warnings."""

    processes: ProcessesPart | None = None
    distributed: DistributedPart | None = None
    warnings: list[str] = field(default_factory=list)


class ShapeComparison(Protocol):
    """The streaming comparison of a shape's runs (per process, per rank)."""

    def settled_divergence(self) -> bool:
        """For fail-fast: a divergence no later record can precede."""
        ...

    def result(self) -> ComparisonResult: ...


class RunShape(Protocol):
    """How a command's runs are started and compared."""

    #: starts each run (None: the plain run entry, a process of its own)
    launcher: Launcher | None
    #: the processes the target starts are recorded and compared (a stream each)
    records_processes: bool
    #: the printed metrics (``--metric``) are picked from the runs' output
    picks_printed: bool

    def jobs(self, requested: int | None, session: Session) -> int:
        """Runs at a time: as asked, else as many as the CPUs hold."""
        ...

    def comparison(self, runs: int, policy: Policy) -> ShapeComparison:
        """The streaming comparison of the runs."""
        ...

    def feed(self, comparison: ShapeComparison, listener: Listener | None) -> Feed:
        """What passes the runs' events to ``comparison`` and to ``listener``."""
        ...

    def parts(self, results: Sequence[RunResult], comparison: ShapeComparison,
              result: ComparisonResult | None) -> ShapeParts:
        """The report's parts of this shape, once the runs ended."""
        ...

    def no_control(self, command: str) -> str | None:
        """Why the negative control of ``command`` does not run under this shape (None: it
        does)."""
        ...

    def stop_run(self, done: Callable[[int], bool]) -> Callable[[int], bool] | None:
        """What stops a run from outside once ``done(run)`` holds (None: the run stops itself)."""
        ...

    def cli_args(self) -> tuple[str, ...]:
        """The flags of this shape in a replay line."""
        ...


class Plain:
    """Each run a process of its own; with ``records_processes``, the processes the target
    starts are compared across runs too."""

    launcher: Launcher | None = None
    picks_printed = True

    def __init__(self, records_processes: bool = False) -> None:
        self.records_processes = records_processes

    def jobs(self, requested: int | None, session: Session) -> int:
        return requested or session.default_jobs()

    def comparison(self, runs: int, policy: Policy) -> ProcessComparison:
        return ProcessComparison(runs, policy)

    def feed(self, comparison: ShapeComparison, listener: Listener | None) -> Feed:
        return ProcessFeed(comparison, listener)

    def parts(self, results: Sequence[RunResult], comparison: ShapeComparison,
              result: ComparisonResult | None) -> ShapeParts:
        assert isinstance(comparison, ProcessComparison)
        return ShapeParts(processes=processes_part(results, comparison, result))

    def no_control(self, command: str) -> str | None:
        return None

    def stop_run(self, done: Callable[[int], bool]) -> Callable[[int], bool] | None:
        return None

    def cli_args(self) -> tuple[str, ...]:
        return ()


class Replayed(Plain):
    """Runs started by ``launcher`` instead of as processes (the tests replay recorded runs)."""

    def __init__(self, launcher: Launcher) -> None:
        super().__init__(records_processes=False)
        self.launcher = launcher

    def no_control(self, command: str) -> str | None:
        return "the runs were not started as processes of their own"


class Torchrun:
    """Each run a torchrun job, every rank recorded (:mod:`repro_check.distributed`)."""

    records_processes = False
    #: under torchrun printed metrics are not picked
    picks_printed = False

    def __init__(self, dist: Distributed) -> None:
        self.dist = dist
        self.launcher: Launcher | None = dist

    def jobs(self, requested: int | None, session: Session) -> int:
        return self.dist.jobs(requested, session.default_jobs(self.dist.local_ranks))

    def comparison(self, runs: int, policy: Policy) -> ShapeComparison:
        return self.dist.comparison(policy)

    def feed(self, comparison: ShapeComparison, listener: Listener | None) -> Feed:
        return self.dist.feed(comparison, listener)  # type: ignore[arg-type]  # its own comparison

    def parts(self, results: Sequence[RunResult], comparison: ShapeComparison,
              result: ComparisonResult | None) -> ShapeParts:
        part, warnings = self.dist.parts(results, comparison, result)  # type: ignore[arg-type]
        return ShapeParts(distributed=part, warnings=warnings)

    def no_control(self, command: str) -> str | None:
        own = ": the ranks' own comparison stands alone" if command == "check" else ""
        return f"not run under torchrun yet{own}"

    def stop_run(self, done: Callable[[int], bool]) -> Callable[[int], bool] | None:
        # a torchrun job whose saving rank ended is stopped whole: its other ranks would wait in
        # their next collective for the one that ended
        return done

    def cli_args(self) -> tuple[str, ...]:
        return tuple(self.dist.options.cli_args())


def shape_of(options: RunOptions, runs: int, *, launcher: Launcher | None = None,
             processes: bool = False) -> RunShape:
    """The shape of ``runs`` runs under ``options``: torchrun jobs with ``--nproc-per-node``,
    else started by ``launcher`` when given, else processes of their own (``processes``: those
    the target starts compared too). Checks the torchrun options (exit 2)."""
    if options.distributed is not None:
        return Torchrun(Distributed(options.distributed, runs))
    if launcher is not None:
        return Replayed(launcher)
    return Plain(records_processes=processes)
