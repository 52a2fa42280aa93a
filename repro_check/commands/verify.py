"""``verify``: one run of a target compared step by step with a golden trace, as it goes."""

from __future__ import annotations

import dataclasses
import os
import shlex

from repro_check.compare.control import ControlResult, skipped
from repro_check.compare.steps import BAND, TOLERANCE, Comparison, Policy
from repro_check.commands.skeleton import GivenCommand, Planned
from repro_check.errors import TraceFileError, UsageError
from repro_check.gate.golden import (
    BodyCheck,
    environment_finding,
    check_golden,
    header_settings,
    missing_rules,
    result_from_trace,
)
from repro_check.report.model import GatePart, Report
from repro_check.report.text import visible
from repro_check.run import control
from repro_check.run.options import PLAIN, InternalSettings, RecordedSettings, RunOptions
from repro_check.run.replay import replay_line
from repro_check.trace.results import Listener, RunResult
from repro_check.compare.feed import NullListener
from repro_check.run.session import Session, failure
from repro_check.trace.format import TraceStream
from repro_check.trace.protocol import MetricsRecord, Record, StepRecord

LABELS = ["golden", "this run"]


class GoldenFeed:
    """Feeds the golden's steps to the comparison as the run reaches them (run 1 = golden)."""

    def __init__(self, comparison: Comparison, golden: TraceStream, listener: Listener | None,
                 scanned: TraceStream | None = None) -> None:
        self.comparison = comparison
        self.golden = golden
        self.listener = listener or NullListener()
        self.fed = 0
        self.exhausted = False
        #: the golden as checked before the run: this second read must hold the same
        self.scanned = scanned
        self.check = BodyCheck(golden.header, golden.path)

    def _next(self) -> StepRecord | None:
        ev = self.golden.next_step()
        if ev is not None:
            self.check.step(ev)
        return ev

    def _advance(self, upto: int) -> None:
        while self.fed < upto and not self.exhausted:
            ev = self._next()
            if ev is None:
                self.exhausted = True
                self.comparison.end(1, self.fed)
                return
            self.fed = ev.step
            self.comparison.add_step(1, ev.step, ev.signals, ev.band)

    def run_started(self, index: int) -> None:
        self.listener.run_started(index)

    def event(self, index: int, event: Record) -> None:
        if isinstance(event, StepRecord):
            self._advance(event.step)
            self.comparison.add_step(2, event.step, event.signals)
        elif isinstance(event, MetricsRecord):
            self.comparison.set_metrics(2, event.metrics)
        self.listener.event(index, event)

    def run_finished(self, result: RunResult) -> None:
        cmp = self.comparison
        if result.status in ("cancelled", "stopped"):
            # cut short (by us, or at --max-steps): compare what both have up to there
            cmp.end(2, result.steps, complete=result.status != "cancelled")
            if not self.exhausted:
                self.exhausted = True
                cmp.end(1, self.fed)
        else:
            cmp.end(2, result.steps)
            self._advance(10**18)
            cmp.set_metrics(1, self.golden.metrics, self.golden.metrics_band)
        while self._next() is not None:
            pass
        self.check.finish(self.golden)
        before = self.scanned
        if before is not None and (self.golden.steps, self.golden.metrics, self.golden.header) \
                != (before.steps, before.metrics, before.header):
            raise TraceFileError(f"{self.golden.path}: the golden changed while verify read it")
        self.listener.run_finished(result)


@dataclasses.dataclass
class Prepared:
    """A golden checked whole and the options of the run compared with it."""

    options: RunOptions
    golden: TraceStream
    recorded: RecordedSettings


def prepare(options: RunOptions, golden: str | os.PathLike[str]) -> Prepared:
    """Everything ``verify`` checks before it runs anything: the golden (whole, its body against
    its header), the target, the options it takes from the golden, and the printed-metric rules
    the golden's metrics need (from the command line or config: never from the file)."""
    golden_path = str(golden)
    scanned = check_golden(golden_path)
    recorded = header_settings(scanned.header, golden_path)
    if not options.target:
        named = f" (it was recorded from {visible(recorded.target)!r})" if recorded.target else ""
        raise UsageError(f"verify needs TARGET, or a target in [tool.repro-check]: a golden never "
                         f"decides what runs{named}")
    try:
        inherited = options.inherit(recorded)
    except UsageError as e:  # the options were valid alone: the golden's values are at fault
        raise TraceFileError(f"{golden_path}: the settings its header records make no valid run "
                             f"({e})") from None
    lacking = missing_rules(scanned.header, scanned.metrics, golden_path,
                            inherited.printed_metrics)
    if lacking:
        raise UsageError(lacking)
    return Prepared(inherited, scanned, recorded)


def verify_golden(options: RunOptions, golden: str | os.PathLike[str],
                  listener: Listener | None = None, internal: InternalSettings = PLAIN) -> Report:
    """Run the target once and compare it step by step with the golden trace ``golden``.

    What ``options`` leaves unset (seed, seeding, threads, max steps, the target's arguments)
    is taken from the golden's header. Raises :class:`UsageError` (exit 2) for bad options and
    :class:`~repro_check.errors.TraceFileError` (exit 2) for a golden that is not a complete
    trace or whose header disagrees with what it holds. ``internal`` as
    :func:`~repro_check.commands.check.run_check` takes it.
    """
    golden_path = str(golden)
    prepared = prepare(options, golden_path)
    options, scanned, recorded = prepared.options, prepared.golden, prepared.recorded
    policy = options.policy(internal.policy_override)
    session = Session(options, runs=1, internal=internal)
    comparison = Comparison(2, policy, names=LABELS)
    stream = TraceStream(golden_path, require_end=True)
    feed = GoldenFeed(comparison, stream, listener, scanned)
    stop = comparison.settled_divergence if options.fail_fast else None
    specs = session.specs(1)
    beside = control.beside(options, feed, specs, session.folder, 1,
                            parallel=(os.cpu_count() or 1) >= 2)
    try:
        outcome = control.run_with(session, feed, beside, specs, 1, stop)
    finally:
        stream.close()
    run = dataclasses.replace(outcome.results[0], index=2) if outcome.results \
        else RunResult(2, status="cancelled")
    result = comparison.result()
    error = failure([run], result)
    warnings = [f"this run: {w}" for w in run.warnings]
    unread = _not_compared(options, scanned, run)
    if unread:
        warnings.append(unread)
    if recorded.target and recorded.target != options.target:
        warnings.append(f"the golden was recorded from {recorded.target}, this run is "
                        f"{options.target}")
    env = environment_finding(scanned.header, run.header, LABELS, result, error=error,
                              interrupted=outcome.interrupted)
    report = Report(target=options.target or "", args=options.target_args, seed=options.run_seed,
                    components=options.components, runs=2,
                    results=[result_from_trace(1, scanned), run], comparison=result,
                    policy=policy, max_steps=options.max_steps, threads=options.run_threads,
                    interrupted=outcome.interrupted, trace_dir=str(outcome.folder),
                    error=error, warnings=warnings, cause=env.cause,
                    cause_detail=env.cause_detail,
                    gate=GatePart("verify", labels=list(LABELS), golden=golden_path,
                                  **env.gate_fields()))
    if report.agrees:  # a planted change must fail the gate, or the match claims nothing
        checked, stopped = golden_control(options, session, golden_path, policy, result.judged,
                                          run, beside)
        report = dataclasses.replace(report, control=checked, interrupted=stopped)
    elif beside is not None:
        beside.discard()
    if report.reproducible:
        return report
    return dataclasses.replace(report, replay=replay_line(
        options, subcommand="verify", golden=golden_path,
        upto=result.first_divergent_step or options.max_steps,
        extra=options.tolerances.to_args()))


def golden_control(options: RunOptions, session: Session, golden: str, policy: Policy,
                   judged: dict[str, int], run: RunResult,
                   beside: control.Beside | None = None) -> tuple[ControlResult, bool]:
    """The negative control of a run that matches the golden (:mod:`repro_check.run.control`):
    one more run with a 1-ulp change planted after step 1, compared with the golden on exact
    bits; and whether Ctrl-C or SIGTERM stopped it. Where the golden's values were accepted by
    a tolerance or its band (not every bit equal), this run's own trace is the reference
    instead: the golden already differs from any run in bits the gate lets pass."""
    if not options.control:
        return skipped(control.SKIPPED, "golden"), False
    reference, name = golden, "golden"
    if any(judged.get(rule, 0) for rule in (TOLERANCE, BAND)) and run.trace_path is not None:
        reference, name = run.trace_path, "this run (the golden matched within tolerance)"
    ref = control.reference_of(reference)
    return control.run_control(session.specs(1)[0], ref, policy, session.folder, runs=1,
                               reference=name, beside=beside)


def _not_compared(options: RunOptions, golden: TraceStream, run: RunResult) -> str | None:
    """What the golden holds that this run was not compared with, because ``--max-steps`` (given
    by the user: a golden's own is checked against its body) stopped it first."""
    if run.status != "stopped" or options.max_steps is None:
        return None
    parts = []
    if golden.steps == options.max_steps + 1:
        parts.append(f"step {golden.steps}")
    elif golden.steps > options.max_steps:
        parts.append(f"steps {options.max_steps + 1} to {golden.steps}")
    if golden.metrics:
        parts.append("its final metrics")
    if not parts:
        return None
    return (f"--max-steps {options.max_steps} stopped this run: the golden's "
            f"{' and '.join(parts)} were not compared")


#: the run count is verify's own (one run against the golden): never the config's check runs
VERIFY_OWN: dict[str, str | None] = {"runs": None}


class VerifyCommand(GivenCommand):
    """``verify``: each planned target run once against its golden, every golden checked
    before anything runs."""

    name = "verify"
    timed = True

    def describe(self, planned: Planned) -> str:
        cell = f" ({planned.cell})" if planned.cell else ""
        return f"verifying {planned.target}{cell} against {planned.golden}"

    def prepare(self, planned: Planned) -> None:
        assert planned.golden is not None
        made = prepare(self.given.options(planned.target, planned.entry, keys=VERIFY_OWN),
                       planned.golden)
        recorded = tuple(made.recorded.args or ())
        if planned.args and recorded[-len(planned.args):] != planned.args:
            # the golden of another argument list: its run would verify the wrong one
            raise UsageError(f"{planned.golden} was recorded with the arguments "
                             f"{shlex.join(recorded) or '(none)'}, which do not end with "
                             f"{planned.cell}'s: not the golden of that argument list")

    def run(self, planned: Planned) -> Report:
        assert planned.golden is not None
        options = self.given.options(planned.target, planned.entry, keys=VERIFY_OWN)
        if planned.args and options.args is not None:
            # arguments given: the cell's are appended, as record appended them (without any,
            # the golden's own arguments, which hold the cell's, are the run's)
            options = options.replace(args=(*options.args, *planned.args))
        with self.given.progress(options, 1) as listener:
            return verify_golden(options, planned.golden, listener, self.given.internal)
