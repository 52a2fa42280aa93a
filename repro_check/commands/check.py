"""``check``: run a target several times under the same options and compare every step.

Above the runner (:mod:`repro_check.run`), the torchrun launch (:mod:`repro_check.distributed`)
and the report (:mod:`repro_check.report`), which it puts together; ``diagnose`` and ``--across``
build on it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from repro_check.commands.shape import RunShape, shape_of
from repro_check.commands.skeleton import GivenCommand, Planned
from repro_check.compare import cause, printed, saved
from repro_check.compare.control import ControlResult, skipped
from repro_check.compare.steps import Comparison, ComparisonResult, Divergence, Policy
from repro_check.report.model import Report, SavedPart
from repro_check.run.options import PLAIN, InternalSettings, RunOptions, require_two_runs
from repro_check.run import control
from repro_check.run.replay import check_runs, replay_line
from repro_check.run.runner import Launcher
from repro_check.run.session import Outcome, Session, failure, merge_warnings
from repro_check.trace.payloads import ModelBuilt
from repro_check.trace.results import PRINTED_STATUSES, Listener, RunResult


def run_check(options: RunOptions, listener: Listener | None = None,
              internal: InternalSettings = PLAIN, launcher: Launcher | None = None) -> Report:
    """Run ``options.target`` ``options.runs`` times and compare the runs step by step.

    With ``options.distributed`` every run is a torchrun job, each rank compared across runs and
    the ranks of each run with each other. Raises :class:`~repro_check.errors.UsageError` (exit 2)
    for bad options or a TARGET that cannot be resolved; a target that fails is reported
    (``report.error``, exit 3), not raised. ``internal``: what ``diagnose`` (or the API's
    ``policy=``) sets on the runs beside the options. ``launcher``: starts each run some other
    way than a process of its own (the tests replay recorded runs through it, so everything
    after the runs' records is what a check does); not with ``options.distributed``.
    """
    require_two_runs(options.runs)
    policy = options.policy(internal.policy_override)
    # the processes the target starts are compared across runs too (a stream each)
    shape = shape_of(options, options.runs, launcher=launcher, processes=True)
    # runs compared with each other go in parallel even without a fixed thread count
    session = Session(options, launcher=shape.launcher, share_threads=True,
                      processes=shape.records_processes, internal=internal)
    comparison = shape.comparison(options.runs, policy)
    feed = shape.feed(comparison, listener)
    jobs = shape.jobs(options.jobs, session)
    stop = comparison.settled_divergence if options.fail_fast else None
    specs = session.specs(jobs)
    beside = control.beside(options, feed, specs, session.folder, options.runs,
                            parallel=jobs >= 2 and shape.no_control("check") is None)
    outcome = control.run_with(session, feed, beside, specs, jobs, stop)
    left = feed.saved.result(options.runs)  # the files the runs saved, their end state
    result = saved.merge(comparison.result(), left)
    parts = shape.parts(outcome.results, comparison, result)
    report = finished_report(options, outcome, result, policy, feed.uses_dataloader,
                             shape=shape, warnings=parts.warnings, saved=SavedPart.of(left),
                             processes=parts.processes, distributed=parts.distributed)
    failed = not report.reproducible or report.error is not None
    replay = replay_line(options, upto=result.first_divergent_step or options.max_steps,
                         runs=check_runs(options.runs), extra=shape.cli_args()) \
        if failed else None
    if not report.agrees:
        if beside is not None:
            beside.discard()
        return dataclasses.replace(report, replay=replay)
    checked, stopped = negative_control(options, session, shape, jobs, report, policy, beside)
    return dataclasses.replace(report, replay=replay, control=checked,
                               interrupted=report.interrupted or stopped)


def negative_control(options: RunOptions, session: Session, shape: RunShape, jobs: int,
                     report: Report, policy: Policy,
                     beside: control.Beside | None = None) -> tuple[ControlResult, bool]:
    """The control behind agreeing runs (:mod:`repro_check.run.control`): one more run like
    run 1, with a 1-ulp change planted after step 1, compared with run 1 (judged from
    ``beside``, the control run started with the runs, when it can be); and whether Ctrl-C or
    SIGTERM stopped it."""
    if not options.control:
        return skipped(control.SKIPPED), False
    if (why := shape.no_control("check")) is not None:
        return skipped(why), False
    first = report.results[0] if report.results else None
    if first is None or first.trace_path is None:
        return skipped("run 1 kept no trace to compare the control run with"), False
    if first.steps == 0 and any(p.recorded for p in first.processes):
        return skipped("the training is in processes the target starts, which the control "
                       "does not cover yet"), False
    cmp = report.comparison
    ref = control.reference_of(first.trace_path, total=first.steps,
                               metrics=cmp.metrics_of(1) if cmp is not None else None)
    return control.run_control(session.specs(jobs)[0], ref, policy, session.folder,
                               runs=options.runs, beside=beside)


def finished_report(options: RunOptions, outcome: Outcome, result: ComparisonResult | None,
                    policy: Policy, uses_dataloader: bool, *, runs: int | None = None,
                    shape: RunShape | None = None, error: str | None = None,
                    warnings: Sequence[str] = (), **parts: Any) -> Report:
    """The report of runs that ended, built of its parts: the verdict, why the target failed
    (``error`` when the command knows better, else the runs'), the runs' warnings (then
    ``warnings``) and the cause of a divergence. ``runs``: the options' unless given;
    ``shape``: whether printed metrics were picked (a plain run's, unless given); ``parts``:
    the command's own parts of the report (``resume=``, ``saved=``, ...)."""
    results = outcome.results
    # the verdict and the cause are those of the runs: an empty comparison when the command has
    # none, the runs' own failure (the command's ``error`` and ``result`` are the report's)
    compared = result if result is not None else Comparison(2, policy).result()
    said = merge_warnings(results)
    if shape is None or shape.picks_printed:
        said += printed.unmatched(options.printed_metrics,
                                  [r.printed_metrics for r in results
                                   if r.status in PRINTED_STATUSES])
    runs_report = Report(
        target=options.target or "", args=options.target_args, seed=options.run_seed,
        components=options.components, runs=options.runs if runs is None else runs,
        results=results, comparison=compared, policy=policy, max_steps=options.max_steps,
        threads=options.run_threads, warnings=[*said, *warnings],
        error=None if outcome.interrupted and not any(r.failed for r in results)
        else failure(results, compared),
        interrupted=outcome.interrupted, trace_dir=str(outcome.folder), **parts,
    )
    div = compared.divergence
    seen = evidence(results, div.rank if div is not None else None)
    step_1 = diverged(results, div)
    found, why, location = cause.classify(
        reproducible=runs_report.reproducible,
        failed=runs_report.error is not None or outcome.interrupted,
        divergent_signal=runs_report.divergent_signal,
        environments=[(r.header or {}).get("environment") for r in results],
        uses_dataloader=uses_dataloader,
        seedings={k: r.overrides for k, r in seen.items()},
        models=seen[1].models if 1 in seen else None,
        generators={k: r.generators for k, r in seen.items()},
        divergence=(div.run, div.step) if div is not None and div.step is not None else None,
        loaders=seen[1].loaders if 1 in seen else None,
        env_calls={k: r.env_calls for k, r in seen.items()},
        process=div.process or None if div is not None else None,
        diverged_models=step_1.models, shared_params=step_1.shared_params,
    )
    return dataclasses.replace(runs_report, comparison=result,
                               error=runs_report.error if error is None else error,
                               cause=found, cause_detail=why or None, cause_location=location)


@dataclasses.dataclass(frozen=True)
class Diverged:
    """What the process the first divergence is in recorded of its step 1: its top-level
    models, and how many of its parameters were in memory shared with other processes."""

    models: Sequence[ModelBuilt] = ()
    shared_params: int = 0


def diverged(results: Sequence[RunResult], div: Divergence | None) -> Diverged:
    """Step 1 as the process the first divergence is in recorded it, in the run it is in (the
    run's main process: process 0 or None; nothing under torchrun, whose ranks are processes
    of their own)."""
    if div is None or div.rank is not None:
        return Diverged()
    run = next((r for r in results if r.index == div.run), None)
    if run is None:
        return Diverged()
    if not div.process:
        return Diverged(run.models, run.shared_params)
    return next((Diverged(p.models, p.shared_params) for p in run.processes
                 if p.index == div.process), Diverged())


def evidence(results: list[RunResult], rank: int | None) -> dict[int, Any]:
    """Per run, what its seeding watch and generator tracking saw: the run's own, or under
    torchrun the rank's where the difference entered (the lowest rank without one)."""
    out: dict[int, Any] = {}
    for r in results:
        ranks = r.rank_results()
        pick = [rr for rr in ranks if rr.rank == rank] or sorted(ranks, key=lambda rr: rr.rank)
        out[r.index] = pick[0] if pick else r
    return out


class CheckCommand(GivenCommand):
    """``check``: each planned target run ``runs`` times, the runs compared with each other."""

    name = "check"
    timed = True

    def describe(self, planned: Planned) -> str:
        return f"checking {planned.target}"

    def run(self, planned: Planned) -> Report:
        options = self.given.options(planned.target, planned.entry, compare_runs=True)
        with self.given.progress(options, options.runs) as listener:
            return run_check(options, listener, self.given.internal)
