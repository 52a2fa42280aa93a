"""Notices, inside a run, when the target overrides a seeding component itself.

A script that sets ``torch.backends.cudnn.benchmark = True``, reseeds torch (from the clock, or
with ``torch.seed()``), changes the thread count or turns deterministic algorithms off undoes what
repro-check set up, and the runs may differ for a reason the user does not see. The settings are
compared with what seeding applied after every recorded step and when the target returns; calls
that reseed a generator are observed as they happen. Each override is reported once a run as
``{"warning": text, "component": name, "key": what, "value": seen}``, so the report can also tell
a constant reseed from one that differs between runs (the clock, OS entropy).
"""

from __future__ import annotations

import functools
import math
import os
import random
import sys
from collections.abc import Callable
from typing import Any

Emit = Callable[[dict[str, Any]], None]


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
    """Reports the seeding components (of those ``applied``) that the target overrides."""

    def __init__(self, emit: Emit, applied: dict[str, Any], seed: int | None) -> None:
        self.emit = emit
        self.applied = applied
        self.seed = seed
        self.reported: set[str] = set()
        self.pid = os.getpid()
        #: the torch seed the default generator is expected to have (changes with torch.seed())
        self.torch_seed = seed

    def warn(self, component: str, key: str, value: Any, text: str) -> None:
        if key in self.reported or os.getpid() != self.pid:
            return  # once a run; never from a forked DataLoader worker
        self.reported.add(key)
        self.emit({"warning": f"{text} (overrides seeding component {component!r})",
                   "component": component, "key": key, "value": _plain(value)})

    # ---- reseeding calls -----------------------------------------------------------------
    def install(self) -> SeedingWatch:
        if self.seed is None:
            return self
        if "torch" in self.applied:
            self._wrap_torch_seed()
        if "python" in self.applied:
            random.seed = self._wrap_seed_call(random.seed, "python", "random.seed",
                                               "Python's random")  # type: ignore[assignment]
        if "numpy" in self.applied and "numpy" in sys.modules:
            np_random = sys.modules["numpy"].random
            np_random.seed = self._wrap_seed_call(np_random.seed, "numpy", "numpy.random.seed",
                                                  "numpy's global generator")
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
                self.warn("torch", "torch.seed", value,
                          f"the target reseeded torch from OS entropy with torch.seed() (seed {value})")
            return value

        torch.random.seed = seed
        torch.seed = seed

    def _wrap_seed_call(self, original: Callable[..., Any], component: str, key: str,
                        what: str) -> Callable[..., Any]:
        @functools.wraps(original)
        def seed(*args: Any, **kwargs: Any) -> Any:
            value = args[0] if args else kwargs.get("a", kwargs.get("seed"))
            try:
                same = bool(value == self.seed)
            except Exception:  # noqa: BLE001 - e.g. an array as the seed
                same = False
            if value is None:
                self.warn(component, key, None, f"the target reseeded {what} from OS entropy "
                                                f"({key}() without a seed)")
            elif not same:
                self.warn(component, key, value,
                          f"the target reseeded {what} itself ({key}({_plain(value)!r}))")
            return original(*args, **kwargs)

        return seed

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
    """Overrides whose value differs between runs: the target seeds from the clock or entropy."""
    seen: dict[str, dict[int, Any]] = {}
    component: dict[str, str] = {}
    for run, records in overrides_by_run.items():
        for rec in records:
            key = rec.get("key")
            if isinstance(key, str):
                seen.setdefault(key, {})[run] = rec.get("value")
                component[key] = str(rec.get("component"))
    notes = []
    for key, by_run in seen.items():
        if len(by_run) > 1 and len({repr(v) for v in by_run.values()}) > 1:
            shown = ", ".join(f"run {r}: {v}" for r, v in sorted(by_run.items()))
            notes.append(f"{component[key]} was reseeded differently in each run ({key}; {shown}): "
                         "the target seeds it from the clock or OS entropy, so the runs cannot agree")
    return notes
