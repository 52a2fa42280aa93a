"""The trace format: one JSON Lines file a run, never pickle (documented in docs/trace-format.md).

Line 1 is the header ``{"format": "repro-check-trace", "version": 2, "header": {...}}``; then, in
the order they happened, ``{"step": N, "signals": {...}}`` lines, at most one ``{"metrics": {...}}``
line, optional ``{"warning": ...}`` and ``{"error": {...}}`` lines, ``{"flagged": {...}}`` lines (ops
PyTorch reports as nondeterministic) and ``{"probe": {...}}`` lines (one step's ops, see
:mod:`repro_check.child.probe`), and a final ``{"end": {...}}``
line with the run's exit status and the tail of its output. Signal and metric values are encoded
scalars (see :mod:`repro_check.trace.values`) or fingerprint strings. A golden trace recorded from
repeated runs adds ``"band": {name: {"min": v, "max": v}}`` to its step and metrics lines. The
reader validates every line, so a corrupt or foreign file is a :class:`TraceFileError`, never an
exception from deep inside; files of older versions are read through :data:`UPGRADES`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro_check.trace import values
from repro_check.trace.atomic import AtomicWriter
from repro_check.errors import TraceFileError

FORMAT = "repro-check-trace"
VERSION = 2
#: no valid line is longer than this; a longer one means a corrupt or foreign file
MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_STEP = 10**12


def header_line(header: dict[str, Any]) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "header": header}


def _threads_of(header: dict[str, Any]) -> int | None:
    seeding = header.get("seeding")
    threads = seeding.get("threads") if isinstance(seeding, dict) else None
    return threads if isinstance(threads, int) and not isinstance(threads, bool) else None


def _v1_to_v2(header: dict[str, Any]) -> dict[str, Any]:
    """Version 2 added the header keys ``threads`` and ``golden`` and the optional ``band`` of
    step and metrics lines (a v1 file has none: its values are judged without a band)."""
    out = dict(header)
    out.setdefault("threads", _threads_of(header))
    out.setdefault("golden", None)
    return out


#: ``UPGRADES[v]`` turns the header of a version-v file into the header of version v + 1; a file
#: of any version in :data:`READABLE_VERSIONS` is read as the current version
UPGRADES = {1: _v1_to_v2}
#: versions this reader understands
READABLE_VERSIONS = tuple(sorted({*UPGRADES, VERSION}))


def upgrade_header(version: int, header: dict[str, Any]) -> dict[str, Any]:
    """The header of a ``version`` file in the shape of the current version."""
    while version < VERSION:
        header = UPGRADES[version](header)
        version += 1
    return header


def dumps(event: dict[str, Any]) -> str:
    """One trace line; NaN and inf never appear as bare JSON numbers."""
    return json.dumps(event, separators=(",", ":"), allow_nan=False) + "\n"


@dataclass
class Step:
    step: int
    signals: dict[str, Any]
    band: dict[str, Any] | None = None


@dataclass
class Trace:
    """A whole trace in memory (for ``diff``, ``verify`` and tests; the runner streams instead)."""

    header: dict[str, Any]
    steps: list[Step] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    metrics_band: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    path: str | None = None


def _short(x: Any, limit: int = 40) -> str:
    """A value from the file, shortened for a one-line message."""
    text = repr(x)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fail(path: str, lineno: int, why: str) -> TraceFileError:
    where = f"{path}:{lineno}" if lineno else path
    return TraceFileError(f"{where}: not a valid repro-check trace ({why})")


def validate_signal(name: Any, value: Any) -> bool:
    if not isinstance(name, str) or len(name) > 200:
        return False
    if isinstance(value, str):
        return len(value) <= 1024
    return value is None or values.is_valid(value)


def validate_band(band: Any) -> bool:
    """``{name: {"min": encoded, "max": encoded}}``, as stored by a golden trace of repeats."""
    return isinstance(band, dict) and all(
        isinstance(k, str) and isinstance(v, dict) and values.is_valid(v.get("min"))
        and values.is_valid(v.get("max"))
        for k, v in band.items()
    )


def parse_event(obj: Any, path: str = "<trace>", lineno: int = 0) -> dict[str, Any]:
    """Validate one decoded line after the header; return it unchanged."""
    if not isinstance(obj, dict) or len(obj) == 0:
        raise _fail(path, lineno, "a line is not a JSON object")
    if "step" in obj:
        n = obj["step"]
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_STEP:
            raise _fail(path, lineno, f"step number {_short(n)} out of range")
        sig = obj.get("signals")
        if not isinstance(sig, dict) or not all(validate_signal(k, v) for k, v in sig.items()):
            raise _fail(path, lineno, f"step {n} has malformed signals")
        if "band" in obj and not validate_band(obj["band"]):
            raise _fail(path, lineno, f"step {n} has a malformed band")
        return obj
    if "metrics" in obj:
        m = obj["metrics"]
        if not isinstance(m, dict) or not all(
            isinstance(k, str) and values.is_valid(v) for k, v in m.items()
        ):
            raise _fail(path, lineno, "malformed metrics")
        if "band" in obj and not validate_band(obj["band"]):
            raise _fail(path, lineno, "metrics have a malformed band")
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
    raise _fail(path, lineno, f"unknown record {_short(sorted(obj)[:3])}")


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
        if lineno > 1 and not text.endswith("\n"):
            raise _fail(path, lineno, "not JSON: truncated, its last line is incomplete") from None
        if lineno == 1 and text.strip() in ("{", "["):
            raise _fail(path, lineno, "not JSON Lines: a JSON document such as a --json report, "
                                      "not a trace") from None
        raise _fail(path, lineno, "not JSON") from None


def iter_trace(path: str | os.PathLike[str], require_end: bool = False) -> Iterator[dict[str, Any]]:
    """Yield the header dict, then every later record, validating as it goes (bounded memory).

    The header is upgraded to the current version. With ``require_end``, a file that stops
    before its ``end`` record (a truncated copy) is a :class:`TraceFileError` once reached.
    """
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
                f"{p}: trace format version {_short(version)} is not supported by this repro-check "
                f"(reads {', '.join(map(str, READABLE_VERSIONS))})"
            )
        if not isinstance(head.get("header"), dict):
            raise _fail(p, lineno, "header is not an object")
        yield upgrade_header(version, head["header"])
        ended = False
        for lineno, text in lines:
            event = parse_event(_decode(text, p, lineno), p, lineno)
            ended = ended or "end" in event
            yield event
        if require_end and not ended:
            raise TraceFileError(f"{p}: truncated trace (it stops before its end record)")


def load_trace(path: str | os.PathLike[str], require_end: bool = False) -> Trace:
    """Read a whole trace; steps must be numbered 1, 2, 3, ..."""
    events = iter_trace(path, require_end)
    trace = Trace(header=next(events), path=str(path))
    for ev in events:
        if "step" in ev:
            expected = len(trace.steps) + 1
            if ev["step"] != expected:
                raise _fail(str(path), 0, f"step {ev['step']} where step {expected} was expected")
            trace.steps.append(Step(ev["step"], ev["signals"], ev.get("band")))
        elif "metrics" in ev:
            trace.metrics.update(ev["metrics"])
            trace.metrics_band.update(ev.get("band") or {})
        elif "warning" in ev:
            trace.warnings.append(ev["warning"])
        elif "error" in ev:
            trace.errors.append(ev["error"])
        elif "end" in ev:
            trace.end = ev["end"]
    return trace


class TraceStream:
    """Reads a trace once, front to back, in bounded memory: steps one at a time (checked to be
    numbered 1, 2, 3, ...), everything else collected as it passes. For ``verify``, ``diff`` and
    ``record``, which walk two or more traces side by side."""

    def __init__(self, path: str | os.PathLike[str], require_end: bool = True) -> None:
        self.path = str(path)
        self._events = iter_trace(path, require_end)
        self.header: dict[str, Any] = next(self._events)
        self.steps = 0
        self.metrics: dict[str, Any] = {}
        self.metrics_band: dict[str, Any] = {}
        self.warnings: list[str] = []
        self.errors: list[dict[str, Any]] = []
        self.end: dict[str, Any] | None = None
        self.done = False

    def _take(self, ev: dict[str, Any]) -> None:
        if "metrics" in ev:
            self.metrics.update(ev["metrics"])
            self.metrics_band.update(ev.get("band") or {})
        elif "warning" in ev:
            if len(self.warnings) < 100:
                self.warnings.append(ev["warning"])
        elif "error" in ev:
            self.errors.append(ev["error"])
        elif "end" in ev:
            self.end = ev["end"]

    def next_step(self) -> dict[str, Any] | None:
        """The next step record, or None once the file has no more (then it is read to its end)."""
        for ev in self._events:
            if "step" in ev:
                if ev["step"] != self.steps + 1:
                    raise _fail(self.path, 0,
                                f"step {ev['step']} where step {self.steps + 1} was expected")
                self.steps += 1
                return ev
            self._take(ev)
        self.done = True
        return None

    def drain(self) -> None:
        """Read the rest of the file (counting, not keeping, its steps)."""
        while self.next_step() is not None:
            pass

    def close(self) -> None:
        self._events.close()  # type: ignore[attr-defined]


def scan(path: str | os.PathLike[str], require_end: bool = True) -> TraceStream:
    """Validate a whole file (bounded memory) and return what it holds besides its steps."""
    stream = TraceStream(path, require_end)
    stream.drain()
    return stream


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
