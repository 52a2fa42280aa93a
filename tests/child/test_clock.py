"""Each run's wall clock is moved by a fixed amount (in a fresh interpreter: it changes the
process's ``time`` and ``datetime``)."""

from __future__ import annotations

import subprocess
import sys

from repro_check.child import clock

from ..conftest import ROOT, cli_env

SCRIPT = r"""
import copy, datetime, pickle, time
from repro_check.child import clock
real, real_ns, real_now = time.time(), time.time_ns(), datetime.datetime.now()
assert clock.install(1) == 0 and abs(time.time() - clock.real_time()) < 1  # run 1: real
shift = clock.install(3)
assert shift == 2 * clock.SHIFT_NS
moved = time.time() - real
assert abs(moved - shift / 1e9) < 5, moved
assert int(time.time()) != int(real) and time.time_ns() - real_ns >= shift
from datetime import datetime as DT, date
now = DT.now()
assert abs((now - real_now).total_seconds() - shift / 1e9) < 5
assert (date.today() - real_now.date()).days in (2, 3)
assert abs((DT.utcnow() - datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
            ).total_seconds()) < 5
assert time.strftime("%Y-%m-%d") == now.strftime("%Y-%m-%d")
assert time.gmtime(0).tm_year == 1970 and time.ctime(0) == time.asctime(time.localtime(0))
assert abs(time.monotonic() - time.monotonic()) < 1          # durations are not moved
# the stand-in classes accept real instances, and both kinds pickle and copy
assert isinstance(real_now, DT) and isinstance(now, clock.RealDatetime)
assert issubclass(clock.RealDatetime, DT) and isinstance(now, date)
for value in (real_now, now, real_now.date(), DT(2020, 1, 2, 3, 4, 5)):
    assert pickle.loads(pickle.dumps(value)) == value and copy.deepcopy(value) == value
assert clock.clock_unit(int(time.time())) == "s" and clock.clock_unit(int(real)) is None
print("ok")
"""


def test_a_moved_clock_in_a_fresh_interpreter() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=cli_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_every_unit_of_a_clock_seed_differs_between_runs() -> None:
    """Runs 1 and 2 started in the same instant still get different clock seeds."""
    t = 1_750_000_000_123_456_789
    for run in (2, 3):
        moved = t + clock.shift_of(run)
        for ns in (10**9, 10**6, 10**3, 1):
            assert moved // ns != t // ns
        assert (moved // 10**9) % 60 != (t // 10**9) % 60  # the time of day too
