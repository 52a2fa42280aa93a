"""Tolerance options as people write them (``--atol loss=1e-6``, ``atol = {loss = 1e-6}`` in
pyproject.toml) turned into a :class:`~repro_check.compare.steps.Policy`.

Each of ``atol``, ``rtol`` and ``ulps`` maps a name to a value; the name is a signal (``loss``),
``metric:NAME``, ``metric:*`` (every metric) or the default (a plain value, or the name
``default``). A name given for one of them takes the default's value for the others. Values are
exact bits unless one of them is set; a value passes when any tolerance set for its name accepts it.
"""

from __future__ import annotations

import difflib

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from repro_check.compare.steps import Policy
from repro_check.errors import UsageError
from repro_check.trace.values import Tolerance
from repro_check.trace import signals

DEFAULT = "default"
KINDS = ("atol", "rtol", "ulps")


def _number(kind: str, text: Any, where: str) -> float | int:
    if kind == "ulps":
        if isinstance(text, bool) or not isinstance(text, (int, str)):
            raise UsageError(f"{where}: expected a whole number of ulps, got {text!r}")
        try:
            n = int(text)
        except ValueError:
            raise UsageError(f"{where}: expected a whole number of ulps, got {text!r}") from None
        if n < 0:
            raise UsageError(f"{where}: must not be negative, got {n}")
        return n
    if isinstance(text, bool) or not isinstance(text, (int, float, str)):
        raise UsageError(f"{where}: expected a number, got {text!r}")
    try:
        x = float(text)
    except ValueError:
        raise UsageError(f"{where}: expected a number, got {text!r}") from None
    except OverflowError:  # an integer too large for a float
        raise UsageError(f"{where}: must be a finite number >= 0, got an integer of "
                         f"{int(text).bit_length()} bits") from None
    if math.isnan(x) or math.isinf(x) or x < 0:
        raise UsageError(f"{where}: must be a finite number >= 0, got {text!r}")
    return x


def _name(name: str, where: str) -> str:
    name = name.strip()
    if name in ("", "*", DEFAULT):
        return DEFAULT
    if name == "metric:" or name.startswith(":") or any(c.isspace() for c in name):
        raise UsageError(f"{where}: invalid name {name!r} (a signal like loss, metric:NAME or "
                         "metric:*)")
    if not name.startswith("metric:") and name not in SIGNALS:
        close = difflib.get_close_matches(name, SIGNALS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(f"{where}: unknown signal {name!r}{hint}; a tolerance names one of "
                         f"{', '.join(SIGNALS)}, metric:NAME or metric:*")
    return name


def parse_cli(kind: str, items: Iterable[str] | None) -> dict[str, float | int]:
    """``["1e-6", "loss=1e-5", "metric:accuracy=1e-3"]`` -> ``{"default": 1e-6, "loss": ...}``."""
    out: dict[str, float | int] = {}
    for item in items or ():
        name, sep, value = str(item).rpartition("=")
        where = f"--{kind} {item}"
        key = _name(name, where) if sep else DEFAULT
        out[key] = _number(kind, value, where)
    return out


def parse_config(kind: str, value: Any, where: str) -> dict[str, float | int]:
    """A number (the default) or a table of name = number, from pyproject.toml."""
    if isinstance(value, Mapping):
        return {_name(str(k), f"{where}.{k}"): _number(kind, v, f"{where}.{k}")
                for k, v in value.items()}
    return {DEFAULT: _number(kind, value, where)}


@dataclass
class ToleranceOptions:
    """Tolerances by name, plus how a golden's band is used."""

    atol: dict[str, float | int] = field(default_factory=dict)
    rtol: dict[str, float | int] = field(default_factory=dict)
    ulps: dict[str, float | int] = field(default_factory=dict)
    band_widen: float | None = None
    use_band: bool | None = None
    signals: tuple[str, ...] | None = None

    def merged(self, over: ToleranceOptions) -> ToleranceOptions:
        """These options with ``over``'s taking precedence (the command line over the config)."""
        return ToleranceOptions(
            {**self.atol, **over.atol}, {**self.rtol, **over.rtol}, {**self.ulps, **over.ulps},
            over.band_widen if over.band_widen is not None else self.band_widen,
            over.use_band if over.use_band is not None else self.use_band,
            over.signals if over.signals is not None else self.signals,
        )

    def policy(self) -> Policy:
        if self.band_widen is not None and (math.isnan(self.band_widen) or self.band_widen < 1):
            raise UsageError(f"--band-widen must be a number >= 1, got {self.band_widen}")
        default = Tolerance(float(self.atol.get(DEFAULT, 0.0)), float(self.rtol.get(DEFAULT, 0.0)),
                            int(self.ulps.get(DEFAULT, 0)))
        names = [n for d in (self.atol, self.rtol, self.ulps) for n in d if n != DEFAULT]
        per_name = {
            n: Tolerance(float(self.atol.get(n, default.atol)), float(self.rtol.get(n, default.rtol)),
                         int(self.ulps.get(n, default.ulps)))
            for n in dict.fromkeys(names)
        }
        return Policy(default, per_name, band_widen=self.band_widen or 1.0,
                      use_band=self.use_band is not False,
                      signals=frozenset(self.signals) if self.signals is not None else None)

    def to_args(self) -> list[str]:
        """The command-line flags that give these options (for replay lines)."""
        out: list[str] = []
        for kind in KINDS:
            for name, value in getattr(self, kind).items():
                text = f"{value:g}" if isinstance(value, float) else str(value)
                out += [f"--{kind}", text if name == DEFAULT else f"{name}={text}"]
        if self.band_widen is not None and self.band_widen != 1.0:
            out += ["--band-widen", f"{self.band_widen:g}"]
        if self.use_band is False:
            out.append("--no-band")
        if self.signals is not None:
            out += ["--signals", ",".join(self.signals)]
        return out


#: what ``--signals`` may name (``rng`` stands for every ``rng.*`` stream)
SIGNALS: tuple[str, ...] = (signals.RNG, *signals.STEP_SIGNALS)


def parse_signals(text: str | None) -> tuple[str, ...] | None:
    """``--signals loss,grads``: compare only these per-step signals (metrics always count)."""
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    for n in names:
        if n not in SIGNALS:
            close = difflib.get_close_matches(n, SIGNALS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(f"--signals: unknown signal {n!r}{hint}; signals: {', '.join(SIGNALS)}")
    if not names:
        raise UsageError("--signals needs at least one signal name")
    return names


def from_cli(atol: Iterable[str] | None = None, rtol: Iterable[str] | None = None,
             ulps: Iterable[str] | None = None, band_widen: float | None = None,
             no_band: bool = False, signals: str | None = None) -> ToleranceOptions:
    return ToleranceOptions(parse_cli("atol", atol), parse_cli("rtol", rtol),
                            parse_cli("ulps", ulps), band_widen, False if no_band else None,
                            parse_signals(signals))
