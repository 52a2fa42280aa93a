"""Runs repro-check as its console script does, for tests that need two things more.

Ctrl-C is handled as in a terminal even when the test runner was started with SIGINT ignored (a
background job), and when ``REPRO_CHECK_TEST_MAXRSS`` names a file, the peak resident memory of
this process alone (not of its runs) is written there in KiB on exit: VmHWM, the high-water mark
of this address space. (``ru_maxrss`` would not do: Linux carries it over from the parent through
fork and exec, so it can report the test runner's own size.)
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

signal.signal(signal.SIGINT, signal.default_int_handler)

from repro_check.cli.main import console_main  # noqa: E402

code = console_main(sys.argv[1:])
out = os.environ.get("REPRO_CHECK_TEST_MAXRSS")
if out:
    status = Path("/proc/self/status").read_text()
    peak = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))
    Path(out).write_text(peak)
sys.exit(code)
