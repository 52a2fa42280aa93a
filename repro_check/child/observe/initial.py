"""The parameters going into step 1: the ``init`` signal of step 1.

A model built before the script seeds itself (the usual Hugging Face pattern: the model, then a
Trainer that calls ``set_seed``) starts from different parameters in each unseeded run, while the
RNG streams and the batch agree at step 1: without this signal the difference would first show in
the loss, and look like a nondeterministic computation. The parameters are fingerprinted before
the first optimizer step changes them (at its pre-hook, every optimizer made so far, in the order
they were made), or, without an optimizer, before the first backward call (the leaves it reaches).
The top-level models holding them are reported once, with where they were built, as
``{"info": {"models": [...], "shared_params": N}}`` (see :mod:`repro_check.child.observe.origin`),
N the number of those parameters in memory shared with other processes (Hogwild training),
written only when N > 0 so that the usual record keeps its shape.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from repro_check.child.observe import origin
from repro_check.trace import fingerprint

Emit = Callable[[dict[str, Any]], None]

#: the signal's name, placed right after the RNG signals of step 1
SIGNAL = "init"


def _params(optimizers: Iterable[Any]) -> Iterator[tuple[str, Any]]:
    """Every optimizer's parameters, named by optimizer, group and position (stable across runs)."""
    for k, optimizer in enumerate(optimizers):
        for g, group in enumerate(optimizer.param_groups):
            for i, p in enumerate(group["params"]):
                yield f"{k}.{g}.{i}", p


class InitialParams:
    """Takes the ``init`` fingerprint once, when step 1 reaches its first backward or optimizer
    step, and puts it into step 1's signals."""

    def __init__(self, emit: Emit, quiet: Callable[[], Any]) -> None:
        self.emit = emit
        self.quiet = quiet
        self.optimizers: list[Callable[[], Any]] = []
        self.value: Any = None
        self.taken = False

    def optimizer_made(self, optimizer: Any) -> None:
        try:
            self.optimizers.append(weakref.ref(optimizer))
        except TypeError:
            pass

    def before_optimizer_step(self, stepping: Any) -> None:
        """The first optimizer step is about to change the parameters: take them all."""
        if self.taken:
            return
        optimizers = [o for o in (ref() for ref in self.optimizers) if o is not None]
        if not any(o is stepping for o in optimizers):
            optimizers.append(stepping)
        self._take(list(_params(optimizers)))

    def before_backward(self, leaves: Iterable[Any]) -> None:
        """A first backward call without any optimizer: take the leaves it reaches."""
        if not self.taken:
            self._take([(str(i), leaf) for i, leaf in enumerate(leaves)])

    def _take(self, named: list[tuple[str, Any]]) -> None:
        self.taken = True
        if not named:
            return
        with self.quiet():
            self.value = fingerprint.tensors(named, defer=True)
        try:
            models = origin.SITES.models_holding(t for _, t in named)
        except Exception:  # noqa: BLE001 - where a model was built is a nicety
            models = []
        # parameters in shared memory (a model a spawned process was handed: no site of its
        # own here): other processes may update them while this one trains
        shared = sum(origin.shared_memory(t) for _, t in named)
        if models or shared:
            info: dict[str, Any] = {"models": models}
            if shared:  # only then: the record keeps its shape for the usual, unshared case
                info["shared_params"] = shared
            self.emit({"info": info})

    def place(self, signals: dict[str, Any]) -> dict[str, Any]:
        """Step 1's signals with ``init`` after the RNG signals (before the batch): the order in
        which a difference is named."""
        if self.value is None:
            return signals
        out: dict[str, Any] = {}
        for name, value in signals.items():
            if SIGNAL not in out and not name.startswith("rng."):
                out[SIGNAL] = self.value
            out[name] = value
        out.setdefault(SIGNAL, self.value)
        self.value = None
        return out
