"""One skeleton for every command: its plan, each planned target's runs and report, the outputs,
and one exit code.

A command (``check``, ``record``, ``verify``, ``diff``, ``diagnose``, ``across``, ``resume``,
``bisect``) is a small object (:class:`Command`): what it says as each target starts, what it
checks of a target before anything runs, and how one target's runs make its report (its
comparison and its report built of their parts, in the command's module). :func:`execute` is
the one path around it, for every command alike: the plan's targets in turn (from the config's
folder when they come from it), a signal between two of them or an interrupted run ending the
plan, each report timed and handed to the front end's :class:`Outputs` as it ends, then the
outputs of them all written (:func:`run_plan`, which the Python API calls for its report) and
the exit code of them all taken (:func:`aggregate_exit`).
Errors are not caught here: the console script maps every one to its exit code, once
(:mod:`repro_check.cli.main`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ContextManager, Protocol

from repro_check.config import TargetEntry
from repro_check.errors import ExitCode
from repro_check.report.model import Report
from repro_check.run import signals
from repro_check.run.options import PLAIN, InternalSettings, RunOptions
from repro_check.trace.results import Listener


@dataclasses.dataclass(frozen=True)
class Planned:
    """One target of a plan: its TARGET, its config entry, and the golden a ``record`` writes or
    a ``verify`` reads."""

    target: str | None
    entry: TargetEntry | None = None
    golden: str | None = None
    #: ``record``/``verify --across 'args=A|B'``: the arguments this cell appends to the
    #: target's, and the cell as the report names it (``args=--checkpointing``)
    args: tuple[str, ...] = ()
    cell: str | None = None


class OptionsFor(Protocol):
    """How the front end makes a target's run options (the command line: its flags over the
    target's config entry over the table)."""

    def __call__(self, target: str | None, entry: TargetEntry | None, *,
                 keys: dict[str, str | None] | None = None,
                 defaults: dict[str, Any] | None = None,
                 compare_runs: bool = False) -> RunOptions: ...


@dataclasses.dataclass
class Given:
    """What the front end gives a command besides its plan: how a target's run options are
    made, the progress display of ``runs`` runs (the listener it yields: None, none), where a
    step is said (None: quiet), and what the runs are set beside the options (the Python API's
    ``policy=``)."""

    options: OptionsFor
    progress: Callable[[RunOptions, int], ContextManager[Listener | None]]
    log: Callable[[str], None] | None = None
    internal: InternalSettings = PLAIN


class Command(Protocol):
    """A command, as :func:`execute` runs it."""

    #: its name in the CI outputs (JUnit, annotations)
    name: str
    #: its report says how long the command took (``wall_seconds``)
    timed: bool

    def describe(self, planned: Planned) -> str:
        """What is said as ``planned`` starts, when the plan has several targets."""
        ...

    def prepare(self, planned: Planned) -> None:
        """What is checked of ``planned`` before any target runs (a usage error, exit 2)."""
        ...

    def run(self, planned: Planned) -> Report:
        """The runs of ``planned``, their comparison and the report built of its parts."""
        ...


class GivenCommand:
    """What the commands that run planned targets share: the front end's :class:`Given`, and
    nothing to check before the runs (a command that has, :class:`VerifyCommand`'s golden,
    overrides :meth:`prepare`)."""

    def __init__(self, given: Given) -> None:
        self.given = given

    def prepare(self, planned: Planned) -> None:
        """Nothing to check before the runs."""


class Outputs(Protocol):
    """Where a front end puts the reports: each as it ends, then all of them."""

    def announce(self, text: str) -> None:
        """Say which target starts (a plan of several)."""
        ...

    def show(self, report: Report, index: int | None) -> None:
        """One target's report as it ends (``index``: its place in a plan of several)."""
        ...

    def write(self, reports: Sequence[Report], command: str) -> None:
        """Every report, once the plan ended."""
        ...


@contextlib.contextmanager
def in_folder(folder: Path | None) -> Iterator[Path | None]:
    """Run configured targets from the config's folder, as its paths are written; yields the
    folder when it had to move there (replay lines then start with ``cd FOLDER &&``)."""
    if folder is None or folder.resolve() == Path.cwd().resolve():
        yield None
        return
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield folder
    finally:
        os.chdir(before)


def replay_from(replay: str | None, moved: Path | None) -> str | None:
    """A replay line, from the folder the runs started in when the plan moved there."""
    if moved is not None and replay:
        return f"cd {shlex.quote(str(moved))} && {replay}"
    return replay


def aggregate_exit(reports: Sequence[Report]) -> ExitCode:
    """The exit code of every report: the worst of interrupted, target failed, not
    reproducible; else reproducible."""
    codes = {r.exit_code for r in reports}
    for code in (ExitCode.INTERRUPTED, ExitCode.TARGET_FAILED, ExitCode.NOT_REPRODUCIBLE):
        if code in codes:
            return code
    return ExitCode.REPRODUCIBLE


def execute(command: Command, plan: Sequence[Planned], outputs: Outputs, *,
            root: Path | None = None) -> ExitCode:
    """Run ``command`` on every planned target (:func:`run_plan`); the exit code of them all."""
    return aggregate_exit(run_plan(command, plan, outputs, root=root))


def run_plan(command: Command, plan: Sequence[Planned], outputs: Outputs, *,
             root: Path | None = None, timed: bool = True) -> list[Report]:
    """Run ``command`` on every planned target (from ``root``, the config's folder, when the
    targets come from it): everything checked first, then each target's report shown as it
    ends; a signal or an interrupted target stops the plan. The outputs of every report, and
    the reports. ``timed``: a timed command's reports say how long it took (the JUnit file's
    time; the Python API, which writes none, returns its reports as the command made them)."""
    several = len(plan) > 1
    reports: list[Report] = []
    with in_folder(root) as moved:
        for planned in plan:  # every target is checked before anything runs
            command.prepare(planned)
        for i, planned in enumerate(plan, 1):
            if signals.stop_requested() or (reports and reports[-1].interrupted):
                break  # a signal between two targets, or one interrupted: report what was done
            if several:
                outputs.announce(command.describe(planned))
            started = time.monotonic()
            report = command.run(planned)
            if moved is not None or (timed and command.timed):
                report = dataclasses.replace(
                    report, replay=replay_from(report.replay, moved),
                    wall_seconds=time.monotonic() - started if timed and command.timed
                    else report.wall_seconds)
            outputs.show(report, i if several else None)
            reports.append(report)
    outputs.write(reports, command.name)
    return reports
