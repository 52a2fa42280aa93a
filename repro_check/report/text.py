"""Small pieces of text every renderer shares: values, differences, verdicts, a run's output."""

from __future__ import annotations

from typing import Any

from repro_check.report.model import Report
from repro_check.run.runner import RunResult
from repro_check.trace import values

#: rich style of each verdict tone
TONE_STYLE = {"good": "bold green", "bad": "bold red", "warn": "bold yellow"}


def value_text(v: Any) -> str:
    """A recorded value as people read it (an encoded number exactly, a fingerprint cut short)."""
    if isinstance(v, dict):
        return values.readable(v)
    if v is None:
        return "—"
    return str(v)[:24]


def diff_text(d: float | None) -> str:
    return "—" if d is None else f"{d:.3g}"


def verdict_style(report: Report) -> str:
    return TONE_STYLE[report.verdict.tone]


def failure_output(r: RunResult, lines: int = 30, chars: int = 6000) -> str:
    """What a failed run left to read: its traceback, else the last lines of its output."""
    if r.error and r.error.get("traceback"):
        return str(r.error["traceback"]).rstrip()[-chars:]
    return "\n".join(r.output_tail.rstrip().splitlines()[-lines:])[-chars:]
