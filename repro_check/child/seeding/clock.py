"""Each run's wall clock, moved by a fixed amount per run, so a seed taken from the clock differs
between runs every time.

Runs that go in parallel usually start within the same second, so
``torch.manual_seed(int(time.time()))`` would give them the same seed and the verdict would
depend on when they happened to start. Run K sees the wall clock moved forward by
``(K - 1) * SHIFT_NS``: 404 days, 13 hours, 11 minutes, 7 seconds and 1,234,567 nanoseconds per
run, so that every field a script can read of the time differs between runs: the year, month,
day of the month, weekday, day of the year, hour, minute, second, microsecond and nanosecond (a
seed taken from ``datetime.now().hour`` or ``int(strftime('%Y%m%d'))`` too), whatever the date
and time of day, in UTC and in local time across a daylight-saving change. That holds between
any two of runs 1 to 5 (``shift_of`` checks it in the tests); later runs may repeat a field of
run 1's, but run 2 already differs. Run 1 sees the real clock.

What is moved: ``time.time``, ``time.time_ns``, ``time.clock_gettime``/``clock_gettime_ns`` of
``CLOCK_REALTIME``, ``time.localtime``/``gmtime``/``ctime``/``strftime``/``asctime`` without a
time argument, ``datetime.datetime.now``/``utcnow``/``today`` and ``datetime.date.today`` (and so
pandas' ``Timestamp.now``/``today``, which call them). No type is replaced: ``now`` and
``utcnow`` are set in the namespace of the real ``datetime`` class, which compiled libraries
check when they are imported (pandas' and pyarrow's modules crashed on a stand-in subclass), so
``from datetime import datetime`` taken before the run started sees the moved clock too. Not
moved: durations (``time.monotonic``, ``time.perf_counter``, ``time.process_time``), clocks read
by compiled code itself (``numpy.datetime64('now')``, C++ ``std::chrono``, file times from
``os.stat``), and processes started fresh by the run (a ``spawn`` DataLoader worker), which see
the real clock. A seed taken from one of those is seen as differing between runs, not as a seed
from the clock.

:func:`clock_unit` says whether a value is the current (moved) time in seconds, milliseconds,
microseconds or nanoseconds, give or take a day: the seeding watch calls such a seed "seeded
from the clock". A coarse field of the time (the hour, the date, ``hour * 60 + minute``) is a
small number that a constant seed can equal by chance (42 at 00:42, 2026 in 2026), so one run
cannot tell: :func:`clock_fields` lists the fields a value equals in this run, and
:func:`repro_check.compare.seeds.shared_field`, in the parent, calls a seed clock-derived only
when its value differs between runs and equals the same field in every one of them (a constant
cannot differ).
"""

from __future__ import annotations

import datetime as _datetime
import time
from typing import Any
from repro_check.child import patches

DAY_NS = 86_400 * 10**9
#: how much further each run's clock is moved than the run before it: 404 days (more than a
#: year, and a month, and not a whole number of weeks), 13 h (never a whole day, even with an
#: hour of daylight saving), 11 min, 7 s (never a whole minute) and 1,234,567 ns
SHIFT_NS = ((404 * 24 + 13) * 60 + 11) * 60 * 10**9 + 7 * 10**9 + 1_234_567
#: runs 1 to this one differ from each other in every field of the time
FIELDS_DIFFER_UP_TO = 5
#: a value this close to the current time (in one of :data:`UNITS`) is taken from the clock
NEAR_NS = DAY_NS
#: (name, nanoseconds per unit), coarsest first
UNITS: tuple[tuple[str, int], ...] = (("s", 10**9), ("ms", 10**6), ("us", 10**3), ("ns", 1))

_real_time = time.time
_real_time_ns = time.time_ns
_real_localtime = time.localtime
_real_gmtime = time.gmtime
_real_ctime = time.ctime
_real_strftime = time.strftime
_real_asctime = time.asctime
_real_clock_gettime = time.clock_gettime
_real_clock_gettime_ns = time.clock_gettime_ns
RealDatetime = _datetime.datetime
RealDate = _datetime.date

#: the shift of this process's clock, in nanoseconds (0 until :func:`install`)
offset = 0


def shift_of(run: int) -> int:
    """How far run ``run``'s clock is moved, in nanoseconds."""
    return (max(1, run) - 1) * SHIFT_NS


def real_time() -> float:
    """The real wall clock, in seconds (for repro-check's own timestamps)."""
    return _real_time()


def now_ns() -> int:
    """The run's (moved) wall clock, in nanoseconds."""
    return _real_time_ns() + offset


def clock_unit(value: Any) -> str | None:
    """``"s"``, ``"ms"``, ``"us"`` or ``"ns"`` when ``value`` is within a day of the run's wall
    clock in that unit; None otherwise (and for anything that is not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = int(value)  # a numpy integer, a 0-d tensor
        except (TypeError, ValueError, OverflowError):
            return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    now = now_ns()
    for name, ns in UNITS:
        if abs(value * ns - now) <= NEAR_NS:
            return name
    return None


#: the fields of the time a coarse clock seed is taken from, by name: (local time or UTC) ->
#: value; ``d`` is a ``datetime`` (a microsecond read earlier is never seen again: a seed taken
#: from one differs between runs like OS entropy, and is named as a seed that differs)
_FIELDS: tuple[tuple[str, Any], ...] = (
    ("year", lambda d: d.year),
    ("month", lambda d: d.month),
    ("day of the month", lambda d: d.day),
    ("weekday", lambda d: d.weekday()),
    ("ISO weekday", lambda d: d.isoweekday()),
    ("day of the year", lambda d: d.timetuple().tm_yday),
    ("hour", lambda d: d.hour),
    ("minute", lambda d: d.minute),
    ("second", lambda d: d.second),
    ("minute of the day", lambda d: d.hour * 60 + d.minute),
    ("second of the day", lambda d: (d.hour * 60 + d.minute) * 60 + d.second),
    ("date (%Y%m%d)", lambda d: int(d.strftime("%Y%m%d"))),
    ("date (%y%m%d)", lambda d: int(d.strftime("%y%m%d"))),
    ("date and hour (%Y%m%d%H)", lambda d: int(d.strftime("%Y%m%d%H"))),
    ("date and time (%Y%m%d%H%M)", lambda d: int(d.strftime("%Y%m%d%H%M"))),
    ("date and time (%Y%m%d%H%M%S)", lambda d: int(d.strftime("%Y%m%d%H%M%S"))),
    ("year and month (%Y%m)", lambda d: int(d.strftime("%Y%m"))),
    ("month and day (%m%d)", lambda d: int(d.strftime("%m%d"))),
    ("time of day (%H%M)", lambda d: int(d.strftime("%H%M"))),
    ("time of day (%H%M%S)", lambda d: int(d.strftime("%H%M%S"))),
    ("day number (date.toordinal())", lambda d: d.toordinal()),
)
#: whole units since 1970 (coarser than :data:`UNITS`)
_EPOCH_UNITS: tuple[tuple[str, int], ...] = (
    ("minutes since 1970", 60), ("hours since 1970", 3600), ("days since 1970", 86_400))
#: how far back a coarse seed may have been read (it changes at a field's boundary: 12:59:59
#: read, 13:00:00 seeded)
_READ_BEFORE_NS = 61 * 10**9


def clock_fields(value: Any) -> list[str]:
    """The coarse fields of the run's (moved) time, local or UTC, now or a minute ago, that
    ``value`` equals (``[]`` for anything that is not a whole number). Only a hint in one run:
    see :func:`repro_check.compare.seeds.shared_field`."""
    if isinstance(value, bool):
        return []
    if isinstance(value, float):
        if not value.is_integer():
            return []
        value = int(value)
    if not isinstance(value, int):
        try:
            value = int(value)  # a numpy integer, a 0-d tensor
        except (TypeError, ValueError, OverflowError):
            return []
    found: list[str] = []
    now = now_ns()
    for at in (now, now - _READ_BEFORE_NS):
        secs = at // 10**9
        for d in (RealDatetime.fromtimestamp(secs),
                  RealDatetime.fromtimestamp(secs, _datetime.timezone.utc)):
            for name, field in _FIELDS:
                if name not in found and field(d) == value:
                    found.append(name)
        for name, unit in _EPOCH_UNITS:
            if name not in found and secs // unit == value:
                found.append(name)
    return found


# ---- the moved functions -----------------------------------------------------------------------
def _time() -> float:
    return (_real_time_ns() + offset) / 1e9


def _time_ns() -> int:
    return _real_time_ns() + offset


def _clock_gettime(clk_id: int) -> float:
    moved = _real_clock_gettime(clk_id)
    return moved + offset / 1e9 if clk_id == time.CLOCK_REALTIME else moved


def _clock_gettime_ns(clk_id: int) -> int:
    moved = _real_clock_gettime_ns(clk_id)
    return moved + offset if clk_id == time.CLOCK_REALTIME else moved


def _localtime(secs: float | None = None) -> time.struct_time:
    return _real_localtime(_time() if secs is None else secs)


def _gmtime(secs: float | None = None) -> time.struct_time:
    return _real_gmtime(_time() if secs is None else secs)


def _ctime(secs: float | None = None) -> str:
    return _real_ctime(_time() if secs is None else secs)


def _strftime(fmt: str, t: Any = None) -> str:
    return _real_strftime(fmt, _localtime() if t is None else t)


def _asctime(t: Any = None) -> str:
    return _real_asctime(_localtime() if t is None else t)


def _now(cls: Any, tz: Any = None) -> Any:
    """``datetime.now`` on the moved clock (``cls``: ``datetime`` or a subclass, pandas'
    ``Timestamp`` among them)."""
    return cls.fromtimestamp(_time(), tz)


def _utcnow(cls: Any) -> Any:
    """``datetime.utcnow`` on the moved clock."""
    return cls.fromtimestamp(_time(), _datetime.timezone.utc).replace(tzinfo=None)


def install(run: int) -> int:
    """Move this process's wall clock by run ``run``'s shift; returns the shift (ns).

    ``time``'s functions are replaced in the module. ``datetime.datetime.now`` and ``utcnow``
    are replaced inside the real class's own namespace, the class itself kept: compiled code
    (pandas, pyarrow) checks the ``datetime`` types it imports, and a stand-in subclass crashed
    it. ``date.today`` and ``datetime.today`` read ``time.time``, so they follow. Where this
    interpreter keeps the class's namespace out of reach, ``datetime.now`` keeps the real clock
    and the patch listing says so."""
    global offset
    offset = shift_of(run)
    if offset == 0:
        return 0
    for name, moved in (("time", _time), ("time_ns", _time_ns), ("localtime", _localtime),
                        ("gmtime", _gmtime), ("ctime", _ctime), ("strftime", _strftime),
                        ("asctime", _asctime), ("clock_gettime", _clock_gettime),
                        ("clock_gettime_ns", _clock_gettime_ns)):
        patches.PATCHES.replace("clock", time, name, moved)
    for name, method in (("now", classmethod(_now)), ("utcnow", classmethod(_utcnow))):
        try:
            patches.PATCHES.replace("clock", RealDatetime, name, method)
        except patches.SealedTypeError as e:
            patches.PATCHES.skip("clock", f"datetime.datetime.{name}", f"real clock kept: {e}")
    return offset
