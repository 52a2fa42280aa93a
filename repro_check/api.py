"""The Python API: what the commands do, as functions that return a :class:`Report`.

Each function takes the run options as keywords (or one :class:`RunOptions` as ``options=``,
keywords then override it) and runs its command through the same path as the command line
(:func:`repro_check.commands.skeleton.run_plan`): this front end gives the options it built and
the caller's listener, and gets the report back as the command made it instead of printing it
(every check the command makes before its runs included: ``verify``'s of the golden, ``resume``'s
of its options). The keywords are those of :data:`repro_check.run.options.OPTIONS`, read by the
same builder as the command line's flags: the fields of :class:`RunOptions`, and the parts of its
tolerances one by one (``atol``, ``rtol``, ``ulps`` as a number or a table ``{"loss": 1e-6}``,
``band_widen``, ``band``, ``signals``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import Any

from repro_check.commands.skeleton import Command, Given, Planned, run_plan
from repro_check.compare.steps import Policy
from repro_check.compare.tolerances import ToleranceOptions
from repro_check.report.model import Report
from repro_check.run.options import (
    CHECK_RUNS,
    PLAIN,
    RECORD_RUNS,
    InternalSettings,
    RunOptions,
    build_options,
    keyword_values,
)
from repro_check.trace.results import Listener

__all__ = ["RunOptions", "across", "bisect", "check", "diff", "record", "resume", "verify"]


def _options(options: RunOptions | None, target: str | None, default_runs: int | None = None,
             **given: Any) -> RunOptions:
    """``options`` (or the defaults, with ``default_runs``) with every keyword that is not None
    put over it (unknown ones: TypeError)."""
    return build_options(target, given=keyword_values(given), base=options,
                         defaults={"runs": default_runs} if options is None else None)


def _given(options: RunOptions, listener: Listener | None,
           internal: InternalSettings = PLAIN) -> Given:
    """What the API gives a command: the options its keywords made (the command's own config
    keys and defaults do not apply: no config is read, and each function's default run count is
    already in them), the caller's listener as the progress, nothing said."""
    return Given(options=lambda target, entry, **how: options,
                 progress=lambda opts, runs: contextlib.nullcontext(listener),
                 internal=internal)


class _Returned:
    """The API's outputs of its one target: nothing said, shown or written; the report kept
    for the caller."""

    def __init__(self) -> None:
        self.reports: list[Report] = []

    def announce(self, text: str) -> None:
        """One target: nothing to announce."""

    def show(self, report: Report, index: int | None) -> None:
        self.reports.append(report)

    def write(self, reports: Sequence[Report], command: str) -> None:
        """The report is returned, not written."""


def _report(command: Command, planned: Planned) -> Report:
    """``planned`` run by ``command`` through the commands' one path, and its report."""
    returned = _Returned()
    run_plan(command, [planned], returned, timed=False)
    if not returned.reports:  # a signal noted before it started (only under the console script)
        raise KeyboardInterrupt
    return returned.reports[0]


def check(
    target: str | None = None,
    *,
    options: RunOptions | None = None,
    listener: Listener | None = None,
    policy: Policy | None = None,
    **run_options: Any,
) -> Report:
    """Run ``target`` ``runs`` times (default 2) under full seeding and compare every step.

    ``run_options`` are the fields of :class:`RunOptions` (``seed``, ``runs``, ``args``,
    ``without``, ``no_seed``, ``max_steps``, ``timeout``, ``threads``, ``jobs``, ``fail_fast``,
    ``trace_dir``, ``tolerances``, ``printed_metrics``, ``distributed``, ``control``: False
    skips the negative control) and the tolerances one
    by one (``atol=1e-6`` sets one tolerance for every value, ``atol={"loss": 1e-6}`` one for a
    signal; ``rtol``, ``ulps``, ``signals``). ``policy``: a comparison policy object instead of
    the tolerances. Raises :class:`~repro_check.errors.UsageError` (exit 2) for bad arguments or
    a TARGET that cannot be resolved; a target that fails is reported (``report.error``,
    exit 3), not raised.
    """
    # on first call: importing the API loads no command it does not run
    from repro_check.commands.check import CheckCommand

    opts = _options(options, target, CHECK_RUNS, **run_options)
    return _report(CheckCommand(_given(opts, listener, InternalSettings(policy_override=policy))),
                   Planned(target))


def record(
    target: str | None,
    output: str | os.PathLike[str],
    *,
    options: RunOptions | None = None,
    listener: Listener | None = None,
    **run_options: Any,
) -> Report:
    """Run ``target`` ``runs`` times (default 1) and save the result as the golden ``output``.

    ``run_options`` as for :func:`check`. With more than one run, each step keeps the runs'
    spread, which ``verify`` accepts. Nothing is written when a run fails (exit 3) or the runs
    record different numbers of steps (exit 1).
    """
    # on first call: importing the API loads no command it does not run
    from repro_check.commands.record import RecordCommand

    opts = _options(options, target, RECORD_RUNS, **run_options)
    return _report(RecordCommand(_given(opts, listener)),
                   Planned(target, golden=os.fspath(output)))


def verify(
    target: str | None,
    golden: str | os.PathLike[str],
    *,
    options: RunOptions | None = None,
    listener: Listener | None = None,
    policy: Policy | None = None,
    **run_options: Any,
) -> Report:
    """Run ``target`` once and compare it step by step with the golden trace ``golden``.

    Seed, seeding components, thread count, max steps, the target and its arguments default to
    the golden's; each of ``run_options`` given (as for :func:`check`) overrides. Raises
    :class:`UsageError` (exit 2) for bad arguments and :class:`TraceFileError` (exit 2) for a
    golden that is not a complete trace.
    """
    # on first call: importing the API loads no command it does not run
    from repro_check.commands.verify import VerifyCommand

    opts = _options(options, target, **run_options)
    return _report(VerifyCommand(_given(opts, listener, InternalSettings(policy_override=policy))),
                   Planned(target, golden=os.fspath(golden)))


def diff(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    *,
    tolerances: ToleranceOptions | None = None,
    policy: Policy | None = None,
    format: str | None = None,
) -> Report:
    """Compare two saved traces step by step (A is the reference); nothing is run. Given what
    two finished runs left instead (scalar logs or checkpoints, detected or named by
    ``format``), compare those: the report's ``finished`` part holds the result."""
    # on first call: importing the API loads no command it does not run
    from repro_check.commands.diff import DiffCommand

    return _report(DiffCommand(os.fspath(a), os.fspath(b), tolerances, format, policy),
                   Planned(None))


def across(
    target: str | None,
    axes: Sequence[str] = (),
    *,
    options: RunOptions | None = None,
    listener: Listener | None = None,
    **run_options: Any,
) -> Report:
    """Run ``target`` ``runs`` times (default 1) in each environment of ``axes``
    (``["threads=1,2", "env:NAME=a,b"]``; also ``workers=``, ``start=``, ``compile=``,
    ``compile-cache=``, ``rev=``, ``args=A|B``,
    docs/across.md; a grid when several) and compare each with the first.

    Other run options (``args``, ``seed``, ``max_steps``, ``tolerances``, ...) are keywords as
    :class:`RunOptions` takes them. The report's ``across`` part has one pair per environment:
    identical or not, the first divergent step and signal, the culprit op, the loss drift and
    the metrics side by side.
    """
    # on first call: importing the API loads no command it does not run
    from repro_check.commands.across import AcrossCommand

    opts = _options(options, target, 1, across=tuple(axes) if axes else None, **run_options)
    return _report(AcrossCommand(_given(opts, listener)), Planned(target))


def resume(
    target: str | None = None,
    *,
    at: int | None = None,
    resume_args: str | None = None,
    checkpoint: str | None = None,
    options: RunOptions | None = None,
    listener: Listener | None = None,
    policy: Policy | None = None,
    **run_options: Any,
) -> Report:
    """Does ``target`` stopped at a checkpoint and resumed match the run that never stopped?

    The reference and a run stopped right after its first checkpoint at or after step ``at``
    go in parallel; then a resumed run gets ``resume_args`` (``{checkpoint}`` replaced by the
    copy's path) after the target's arguments. ``checkpoint`` names the file (path or glob)
    when its save cannot be seen. ``at``, ``resume_args`` and ``checkpoint`` are the options
    ``resume_at``, ``resume_args`` and ``checkpoint`` of :class:`RunOptions` (``--at``,
    ``--resume-args``, ``--checkpoint``), read by the same builder as the command line's.
    ``report.resume`` holds the checkpoint, what it holds and ``not_restored``;
    ``report.exit_code`` is 0 when every resumed step and metric equals the reference's. Other
    keywords (tolerances too) as for :func:`check`.
    """
    # on first call: importing the API loads no command it does not run
    from repro_check.commands.resume import ResumeCommand

    opts = _options(options, target, resume_at=at, resume_args=resume_args,
                    checkpoint=checkpoint, **run_options)
    return _report(ResumeCommand(_given(opts, listener, InternalSettings(policy_override=policy))),
                   Planned(target))


def bisect(
    good: str,
    bad: str,
    target: str | None = None,
    *,
    golden: str | os.PathLike[str] | None = None,
    options: RunOptions | None = None,
    listener: Listener | None = None,
    log: Callable[[str], None] | None = None,
    **run_options: Any,
) -> Report:
    """Find the first commit after ``good`` up to ``bad`` (git revisions of the repository holding
    the current folder) whose run of ``target`` differs from ``good``'s, or from ``golden``.

    Every commit runs once, in a temporary git worktree (the current checkout, index, branch and
    stash are never changed). ``run_options`` as for :func:`check`. Returns the report of the
    first commit that differs compared with the reference, with its :class:`BisectPart`
    (``report.bisect``: ``first_bad``, the commits ``tested`` with their verdicts, ``step``,
    ``signal``, ``op``, ``module``, ``drift``, ``runs``, ``seconds``); exit code 1 when one was
    found, 0 when ``bad`` matches, 3 when ``good`` cannot run. Raises
    :class:`~repro_check.errors.UsageError` before any run for a folder outside a git
    repository, an unknown revision, ``good`` not an ancestor of ``bad``, a bad golden or
    TARGET. ``log``: called with a line as each step starts (what the command line prints).
    """
    # on first call: importing the API loads no command it does not run
    from repro_check.commands.bisect import BisectCommand

    opts = _options(options, target, 1, **run_options)
    command = BisectCommand(opts, good, bad, None if golden is None else os.fspath(golden),
                            lambda o, runs: contextlib.nullcontext(listener), log)
    return _report(command, Planned(target))
