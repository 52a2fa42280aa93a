"""Golden traces: what a golden file holds and how it is read and written.

A golden file is an ordinary trace (same versioned format, same validating reader) whose header
carries a ``golden`` entry; recorded from several runs, each step and the final metrics also carry
the spread of the runs (``band``), which ``verify`` accepts. Every walk over a trace file is
streaming, so memory does not grow with the step count.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro_check.trace.payloads import TraceHeader
from repro_check.trace import environment
from repro_check.trace import seeding
from repro_check.compare import cause, printed
from repro_check.compare.cause import Cause
from repro_check.compare.steps import ComparisonResult
from repro_check.errors import TraceFileError, UsageError
from repro_check.report.contents import EnvironmentDifference
from repro_check.report.text import visible
from repro_check.run.options import MAX_THREADS, RecordedSettings
from repro_check.trace.results import RunResult, status_of
from repro_check.trace import values
from repro_check.trace.format import MAX_STEP, TraceStream, TraceWriter, check_header, header_line
from repro_check.trace.protocol import StepRecord
from repro_check.version import __version__


# ---- settings taken from a golden's header -----------------------------------------------------
def header_settings(header: TraceHeader, path: str) -> RecordedSettings:
    """The run settings recorded in a trace header, checked (a header is untrusted input: the
    trace reader validates it, see :func:`repro_check.trace.format.check_header`). A value out
    of the range a run accepts is the file's fault, named as such (exit 2), never blamed on the
    flag that would have set it."""
    check_header(header, path)
    seed = header.get("seed")
    comps = header.get("components")
    if comps is None:
        comps = list(seeding.COMPONENTS) if seed is not None else []
    if seed is None:
        comps = []
    threads, max_steps = header.get("threads"), header.get("max_steps")
    if threads is not None and threads > MAX_THREADS:
        raise TraceFileError(f"{path}: the header's threads {_number(threads)} is out of range "
                             f"(1 to {MAX_THREADS}): not a trace repro-check wrote")
    if max_steps is not None and max_steps > MAX_STEP:
        raise TraceFileError(f"{path}: the header's max_steps {_number(max_steps)} is out of "
                             f"range (1 to {MAX_STEP}): not a trace repro-check wrote")
    args = list(header.get("args") or [])
    size = sum(len(a.encode("utf-8", "backslashreplace")) + 3 for a in args)
    if size > MAX_ARGS_BYTES:
        raise TraceFileError(f"{path}: the header's args take {size} bytes, more than a run can "
                             f"be given ({MAX_ARGS_BYTES}): not a trace repro-check wrote")
    recorded_rules(header, path)
    return RecordedSettings(header.get("target"), args, seed,
                            list(comps), threads, max_steps)


#: the most a run's arguments may take: they reach it in one environment variable, which the
#: kernel bounds (128 KiB a string on Linux) with the rest of the run's configuration
MAX_ARGS_BYTES = 64 * 1024


def _number(x: int) -> str:
    text = str(x)
    return text if len(text) <= 20 else f"{text[:8]}...({len(text)} digits)"


def recorded_rules(header: TraceHeader, path: str) -> tuple[tuple[str, str], ...]:
    """The ``--metric`` rules a trace was recorded with, as text: never compiled nor run (a
    regex from a file would decide what work runs on every line a run prints), only shown to
    the user, who gives the rules to use."""
    raw = header.get("printed_metrics")
    if raw is None:
        return ()
    rules: list[tuple[str, str]] = []
    if isinstance(raw, list) and len(raw) <= MAX_RECORDED_RULES:
        for item in raw:
            if isinstance(item, str) and "=" in item:
                item = item.split("=", 1)
            if not (isinstance(item, (list, tuple)) and len(item) == 2
                    and all(isinstance(x, str) and 0 < len(x) <= 4096 for x in item)):
                break
            rules.append((item[0], item[1]))
        else:
            return tuple(rules)
    raise TraceFileError(f"{path}: not a valid repro-check trace (malformed printed_metrics "
                         "in header)")


#: no run is recorded with more ``--metric`` rules than this
MAX_RECORDED_RULES = 1000


def missing_rules(header: TraceHeader, metrics: dict[str, Any], path: str,
                  given: Sequence[tuple[str, str]]) -> str | None:
    """Why ``verify`` cannot compare the golden's printed metrics with the rules it was given:
    a metric the golden holds was picked by a rule that the command line and config lack."""
    names = {name for name, _ in given}
    lacking = [(n, r) for n, r in recorded_rules(header, path)
               if printed.PREFIX + n in metrics and n not in names]
    if not lacking:
        return None
    flags = " ".join(f"--metric {shlex.quote(f'{n}={r}')}" for n, r in lacking)
    held = ", ".join(printed.PREFIX + n for n, _ in lacking)
    text = (f"{path}: the golden holds {held}, picked from the run's output by a rule it was "
            f"recorded with; verify never runs a regex taken from a file: give the rule "
            f"yourself ({flags}, or metric in [tool.repro-check])")
    return visible(text).replace("\n", "\\n")  # one line, whatever the file holds


# ---- what a file's body must agree with in its header --------------------------------------------
class BodyCheck:
    """Checks that a trace's body agrees with the header fields that change what is compared, as
    its records pass: a header is never trusted alone. A golden recorded with ``max_steps`` holds
    at most that many steps, and no final metrics if it ended stopped (a run cut there records
    none; one whose script ended on its own at that very step completed, with its metrics); bands come only with a golden recorded from repeated runs, and each
    holds the golden's own value. Any disagreement is a corrupt file (exit 2)."""

    def __init__(self, header: TraceHeader, path: str) -> None:
        self.path = path
        golden = header.get("golden")
        runs = golden.get("runs") if isinstance(golden, dict) else None
        self.banded = isinstance(golden, dict) and golden.get("band") is True \
            and isinstance(runs, int) and runs >= 2
        self.max_steps = header.get("max_steps")

    def _refuse(self, why: str) -> TraceFileError:
        return TraceFileError(f"{self.path}: header and body disagree: {why}")

    def _band(self, band: dict[str, Any], held: dict[str, Any], where: str) -> None:
        if not self.banded:
            raise self._refuse(f"{where} carry a band, but the header does not say the golden was "
                               "recorded from repeated runs (golden.band, golden.runs)")
        for name, limits in band.items():
            own = held.get(name)
            if not (isinstance(own, dict) and values.in_band(own, limits)):
                raise self._refuse(f"{where}: the band of {visible(name)[:80]!r} does not hold "
                                   "the golden's own value")

    def step(self, event: StepRecord) -> None:
        if self.max_steps is not None and event.step > self.max_steps:
            raise self._refuse(f"the header says the run stopped at max_steps {self.max_steps}, "
                               f"but the file holds step {event.step}")
        band = event.band
        if band:
            self._band(band, event.signals, f"step {event.step}")

    def finish(self, stream: TraceStream) -> None:
        """Once the whole file was read: its final metrics."""
        if stream.metrics_band:
            self._band(stream.metrics_band, stream.metrics, "the final metrics")
        end = stream.end or {}
        if end.get("status") == "stopped" and stream.metrics:
            raise self._refuse("the run ended stopped (cut at max_steps), where a run records no "
                               "final metrics, but the file holds some")


def result_from_trace(index: int, stream: TraceStream) -> RunResult:
    """A saved trace seen as a finished run, for the report."""
    end = stream.end or {}
    status = status_of(end["status"]) if isinstance(end.get("status"), str) else "completed"
    seconds = end["seconds"] if isinstance(end.get("seconds"), (int, float)) else 0.0
    error = stream.errors[-1] if stream.errors else None
    res = RunResult(index, status=status, returncode=end.get("returncode"), error=error,
                    steps=stream.steps, header=stream.header, warnings=list(stream.warnings),
                    seconds=float(seconds), trace_path=stream.path,
                    incomplete=list(stream.incomplete))
    res.signal = end.get("signal") if isinstance(end.get("signal"), str) else None
    return res


# ---- the comparison of a reference trace with a run or another trace ---------------------------
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


@dataclass
class EnvironmentFinding:
    """What two sides' environments say of a gate's result: their differences for the gate's
    part, its note, and the cause of the report (None when the result is no verdict)."""

    differences: list[EnvironmentDifference]
    note: str | None
    cause: Cause | None = None
    cause_detail: str | None = None

    def gate_fields(self) -> dict[str, Any]:
        """The gate part's keywords: ``environment_differences`` and ``environment_note``."""
        return {"environment_differences": self.differences, "environment_note": self.note}


def environment_finding(ref_header: TraceHeader | None, other_header: TraceHeader | None,
                        labels: Sequence[str], comparison: ComparisonResult | None, *,
                        error: str | None, interrupted: bool = False) -> EnvironmentFinding:
    """The environment differences of two sides, and with a verdict (no ``error``, not
    ``interrupted``) the cause they make of ``comparison``."""
    diffs: list[environment.Difference] = []
    if ref_header is not None and other_header is not None:
        diffs = environment.differences(environment.run_settings(ref_header),
                                        environment.run_settings(other_header))
    note = environment_note(diffs, comparison, labels) if error is None else None
    named: Cause | None = None
    detail: str | None = None
    if comparison is not None and error is None and not interrupted:
        if comparison.reproducible:
            named = "none"
        elif diffs:
            named, detail = "environment", note
        else:
            named = cause.from_signal(comparison.divergent_signal, uses_dataloader=False)
            detail = cause.EXPLANATION[named]
    return EnvironmentFinding(
        [EnvironmentDifference(key=d.key, label=d.label, reference=d.reference, value=d.value,
                               text=d.describe(*labels)) for d in diffs], note, named, detail)


def check_golden(path: str | os.PathLike[str]) -> TraceStream:
    """Validate a whole golden file before anything runs (its body against its header too, see
    :class:`BodyCheck`); return its header and totals."""
    stream = TraceStream(path, require_end=True)
    check = BodyCheck(stream.header, str(path))
    try:
        while (event := stream.next_step()) is not None:
            check.step(event)
    finally:
        stream.close()
    check.finish(stream)
    if stream.steps == 0 and not stream.metrics:
        raise TraceFileError(f"{path}: the trace records no step and no metric: nothing to verify "
                             "against")
    return stream


# ---- writing -----------------------------------------------------------------------------------
def band_of(encoded: Sequence[Any]) -> dict[str, Any] | None:
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


def bands_of(per_run: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in per_run[0]:
        band = band_of([sig.get(name) for sig in per_run])
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
            got = [s.next_step() for s in streams]
            events = [e for e in got if e is not None]
            if not events:
                break
            if len(events) < len(got):
                raise UsageError("the runs recorded different numbers of steps")
            line: dict[str, Any] = {"step": events[0].step, "signals": events[0].signals}
            if len(streams) > 1:
                band = bands_of([e.signals for e in events])
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
                band = bands_of([s.metrics for s in streams])
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


def make_parent(path: str | os.PathLike[str]) -> None:
    """Goldens usually live in a folder of their own; create it."""
    parent = Path(path).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create the golden's folder {str(parent)!r}: {e.strerror}") from None
