"""``check``: run a target several times under the same options and compare every step.

Above the runner (:mod:`repro_check.run`), the torchrun launch (:mod:`repro_check.distributed`)
and the report (:mod:`repro_check.report`), which it puts together; ``diagnose`` and ``--across``
build on it."""

from __future__ import annotations

from typing import Any

from repro_check.compare import cause, printed, saved
from repro_check.compare.control import ControlResult, skipped
from repro_check.compare.processes import ProcessComparison, ProcessFeed
from repro_check.compare.steps import ComparisonResult, Policy
from repro_check.distributed.launch import Distributed
from repro_check.report import processes
from repro_check.report.model import Report, SavedPart
from repro_check.run.options import PLAIN, InternalSettings, RunOptions, require_two_runs
from repro_check.run import control
from repro_check.run.replay import check_runs, replay_line
from repro_check.run.runner import Launcher
from repro_check.run.session import Outcome, Session, failure, merge_warnings
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
    dist = None
    if options.distributed is not None:
        dist = Distributed(options.distributed, options.runs)
    # runs compared with each other go in parallel even without a fixed thread count; the
    # processes the target starts are compared across runs too (a stream each)
    session = Session(options, launcher=dist or launcher, share_threads=True,
                      processes=dist is None and launcher is None, internal=internal)
    comparison: Any
    if dist is None:
        comparison = ProcessComparison(options.runs, policy)
        feed: Any = ProcessFeed(comparison, listener)
        jobs = options.jobs or session.default_jobs()
    else:
        comparison = dist.comparison(policy)
        feed = dist.feed(comparison, listener)
        jobs = dist.jobs(options.jobs, session.default_jobs(dist.local_ranks))
    stop = comparison.settled_divergence if options.fail_fast else None
    outcome = session.run(feed, jobs, stop)
    left = feed.saved.result(options.runs)  # the files the runs saved, their end state
    result = saved.merge(comparison.result(), left)
    report = finished_report(options, outcome, result, policy, feed.uses_dataloader)
    report.saved = SavedPart.of(left)
    if not report.reproducible or report.error:
        report.replay = replay_line(options, upto=result.first_divergent_step or options.max_steps,
                                    runs=check_runs(options.runs),
                                    extra=options.distributed.cli_args()
                                    if options.distributed else ())
    if dist is not None:
        dist.finish_report(report, comparison)
    else:
        processes.finish_report(report, comparison)
    if report.agrees:
        report.control, stopped = negative_control(options, session, jobs, report, policy)
        report.interrupted = stopped
    return report


def negative_control(options: RunOptions, session: Session, jobs: int, report: Report,
                     policy: Policy) -> tuple[ControlResult, bool]:
    """The control behind agreeing runs (:mod:`repro_check.run.control`): one more run like
    run 1, with a 1-ulp change planted after step 1, compared with run 1; and whether Ctrl-C or
    SIGTERM stopped it."""
    if not options.control:
        return skipped(control.SKIPPED), False
    if options.distributed is not None:
        return skipped("not run under torchrun yet: the ranks' own comparison stands alone"), \
            False
    if session.launcher is not None:
        return skipped("the runs were not started as processes of their own"), False
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
                               runs=options.runs)


def finished_report(options: RunOptions, outcome: Outcome, result: ComparisonResult,
                    policy: Policy, uses_dataloader: bool, *, runs: int | None = None) -> Report:
    """The report of runs that ended: the verdict, why the target failed (if it did), the
    runs' warnings and the cause of a divergence (``runs``: the options' unless given)."""
    report = Report(
        target=options.target or "", args=options.target_args, seed=options.run_seed,
        components=options.components, runs=options.runs if runs is None else runs,
        results=outcome.results, comparison=result, policy=policy, max_steps=options.max_steps,
        threads=options.run_threads,
        interrupted=outcome.interrupted, trace_dir=str(outcome.folder),
    )
    report.error = None if outcome.interrupted and not any(r.failed for r in outcome.results) \
        else failure(outcome.results, result)
    report.warnings += merge_warnings(outcome.results)
    if options.distributed is None:  # under torchrun printed metrics are not picked
        report.warnings += printed.unmatched(
            options.printed_metrics,
            [r.printed_metrics for r in outcome.results if r.status in PRINTED_STATUSES])
    div = result.divergence
    seen = evidence(outcome.results, div.rank if div is not None else None)
    report.cause, why, report.cause_location = cause.classify(
        reproducible=report.reproducible,
        failed=report.error is not None or outcome.interrupted,
        divergent_signal=report.divergent_signal,
        environments=[(r.header or {}).get("environment") for r in outcome.results],
        uses_dataloader=uses_dataloader,
        seedings={k: r.overrides for k, r in seen.items()},
        models=seen[1].models if 1 in seen else None,
        generators={k: r.generators for k, r in seen.items()},
        divergence=(div.run, div.step) if div is not None and div.step is not None else None,
        loaders=seen[1].loaders if 1 in seen else None,
        env_calls={k: r.env_calls for k, r in seen.items()},
    )
    report.cause_detail = why or None
    return report


def evidence(results: list[RunResult], rank: int | None) -> dict[int, Any]:
    """Per run, what its seeding watch and generator tracking saw: the run's own, or under
    torchrun the rank's where the difference entered (the lowest rank without one)."""
    out: dict[int, Any] = {}
    for r in results:
        ranks = r.rank_results()
        pick = [rr for rr in ranks if rr.rank == rank] or sorted(ranks, key=lambda rr: rr.rank)
        out[r.index] = pick[0] if pick else r
    return out
