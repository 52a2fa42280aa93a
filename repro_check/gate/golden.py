"""Golden traces, the pre-merge gate: ``record`` a run as the reference, ``verify`` one new run
against it step by step, ``diff`` two saved traces.

A golden file is an ordinary trace (same versioned format, same validating reader) whose header
carries a ``golden`` entry; recorded from several runs, each step and the final metrics also carry
the spread of the runs (``band``), which ``verify`` accepts. Every walk over a trace file is
streaming: ``verify`` reads the golden as the run advances, ``diff`` reads both files side by
side, ``record`` merges its runs' traces in lockstep, so memory does not grow with the step count.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from repro_check.child import environment
from repro_check.child import seeding
from repro_check import targets
from repro_check.trace import values
from repro_check import __version__
from repro_check.api import (
    _Feed,
    _failure,
    _NullListener,
    _sigterm_as_interrupt,
    check_bounds,
    default_jobs,
    make_trace_dir,
)
from repro_check.trace.atomic import check_writable
from repro_check.compare.steps import Comparison, ComparisonResult, Policy
from repro_check.errors import ExitCode, Interrupted, TraceFileError, UsageError
from repro_check.report.model import Report
from repro_check.run.runner import Listener, RunResult, RunSpec, run_all
from repro_check.compare.tolerances import ToleranceOptions
from repro_check.trace.format import TraceStream, TraceWriter, check_header, header_line

#: statuses of a recorded run that mean the target failed
FAILED_STATUSES = ("failed", "crashed", "timeout", "unresolved")


# ---- settings taken from a golden's header -----------------------------------------------------
@dataclasses.dataclass
class RunSettings:
    """How a run was made: what ``verify`` repeats unless told otherwise."""

    target: str | None
    args: list[str]
    seed: int | None
    components: list[str]
    threads: int | None
    max_steps: int | None


def header_settings(header: dict[str, Any], path: str) -> RunSettings:
    """The run settings recorded in a trace header, checked (a header is untrusted input: the
    trace reader validates it, see :func:`repro_check.trace.format.check_header`)."""
    check_header(header, path)
    seed = header.get("seed")
    comps = header.get("components")
    if comps is None:
        comps = list(seeding.COMPONENTS) if seed is not None else []
    if seed is None:
        comps = []
    return RunSettings(header.get("target"), list(header.get("args") or []), seed, list(comps),
                       header.get("threads"), header.get("max_steps"))


def _result_from_trace(index: int, stream: TraceStream) -> RunResult:
    """A saved trace seen as a finished run, for the report."""
    end = stream.end or {}
    status = end.get("status") if isinstance(end.get("status"), str) else "completed"
    seconds = end.get("seconds") if isinstance(end.get("seconds"), (int, float)) else 0.0
    error = stream.errors[-1] if stream.errors else None
    res = RunResult(index, status=status, returncode=end.get("returncode"), error=error,
                    steps=stream.steps, header=stream.header, warnings=list(stream.warnings),
                    seconds=float(seconds), trace_path=stream.path)
    res.signal = end.get("signal") if isinstance(end.get("signal"), str) else None
    return res


# ---- replay lines ------------------------------------------------------------------------------
def command_line(
    subcommand: str,
    target: str | None,
    *,
    golden: str | None = None,
    output: str | None = None,
    seed: int | None = None,
    components: Sequence[str] = (),
    threads: int | None = None,
    max_steps: int | None = None,
    runs: int | None = None,
    args: Sequence[str] = (),
    extra: Sequence[str] = (),
    command: str = "repro-check",
) -> str:
    """One copy-pasteable ``repro-check SUBCOMMAND ...`` line."""
    parts = [command, subcommand]
    if target:
        parts.append(target)
    if golden:
        parts += ["--golden", golden]
    if output:
        parts += ["-o", output]
    if not components:
        parts.append("--no-seed")
    else:
        parts += ["--seed", str(seed)]
        off = [c for c in seeding.COMPONENTS if c not in components]
        if off:
            parts += ["--without", ",".join(off)]
        if threads is not None and threads != 1:
            parts += ["--threads", str(threads)]
    if runs is not None:
        parts += ["--runs", str(runs)]
    if max_steps is not None:
        parts += ["--max-steps", str(max_steps)]
    parts += list(extra)
    if args:
        parts += ["--", *args]
    return " ".join(shlex.quote(p) for p in parts)


# ---- the comparison of a reference trace with a run or another trace ---------------------------
def _relabel(result: ComparisonResult, labels: Sequence[str]) -> None:
    """Divergence details say "golden"/"this run" (or the file names) instead of run 1/run 2."""
    names = {"1": labels[0], "2": labels[1]}
    for div in [result.divergence, *result.per_run.values(), *result.metric_divergences]:
        if div is not None and div.detail:
            div.detail = re.sub(r"\brun ([12])\b", lambda m: names[m.group(1)], div.detail)


def environment_note(diffs: Sequence[environment.Difference], result: ComparisonResult | None,
                     labels: Sequence[str]) -> str | None:
    """One sentence on what the environment differences mean for this result."""
    diverged = result is not None and not result.reproducible
    if not diffs:
        if diverged:
            return (f"{labels[0]} and {labels[1]} have the same environment and target source: "
                    "the difference comes from nondeterminism, data, or code outside the target "
                    "file")
        return None
    listed = "; ".join(d.describe(*labels) for d in diffs)
    n = len(diffs)
    if diverged:
        return f"the divergence comes with {n} environment difference(s): {listed}"
    return f"the environment differs ({n}), but the values agree: {listed}"


def _attach_environment(report: Report, ref_header: dict[str, Any] | None,
                        other_header: dict[str, Any] | None, labels: Sequence[str]) -> None:
    diffs: list[environment.Difference] = []
    if ref_header is not None and other_header is not None:
        diffs = environment.differences(environment.run_settings(ref_header),
                                        environment.run_settings(other_header))
    note = environment_note(diffs, report.comparison, labels) if report.error is None else None
    report.extra["environment_differences"] = [
        {**d.to_dict(), "text": d.describe(*labels)} for d in diffs
    ]
    report.extra["environment_note"] = note
    if report.comparison is not None and report.error is None and not report.interrupted:
        from repro_check.compare import cause

        if report.comparison.reproducible:
            report.cause = "none"
        elif diffs:
            report.cause, report.extra["cause_detail"] = "environment", note
        else:
            report.cause = cause.from_signal(report.divergent_signal, uses_dataloader=False)
            report.extra["cause_detail"] = cause.EXPLANATION[report.cause]


# ---- verify ------------------------------------------------------------------------------------
class _GoldenFeed:
    """Feeds the golden's steps to the comparison as the run reaches them (run 1 = golden)."""

    def __init__(self, comparison: Comparison, golden: TraceStream, listener: Listener) -> None:
        self.comparison = comparison
        self.golden = golden
        self.listener = listener
        self.fed = 0
        self.exhausted = False

    def _advance(self, upto: int) -> None:
        while self.fed < upto and not self.exhausted:
            ev = self.golden.next_step()
            if ev is None:
                self.exhausted = True
                self.comparison.end(1, self.fed)
                return
            self.fed = ev["step"]
            self.comparison.add_step(1, ev["step"], ev["signals"], ev.get("band"))

    def run_started(self, index: int) -> None:
        self.listener.run_started(index)

    def event(self, index: int, event: dict[str, Any]) -> None:
        if "step" in event:
            self._advance(event["step"])
            self.comparison.add_step(2, event["step"], event["signals"])
        elif "metrics" in event:
            self.comparison.set_metrics(2, event["metrics"])
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
        self.golden.drain()
        self.listener.run_finished(result)


def _check_golden(path: str | os.PathLike[str]) -> TraceStream:
    """Validate a whole golden file before anything runs; return its header and totals."""
    stream = TraceStream(path, require_end=True)
    stream.drain()
    if stream.steps == 0 and not stream.metrics:
        raise TraceFileError(f"{path}: the trace records no step and no metric: nothing to verify "
                             "against")
    return stream


def verify(
    target: str | None,
    golden: str | os.PathLike[str],
    *,
    args: Sequence[str] | None = None,
    seed: int | None = None,
    no_seed: bool = False,
    without: Sequence[str] | None = None,
    max_steps: int | None = None,
    timeout: float | None = None,
    threads: int | None = None,
    tolerances: ToleranceOptions | None = None,
    policy: Policy | None = None,
    fail_fast: bool = False,
    trace_dir: str | os.PathLike[str] | None = None,
    listener: Listener | None = None,
) -> Report:
    """Run ``target`` once and compare it step by step with the golden trace ``golden``.

    Seed, seeding components, thread count, max steps, the target and its arguments default to
    the golden's; each argument given overrides. Raises :class:`UsageError` (exit 2) for bad
    arguments and :class:`TraceFileError` (exit 2) for a golden that is not a complete trace.
    """
    golden_path = str(golden)
    scanned = _check_golden(golden_path)
    rec = header_settings(scanned.header, golden_path)
    target = target or rec.target
    if not target:
        raise UsageError(f"{golden_path} does not name its target; give TARGET")
    if seed is not None:
        seeding.check_seed(seed)
    if no_seed or without:
        components = list(seeding.select_components(without or (), no_seed))
    elif seed is not None and not rec.components:
        components = list(seeding.COMPONENTS)
    else:
        components = rec.components
    run_seed = (seed if seed is not None else rec.seed if rec.seed is not None else 0) \
        if components else None
    run_threads = threads if threads is not None else (rec.threads or 1)
    if run_threads < 1:
        raise UsageError(f"--threads must be at least 1, got {run_threads}")
    run_threads_or_none = run_threads if "threads" in components else None
    run_max = max_steps if max_steps is not None else rec.max_steps
    if run_max is not None and run_max < 1:
        raise UsageError(f"--max-steps must be at least 1, got {run_max}")
    if timeout is not None and timeout <= 0:
        raise UsageError(f"--timeout must be positive, got {timeout}")
    run_args = list(args) if args is not None else rec.args
    tolerances = tolerances or ToleranceOptions()
    policy = policy or tolerances.policy()
    tgt = targets.parse(target)
    targets.check(tgt)
    folder = make_trace_dir(trace_dir)
    spec = RunSpec(index=1, target=tgt, args=run_args, seed=run_seed, components=components,
                   threads=run_threads_or_none, max_steps=run_max, timeout=timeout,
                   trace_path=folder / "run-1.jsonl")
    comparison = Comparison(2, policy)
    stream = TraceStream(golden_path, require_end=True)
    feed = _GoldenFeed(comparison, stream, listener or _NullListener())
    stop = (lambda: comparison.settled_divergence()) if fail_fast else (lambda: False)
    interrupted = False
    previous = _sigterm_as_interrupt()
    try:
        results = run_all([spec], feed, 1, should_stop=stop)
    except Interrupted as e:
        interrupted, results = True, list(e.results)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        stream.close()
    run = dataclasses.replace(results[0], index=2) if results else RunResult(2, status="cancelled")
    golden_result = _result_from_trace(1, scanned)
    result = comparison.result()
    labels = ["golden", "this run"]
    _relabel(result, labels)
    report = Report(target=target, args=run_args, seed=run_seed, components=components, runs=2,
                    results=[golden_result, run], comparison=result, policy=policy,
                    max_steps=run_max, threads=run_threads_or_none, interrupted=interrupted,
                    trace_dir=str(folder))
    report.error = _failure([run], result)
    report.warnings += [f"this run: {w}" for w in run.warnings]
    report.extra.update({"mode": "verify", "golden": golden_path, "labels": labels})
    _attach_environment(report, scanned.header, run.header, labels)
    if not report.reproducible:
        upto = result.first_divergent_step or run_max
        report.replay = command_line(
            "verify", target, golden=golden_path, seed=run_seed, components=components,
            threads=run_threads_or_none, max_steps=upto, args=run_args,
            extra=tolerances.to_args(),
        )
    return report


# ---- diff --------------------------------------------------------------------------------------
def diff(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    *,
    tolerances: ToleranceOptions | None = None,
    policy: Policy | None = None,
) -> Report:
    """Compare two saved traces step by step (A is the reference); nothing is run.

    Both files are read side by side, so memory stays flat however long they are. A file that is
    not a complete trace raises :class:`TraceFileError` (exit 2).
    """
    tolerances = tolerances or ToleranceOptions()
    policy = policy or tolerances.policy()
    pa, pb = str(a), str(b)
    sa, sb = TraceStream(pa, require_end=True), TraceStream(pb, require_end=True)
    ha, hb = header_settings(sa.header, pa), header_settings(sb.header, pb)
    comparison = Comparison(2, policy)
    try:
        ended = {1: False, 2: False}
        while not (ended[1] and ended[2]):
            for run, stream in ((1, sa), (2, sb)):
                if ended[run]:
                    continue
                ev = stream.next_step()
                if ev is None:
                    ended[run] = True
                    comparison.end(run, stream.steps)
                else:
                    comparison.add_step(run, ev["step"], ev["signals"],
                                        ev.get("band") if run == 1 else None)
        comparison.set_metrics(1, sa.metrics, sa.metrics_band)
        comparison.set_metrics(2, sb.metrics)
    finally:
        sa.close()
        sb.close()
    ra, rb = _result_from_trace(1, sa), _result_from_trace(2, sb)
    result = comparison.result()
    labels = [Path(pa).name, Path(pb).name]
    if labels[0] == labels[1]:
        labels = [pa, pb]
    _relabel(result, labels)
    report = Report(target=hb.target or ha.target or "?", args=hb.args, seed=hb.seed,
                    components=hb.components, runs=2, results=[ra, rb], comparison=result,
                    policy=policy, max_steps=hb.max_steps, threads=hb.threads)
    failed = [(label, r) for label, r in zip(labels, (ra, rb)) if r.status in FAILED_STATUSES]
    if failed:
        report.error = "; ".join(f"{label} records a failed run ({r.describe_failure()})"
                                 for label, r in failed)
    report.extra.update({"mode": "diff", "a": pa, "b": pb, "labels": labels})
    _attach_environment(report, sa.header, sb.header, labels)
    if not report.reproducible and hb.target:
        upto = result.first_divergent_step or hb.max_steps
        report.replay = command_line(
            "verify", hb.target, golden=pa, seed=hb.seed, components=hb.components,
            threads=hb.threads, max_steps=upto, args=hb.args, extra=tolerances.to_args(),
        )
    return report


# ---- record ------------------------------------------------------------------------------------
@dataclasses.dataclass
class RecordReport(Report):
    """The report of ``record``: exit 0 once the golden is written (its runs may differ: their
    spread is what the golden stores), otherwise the exit code of what went wrong."""

    golden: str | None = None

    @property
    def exit_code(self) -> ExitCode:
        if self.golden is not None:
            return ExitCode.REPRODUCIBLE
        return super().exit_code


def _band(encoded: Sequence[Any]) -> dict[str, Any] | None:
    """``{"min": v, "max": v}`` of encoded numbers, or None when any is missing or not finite."""
    nums: list[tuple[float, Any]] = []
    for enc in encoded:
        if not isinstance(enc, dict) or not values.is_valid(enc):
            return None
        x = values.to_float(enc)
        if x != x or x in (float("inf"), float("-inf")):
            return None
        nums.append((x, enc))
    if not nums:
        return None
    return {"min": min(nums, key=lambda t: t[0])[1], "max": max(nums, key=lambda t: t[0])[1]}


def _bands(per_run: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in per_run[0]:
        band = _band([sig.get(name) for sig in per_run])
        if band is not None:
            out[name] = band
    return out


def write_golden(output: str | os.PathLike[str], traces: Sequence[str | os.PathLike[str]],
                 meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Merge the traces of one or more runs into a golden file (atomically).

    Run 1 gives the values; with several runs each step and the metrics also get the runs'
    spread. Returns what was stored (steps, steps whose values spread, the largest spread).
    """
    streams = [TraceStream(p, require_end=True) for p in traces]
    header = dict(streams[0].header)
    header["golden"] = {"runs": len(streams), "band": len(streams) > 1,
                        "recorded": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        "repro_check": __version__, **(meta or {})}
    writer = TraceWriter(output)
    spread_steps, widest = 0, 0.0
    try:
        writer.write(header_line(header))
        while True:
            events = [s.next_step() for s in streams]
            if events[0] is None:
                if any(e is not None for e in events):
                    raise UsageError("the runs recorded different numbers of steps")
                break
            if any(e is None for e in events):
                raise UsageError("the runs recorded different numbers of steps")
            line: dict[str, Any] = {"step": events[0]["step"], "signals": events[0]["signals"]}
            if len(streams) > 1:
                band = _bands([e["signals"] for e in events])  # type: ignore[index]
                if band:
                    line["band"] = band
                    for b in band.values():
                        lo, hi = values.to_float(b["min"]), values.to_float(b["max"])
                        if hi != lo:
                            spread_steps += 1
                            widest = max(widest, hi - lo)
                            break
            writer.write(line)
        first = streams[0]
        for w in first.warnings:
            writer.write({"warning": w})
        if first.metrics:
            line = {"metrics": first.metrics}
            if len(streams) > 1 and all(s.metrics for s in streams):
                band = _bands([s.metrics for s in streams])
                if band:
                    line["band"] = band
            writer.write(line)
        for err in first.errors:
            writer.write({"error": err})
        writer.write({"end": first.end or {"status": "completed"}})
        path = writer.close()
    except BaseException:
        writer.abort()
        raise
    finally:
        for s in streams:
            s.close()
    return {"path": str(path), "steps": first.steps, "spread_steps": spread_steps,
            "widest_spread": widest}


def _make_parent(path: str | os.PathLike[str]) -> None:
    """Goldens usually live in a folder of their own; create it."""
    parent = Path(path).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create the golden's folder {str(parent)!r}: {e.strerror}") from None


def record(
    target: str,
    output: str | os.PathLike[str],
    *,
    args: Sequence[str] = (),
    seed: int = 0,
    runs: int = 1,
    without: Sequence[str] = (),
    no_seed: bool = False,
    max_steps: int | None = None,
    timeout: float | None = None,
    threads: int | None = 1,
    jobs: int | None = None,
    trace_dir: str | os.PathLike[str] | None = None,
    listener: Listener | None = None,
) -> RecordReport:
    """Run ``target`` ``runs`` times and save the result as the golden trace ``output``.

    With more than one run, each step keeps the runs' spread (min and max of every scalar), which
    ``verify`` accepts. Nothing is written when a run fails (exit 3) or the runs record different
    numbers of steps (exit 1).
    """
    check_bounds(runs, max_steps, timeout, threads)
    seeding.check_seed(seed)
    _make_parent(output)
    check_writable(output, "golden")
    components = list(seeding.select_components(without, no_seed))
    tgt = targets.parse(target)
    targets.check(tgt)
    run_seed = seed if components else None
    run_threads = threads if "threads" in components else None
    folder = make_trace_dir(trace_dir)
    specs = [RunSpec(index=i, target=tgt, args=list(args), seed=run_seed, components=components,
                     threads=run_threads, max_steps=max_steps, timeout=timeout,
                     trace_path=folder / f"run-{i}.jsonl") for i in range(1, runs + 1)]
    comparison = Comparison(runs, Policy())
    feed = _Feed(comparison, listener or _NullListener())
    interrupted = False
    previous = _sigterm_as_interrupt()
    try:
        results = run_all(specs, feed, jobs or default_jobs(runs, run_threads))
    except Interrupted as e:
        interrupted, results = True, list(e.results)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    result = comparison.result()
    report = RecordReport(target=target, args=list(args), seed=run_seed, components=components,
                          runs=runs, results=results, comparison=result, policy=Policy(),
                          max_steps=max_steps, threads=run_threads, interrupted=interrupted,
                          trace_dir=str(folder))
    report.error = _failure(results, result)
    for r in results:
        report.warnings += [f"run {r.index}: {w}" for w in r.warnings]
    report.extra.update({"mode": "record", "golden": None, "output": str(output)})
    counts = {r.steps for r in results}
    if not interrupted and report.error is None:
        if len(counts) > 1:
            report.warnings.append("the runs recorded different numbers of steps "
                                   f"({', '.join(str(r.steps) for r in results)}): no golden "
                                   "written")
        else:
            stored = write_golden(output, [r.trace_path for r in results if r.trace_path])
            report.golden = stored["path"]
            report.extra.update({"golden": stored["path"], "band": runs > 1,
                                 "spread_steps": stored["spread_steps"],
                                 "widest_spread": stored["widest_spread"]})
    if report.golden is None:
        upto = result.first_divergent_step or max_steps
        report.replay = command_line("record", target, output=str(output), seed=run_seed,
                                     components=components, threads=run_threads, max_steps=upto,
                                     runs=runs if runs != 1 else None, args=list(args))
    return report
