"""Step capture inside a run, on unmodified training code.

Installs PyTorch's global optimizer step hooks and a thin wrapper around
``torch.autograd.backward`` (which ``Tensor.backward`` calls), so every optimizer step of any
script is recorded without an import of repro-check in user code. Step N is the N-th optimizer
step; a run that builds no optimizer counts backward calls instead. The loss of a step is the
scalar on which backward was last called, kept as a device tensor and turned into exact bits in
batches, so a GPU run is not synchronised at every step.

For the progress display, when a DataLoader of known length starts an epoch, the steps expected
by the end of it are emitted as ``{"info": {"expected_steps": N}}``. The loader that counts is the
one being iterated when steps happen, so an evaluation loader does not move the expectation.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

from . import values

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
    """Counts steps, keeps each step's loss, and emits one trace record a step."""

    #: device losses are turned into bits this many at a time
    FLUSH_EVERY = 64

    def __init__(self, emit: Emit, max_steps: int | None = None) -> None:
        self.emit = emit
        self.max_steps = max_steps
        self.step = 0
        self.backward_calls = 0
        self.optimizers_made = 0
        self.last_loss: Any = None
        self.metrics: dict[str, Any] = {}
        self._pending: list[tuple[int, Any]] = []
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
        from torch.optim.optimizer import Optimizer, register_optimizer_step_post_hook

        self._handles.append(register_optimizer_step_post_hook(self._after_optimizer_step))

        original_backward = torch.autograd.backward

        @functools.wraps(original_backward)
        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            result = original_backward(tensors, *args, **kwargs)
            self._after_backward(tensors)
            return result

        torch.autograd.backward = backward
        self._undo.append(lambda: setattr(torch.autograd, "backward", original_backward))

        original_init = Optimizer.__init__

        @functools.wraps(original_init)
        def optimizer_init(opt: Any, *args: Any, **kwargs: Any) -> None:
            self.optimizers_made += 1
            original_init(opt, *args, **kwargs)

        Optimizer.__init__ = optimizer_init  # type: ignore[method-assign]
        self._undo.append(lambda: setattr(Optimizer, "__init__", original_init))
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

    def uninstall(self) -> None:
        global _ACTIVE
        for h in self._handles:
            h.remove()
        for undo in reversed(self._undo):
            undo()
        self._handles.clear()
        self._undo.clear()
        if _ACTIVE is self:
            _ACTIVE = None

    # ---- hooks ---------------------------------------------------------------------------
    def _after_backward(self, tensors: Any) -> None:
        self.backward_calls += 1
        t = tensors[0] if isinstance(tensors, (tuple, list)) and len(tensors) == 1 else tensors
        try:
            if t.numel() == 1:
                self.last_loss = t.detach().clone()
        except AttributeError:
            pass
        if self.optimizers_made == 0:
            self._record_step()

    def _after_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._record_step()

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

    def _record_step(self) -> None:
        self.step += 1
        if not self._epoch_seen_step:
            self._first_step_of_epoch()
        loss = self.last_loss
        if loss is not None and loss.device.type != "cpu":
            self._pending.append((self.step, loss))
            if len(self._pending) >= self.FLUSH_EVERY:
                self.flush()
        else:
            self.flush()
            self._emit_step(self.step, loss)
        for watch in self.watchers:
            watch()
        if self.max_steps is not None and self.step >= self.max_steps:
            self.flush()
            raise StopTraining(self.step)

    def _emit_step(self, step: int, loss: Any) -> None:
        enc = values.encode_tensor(loss) if loss is not None else None
        self.emit({"step": step, "signals": {"loss": enc}})

    def flush(self) -> None:
        """Emit the steps whose device losses are still pending (one sync for the batch)."""
        pending, self._pending = self._pending, []
        for step, loss in pending:
            self._emit_step(step, loss)

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
