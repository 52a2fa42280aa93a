"""Step capture inside a run, on unmodified training code.

Installs PyTorch's global optimizer step hooks and thin wrappers around
``torch.autograd.backward`` (which ``Tensor.backward`` calls) and the DataLoader iterator's
``__next__``, so every optimizer step of any script is recorded without an import of repro-check
in user code. Step N is the N-th optimizer step; a run that builds no optimizer counts backward
calls instead.

A step's signals, in the order the step happens:

``rng.python``, ``rng.numpy``, ``rng.torch``, ``rng.cuda``
    fingerprints of the global RNG streams' states when the step starts: right after the previous
    step was recorded; for step 1, at the first DataLoader fetch, backward call or optimizer step
    of the run, whichever comes first (so after the script's own seeding, if it seeds itself).
    A stream is recorded from the first step by whose end the run has drawn from it (its state
    moved since the recorder was installed, after seeding): the unseeded state of a stream that
    nothing uses changes no result and is no divergence.
``batch``
    the fingerprint of everything the DataLoader iterators yielded since the previous step, in
    order (several fetches for gradient accumulation combine); absent when nothing was fetched.
``loss``
    the scalar on which backward was last called, exactly. It is kept as a device tensor and
    turned into bits in batches, so a GPU run is not synchronised for it at every step.
``grads``
    the gradients of the optimizer's parameters before its step; without an optimizer, the
    gradients of the leaf tensors the backward call reached.
``params``
    the optimizer's parameters after its step (absent without an optimizer: a hand-written
    update happens after the backward call that ends the step, out of sight).

For the progress display, when a DataLoader of known length starts an epoch, the steps expected
by the end of it are emitted as ``{"info": {"expected_steps": N}}``. The loader that counts is the
one being iterated when steps happen, so an evaluation loader does not move the expectation.
"""

from __future__ import annotations

import contextlib
import functools
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from repro_check.trace import fingerprint
from repro_check.child import rngstate
from repro_check.trace import values

Emit = Callable[[dict[str, Any]], None]


class StopTraining(BaseException):
    """Raised from the step hook when ``--max-steps`` is reached.

    A BaseException, so that a training loop's ``except Exception`` does not swallow it.
    """


#: the recorder of this process, when it runs under repro-check
_ACTIVE: Recorder | None = None


def log_metric(name: str, value: Any) -> Any:
    """Record a final metric (e.g. accuracy) of a script that prints instead of returning it.

    Outside repro-check this does nothing. Returns ``value`` so it can wrap an expression.
    """
    if _ACTIVE is not None:
        _ACTIVE.metric(str(name), value)
    return value


#: what ``_quiet`` returns when no probe is armed (reusable)
_NO_PROBE = contextlib.nullcontext()

#: the text PyTorch's warn-only deterministic mode puts after the op's name
NONDETERMINISTIC_ALERT = " does not have a deterministic implementation"


def _weak(obj: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: None


def _finished(iterator_ref: Callable[[], Any], length: int) -> bool:
    """Whether a DataLoader iterator is gone or has yielded all its batches."""
    it = iterator_ref()
    return it is None or getattr(it, "_num_yielded", 0) >= length


class Recorder:
    """Counts steps, fingerprints each step's signals, and emits one trace record a step.

    ``probe_step``: arm a :class:`~repro_check.child.probe.StepProbe` for that step only.
    ``flag_ops``: report the ops PyTorch's warn-only deterministic mode warns about, each once,
    with the step it first ran at.
    """

    #: steps held on a device (losses, fingerprints) go to the host this many at a time...
    FLUSH_EVERY = 64
    #: ...or once the oldest has waited this long (seconds), so slow steps still stream
    FLUSH_SECONDS = 0.5

    def __init__(self, emit: Emit, max_steps: int | None = None, probe_step: int | None = None,
                 flag_ops: bool = False) -> None:
        self.emit = emit
        self.max_steps = max_steps
        self.step = 0
        self.backward_calls = 0
        self.optimizers_made = 0
        self.last_loss: Any = None
        self.metrics: dict[str, Any] = {}
        self.flagged: dict[str, int] = {}
        self.probe_step = probe_step
        self.flag_ops = flag_ops
        self.probe: Any = None
        self._cuda = False
        self._rng: dict[str, Any] | None = None
        self._rng_at_install: dict[str, Any] = {}
        self._rng_live: set[str] = set()
        self._batch: Any = None
        self._grads: fingerprint.Fingerprint | None = None
        self._pending: list[tuple[int, dict[str, Any], Any]] = []
        self._pending_since = 0.0
        self._handles: list[Any] = []
        self._undo: list[Callable[[], None]] = []
        self.expected_steps: int | None = None
        # the epoch started last and the training loader's: (loader, iterator, first step, len),
        # loader and iterator as weak references
        self._epoch: tuple[Any, Any, int, int] | None = None
        self._train: tuple[Any, Any, int, int] | None = None
        self._epoch_seen_step = True
        #: called after every recorded step (e.g. to notice settings the target changed)
        self.watchers: list[Callable[[], None]] = []

    # ---- installing ----------------------------------------------------------------------
    def install(self) -> Recorder:
        global _ACTIVE
        import torch
        import torch.autograd
        from torch.optim.optimizer import (
            Optimizer,
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )
        from torch.utils.data import dataloader

        self._cuda = rngstate.cuda_available()
        self._rng_at_install = rngstate.signals(self._cuda)
        self._handles.append(register_optimizer_step_pre_hook(self._before_optimizer_step))
        self._handles.append(register_optimizer_step_post_hook(self._after_optimizer_step))

        original_backward = torch.autograd.backward

        @functools.wraps(original_backward)
        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            self._step_starts()
            leaves = None
            if self.optimizers_made == 0:
                inputs = kwargs.get("inputs", args[4] if len(args) > 4 else None)
                with self._quiet():
                    leaves = _leaves(tensors, inputs)
            probe = self.probe
            if probe is not None:
                probe.phase = "backward"
            try:
                result = original_backward(tensors, *args, **kwargs)
            finally:
                if probe is not None:
                    probe.phase = "forward"
            self._after_backward(tensors, leaves)
            return result

        torch.autograd.backward = backward
        self._undo.append(lambda: setattr(torch.autograd, "backward", original_backward))

        iterator_cls = dataloader._BaseDataLoaderIter
        original_next = iterator_cls.__next__

        @functools.wraps(original_next)
        def __next__(it: Any) -> Any:
            self._step_starts()
            probe = self.probe
            before = probe.phase if probe is not None else None
            if probe is not None:
                probe.phase = "data"
            try:
                item = original_next(it)
            finally:
                if probe is not None:
                    probe.phase = before
            self._add_batch(item)
            return item

        iterator_cls.__next__ = __next__  # type: ignore[method-assign]
        self._undo.append(lambda: setattr(iterator_cls, "__next__", original_next))

        original_init = Optimizer.__init__

        @functools.wraps(original_init)
        def optimizer_init(opt: Any, *args: Any, **kwargs: Any) -> None:
            self.optimizers_made += 1
            original_init(opt, *args, **kwargs)

        Optimizer.__init__ = optimizer_init  # type: ignore[method-assign]
        self._undo.append(lambda: setattr(Optimizer, "__init__", original_init))
        if self.flag_ops:
            self._capture_alerts()
        if self.probe_step is not None:
            from repro_check.child.probe import StepProbe

            self.probe = StepProbe(self.emit)
            if self.probe_step == 1:
                self.probe.arm(1)
        self._watch_loaders()
        _ACTIVE = self
        return self

    def _watch_loaders(self) -> None:
        from torch.utils.data import DataLoader

        original_iter = DataLoader.__iter__

        @functools.wraps(original_iter)
        def loader_iter(loader: Any) -> Any:
            it = original_iter(loader)
            try:
                self._epoch_started(loader, it)
            except Exception:  # noqa: BLE001 - progress is a nicety; never break the target
                pass
            return it

        DataLoader.__iter__ = loader_iter  # type: ignore[method-assign]
        self._undo.append(lambda: setattr(DataLoader, "__iter__", original_iter))

    def _capture_alerts(self) -> None:
        """Turn PyTorch's nondeterminism warnings into ``{"flagged": ...}`` records.

        Hooks ``warnings._showwarnmsg``, through which every shown warning passes whatever the
        script does with ``showwarning`` or ``catch_warnings``; a filter in front makes every
        occurrence reach it, and each op is recorded (and shown) once.
        """
        import warnings

        warnings.filterwarnings("always", message=".*" + NONDETERMINISTIC_ALERT)
        attr = "_showwarnmsg" if hasattr(warnings, "_showwarnmsg") else "showwarning"
        original = getattr(warnings, attr)

        def show(*args: Any, **kwargs: Any) -> Any:
            msg = args[0] if attr == "_showwarnmsg" else None
            text = str(msg.message if msg is not None else args[0])
            if NONDETERMINISTIC_ALERT in text:
                op = text.split(NONDETERMINISTIC_ALERT)[0].strip()
                if op in self.flagged:
                    return None
                self.flagged[op] = self.step + 1
                fallback = f"{msg.filename}:{msg.lineno}" if msg is not None else None
                self.emit({"flagged": {"op": op, "step": self.step + 1,
                                       "where": _caller() or fallback}})
            return original(*args, **kwargs)

        setattr(warnings, attr, show)
        self._undo.append(lambda: setattr(warnings, attr, original))

    def uninstall(self) -> None:
        global _ACTIVE
        if self.probe is not None:
            self.probe.disarm()
        for h in self._handles:
            h.remove()
        for undo in reversed(self._undo):
            undo()
        self._handles.clear()
        self._undo.clear()
        if _ACTIVE is self:
            _ACTIVE = None

    # ---- hooks ---------------------------------------------------------------------------
    def _quiet(self) -> Any:
        """Our own tensor work is kept out of the step probe's op record."""
        return self.probe.quiet() if self.probe is not None else _NO_PROBE

    def _step_starts(self) -> None:
        """Take the RNG states of the step in progress, unless already taken."""
        if self._rng is None:
            with self._quiet():
                self._rng = rngstate.signals(self._cuda)

    def _add_batch(self, item: Any) -> None:
        with self._quiet():
            if self._batch is None:
                self._batch = []
            self._batch.append(fingerprint.nested(item, defer=True))

    def _after_backward(self, tensors: Any, leaves: list[Any] | None) -> None:
        self.backward_calls += 1
        t = tensors[0] if isinstance(tensors, (tuple, list)) and len(tensors) == 1 else tensors
        try:
            if t.numel() == 1:
                self.last_loss = t.detach().clone()
        except AttributeError:
            pass
        if self.optimizers_made == 0:
            grads = None
            if leaves:
                with self._quiet():
                    grads = fingerprint.tensors(((str(i), leaf.grad) for i, leaf in enumerate(leaves)),
                                                defer=True)
            self._record_step(grads, None)

    def _before_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._step_starts()
        with self._quiet():
            self._grads = fingerprint.tensors(
                ((name, p.grad) for name, p in _optimizer_params(optimizer)), defer=True)
        if self.probe is not None:
            self.probe.phase = "optimizer"

    def _after_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.probe is not None:
            self.probe.phase = "forward"
        with self._quiet():
            params = self._params_fingerprint(optimizer)
        grads, self._grads = self._grads, None
        self._record_step(grads, params)

    def _params_fingerprint(self, optimizer: Any) -> fingerprint.Fingerprint:
        """The ``params`` signal after an optimizer step: the parameters it updates."""
        return fingerprint.tensors(_optimizer_params(optimizer), defer=True)

    # ---- expected steps (progress) --------------------------------------------------------
    def _epoch_started(self, loader: Any, it: Any) -> None:
        try:
            n = len(loader)
        except Exception:  # noqa: BLE001 - an IterableDataset without a length
            return
        if not isinstance(n, int) or n <= 0:
            return
        epoch = (_weak(loader), _weak(it), self.step, n)
        self._epoch, self._epoch_seen_step = epoch, False
        train = self._train[0]() if self._train is not None else None
        if train is loader:
            self._train = epoch
        if train is None or train is loader:
            self._expect(self.step + n)

    def _first_step_of_epoch(self) -> None:
        """The first step since a loader started an epoch: if that loader is still being iterated
        and the training loader known so far is not, it is the one whose length counts."""
        self._epoch_seen_step = True
        if self._epoch is None:
            return
        ref, it, start, n = self._epoch
        loader = ref()
        if loader is None or (self._train is not None and self._train[0]() is loader):
            return
        if _finished(it, n) or (self._train is not None and not _finished(self._train[1],
                                                                          self._train[3])):
            return  # an evaluation loop that ran to its end, or one inside a training epoch
        self._train = self._epoch
        self._expect(start + n)

    def _expect(self, total: int) -> None:
        if total != self.expected_steps:
            self.expected_steps = total
            self.emit({"info": {"expected_steps": total}})

    def _record_step(self, grads: fingerprint.Fingerprint | None,
                     params: fingerprint.Fingerprint | None) -> None:
        self.step += 1
        if not self._epoch_seen_step:
            self._first_step_of_epoch()
        self._step_starts()
        start = self._rng or {}
        with self._quiet():
            end = rngstate.signals(self._cuda)  # the start of the next step
        signals: dict[str, Any] = self._live_streams(start, end)
        if self._batch is not None:
            signals["batch"] = fingerprint.combine(self._batch, defer=True)
        signals["loss"] = None  # filled in when the loss is turned into bits, keeping its place
        if grads is not None:
            signals["grads"] = grads
        if params is not None:
            signals["params"] = params
        self._rng, self._batch = end, None
        loss = self.last_loss
        if (loss is not None and not loss.is_cpu) or any(
                type(v) is fingerprint.Deferred for v in signals.values()):
            # still on a device: kept until a batch of steps goes to the host in one copy
            if not self._pending:
                self._pending_since = time.monotonic()
            self._pending.append((self.step, signals, loss))
            if (len(self._pending) >= self.FLUSH_EVERY
                    or time.monotonic() - self._pending_since >= self.FLUSH_SECONDS):
                self.flush()
        else:
            self.flush()
            self._emit_step(self.step, signals, loss)
        for what in fingerprint.take_unreadable():
            self.emit({"warning": f"fingerprints count a tensor they could not read by its type "
                                  f"only: {what}"})
        for watch in self.watchers:
            watch()
        probe = self.probe
        if probe is not None and probe.step == self.step:
            probe.disarm()
        if self.max_steps is not None and self.step >= self.max_steps:
            self.flush()
            raise StopTraining(self.step)
        if probe is not None and self.probe_step == self.step + 1:
            probe.arm(self.step + 1)

    def _live_streams(self, start: dict[str, Any], end: dict[str, Any]) -> dict[str, Any]:
        """The RNG signals of a step: the state at its start of every stream the run has drawn
        from by the end of the step (before, or during it). A stream nothing draws from cannot
        change a result; left out, its unseeded state does not count as a divergence."""
        for name, value in start.items():
            if name not in self._rng_live and (
                value != self._rng_at_install.get(name) or end.get(name) != value
            ):
                self._rng_live.add(name)
        return {name: value for name, value in start.items() if name in self._rng_live}

    def _emit_step(self, step: int, signals: dict[str, Any], loss: Any) -> None:
        with self._quiet():
            signals["loss"] = values.encode_tensor(loss) if loss is not None else None
        self.emit({"step": step, "signals": signals})

    def flush(self) -> None:
        """Emit the steps still held on a device: their losses and fingerprints reach the host
        together, one copy per device for the whole batch."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        with self._quiet():
            where = [(signals, name) for _, signals, _ in pending
                     for name, value in signals.items() if type(value) is fingerprint.Deferred]
            texts = fingerprint.resolve([signals[name] for signals, name in where])
            for (signals, name), text in zip(where, texts):
                signals[name] = text
            losses = values.encode_tensors([loss for _, _, loss in pending])
        for (step, signals, _), loss in zip(pending, losses):
            signals["loss"] = loss
            self.emit({"step": step, "signals": signals})

    # ---- metrics -------------------------------------------------------------------------
    def metric(self, name: str, value: Any) -> None:
        enc = values.encode(value)
        if enc is None:
            self.emit({"warning": f"metric {name!r} ignored: {type(value).__name__} is not a number"})
            return
        self.metrics[name] = enc

    def metrics_from_return(self, result: Any, prefix: str = "") -> None:
        """Take the target's return value: a number, a one-element tensor, or a dict of them."""
        if result is None:
            return
        if isinstance(result, dict):
            for key, val in result.items():
                name = f"{prefix}{key}"
                if isinstance(val, dict):
                    self.metrics_from_return(val, prefix=name + ".")
                elif values.encode(val) is not None:
                    self.metric(name, val)
            return
        if values.encode(result) is not None:
            self.metric(prefix.rstrip(".") or "return", result)


def _optimizer_params(optimizer: Any) -> Iterator[tuple[str, Any]]:
    """The optimizer's parameters, named by group and position (stable across runs)."""
    for g, group in enumerate(optimizer.param_groups):
        for i, p in enumerate(group["params"]):
            yield f"{g}.{i}", p


def _leaves(tensors: Any, inputs: Any) -> list[Any]:
    """The leaf tensors a backward call from ``tensors`` accumulates gradients into, in a fixed
    order (depth first along the autograd graph), or ``inputs`` when the call names them."""
    import torch

    if inputs is not None:
        found = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
        return [t for t in found if isinstance(t, torch.Tensor)]
    roots = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    leaves: list[Any] = []
    todo: list[Any] = []
    for t in reversed(roots):
        if not isinstance(t, torch.Tensor):
            continue
        if t.grad_fn is not None:
            todo.append(t.grad_fn)
        elif t.requires_grad:
            leaves.append(t)
    seen: set[Any] = set()
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)
        if variable is not None:
            leaves.append(variable)
            continue
        todo.extend(nxt for nxt, _ in reversed(node.next_functions) if nxt is not None)
    unique: dict[int, Any] = {}
    for leaf in leaves:
        unique.setdefault(id(leaf), leaf)
    return list(unique.values())


def _caller() -> str | None:
    """``file:line`` of the innermost frame of the target's own code on the stack."""
    import os
    import traceback

    import torch

    skip = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(__file__) + os.sep)
    workloads = os.path.join(os.path.dirname(__file__), "workloads") + os.sep
    for frame in reversed(traceback.extract_stack()[:-2]):
        path = frame.filename
        if path.startswith("<") or path.endswith("warnings.py"):
            continue
        if path.startswith(skip) and not path.startswith(workloads):
            continue
        return f"{path}:{frame.lineno}"
    return None
