"""The Python API: what the commands do, as functions that return a :class:`Report`.

Each function takes the run options as keywords (or one :class:`RunOptions` as ``options=``,
keywords then override it) and calls the same code as the command line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from repro_check.compare.steps import Policy
from repro_check.compare.tolerances import ToleranceOptions
from repro_check.report.model import Report
from repro_check.run.options import CHECK_RUNS, RECORD_RUNS, RunOptions, options_of
from repro_check.run.runner import Listener
from repro_check.trace.values import Tolerance

__all__ = ["RunOptions", "across", "check", "diff", "record", "resume", "verify"]


def _options(options: RunOptions | None, target: str | None, **given: Any) -> RunOptions:
    """``options`` with every keyword that is not None put over it (unknown ones: TypeError)."""
    given = {k: v for k, v in given.items() if v is not None}
    if "trace_dir" in given:
        given["trace_dir"] = os.fspath(given["trace_dir"])
    if options is None:
        return options_of(target, **given)
    if target is not None:
        given["target"] = target
    # an unknown keyword is a TypeError here too; RunOptions makes sequences tuples itself
    return options.replace(**given)


def check(
    target: str | None = None,
    *,
    options: RunOptions | None = None,
    listener: Listener | None = None,
    atol: float = 0.0,
    rtol: float = 0.0,
    policy: Policy | None = None,
    **run_options: Any,
) -> Report:
    """Run ``target`` ``runs`` times (default 2) under full seeding and compare every step.

    ``run_options`` are the fields of :class:`RunOptions` (``seed``, ``runs``, ``args``,
    ``without``, ``no_seed``, ``max_steps``, ``timeout``, ``threads``, ``jobs``, ``fail_fast``,
    ``trace_dir``, ``tolerances``, ``distributed``, ``warn_only``, ``probe_step``); ``atol`` and
    ``rtol`` set one tolerance for every value. Raises :class:`~repro_check.errors.UsageError`
    (exit 2) for bad arguments or a TARGET that cannot be resolved; a target that fails is
    reported (``report.error``, exit 3), not raised.
    """
    from repro_check.run.check import run_check

    if policy is None and (atol or rtol):
        policy = Policy(_tolerance(atol, rtol))
    if options is None:
        run_options.setdefault("runs", CHECK_RUNS)
    return run_check(_options(options, target, policy_override=policy, **run_options), listener)


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
    from repro_check.gate.record import record_golden

    if options is None:
        run_options.setdefault("runs", RECORD_RUNS)
    return record_golden(_options(options, target, **run_options), output, listener)


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
    from repro_check.gate.verify import verify_golden

    return verify_golden(_options(options, target, policy_override=policy, **run_options),
                         golden, listener)


def diff(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    *,
    tolerances: ToleranceOptions | None = None,
    policy: Policy | None = None,
) -> Report:
    """Compare two saved traces step by step (A is the reference); nothing is run."""
    from repro_check.gate.diff import diff_traces

    return diff_traces(a, b, tolerances, policy)


def across(
    target: str | None,
    axes: Sequence[str] = (),
    *,
    options: RunOptions | None = None,
    listener: Listener | None = None,
    **run_options: Any,
) -> Report:
    """Run ``target`` ``runs`` times (default 1) in each environment of ``axes``
    (``["threads=1,2", "env:NAME=a,b"]``, a grid when several) and compare each with the first.

    Other run options (``args``, ``seed``, ``max_steps``, ``tolerances``, ...) are keywords as
    :class:`RunOptions` takes them. The report's ``across`` part has one pair per environment:
    identical or not, the first divergent step and signal, the culprit op, the loss drift and
    the metrics side by side.
    """
    from repro_check.run.across import run_across

    if options is None:
        run_options.setdefault("runs", 1)
    opts = _options(options, target, across=tuple(axes) if axes else None, **run_options)
    return run_across(opts, listener)


def resume(
    target: str | None = None,
    *,
    at: int | None = None,
    resume_args: str | None = None,
    checkpoint: str | None = None,
    options: RunOptions | None = None,
    listener: Listener | None = None,
    atol: float = 0.0,
    rtol: float = 0.0,
    policy: Policy | None = None,
    **run_options: Any,
) -> Report:
    """Does ``target`` stopped at a checkpoint and resumed match the run that never stopped?

    The reference and a run stopped right after its first checkpoint at or after step ``at``
    go in parallel; then a resumed run gets ``resume_args`` (``{checkpoint}`` replaced by the
    copy's path) after the target's arguments. ``checkpoint`` names the file (path or glob)
    when its save cannot be seen. ``report.resume`` holds the checkpoint, what it holds and
    ``not_restored``; ``report.exit_code`` is 0 when every resumed step and metric equals the
    reference's. Other keywords as for :func:`check`.
    """
    from repro_check.run.resume import run_resume

    if policy is None and (atol or rtol):
        policy = Policy(_tolerance(atol, rtol))
    opts = _options(options, target, policy_override=policy, resume_at=at,
                    resume_args=resume_args, checkpoint=checkpoint, **run_options)
    return run_resume(opts, listener)


def _tolerance(atol: float, rtol: float) -> Tolerance:
    from repro_check.errors import UsageError

    if atol < 0 or rtol < 0:
        raise UsageError("--atol and --rtol must not be negative")
    return Tolerance(atol, rtol)
