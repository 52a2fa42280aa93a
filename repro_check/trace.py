"""The trace format: one JSON Lines file a run, never pickle.

Line 1 is the header ``{"format": "repro-check-trace", "version": 1, "header": {...}}``; then, in
the order they happened, ``{"step": N, "signals": {...}}`` lines, at most one ``{"metrics": {...}}``
line, optional ``{"warning": ...}`` and ``{"error": {...}}`` lines, ``{"flagged": {...}}`` lines (ops
PyTorch reports as nondeterministic) and ``{"probe": {...}}`` lines (one step's ops, see
:mod:`repro_check.probe`), and a final ``{"end": {...}}``
line with the run's exit status and the tail of its output. Signal and metric values are encoded
scalars (see :mod:`repro_check.values`) or fingerprint strings. The reader validates every line, so
a corrupt or foreign file is a :class:`TraceFileError`, never an exception from deep inside.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import values
from .atomic import AtomicWriter
from .errors import TraceFileError

FORMAT = "repro-check-trace"
VERSION = 1
#: versions this reader understands
READABLE_VERSIONS = (1,)
#: no valid line is longer than this; a longer one means a corrupt or foreign file
MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_STEP = 10**12


def header_line(header: dict[str, Any]) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "header": header}


def dumps(event: dict[str, Any]) -> str:
    """One trace line; NaN and inf never appear as bare JSON numbers."""
    return json.dumps(event, separators=(",", ":"), allow_nan=False) + "\n"


@dataclass
class Step:
    step: int
    signals: dict[str, Any]


@dataclass
class Trace:
    """A whole trace in memory (for ``diff``, ``verify`` and tests; the runner streams instead)."""

    header: dict[str, Any]
    steps: list[Step] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    path: str | None = None


def _fail(path: str, lineno: int, why: str) -> TraceFileError:
    where = f"{path}:{lineno}" if lineno else path
    return TraceFileError(f"{where}: not a valid repro-check trace ({why})")


def validate_signal(name: Any, value: Any) -> bool:
    if not isinstance(name, str) or len(name) > 200:
        return False
    if isinstance(value, str):
        return len(value) <= 1024
    return value is None or values.is_valid(value)


def parse_event(obj: Any, path: str = "<trace>", lineno: int = 0) -> dict[str, Any]:
    """Validate one decoded line after the header; return it unchanged."""
    if not isinstance(obj, dict) or len(obj) == 0:
        raise _fail(path, lineno, "a line is not a JSON object")
    if "step" in obj:
        n = obj["step"]
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_STEP:
            raise _fail(path, lineno, f"step number {n!r} out of range")
        sig = obj.get("signals")
        if not isinstance(sig, dict) or not all(validate_signal(k, v) for k, v in sig.items()):
            raise _fail(path, lineno, f"step {n} has malformed signals")
        return obj
    if "metrics" in obj:
        m = obj["metrics"]
        if not isinstance(m, dict) or not all(
            isinstance(k, str) and values.is_valid(v) for k, v in m.items()
        ):
            raise _fail(path, lineno, "malformed metrics")
        return obj
    if "warning" in obj:
        if not isinstance(obj["warning"], str):
            raise _fail(path, lineno, "malformed warning")
        return obj
    if "error" in obj or "end" in obj:
        body = obj.get("error", obj.get("end"))
        if not isinstance(body, dict):
            raise _fail(path, lineno, "malformed error or end record")
        return obj
    if "info" in obj:
        return obj
    if "probe" in obj or "flagged" in obj:
        if not isinstance(obj.get("probe", obj.get("flagged")), dict):
            raise _fail(path, lineno, "malformed probe or flagged record")
        return obj
    raise _fail(path, lineno, f"unknown record {sorted(obj)[:3]}")


def _lines(fh: Any, path: str) -> Iterator[tuple[int, str]]:
    lineno = 0
    while True:
        raw = fh.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) > MAX_LINE_BYTES:
            raise _fail(path, lineno, "line too long")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _fail(path, lineno, "not UTF-8 text") from None
        if text.strip():
            yield lineno, text


def _decode(text: str, path: str, lineno: int) -> Any:
    def bad_constant(name: str) -> Any:
        raise ValueError(name)

    try:
        return json.loads(text, parse_constant=bad_constant)
    except (ValueError, RecursionError):
        raise _fail(path, lineno, "not JSON") from None


def iter_trace(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield the header dict, then every later record, validating as it goes (bounded memory)."""
    p = str(path)
    try:
        fh = open(p, "rb")
    except FileNotFoundError:
        raise TraceFileError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise TraceFileError(f"{p}: is a directory") from None
    except OSError as e:
        raise TraceFileError(f"{p}: cannot read ({e.strerror})") from None
    with fh:
        lines = _lines(fh, p)
        first = next(lines, None)
        if first is None:
            raise TraceFileError(f"{p}: empty file, not a repro-check trace")
        lineno, text = first
        head = _decode(text, p, lineno)
        if not isinstance(head, dict) or head.get("format") != FORMAT:
            raise _fail(p, lineno, "no repro-check header; is this a trace file?")
        version = head.get("version")
        if version not in READABLE_VERSIONS:
            raise TraceFileError(
                f"{p}: trace format version {version!r} is not supported by this repro-check "
                f"(reads {', '.join(map(str, READABLE_VERSIONS))})"
            )
        if not isinstance(head.get("header"), dict):
            raise _fail(p, lineno, "header is not an object")
        yield head["header"]
        for lineno, text in lines:
            yield parse_event(_decode(text, p, lineno), p, lineno)


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a whole trace; steps must be numbered 1, 2, 3, ..."""
    events = iter_trace(path)
    trace = Trace(header=next(events), path=str(path))
    for ev in events:
        if "step" in ev:
            expected = len(trace.steps) + 1
            if ev["step"] != expected:
                raise _fail(str(path), 0, f"step {ev['step']} where step {expected} was expected")
            trace.steps.append(Step(ev["step"], ev["signals"]))
        elif "metrics" in ev:
            trace.metrics.update(ev["metrics"])
        elif "warning" in ev:
            trace.warnings.append(ev["warning"])
        elif "error" in ev:
            trace.errors.append(ev["error"])
        elif "end" in ev:
            trace.end = ev["end"]
    return trace


class TraceWriter:
    """Writes a trace line by line to a temporary file; it takes its name on :meth:`close`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._out = AtomicWriter(path)
        self.path = Path(path)

    def write_raw(self, line: str) -> None:
        """Append a line that was already validated (as received from a run)."""
        self._out.write(line if line.endswith("\n") else line + "\n")

    def write(self, event: dict[str, Any]) -> None:
        self._out.write(dumps(event))

    def close(self) -> Path:
        return self._out.commit()

    def abort(self) -> None:
        self._out.abort()


def finite_or_none(x: float | None) -> float | None:
    """For JSON reports: None for NaN/inf."""
    if x is None or math.isnan(x) or math.isinf(x):
        return None
    return x
