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

What is moved: ``time.time``, ``time.time_ns``, ``time.localtime``/``gmtime``/``ctime``/
``strftime``/``asctime`` without a time argument, ``datetime.datetime.now``/``utcnow``/``today``
and ``datetime.date.today`` (the two classes are replaced by subclasses that accept every real
instance in ``isinstance`` and pickle as the real ones). Durations (``time.monotonic``,
``time.perf_counter``, ``time.process_time``) and the clock of code that took ``datetime`` before
the run started (torch) are not moved. Processes started fresh by the run (a ``spawn``
DataLoader worker) see the real clock.

:func:`clock_unit` says whether a value is the current (moved) time in seconds, milliseconds,
microseconds or nanoseconds, give or take a day: the seeding watch calls such a seed "seeded
from the clock". A coarse field of the time (the hour, the date, ``hour * 60 + minute``) is a
small number that a constant seed can equal by chance (42 at 00:42, 2026 in 2026), so one run
cannot tell: :func:`clock_fields` lists the fields a value equals in this run, and
:func:`shared_field` calls a seed clock-derived only when its value differs between runs and
equals the same field in every one of them (a constant cannot differ).
"""

from __future__ import annotations

import copyreg
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
    see :func:`shared_field`."""
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


def shared_field(fields_by_run: list[Any], values_by_run: list[Any]) -> str | None:
    """The field a seed was taken from, when its value differs between the runs and equals that
    field of the time in every run (each run's :func:`clock_fields`); None otherwise."""
    if len(values_by_run) < 2 or len({repr(v) for v in values_by_run}) < 2 \
            or len(fields_by_run) != len(values_by_run):
        return None
    common: list[str] | None = None
    for fields in fields_by_run:
        if not isinstance(fields, list):
            return None
        common = [f for f in (fields if common is None else common) if f in fields]
    return common[0] if common else None


# ---- the moved functions -----------------------------------------------------------------------
def _time() -> float:
    return (_real_time_ns() + offset) / 1e9


def _time_ns() -> int:
    return _real_time_ns() + offset


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


class _Real(type):
    """The replaced ``datetime`` classes accept the real classes' instances and subclasses."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls.real)  # type: ignore[attr-defined]

    def __subclasscheck__(cls, sub: Any) -> bool:
        return issubclass(sub, cls.real)  # type: ignore[attr-defined]


class date(RealDate, metaclass=_Real):  # noqa: N801 - stands in for datetime.date
    real = RealDate

    @classmethod
    def today(cls) -> Any:
        return cls.fromtimestamp(_time())


class datetime(RealDatetime, metaclass=_Real):  # noqa: N801 - stands in for datetime.datetime
    real = RealDatetime

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return cls.fromtimestamp(_time(), tz)

    @classmethod
    def utcnow(cls) -> Any:
        return cls.fromtimestamp(_time(), _datetime.timezone.utc).replace(tzinfo=None)

    @classmethod
    def today(cls) -> Any:
        return cls.fromtimestamp(_time())


for _cls in (date, datetime):
    _cls.__module__ = "datetime"
    _cls.__qualname__ = _cls.__name__


def _reduce_as(stand_in: type) -> Any:
    def reduce(obj: Any) -> Any:
        return (stand_in, obj.__reduce__()[1])

    return reduce


def install(run: int) -> int:
    """Move this process's wall clock by run ``run``'s shift; returns the shift (ns)."""
    global offset
    offset = shift_of(run)
    if offset == 0:
        return 0
    for name, moved in (("time", _time), ("time_ns", _time_ns), ("localtime", _localtime),
                        ("gmtime", _gmtime), ("ctime", _ctime), ("strftime", _strftime),
                        ("asctime", _asctime)):
        patches.PATCHES.replace("clock", time, name, moved)
    patches.PATCHES.replace("clock", _datetime, "datetime", datetime)
    patches.PATCHES.replace("clock", _datetime, "date", date)
    # pickle looks a real instance's class up as datetime.datetime, which is now the stand-in
    for real, stand_in in ((RealDatetime, datetime), (RealDate, date)):
        patches.PATCHES.replace("clock", copyreg.dispatch_table, real, _reduce_as(stand_in),
                                item=True, label=f"copyreg.dispatch_table[{real.__qualname__}]")
    return offset
