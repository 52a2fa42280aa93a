"""Golden traces: what a golden file holds and how it is read and written.

A golden file is an ordinary trace (same versioned format, same validating reader) whose header
carries a ``golden`` entry; recorded from several runs, each step and the final metrics also carry
the spread of the runs (``band``), which ``verify`` accepts. Every walk over a trace file is
streaming, so memory does not grow with the step count.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from repro_check.child import environment, seeding
from repro_check.compare import cause, printed
from repro_check.compare.steps import ComparisonResult
from repro_check.errors import TraceFileError, UsageError
from repro_check.report.model import Report
from repro_check.run.options import RecordedSettings
from repro_check.run.runner import RunResult
from repro_check.trace import values
from repro_check.trace.format import TraceStream, TraceWriter, check_header, header_line
from repro_check.version import __version__


# ---- settings taken from a golden's header -----------------------------------------------------
def header_settings(header: dict[str, Any], path: str) -> RecordedSettings:
    """The run settings recorded in a trace header, checked (a header is untrusted input: the
    trace reader validates it, see :func:`repro_check.trace.format.check_header`)."""
    check_header(header, path)
    seed = header.get("seed")
    comps = header.get("components")
    if comps is None:
        comps = list(seeding.COMPONENTS) if seed is not None else []
    if seed is None:
        comps = []
    try:
        rules = printed.rules_of(header.get("printed_metrics") or [])
    except UsageError:
        raise TraceFileError(f"{path}: not a valid repro-check trace (malformed printed_metrics "
                             "in header)") from None
    return RecordedSettings(header.get("target"), list(header.get("args") or []), seed,
                            list(comps), header.get("threads"), header.get("max_steps"), rules)


def result_from_trace(index: int, stream: TraceStream) -> RunResult:
    """A saved trace seen as a finished run, for the report."""
    end = stream.end or {}
    status = end.get("status") if isinstance(end.get("status"), str) else "completed"
    seconds = end.get("seconds") if isinstance(end.get("seconds"), (int, float)) else 0.0
    error = stream.errors[-1] if stream.errors else None
    res = RunResult(index, status=status, returncode=end.get("returncode"), error=error,
                    steps=stream.steps, header=stream.header, warnings=list(stream.warnings),
                    seconds=float(seconds), trace_path=stream.path,
                    incomplete=list(stream.incomplete))
    res.signal = end.get("signal") if isinstance(end.get("signal"), str) else None
    return res


# ---- the comparison of a reference trace with a run or another trace ---------------------------
def relabel(result: ComparisonResult, labels: Sequence[str]) -> None:
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


def attach_environment(report: Report, ref_header: dict[str, Any] | None,
                        other_header: dict[str, Any] | None, labels: Sequence[str]) -> None:
    diffs: list[environment.Difference] = []
    if ref_header is not None and other_header is not None:
        diffs = environment.differences(environment.run_settings(ref_header),
                                        environment.run_settings(other_header))
    note = environment_note(diffs, report.comparison, labels) if report.error is None else None
    gate = report.gate
    assert gate is not None, "a gate report"
    gate.environment_differences = [{**d.to_dict(), "text": d.describe(*labels)} for d in diffs]
    gate.environment_note = note
    if report.comparison is not None and report.error is None and not report.interrupted:
        if report.comparison.reproducible:
            report.cause = "none"
        elif diffs:
            report.cause, report.cause_detail = "environment", note
        else:
            report.cause = cause.from_signal(report.divergent_signal, uses_dataloader=False)
            report.cause_detail = cause.EXPLANATION[report.cause]


def check_golden(path: str | os.PathLike[str]) -> TraceStream:
    """Validate a whole golden file before anything runs; return its header and totals."""
    stream = TraceStream(path, require_end=True)
    stream.drain()
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
            events = [s.next_step() for s in streams]
            if events[0] is None:
                if any(e is not None for e in events):
                    raise UsageError("the runs recorded different numbers of steps")
                break
            if any(e is None for e in events):
                raise UsageError("the runs recorded different numbers of steps")
            line: dict[str, Any] = {"step": events[0]["step"], "signals": events[0]["signals"]}
            if len(streams) > 1:
                band = bands_of([e["signals"] for e in events])  # type: ignore[index]
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
