"""Each run's wall clock, moved by a fixed amount per run, so a seed taken from the clock differs
between runs every time.

Runs that go in parallel usually start within the same second, so
``torch.manual_seed(int(time.time()))`` would give them the same seed and the verdict would
depend on when they happened to start. Run K sees the wall clock moved forward by
``(K - 1) * SHIFT_NS``: one day, 7 seconds and 1,234,567 nanoseconds per run, so whole seconds,
milliseconds, microseconds, nanoseconds, the date and the time of day all differ between runs.
Run 1 sees the real clock.

What is moved: ``time.time``, ``time.time_ns``, ``time.localtime``/``gmtime``/``ctime``/
``strftime``/``asctime`` without a time argument, ``datetime.datetime.now``/``utcnow``/``today``
and ``datetime.date.today`` (the two classes are replaced by subclasses that accept every real
instance in ``isinstance`` and pickle as the real ones). Durations (``time.monotonic``,
``time.perf_counter``, ``time.process_time``) and the clock of code that took ``datetime`` before
the run started (torch) are not moved. Processes started fresh by the run (a ``spawn``
DataLoader worker) see the real clock.

:func:`clock_unit` says whether a value is the current (moved) time in seconds, milliseconds,
microseconds or nanoseconds, give or take a day: the seeding watch calls such a seed "seeded
from the clock".
"""

from __future__ import annotations

import copyreg
import datetime as _datetime
import time
from typing import Any

DAY_NS = 86_400 * 10**9
#: how much further each run's clock is moved than the run before it
SHIFT_NS = DAY_NS + 7 * 10**9 + 1_234_567
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
    time.time = _time
    time.time_ns = _time_ns
    time.localtime = _localtime
    time.gmtime = _gmtime
    time.ctime = _ctime
    time.strftime = _strftime
    time.asctime = _asctime
    _datetime.datetime = datetime  # type: ignore[misc]
    _datetime.date = date  # type: ignore[misc]
    # pickle looks a real instance's class up as datetime.datetime, which is now the stand-in
    copyreg.pickle(RealDatetime, _reduce_as(datetime))
    copyreg.pickle(RealDate, _reduce_as(date))
    return offset
