"""What both sides share: the trace format, exact value encodings, fingerprints, atomic files.

Reading traces from other tools: ``from repro_check.trace import load_trace, iter_trace,
iter_records, TraceStream`` (see docs/trace-format.md).
"""

from __future__ import annotations

from repro_check.trace.format import (
    UPGRADES,
    Trace,
    TraceStream,
    iter_records,
    iter_trace,
    load_trace,
)
from repro_check.trace.protocol import FORMAT, VERSION

__all__ = ["FORMAT", "UPGRADES", "VERSION", "Trace", "TraceStream", "iter_records", "iter_trace", "load_trace"]
