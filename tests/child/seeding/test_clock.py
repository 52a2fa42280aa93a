"""Each run's wall clock is moved by a fixed amount (in a fresh interpreter: it changes the
process's ``time`` and ``datetime``)."""

from __future__ import annotations

import datetime
import subprocess
import sys
from typing import Any

from repro_check.child.seeding import clock

from ...conftest import ROOT, cli_env

SCRIPT = r"""
import copy, datetime, pickle, time
from repro_check.child.seeding import clock
# each bound below is the time since ``began`` plus a second: however long a loaded machine
# pauses this process between two readings of the clock, no bound is broken by it
began = time.monotonic()
real, real_ns, real_now = time.time(), time.time_ns(), datetime.datetime.now()
since = lambda: time.monotonic() - began + 1
assert clock.install(1) == 0 and abs(time.time() - clock.real_time()) < since()  # run 1: real
shift = clock.install(3)
assert shift == 2 * clock.SHIFT_NS
moved = time.time() - real
assert abs(moved - shift / 1e9) < since(), moved
assert int(time.time()) != int(real) and time.time_ns() - real_ns >= shift
from datetime import datetime as DT, date
now = DT.now()
assert abs((now - real_now).total_seconds() - shift / 1e9) < since()
days = shift // clock.DAY_NS
assert (date.today() - real_now.date()).days in (days, days + 1)
assert date.today().year != real_now.year and now.hour != real_now.hour
assert now.minute != real_now.minute and time.localtime().tm_wday != real_now.weekday()
assert abs((DT.utcnow() - datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
            ).total_seconds()) < since()
assert time.strftime("%Y-%m-%d") == now.strftime("%Y-%m-%d")
assert time.gmtime(0).tm_year == 1970 and time.ctime(0) == time.asctime(time.localtime(0))
assert abs(time.monotonic() - time.monotonic()) < shift / 2e9  # durations are not moved
# no type is replaced (compiled code checks them): the real classes, their instances pickle
assert DT is clock.RealDatetime and date is clock.RealDate and type(now) is DT
for value in (real_now, now, real_now.date(), DT(2020, 1, 2, 3, 4, 5)):
    assert pickle.loads(pickle.dumps(value)) == value and copy.deepcopy(value) == value
assert abs(time.clock_gettime(time.CLOCK_REALTIME) - time.time()) < since()
assert abs(time.clock_gettime_ns(time.CLOCK_MONOTONIC) - time.monotonic_ns()) < since() * 1e9
assert DT.today().year == now.year != real_now.year  # date.today reads time.time
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


def _fields(ns: int, tz: Any) -> tuple[int, ...]:
    d = clock.RealDatetime.fromtimestamp(ns // 10**9, tz)
    return (d.year, d.month, d.day, d.weekday(), d.timetuple().tm_yday, d.hour, d.minute,
            d.second, (ns // 1000) % 10**6, ns % 10**9)


def test_every_field_of_the_time_differs_between_runs() -> None:
    """Year, month, day, weekday, day of the year, hour, minute, second, microsecond and
    nanosecond differ between any two of runs 1 to 5 started in the same instant, at any date and
    time of day, in UTC and in a zone with daylight saving (a seed from the hour, or from the
    date only, differs too)."""
    zones: list[Any] = [datetime.timezone.utc]
    try:
        from zoneinfo import ZoneInfo

        zones += [ZoneInfo("America/New_York"), ZoneInfo("Australia/Lord_Howe")]
    except Exception:  # noqa: BLE001 - no time zone data here: UTC and fixed offsets
        zones += [datetime.timezone(datetime.timedelta(hours=-5)),
                  datetime.timezone(datetime.timedelta(hours=10, minutes=30))]
    runs = range(1, clock.FIELDS_DIFFER_UP_TO + 1)
    start = 1_577_836_800 * 10**9 + 987_654_321  # 2020-01-01, then every 7 h 13 min for 6 years
    for t in range(start, start + 6 * 366 * 86_400 * 10**9, (7 * 60 + 13) * 60 * 10**9):
        for tz in zones:
            seen = [_fields(t + clock.shift_of(run), tz) for run in runs]
            for a in range(len(seen)):
                for b in range(a + 1, len(seen)):
                    same = [k for k in range(10) if seen[a][k] == seen[b][k]]
                    assert not same, (t, tz, a + 1, b + 1, same)
