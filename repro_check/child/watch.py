"""Notices, inside a run, when the target seeds or reseeds a generator itself, or undoes a setting.

A script that sets ``torch.backends.cudnn.benchmark = True``, reseeds torch (from the clock, or
with ``torch.seed()``), changes the thread count or turns deterministic algorithms off undoes what
repro-check set up, and the runs may differ for a reason the user does not see. The settings are
compared with what seeding applied after every recorded step and when the target returns; calls
that seed a global generator (``torch.manual_seed``, ``torch.seed``, ``random.seed``,
``numpy.random.seed``) are observed as they happen, whether or not repro-check seeded that stream
(``--no-seed``, ``--without``): a script that seeds itself is reported too. Each is reported once
a run as ``{"warning": text, "component": name, "key": what, "value": seen, "where": file:line,
"source": ..., "order": n}``, so the report can also tell a constant seed from one that differs
between runs. ``source`` says where a seed came from when that can be seen: ``"clock"`` (the
value is the current time, see :mod:`repro_check.child.clock`), ``"entropy"`` (no value: OS
entropy), ``"unseeded python"``/``"unseeded numpy"`` (that stream had been drawn from without a
seed before the call, as ``seed = random.randint(...)`` does). ``order`` places the call among
model constructions (:mod:`repro_check.child.origin`).
"""

from __future__ import annotations

import functools
import math
import os
import random
import sys
from collections.abc import Callable
from typing import Any

from repro_check.child import clock, origin, rngstate
from repro_check.child.seeding import STREAM_NAMES

Emit = Callable[[dict[str, Any]], None]

#: the streams whose unseeded draws can be seen (their state before any seeding is entropy)
_DRAWN = {"python": rngstate.python_state, "numpy": rngstate.numpy_state}


def _plain(value: Any) -> Any:
    """A JSON-safe form of an observed value."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value if not isinstance(value, str) else value[:200]
    if isinstance(value, int):
        return value if abs(value) < 2**63 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return repr(value)[:200]


class SeedingWatch:
    """Reports the seeding components (of those ``applied``) that the target overrides, and the
    global generators it seeds itself."""

    def __init__(self, emit: Emit, applied: dict[str, Any], seed: int | None) -> None:
        self.emit = emit
        self.applied = applied if seed is not None else {}
        self.seed = seed
        self.reported: set[str] = set()
        self.pid = os.getpid()
        #: the torch seed the default generator is expected to have (changes with torch.seed())
        self.torch_seed = seed
        #: streams whose state follows from a seed (repro-check's, or a constant of the script's)
        self.determined = {c for c in STREAM_NAMES if c in self.applied}
        self.at_install = {name: state() for name, state in _DRAWN.items()}
        #: unseeded streams seen drawn from, in the order seen (a seed may have come from them)
        self.drawn: list[str] = []

    def warn(self, component: str, key: str, value: Any, text: str, *, where: str | None = None,
             source: str | None = None, once: str | None = None, override: bool = True) -> None:
        once = once or key
        if once in self.reported or os.getpid() != self.pid:
            return  # once a run; never from a forked DataLoader worker
        self.reported.add(once)
        if override:
            text = f"{text} (overrides seeding component {component!r})"
        record = {"warning": text, "component": component, "key": key, "value": _plain(value),
                  "order": origin.tick()}
        if where:
            record["where"] = where
        if source:
            record["source"] = source
        self.emit(record)

    # ---- seeding calls -------------------------------------------------------------------
    def install(self) -> SeedingWatch:
        self._wrap_torch_seed()
        self._wrap_torch_manual_seed()
        random.seed = self._wrap_seed_call(  # type: ignore[assignment]
            random.seed, "python", "random.seed")
        np = sys.modules.get("numpy")
        if np is not None and hasattr(np, "random"):
            np.random.seed = self._wrap_seed_call(np.random.seed, "numpy", "numpy.random.seed")
        return self

    def _wrap_torch_seed(self) -> None:
        import torch
        import torch.random

        original = torch.random.seed

        @functools.wraps(original)
        def seed() -> int:
            value = original()
            if os.getpid() == self.pid:
                self.torch_seed = value
                self.determined.discard("torch")
                where = origin.caller()
                at = f" at {where}" if where else ""
                applied = "torch" in self.applied
                self.warn("torch", "torch.seed", value,
                          f"the target {'re' if applied else ''}seeded torch from OS entropy with "
                          f"torch.seed() (seed {value}{at})",
                          where=where, source="entropy", override=applied)
            return value

        torch.random.seed = seed
        torch.seed = seed

    def _wrap_torch_manual_seed(self) -> None:
        import torch
        import torch.random

        original = torch.random.manual_seed

        @functools.wraps(original)
        def manual_seed(seed: Any) -> Any:
            if os.getpid() != self.pid:
                return original(seed)
            hint = self._unseeded_draws()
            result = original(seed)
            self.torch_seed = torch.initial_seed()
            self.seen("torch", "torch.manual_seed", seed, origin.caller(), hint)
            return result

        torch.random.manual_seed = manual_seed
        torch.manual_seed = manual_seed

    def _wrap_seed_call(self, original: Callable[..., Any], component: str,
                        key: str) -> Callable[..., Any]:
        @functools.wraps(original)
        def seed(*args: Any, **kwargs: Any) -> Any:
            if os.getpid() != self.pid:
                return original(*args, **kwargs)
            value = args[0] if args else kwargs.get("a", kwargs.get("seed"))
            hint = self._unseeded_draws()
            result = original(*args, **kwargs)
            self._reseeded(component)
            self.seen(component, key, value, origin.caller(), hint)
            return result

        return seed

    def _unseeded_draws(self) -> list[str]:
        """The streams seen drawn from without any seed, so far (a seed taken from one differs
        in every run)."""
        for name, state in _DRAWN.items():
            before = self.at_install.get(name)
            if name in self.determined or name in self.drawn or before is None:
                continue
            try:
                if state() != before:
                    self.drawn.append(name)
            except Exception:  # noqa: BLE001 - a stream that cannot be read says nothing
                continue
        return list(self.drawn)

    def _reseeded(self, component: str) -> None:
        """Draws from a stream count from its last seeding on."""
        state = _DRAWN.get(component)
        if state is not None and self.at_install.get(component) is not None:
            try:
                self.at_install[component] = state()
            except Exception:  # noqa: BLE001
                pass

    def seen(self, component: str, key: str, value: Any, where: str | None,
             drawn: list[str]) -> None:
        """A call seeding ``component``'s stream with ``value`` (None: OS entropy)."""
        applied = component in self.applied
        what = STREAM_NAMES[component]
        shown = f"{key}({_plain(value)!r})" if value is not None else f"{key}()"
        at = f" at {where}" if where else ""
        unit = clock.clock_unit(value) if value is not None else None
        if unit is not None:
            self.determined.discard(component)
            self.warn(component, key, value,
                      f"the target seeded {what} from the clock ({key}{at}: the seed is the current "
                      f"time in {unit}), so every run gets another seed (each run's clock is moved "
                      "by a day and some seconds, so that runs started in the same second differ "
                      "too)",
                      where=where, source="clock", once=f"{key}:clock", override=applied)
            return
        if value is None:
            self.determined.discard(component)
            self.warn(component, key, None, f"the target {'re' if applied else ''}seeded {what} "
                                            f"from OS entropy ({key}() without a seed{at})",
                      where=where, source="entropy", override=applied)
            return
        try:
            same = applied and bool(value == self.seed)
        except Exception:  # noqa: BLE001 - e.g. an array as the seed
            same = False
        if same:
            return
        source = f"unseeded {drawn[0]}" if drawn else None
        if drawn:
            self.determined.discard(component)
            shown = key  # its value differs in every run: one line for all runs
            names = " and ".join(STREAM_NAMES[d] for d in drawn)
            hint = (f"; {names} had been drawn from without a seed before this call: a seed "
                    "taken from it (random.randint, np.random.randint) differs in every run")
        else:
            hint = ""
            self.determined.add(component)
        verb = "reseeded" if applied else "seeds"
        instead = f", not --seed {self.seed}" if applied else ""
        self.warn(component, key, value,
                  f"the target {verb} {what} itself ({shown}{at}{instead}){hint}",
                  where=where, source=source, override=applied)

    # ---- settings ------------------------------------------------------------------------
    def check(self) -> None:
        """Compare the current settings with what seeding applied (cheap: a few flag reads)."""
        if self.seed is None or os.getpid() != self.pid:
            return
        import torch

        on = self.applied
        if "torch" in on:
            current = torch.initial_seed()
            if current != self.torch_seed:
                self.warn("torch", "torch.manual_seed", current,
                          f"the target reseeded torch itself (its seed is {current}, not --seed "
                          f"{self.seed})")
        if "cudnn" in on:
            if torch.backends.cudnn.benchmark:
                self.warn("cudnn", "cudnn.benchmark", True,
                          "the target set torch.backends.cudnn.benchmark = True: cuDNN autotuning can "
                          "pick different kernels in each run")
            if not torch.backends.cudnn.deterministic:
                self.warn("cudnn", "cudnn.deterministic", False,
                          "the target set torch.backends.cudnn.deterministic = False")
        if "deterministic_algorithms" in on and not torch.are_deterministic_algorithms_enabled():
            self.warn("deterministic_algorithms", "use_deterministic_algorithms", False,
                      "the target turned deterministic algorithms off "
                      "(torch.use_deterministic_algorithms(False))")
        threads = on.get("threads")
        if isinstance(threads, int) and torch.get_num_threads() != threads:
            n = torch.get_num_threads()
            self.warn("threads", "set_num_threads", n,
                      f"the target changed torch's thread count to {n} (repro-check set {threads}; "
                      "the thread count changes result bits)")


def cross_run_notes(overrides_by_run: dict[int, list[dict[str, Any]]]) -> list[str]:
    """Seeds whose value differs between runs: the target seeds from the clock, OS entropy or an
    unseeded stream, so the runs cannot agree."""
    seen: dict[str, dict[int, Any]] = {}
    first: dict[str, dict[str, Any]] = {}
    for run, records in sorted(overrides_by_run.items()):
        for rec in records:
            key = rec.get("key")
            if isinstance(key, str):
                seen.setdefault(key, {}).setdefault(run, rec.get("value"))
                first.setdefault(key, rec)
    notes = []
    for key, by_run in seen.items():
        if len(by_run) > 1 and len({repr(v) for v in by_run.values()}) > 1:
            rec = first[key]
            shown = ", ".join(f"run {r}: {v}" for r, v in sorted(by_run.items()))
            at = f" at {rec['where']}" if rec.get("where") else ""
            whence = {"clock": "from the clock", "entropy": "from OS entropy"}.get(
                str(rec.get("source")), "from the clock, OS entropy or an unseeded stream")
            notes.append(f"{rec.get('component')} was reseeded differently in each run ({key}{at}; "
                         f"{shown}): the target seeds it {whence}, so the runs cannot agree")
    return notes
