"""What a captured step costs, part by part, measured inside the run: for ``make bench``.

The bench compares whole runs, captured and bare; this says where the difference goes. With
``REPRO_CHECK_CAPTURE_COSTS=FILE`` in its environment, a run times each part of the capture that
it calls every step (the function that does it, wrapped once before the capture is installed)
and writes, as it ends, ``{"parts": {name: {"calls": n, "seconds": s}}, "steps": N}`` to FILE
as JSON (atomically; the other runs of a check write beside it, see :func:`path_of`). The
timer's own cost (two clock reads a call, well under a microsecond) is counted in its part. Without the variable nothing is wrapped and a run pays nothing.

Parts may hold others: ``step record`` (what runs after the optimizer's step) holds
``parameters``, ``rng states`` and most of ``emission``.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any

from repro_check.errors import ReproCheckError
from repro_check.trace.atomic import write_text_atomic

#: the variable naming the file the costs go to
COSTS_VAR = "REPRO_CHECK_CAPTURE_COSTS"


@dataclass(frozen=True)
class Part:
    """One timed part: a name for the bench's table and the function that does it."""

    name: str
    module: str
    qualname: str


#: the capture's per-step work, in the order the bench prints it
PARTS: tuple[Part, ...] = (
    Part("batch", "repro_check.child.observe.capture", "Recorder.on_batch"),
    Part("backward hook", "repro_check.child.observe.capture", "Recorder.on_backward"),
    Part("gradients", "repro_check.child.observe.capture", "Recorder.on_optimizer_step"),
    Part("optimizer state and lr", "repro_check.child.observe.checkpoint",
         "OptimizerSignals.pre_step"),
    Part("step record", "repro_check.child.observe.capture", "Recorder.on_optimizer_stepped"),
    Part("parameters", "repro_check.child.observe.capture", "Recorder.params_fingerprint"),
    Part("rng states", "repro_check.child.seeding.rngstate", "signals"),
    Part("emission", "repro_check.child.process.emit", "Emitter.__call__"),
)


class Costs:
    """The parts' calls and seconds, kept while the run goes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.totals: dict[str, list[float]] = {}

    def install(self, parts: tuple[Part, ...] = PARTS) -> None:
        """Wrap each part's function where it is looked up (its class or module)."""
        for part in parts:
            owner: Any = importlib.import_module(part.module)
            *outer, attr = part.qualname.split(".")
            for name in outer:
                owner = getattr(owner, name)
            setattr(owner, attr, self._timed(part.name, getattr(owner, attr)))

    def _timed(self, name: str, func: Any) -> Any:
        entry = self.totals.setdefault(name, [0, 0.0])
        clock = time.perf_counter

        @functools.wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return func(*args, **kwargs)
            finally:
                entry[0] += 1
                entry[1] += clock() - start

        return timed

    def write(self, steps: int) -> None:
        """The totals to the file, written whole or not at all."""
        data = {"steps": steps, "parts": {name: {"calls": int(calls), "seconds": seconds}
                                          for name, (calls, seconds) in self.totals.items()}}
        try:
            write_text_atomic(self.path, json.dumps(data))
        except (OSError, ReproCheckError):  # a measurement aid: never fail the run over it
            pass


def path_of(path: str, run: int, control: bool, rank: str | None) -> str:
    """Where one run's costs go: FILE itself for run 1 (what ``record`` and the bench start),
    ``FILE`` with ``.run-K``, ``.control`` or ``.rank-R`` before its extension for the others,
    so that the runs of one check do not write over each other."""
    parts = ["control"] if control else [f"run-{run}"] if run != 1 else []
    if rank is not None:
        parts.append(f"rank-{rank}")
    if not parts:
        return path
    root, ext = os.path.splitext(path)
    return f"{root}.{'.'.join(parts)}{ext}"


def from_environment(run: int, control: bool = False, rank: str | None = None) -> Costs | None:
    """The costs to keep when the run's environment asks for them (the variable is dropped,
    so that processes the target starts do not write the same file)."""
    path = os.environ.pop(COSTS_VAR, None)
    if not path:
        return None
    costs = Costs(path_of(path, run, control, rank))
    costs.install()
    return costs
