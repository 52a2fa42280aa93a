"""The trace format: one JSON Lines file a run, never pickle (documented in docs/trace-format.md).

Line 1 is the header ``{"format": "repro-check-trace", "version": 2, "header": {...}}``; then, in
the order they happened, ``{"step": N, "signals": {...}}`` lines, at most one ``{"metrics": {...}}``
line, optional ``{"warning": ...}`` and ``{"error": {...}}`` lines, ``{"flagged": {...}}`` lines (ops
PyTorch reports as nondeterministic) and ``{"probe": {...}}`` lines (one step's ops, see
:mod:`repro_check.child.observe.probe`), and a final ``{"end": {...}}``
line with the run's exit status and the tail of its output. Signal and metric values are encoded
scalars (see :mod:`repro_check.trace.values`) or fingerprint strings. A golden trace recorded from
repeated runs adds ``"band": {name: {"min": v, "max": v}}`` to its step and metrics lines. The
reader validates every line (the header's fields too, see :func:`check_header`, and refuses any
number out of range), so a corrupt or foreign file is a :class:`TraceFileError`, never an
exception from deep inside; it opens regular files only, never waiting on a FIFO or a device, and
what it keeps of a file does not grow with it. Files of older versions are read through
:data:`UPGRADES`.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from repro_check.trace import values
from repro_check.trace.payloads import RunError, TraceEnd, TraceHeader, error_of, header_of
from repro_check.trace.protocol import (COMPONENTS, FORMAT, MAX_SEED, SAVED_KINDS, VERSION,
                                        EndRecord,
                                        ErrorRecord, HeaderRecord, MetricsRecord, Record,
                                        StepRecord, WarningRecord, record_of)
from repro_check.trace.atomic import AtomicWriter
from repro_check.errors import TraceFileError

#: no valid line is longer than this; a longer one means a corrupt or foreign file
MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_STEP = 10**12
#: no valid integer literal is longer (an encoded integer's readable value has at most 78 digits)
MAX_INT_DIGITS = 100
#: numbers of header and record fields (seconds, times) lie within this
MAX_NUMBER = 10**300
#: what a reader keeps of a trace's warning and error lines (it counts the rest)
KEPT_WARNINGS = 100
KEPT_ERRORS = 10
#: the longest text kept of one warning, and of one field of an error record
KEPT_TEXT = 4096
KEPT_ERROR_TEXT = 65536


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


#: one encoder for every line (``json.dumps`` with options makes a new one per call: half of
#: what a step's line cost)
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def dumps(event: dict[str, Any]) -> str:
    """One trace line; NaN and inf never appear as bare JSON numbers."""
    return _ENCODER.encode(event) + "\n"


@dataclass
class Step:
    step: int
    signals: dict[str, Any]
    band: dict[str, Any] | None = None


@dataclass
class Trace:
    """A whole trace in memory (for ``diff``, ``verify`` and tests; the runner streams instead)."""

    header: TraceHeader
    steps: list[Step] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    metrics_band: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    errors: list[RunError] = field(default_factory=list)
    end: TraceEnd | None = None
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


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    """A finite number that converts to a float (an int too wide for one does not)."""
    if isinstance(x, float):
        return math.isfinite(x)
    return _is_int(x) and -MAX_NUMBER < x < MAX_NUMBER


def _is_scalar(x: Any) -> bool:
    return x is None or isinstance(x, (str, bool)) or _is_number(x)


def _is_plain(x: Any) -> bool:
    """A JSON scalar, or a list or object of scalars (what environment and seeding entries are)."""
    if isinstance(x, list):
        return all(_is_scalar(v) for v in x)
    if isinstance(x, dict):
        return all(_is_scalar(v) for v in x.values())
    return _is_scalar(x)


def _int_at_least(low: int, high: int | None = None) -> Any:
    return lambda x: _is_int(x) and x >= low and (high is None or x <= high)


def _optional(check: Any) -> Any:
    return lambda x: x is None or check(x)


def _str_list(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(v, str) for v in x)


def _object_of(checks: dict[str, Any], others: Any = _is_plain) -> Any:
    """An object whose known keys pass their check and whose other keys pass ``others``."""
    def check(x: Any) -> bool:
        return isinstance(x, dict) and all(checks.get(k, others)(v) for k, v in x.items())
    return check


_TEXT = _optional(lambda x: isinstance(x, str))
_COUNT = _optional(_int_at_least(0, MAX_STEP))
_SECONDS = _optional(_is_number)

#: the header keys a reader checks: key -> check of its value (absent keys are not checked;
#: unknown keys are accepted, as new ones are added without a version change)
HEADER_CHECKS: dict[str, Any] = {
    "target": _optional(lambda x: isinstance(x, str) and 0 < len(x) <= 4096),
    "args": _optional(_str_list),
    "run": _optional(_int_at_least(0, MAX_STEP)),
    "seed": _optional(_int_at_least(0, MAX_SEED)),
    "components": _optional(lambda x: isinstance(x, list)
                            and all(c in COMPONENTS for c in x)),
    "seeding": _optional(_object_of({})),
    "threads": _optional(_int_at_least(1)),
    "max_steps": _optional(_int_at_least(1)),
    "probe_step": _optional(_int_at_least(0)),
    "environment": _optional(_object_of({})),
    "started": _SECONDS,
    "golden": _optional(_object_of({"runs": _int_at_least(1), "band": _optional(
        lambda x: isinstance(x, bool)), "recorded": _TEXT, "repro_check": _TEXT})),
    "distributed": _optional(_object_of({}, _optional(_int_at_least(0)))),
}

#: the fields of error, end and info records a reader checks (others are accepted as they come)
ERROR_CHECKS: dict[str, Any] = {"kind": _TEXT, "type": _TEXT, "message": _TEXT,
                                "traceback": _TEXT, "limit": _SECONDS, "time": _SECONDS}
END_CHECKS: dict[str, Any] = {"status": _optional(lambda x: isinstance(x, str) and x != ""), "returncode": _optional(_is_int),
                              "signal": _TEXT, "seconds": _SECONDS, "steps": _COUNT,
                              "output_tail": _TEXT}


def _saved_row(x: Any) -> bool:
    """``[key, dtype, shape, fingerprint]`` of one saved tensor."""
    return (isinstance(x, list) and len(x) == 4 and isinstance(x[0], str) and len(x[0]) <= 4096
            and isinstance(x[1], str) and len(x[1]) <= 100 and isinstance(x[2], list)
            and len(x[2]) <= 64 and all(_is_int(n) and 0 <= n < MAX_NUMBER for n in x[2])
            and isinstance(x[3], str) and len(x[3]) <= 200)


#: a save of the run, or its modules' state at its end (:class:`~repro_check.trace.protocol.SavedRecord`)
_SAVED = _object_of({
    "kind": lambda x: x in SAVED_KINDS, "order": _int_at_least(0, MAX_STEP),
    "saver": lambda x: isinstance(x, str) and len(x) <= 200,
    "path": _optional(lambda x: isinstance(x, str) and len(x) <= 4096),
    "step": _int_at_least(0, MAX_STEP), "count": _int_at_least(0, MAX_STEP),
    "location": _optional(_object_of({})),
    "tensors": lambda x: isinstance(x, list) and all(_saved_row(r) for r in x),
}, lambda x: True)

INFO_CHECKS: dict[str, Any] = {"status": _TEXT, "steps": _COUNT, "backward_calls": _COUNT,
                               "seconds": _SECONDS, "saved": _SAVED}


def _bad_field(record: dict[str, Any], checks: dict[str, Any]) -> str | None:
    """The first known key of ``record`` whose value fails its check."""
    return next((k for k, check in checks.items() if k in record and not check(record[k])), None)


def check_header(header: Any, path: str = "<trace>", lineno: int = 1) -> dict[str, Any]:
    """Validate a trace header (untrusted input) and return it; a :class:`TraceFileError` names
    the first malformed key."""
    if not isinstance(header, dict):
        raise _fail(path, lineno, "header is not an object")
    bad = _bad_field(header, HEADER_CHECKS)
    if bad is not None:
        raise _fail(path, lineno, f"malformed {bad} in header")
    return header


#: the key that says what a line after the header is; a line has exactly one
RECORD_KINDS = ("step", "metrics", "warning", "error", "end", "info", "probe", "flagged")


def _canonical(encoded: dict[str, Any], band: Any) -> None:
    """Write every encoded value's bits in their one canonical form (in place), so that the same
    value written another way (upper-case hex, leading zeros) compares equal on its bits."""
    for value in encoded.values():
        if isinstance(value, dict):
            values.canonicalize(value)
    for limits in (band or {}).values():
        values.canonicalize(limits["min"])
        values.canonicalize(limits["max"])


def parse_event(obj: Any, path: str = "<trace>", lineno: int = 0) -> dict[str, Any]:
    """Validate one decoded line after the header; return it, its encoded values' bits in
    canonical form (see :func:`repro_check.trace.values.canonicalize`)."""
    if not isinstance(obj, dict) or len(obj) == 0:
        raise _fail(path, lineno, "a line is not a JSON object")
    if sum(kind in obj for kind in RECORD_KINDS) > 1:  # read as one kind, counted as another
        raise _fail(path, lineno, f"a line of more than one kind {_short(sorted(obj)[:3])}")
    if "step" in obj:
        n = obj["step"]
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_STEP:
            raise _fail(path, lineno, f"step number {_short(n)} out of range")
        sig = obj.get("signals")
        if not isinstance(sig, dict) or not all(validate_signal(k, v) for k, v in sig.items()):
            raise _fail(path, lineno, f"step {n} has malformed signals")
        if "band" in obj and not validate_band(obj["band"]):
            raise _fail(path, lineno, f"step {n} has a malformed band")
        _canonical(sig, obj.get("band"))
        return obj
    if "metrics" in obj:
        m = obj["metrics"]
        if not isinstance(m, dict) or not all(
            isinstance(k, str) and values.is_valid(v) for k, v in m.items()
        ):
            raise _fail(path, lineno, "malformed metrics")
        if "band" in obj and not validate_band(obj["band"]):
            raise _fail(path, lineno, "metrics have a malformed band")
        _canonical(m, obj.get("band"))
        return obj
    if "warning" in obj:
        if not isinstance(obj["warning"], str):
            raise _fail(path, lineno, "malformed warning")
        return obj
    if "error" in obj or "end" in obj:
        kind = "error" if "error" in obj else "end"
        body = obj[kind]
        if not isinstance(body, dict):
            raise _fail(path, lineno, "malformed error or end record")
        bad = _bad_field(body, ERROR_CHECKS if kind == "error" else END_CHECKS)
        if bad is not None:
            raise _fail(path, lineno, f"malformed {bad} in the {kind} record")
        return obj
    if "info" in obj:
        body = obj["info"]
        if not isinstance(body, dict) or _bad_field(body, INFO_CHECKS) is not None:
            raise _fail(path, lineno, "malformed info record")
        return obj
    if "probe" in obj or "flagged" in obj:
        if not isinstance(obj.get("probe", obj.get("flagged")), dict):
            raise _fail(path, lineno, "malformed probe or flagged record")
        return obj
    raise _fail(path, lineno, f"unknown record {_short(sorted(obj)[:3])}")


def dropped_reason(exc: BaseException) -> str:
    """Why a line from a run could not be taken, in a few words (for the warning that says so)."""
    text = str(exc)
    marker = "not a valid repro-check trace ("
    if isinstance(exc, TraceFileError) and marker in text:
        return text.split(marker, 1)[1].rstrip(")")
    if isinstance(exc, _OutOfRange):
        return f"number {_short(text, 20)} out of range"
    if isinstance(exc, (ValueError, RecursionError)):
        return "not JSON"
    return f"{type(exc).__name__}: {_short(text, 80)}"


def read_record(line: str | bytes, **tags: int) -> Record:
    """One line a run wrote, as the parent's readers take it: decoded (:func:`loads`), validated
    (:func:`parse_event`; a header line must be of this version) and typed
    (:func:`~repro_check.trace.protocol.record_of`), with ``tags`` (``proc``, ``rank``: where it
    came from) added. A bad line raises (the reader drops it and says so); a header of another
    version raises :class:`~repro_check.trace.protocol.ProtocolError`."""
    obj = loads(line)
    event = obj if isinstance(obj, dict) and "format" in obj else parse_event(obj)
    return record_of({**event, **tags} if tags else event)


def dropped_warning(why: str, later_unnamed: bool = False) -> dict[str, Any]:
    """The warning record that stands for a line of a run that could not be taken: it marks the
    run's comparison incomplete (``"incomplete": true``), so the check is never reproducible."""
    return {"warning": f"a line the run wrote was dropped ({why}): the comparison is incomplete"
                       + ("; later ones are dropped unnamed" if later_unnamed else ""),
            "incomplete": True}


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


class _OutOfRange(ValueError):
    """A number no valid trace holds: one that reads as infinity, or an integer too long."""


def _bad_constant(name: str) -> Any:
    raise ValueError(name)


def _finite(text: str) -> float:
    x = float(text)
    if math.isinf(x):  # 1e999: valid JSON, but not a number any writer makes (allow_nan=False)
        raise _OutOfRange(text)
    return x


def _short_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS:
        raise _OutOfRange(text)
    return int(text)


#: one decoder for every line (``json.loads`` with options builds a new one each call)
_DECODER = json.JSONDecoder(parse_constant=_bad_constant, parse_float=_finite,
                            parse_int=_short_int)


#: a JSON escape of a UTF-16 surrogate: the only way a lone one (no text) gets into a decoded line
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_lone_surrogates(x: Any) -> Any:
    """``x`` with each lone surrogate in its texts written out (``\\udc80``): no such text can be
    printed or saved as UTF-8, and every text from a file is printed or saved somewhere."""
    if isinstance(x, str):
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", x) \
            if _SURROGATE.search(x) else x
    if isinstance(x, list):
        return [_no_lone_surrogates(v) for v in x]
    if isinstance(x, dict):
        return {_no_lone_surrogates(k): _no_lone_surrogates(v) for k, v in x.items()}
    return x


def loads(text: str | bytes) -> Any:
    """Decode one trace line as the reader does: NaN, infinities, numbers that overflow to
    infinity and integers of more than :data:`MAX_INT_DIGITS` digits are refused (ValueError);
    a lone surrogate (``"\\udc80"``, valid JSON but no text) is kept written out."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    obj = _DECODER.decode(text)
    return _no_lone_surrogates(obj) if _SURROGATE_ESCAPE.search(text) else obj


def _decode(text: str, path: str, lineno: int) -> Any:
    try:
        return loads(text)
    except _OutOfRange as e:
        raise _fail(path, lineno, f"number {_short(str(e), 20)} out of range") from None
    except (ValueError, RecursionError):
        if lineno > 1 and not text.endswith("\n"):
            raise _fail(path, lineno, "not JSON: truncated, its last line is incomplete") from None
        if lineno == 1 and text.strip() in ("{", "["):
            raise _fail(path, lineno, "not JSON Lines: a JSON document such as a --json report, "
                                      "not a trace") from None
        raise _fail(path, lineno, "not JSON") from None


def _kind_of(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def open_regular(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open a file given to us for reading, refusing anything but a regular file without ever
    blocking: checked before it is opened, opened without waiting (O_NONBLOCK: a FIFO swapped in
    meanwhile cannot stall us), and checked again once open."""
    p = str(path)

    def refuse(mode: int) -> TraceFileError:
        if stat.S_ISDIR(mode):
            return TraceFileError(f"{p}: is a directory")
        return TraceFileError(f"{p}: not a regular file ({_kind_of(mode)})")

    try:
        st = os.stat(p)
        if not stat.S_ISREG(st.st_mode):
            raise refuse(st.st_mode)
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError):
        raise TraceFileError(f"{p}: no such file") from None
    except OSError as e:
        raise TraceFileError(f"{p}: cannot read ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refuse(st.st_mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def iter_trace(path: str | os.PathLike[str],
               require_end: bool = False) -> Generator[dict[str, Any], None, None]:
    """Yield the header dict, then every later record, validating as it goes (bounded memory).

    The header is upgraded to the current version. With ``require_end``, a file that stops
    before its ``end`` record (a truncated copy) is a :class:`TraceFileError` once reached.
    """
    p = str(path)
    fh = open_regular(p)
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
        if not _is_int(version):
            raise _fail(p, lineno, f"version {_short(version)} is not an integer")
        if version not in READABLE_VERSIONS:
            raise TraceFileError(
                f"{p}: trace format version {_short(version)} is not supported by this repro-check "
                f"(reads {', '.join(map(str, READABLE_VERSIONS))})"
            )
        header = upgrade_header(version, check_header(head.get("header"), p, lineno))
        yield check_header(header, p, lineno)
        ended = False
        metrics: set[bool] = set()
        for lineno, text in lines:
            event = parse_event(_decode(text, p, lineno), p, lineno)
            if ended:  # nothing follows the end record: a file that goes on was spliced
                raise _fail(p, lineno, "a record after the end record")
            ended = "end" in event
            if "metrics" in event:
                # at most the run's own line and the one repro-check writes from its output
                # (``printed:NAME``): each is kept in full, so more would grow with the file
                kind = bool(event["metrics"]) and all(
                    str(k).startswith("printed:") for k in event["metrics"])
                if kind in metrics:
                    raise _fail(p, lineno, "more than one metrics line")
                metrics.add(kind)
            yield event
        if require_end and not ended:
            raise TraceFileError(f"{p}: truncated trace (it stops before its end record)")


def iter_records(path: str | os.PathLike[str],
                 require_end: bool = False) -> Generator[Record, None, None]:
    """:func:`iter_trace` as typed records: the :class:`HeaderRecord` (upgraded to the current
    version), then one record a line (:func:`repro_check.trace.protocol.record_of`)."""
    events = iter_trace(path, require_end)
    try:
        header = next(events)
        yield HeaderRecord({"format": FORMAT, "version": VERSION, "header": header},
                           header_of(header), VERSION)
        for event in events:
            yield record_of(event)
    finally:
        events.close()


def load_trace(path: str | os.PathLike[str], require_end: bool = False) -> Trace:
    """Read a whole trace; steps must be numbered 1, 2, 3, ... (warnings and errors are kept as
    :class:`TraceStream` keeps them)."""
    stream = TraceStream(path, require_end)
    trace = Trace(header=stream.header, path=str(path))
    try:
        while (ev := stream.next_step()) is not None:
            trace.steps.append(Step(ev.step, ev.signals, ev.band))
    finally:
        stream.close()
    trace.metrics, trace.metrics_band = stream.metrics, stream.metrics_band
    trace.warnings, trace.errors, trace.end = stream.warnings, stream.errors, stream.end
    return trace


def _clip(text: Any, limit: int, tail: bool = False) -> Any:
    """A long text kept in part (its start, or its end for a traceback); others unchanged."""
    if not isinstance(text, str) or len(text) <= limit:
        return text
    return "..." + text[-limit:] if tail else text[:limit] + "..."


class TraceStream:
    """Reads a trace once, front to back, in bounded memory: steps one at a time (checked to be
    numbered 1, 2, 3, ...), everything else collected as it passes. For ``verify``, ``diff`` and
    ``record``, which walk two or more traces side by side.

    What it keeps does not grow with the file: the first :data:`KEPT_WARNINGS` warnings, the
    first :data:`KEPT_ERRORS` - 1 errors and the last one (the one that ended the run), each
    text clipped; ``warning_count`` and ``error_count`` say how many the file has."""

    def __init__(self, path: str | os.PathLike[str], require_end: bool = True) -> None:
        self.path = str(path)
        self._events = iter_records(path, require_end)
        head = next(self._events)
        assert isinstance(head, HeaderRecord), "iter_records yields the header first"
        self.header: TraceHeader = head.header
        self.steps = 0
        self.metrics: dict[str, Any] = {}
        self.metrics_band: dict[str, Any] = {}
        self.warnings: list[str] = []
        self.errors: list[RunError] = []
        self.warning_count = 0
        self.error_count = 0
        #: warnings that say a record of the run was left out (``"incomplete": true``), the
        #: first :data:`KEPT_WARNINGS` of them
        self.incomplete: list[str] = []
        self.end: TraceEnd | None = None
        self.done = False

    def _take(self, ev: Record) -> None:
        if isinstance(ev, MetricsRecord):
            self.metrics.update(ev.metrics)
            self.metrics_band.update(ev.raw.get("band") or {})
        elif isinstance(ev, WarningRecord):
            self.warning_count += 1
            if len(self.warnings) < KEPT_WARNINGS:
                self.warnings.append(_clip(ev.warning, KEPT_TEXT))
            if ev.incomplete and len(self.incomplete) < KEPT_WARNINGS:
                self.incomplete.append(_clip(ev.warning, KEPT_TEXT))
        elif isinstance(ev, ErrorRecord):
            self.error_count += 1
            err = error_of({k: _clip(v, KEPT_ERROR_TEXT, tail=k in ("traceback", "output_tail"))
                            for k, v in ev.error.items()})
            if len(self.errors) < KEPT_ERRORS:
                self.errors.append(err)
            else:
                self.errors[-1] = err
        elif isinstance(ev, EndRecord):
            self.end = ev.end

    def next_step(self) -> StepRecord | None:
        """The next step record, or None once the file has no more (then it is read to its end)."""
        for ev in self._events:
            if isinstance(ev, StepRecord):
                if ev.step != self.steps + 1:
                    raise _fail(self.path, 0,
                                f"step {ev.step} where step {self.steps + 1} was expected")
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
        self._events.close()


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
