"""Step capture inside a run, on unmodified training code.

Installs PyTorch's global optimizer step hooks and thin wrappers around
``torch.autograd.backward`` (which ``Tensor.backward`` calls) and the DataLoader iterator's
``__next__``, so every optimizer step of any script is recorded without an import of repro-check
in user code. Step N is the N-th optimizer step; a run that builds no optimizer counts its
gradient computations instead: backward calls here, ``torch.autograd.grad`` and ``torch.func``
transforms in :mod:`repro_check.child.observe.gradients`, which says what such a step records.

A step's signals, in the order the step happens:

``rng.python``, ``rng.numpy``, ``rng.torch``, ``rng.cuda``
    fingerprints of the global RNG streams' states when the step starts: right after the previous
    step was recorded; for step 1, at the first DataLoader fetch, backward call or optimizer step
    of the run, whichever comes first (so after the script's own seeding, if it seeds itself).
    A stream is recorded from the first step by whose end the run has drawn from it (its state
    moved since the recorder was installed, after seeding): the unseeded state of a stream that
    nothing uses changes no result and is no divergence. In a resume's runs (``lazy``) every
    step's states are taken at its first backward call or optimizer step instead, and batches
    fetched and dropped before it are not its batch (:mod:`repro_check.child.observe.checkpoint`).
``init`` (step 1 only)
    the parameters going into the first step, before it changes them (see
    :mod:`repro_check.child.observe.initial`): a model built from a different random state differs here.
``batch``
    the fingerprint of everything the DataLoader iterators yielded since the previous step, in
    order (several fetches for gradient accumulation combine); absent when nothing was fetched.
``loss``
    the scalar on which backward was last called (by the step's thread), exactly. It is kept as a device tensor and
    turned into bits in batches, so a GPU run is not synchronised for it at every step.
``grads``
    the gradients of the optimizer's parameters before its step; without an optimizer, the
    gradients of the leaf tensors the backward call reached.
``lr``, ``opt``, ``scaler``
    the learning rates, the optimizer's state going into the step and a GradScaler's scale
    (taken by :mod:`repro_check.child.observe.checkpoint` and placed here, before ``grads``).
``params``
    the optimizer's parameters after its step.

and, in a step without an optimizer, before ``loss``:

``updated``
    the tensors the previous step's gradient computation differentiated with respect to (the
    leaves a backward call reached), fingerprinted as this step's starts: after the script's
    own update of them, however it made it (absent at step 1, whose ``init`` they are).

For the progress display, when a DataLoader of known length starts an epoch, the steps expected
by the end of it are emitted as ``{"info": {"expected_steps": N}}``. The loader that counts is the
one being iterated when steps happen, so an evaluation loader does not move the expectation.

Steps from several threads (models trained side by side) share one count, in the order their
optimizer steps complete: a step is numbered and its record emitted under one lock.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any, ContextManager

from repro_check.trace import fingerprint
from repro_check.child.observe import gradients, initial, metricset, origin
from repro_check.child import patches
from repro_check.child.seeding import rngstate
from repro_check.trace import values

Emit = Callable[[dict[str, Any]], None]


class StopTraining(BaseException):
    """Raised when a run that recorded ``--max-steps`` steps starts one more (its next backward
    call or optimizer step): a run whose own loop ends at the limit is not stopped.

    A BaseException, so that a training loop's ``except Exception`` does not swallow it.
    """


#: the recorder of this process, when it runs under repro-check
_ACTIVE: Recorder | None = None


def active() -> Recorder | None:
    """The recorder installed in this process, if any (the run entry flushes it when stopped)."""
    return _ACTIVE


def log_metric(name: str, value: Any) -> Any:
    """Record a final metric (e.g. accuracy) of a script that prints instead of returning it.

    Outside repro-check this does nothing. Returns ``value`` so it can wrap an expression.
    """
    if _ACTIVE is not None:
        _ACTIVE.metric(str(name), value)
    return value


#: the signal of a step without an optimizer: what the previous step trained, after the update
UPDATED = "updated"

#: ``Recorder._record_step``'s default loss: the one this thread last called backward on
_THREADS_LOSS: Any = object()

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


class Hooks:
    """The recorder's way into unmodified training code: PyTorch's global optimizer step hooks,
    and thin wrappers around ``torch.autograd.backward`` (which ``Tensor.backward`` calls), the
    DataLoader iterator's ``__next__``, ``DataLoader.__iter__``, ``Optimizer.__init__`` and, to
    flag ops, the warnings machinery. Each calls one of the recorder's ``on_*`` methods. All go
    through the process's patch registry (:mod:`repro_check.child.patches`), under this object's
    token: :meth:`undo` takes them out again."""

    def __init__(self, recorder: Recorder) -> None:
        self.rec = recorder

    def replace(self, feature: str, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        """Have ``feature`` wrap ``owner.name``: ``make(inner)`` returns the wrapper."""
        patches.PATCHES.wrap(feature, owner, name, make, token=self)

    def undo(self) -> None:
        patches.PATCHES.release(self)

    def install(self, flag_ops: bool) -> None:
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        for register, hook in ((register_optimizer_step_pre_hook, self.rec.on_optimizer_step),
                               (register_optimizer_step_post_hook, self.rec.on_optimizer_stepped)):
            patches.PATCHES.hook("capture.step_hooks", f"torch.optim.optimizer.{register.__name__}",
                                 register, hook, token=self)
        self._backward()
        gradients.install(self, self.rec)
        gradients.install_no_grad(self, self.rec)
        self._loader_next()
        self._optimizer_init()
        if flag_ops:
            self._alerts()

    def _backward(self) -> None:
        import torch.autograd

        rec = self.rec

        def make(original_backward: Any) -> Any:
            @functools.wraps(original_backward)
            def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
                if rec.computing_now():
                    # a backward call inside another gradient computation (a reentrant
                    # checkpoint's recomputation, a torch.func transform): part of that one
                    rec.note_gradient()
                    return original_backward(tensors, *args, **kwargs)
                rec.before_step_work()
                rec.on_step_activity()
                leaves = None
                if rec.optimizers_made == 0 or rec.shadowing():
                    inputs = kwargs.get("inputs", args[4] if len(args) > 4 else None)
                    with rec.quiet():
                        leaves = _leaves(tensors, inputs)
                    if rec.step == 0 and rec.optimizers_made == 0:
                        rec.initial.before_backward(leaves)
                probe = rec.probe
                if probe is not None:
                    probe.phase = "backward"
                try:
                    with rec.computing():
                        result = original_backward(tensors, *args, **kwargs)
                finally:
                    if probe is not None:
                        probe.phase = "forward"
                rec.on_backward(tensors, leaves)
                return result

            return backward

        self.replace("capture.backward", torch.autograd, "backward", make)

    def _loader_next(self) -> None:
        iterator_cls = loader_iterator_class("capture.batches")
        if iterator_cls is None:
            return
        rec = self.rec

        def make(original_next: Any) -> Any:
            @functools.wraps(original_next)
            def __next__(it: Any) -> Any:
                sig = rec.signals
                if sig is not None and sig.lazy and sig.idle_fetch:
                    # the batches fetched since the last backward call fed nothing (a resumed
                    # loader skipping what the epoch already saw): the step starts here
                    sig.rng, sig.batch = None, None
                fresh = sig is not None and sig.rng is None
                if sig is None or not sig.lazy:
                    rec.on_step_activity()
                probe = rec.probe
                before = probe.phase if probe is not None else None
                if probe is not None:
                    probe.phase = "data"
                try:
                    item = original_next(it)
                except StopIteration:
                    # an epoch's end is no activity of the next step: its states are taken
                    # where the next epoch's first batch is fetched (after that loader drew
                    # its seeds)
                    if fresh and rec.signals is not None and rec.signals.lazy:
                        rec.signals.rng = None
                    raise
                finally:
                    if probe is not None:
                        probe.phase = before
                rec.on_batch(item)
                if sig is not None:
                    sig.idle_fetch = True
                return item

            return __next__

        self.replace("capture.batches", iterator_cls, "__next__", make)

    def _optimizer_init(self) -> None:
        from torch.optim.optimizer import Optimizer

        rec = self.rec

        def make(original_init: Any) -> Any:
            @functools.wraps(original_init)
            def optimizer_init(opt: Any, *args: Any, **kwargs: Any) -> None:
                rec.optimizers_made += 1
                original_init(opt, *args, **kwargs)
                rec.initial.optimizer_made(opt)

            return optimizer_init

        self.replace("capture.optimizers", Optimizer, "__init__", make)

    def loaders(self) -> None:
        """Notice each epoch a DataLoader starts (for the expected steps)."""
        from torch.utils.data import DataLoader

        rec = self.rec

        def make(original_iter: Any) -> Any:
            @functools.wraps(original_iter)
            def loader_iter(loader: Any) -> Any:
                it = original_iter(loader)
                try:
                    rec.on_epoch(loader, it)
                except Exception:  # noqa: BLE001 - progress is a nicety; never break the target
                    pass
                return it

            return loader_iter

        self.replace("capture.epochs", DataLoader, "__iter__", make)

    def _alerts(self) -> None:
        """Turn PyTorch's nondeterminism warnings into ``{"flagged": ...}`` records.

        Hooks ``warnings._showwarnmsg``, through which every shown warning passes whatever the
        script does with ``showwarning`` or ``catch_warnings``; a filter in front makes every
        occurrence reach it, and each op is recorded (and shown) once.
        """
        warnings.filterwarnings("always", message=".*" + NONDETERMINISTIC_ALERT)
        attr = "_showwarnmsg" if hasattr(warnings, "_showwarnmsg") else "showwarning"
        if attr != "_showwarnmsg":
            patches.PATCHES.skip("capture.alerts", "warnings._showwarnmsg",
                                 "not in this Python: warnings.showwarning is wrapped instead, "
                                 "which a script's own showwarning replaces")
        rec = self.rec

        def make(original: Any) -> Any:
            def show(*args: Any, **kwargs: Any) -> Any:
                msg = args[0] if attr == "_showwarnmsg" else None
                text = str(msg.message if msg is not None else args[0])
                if NONDETERMINISTIC_ALERT in text:
                    op = text.split(NONDETERMINISTIC_ALERT)[0].strip()
                    fallback = f"{msg.filename}:{msg.lineno}" if msg is not None else None
                    if not rec.on_flagged(op, fallback):
                        return None
                return original(*args, **kwargs)

            return show

        self.replace("capture.alerts", warnings, attr, make)


def loader_iterator_class(feature: str) -> Any:
    """torch's private base class of DataLoader iterators, whose ``__next__`` every batch passes;
    None (``feature`` skipped, with the reason listed) when this torch has none."""
    from torch.utils.data import dataloader

    cls = getattr(dataloader, "_BaseDataLoaderIter", None)
    if not isinstance(cls, type) or "__next__" not in vars(cls):
        patches.PATCHES.skip(feature, "torch.utils.data.dataloader._BaseDataLoaderIter.__next__",
                             "this torch has no _BaseDataLoaderIter with its own __next__")
        return None
    return cls


def leading_size(item: Any, depth: int = 0) -> int | None:
    """The samples of a batch: the leading size of its first tensor with one (in a tuple,
    list or dict, as collate functions nest them); None without."""
    import torch

    if isinstance(item, torch.Tensor):
        return int(item.shape[0]) if item.dim() else None
    if depth > 4:
        return None
    inner = item.values() if isinstance(item, dict) else item if isinstance(item, (list, tuple)) \
        else ()
    for x in inner:
        size = leading_size(x, depth + 1)
        if size is not None:
            return size
    return None


class StepSignals:
    """The signals of a step that come from the whole process rather than from the optimizer:
    the RNG streams' states at the step's start and what the DataLoaders yielded for it."""

    def __init__(self, cuda: bool, quiet: Callable[[], Any]) -> None:
        self.cuda = cuda
        self.quiet = quiet
        #: the streams' states after seeding, and the streams seen drawn from since
        self.at_install = rngstate.signals(cuda)
        self.live: set[str] = set()
        self.rng: dict[str, Any] | None = None
        self.batch: list[Any] | None = None
        #: samples of the batches of step 1 (the leading size of each batch's first tensor;
        #: None: none had a tensor), counted until step 1 is taken: ``--across nproc=`` adds
        #: the ranks' up into the global batch
        self.samples: int | None = None
        self.counting = True
        #: take every step's states at its first backward call or optimizer step (after its data
        #: and its forward pass), not when the previous step ends: a resume's runs, whose first
        #: resumed step has no previous step and must be measured where the reference's is, a
        #: state the script restores after fetching its first batch included (the HF Trainer)
        #: (:mod:`repro_check.child.observe.checkpoint`)
        self.lazy = False
        #: with ``lazy``: a batch was fetched and no backward call or optimizer step came since
        self.idle_fetch = False

    def step_starts(self) -> None:
        """Take the RNG states of the step in progress, unless already taken."""
        if self.rng is None:
            with self.quiet():
                self.rng = rngstate.signals(self.cuda)

    def add_batch(self, item: Any) -> None:
        with self.quiet():
            if self.batch is None:
                self.batch = []
            self.batch.append(fingerprint.nested(item, defer=True))
            if self.counting:
                size = leading_size(item)
                if size is not None:
                    self.samples = (self.samples or 0) + size

    def take(self) -> dict[str, Any]:
        """The signals of the step that just ended, in the order it happened (its ``loss`` a
        placeholder, keeping its place); the next step starts here."""
        self.step_starts()
        start = self.rng or {}
        with self.quiet():
            end = rngstate.signals(self.cuda)  # the start of the next step
        signals = self._live_streams(start, end)
        if self.batch is not None:
            signals["batch"] = fingerprint.combine(self.batch, defer=True)
        signals["loss"] = None  # filled in when the loss is turned into bits
        self.rng, self.batch = (None if self.lazy else end), None
        return signals

    def _live_streams(self, start: dict[str, Any], end: dict[str, Any]) -> dict[str, Any]:
        """The RNG signals of a step: the state at its start of every stream the run has drawn
        from by the end of the step (before, or during it). A stream nothing draws from cannot
        change a result; left out, its unseeded state does not count as a divergence."""
        for name, value in start.items():
            if name not in self.live and (
                value != self.at_install.get(name) or end.get(name) != value
            ):
                self.live.add(name)
        return {name: value for name, value in start.items() if name in self.live}


class Outbox:
    """Recorded steps on their way to the trace, in step order: a step whose values are all on
    the host goes at once; steps with losses or fingerprints still on a device are held and go
    to the host together, one copy per device for the whole batch, so a GPU run is not
    synchronised at every step."""

    def __init__(self, emit: Emit, quiet: Callable[[], Any]) -> None:
        self.emit = emit
        self.quiet = quiet
        self.held: list[tuple[int, dict[str, Any], Any]] = []
        self.held_since = 0.0

    def add(self, step: int, signals: dict[str, Any], loss: Any, every: int,
            seconds: float) -> None:
        """Emit the step, or hold it until ``every`` steps are held or the oldest has waited
        ``seconds``."""
        if (loss is not None and not loss.is_cpu) or any(
                type(v) is fingerprint.Deferred for v in signals.values()):
            if not self.held:
                self.held_since = time.monotonic()
            self.held.append((step, signals, loss))
            if len(self.held) >= every or time.monotonic() - self.held_since >= seconds:
                self.flush()
        else:
            self.flush()
            with self.quiet():
                signals["loss"] = values.encode_tensor(loss) if loss is not None else None
            self.emit({"step": step, "signals": signals})

    def flush(self) -> None:
        """Emit the steps still held: their losses and fingerprints reach the host together."""
        held, self.held = self.held, []
        if not held:
            return
        with self.quiet():
            where = [(signals, name) for _, signals, _ in held
                     for name, value in signals.items() if type(value) is fingerprint.Deferred]
            texts = fingerprint.resolve([signals[name] for signals, name in where])
            for (signals, name), text in zip(where, texts):
                signals[name] = text
            losses = values.encode_tensors([loss for _, _, loss in held])
        for (step, signals, _), loss in zip(held, losses):
            signals["loss"] = loss
            self.emit({"step": step, "signals": signals})


class Progress:
    """The steps expected by the end of the training loader's epoch, for the progress display:
    emitted as ``{"info": {"expected_steps": N}}`` when they change. The loader that counts is
    the one being iterated when steps happen, so an evaluation loader does not move it."""

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self.expected_steps: int | None = None
        # the epoch started last and the training loader's: (loader, iterator, first step, len),
        # loader and iterator as weak references
        self._epoch: tuple[Any, Any, int, int] | None = None
        self._train: tuple[Any, Any, int, int] | None = None
        self._epoch_seen_step = True

    def epoch_started(self, loader: Any, it: Any, step: int) -> None:
        try:
            n = len(loader)
        except Exception:  # noqa: BLE001 - an IterableDataset without a length
            return
        if not isinstance(n, int) or n <= 0:
            return
        epoch = (_weak(loader), _weak(it), step, n)
        self._epoch, self._epoch_seen_step = epoch, False
        train = self._train[0]() if self._train is not None else None
        if train is loader:
            self._train = epoch
        if train is None or train is loader:
            self._expect(step + n)

    def step_recorded(self) -> None:
        if not self._epoch_seen_step:
            self._first_step_of_epoch()

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


class Recorder:
    """Counts steps, fingerprints each step's signals, and emits one trace record a step.

    Steps from several threads (models trained side by side) are numbered in the order their
    optimizer steps complete, one count for the process: numbering a step and emitting its
    record happen under one lock, so the trace is always numbered 1..N. A step's loss and
    gradients are its own thread's.

    ``probe_step``: arm a :class:`~repro_check.child.observe.probe.StepProbe` for that step only.
    ``flag_ops``: report the ops PyTorch's warn-only deterministic mode warns about, each once,
    with the step it first ran at.
    """

    #: steps held on a device (losses, fingerprints) go to the host this many at a time...
    FLUSH_EVERY = 64
    #: ...or once the oldest has waited this long (seconds), so slow steps still stream
    FLUSH_SECONDS = 0.5
    #: gradient computations kept aside at most, while an optimizer made is never stepped
    SHADOW_LIMIT = 100_000

    def __init__(self, emit: Emit, max_steps: int | None = None, probe_step: int | None = None,
                 flag_ops: bool = False) -> None:
        self.emit = emit
        self.max_steps = max_steps
        self.step = 0
        self.backward_calls = 0
        self.optimizers_made = 0
        self.last_loss: Any = None
        self.metrics: dict[str, Any] = {}
        self.metric_names = metricset.Names(self.warn)
        self.flagged: dict[str, int] = {}
        self.probe_step = probe_step
        self.flag_ops = flag_ops
        self.probe: Any = None
        self.lock = threading.RLock()
        #: per thread: the loss it last called backward on, the gradients of its optimizer step
        self._local = threading.local()
        self.hooks = Hooks(self)
        self.signals: StepSignals | None = None
        self.outbox = Outbox(emit, self.quiet)
        self.initial = initial.InitialParams(emit, self.quiet)
        self.progress = Progress(emit)
        #: called after every recorded step (e.g. to notice settings the target changed)
        self.watchers: list[Callable[[], None]] = []
        #: called as any ``torch.no_grad`` block ends (the control's change waiting for a
        #: script's own update: :mod:`repro_check.child.seeding.control`)
        self.no_grad_ended: list[Callable[[], None]] = []
        #: called before every backward call and optimizer step, whatever updates the weights
        #: (a resume's look at ``--checkpoint``'s files: :mod:`repro_check.child.observe.checkpoint`)
        self.step_starting: list[Callable[[], None]] = []
        #: signals of the step that just ended taken elsewhere (the optimizer's ``lr``, ``opt``:
        #: :mod:`repro_check.child.observe.checkpoint`), placed before ``grads``
        self.extra_signals: list[Callable[[], dict[str, Any]]] = []
        #: the tensors the step being recorded trains, named as its signals name them (the
        #: optimizer's parameters, or the leaves a backward call reached): where the negative
        #: control plants its change (:mod:`repro_check.child.seeding.control`); None before a step
        self.trained: Callable[[], Iterator[tuple[str, Any]]] | None = None
        self._own = threading.local()
        #: this thread inside our own tensor work (:meth:`quiet`), inside a recorded gradient
        #: computation (:meth:`computing`): counts per thread
        self._depth = _Count(self._own, "depth")
        self._computing = _Count(self._own, "computing")
        #: the tensors the last step without an optimizer trained, and their fingerprint as
        #: the next step's gradient computation starts: that step's ``updated`` signal
        self._trained: list[tuple[str, Any]] | None = None
        self._trained_in: fingerprint.Fingerprint | None = None
        #: optimizer steps recorded; gradient computations kept aside until the first
        #: (:meth:`shadowing`)
        self.optimizer_steps = 0
        self._shadow: list[tuple[dict[str, Any], Any]] = []
        #: parameters changed in place in a run without gradients (gradients.InPlaceWatch)
        self.in_place = gradients.InPlaceWatch()

    @property
    def expected_steps(self) -> int | None:
        return self.progress.expected_steps

    @property
    def held(self) -> int:
        """Steps recorded but not emitted yet (their values still on a device)."""
        return len(self.outbox.held)

    # ---- installing ----------------------------------------------------------------------
    def install(self) -> Recorder:
        global _ACTIVE
        import torch  # noqa: F401 - before the RNG states are taken

        self.signals = StepSignals(rngstate.cuda_available(), self.quiet)
        self.hooks.install(self.flag_ops)
        if self.probe_step is not None:
            # only when a step is probed (diagnose)
            from repro_check.child.observe.probe import StepProbe

            self.probe = StepProbe(self.emit)
            if self.probe_step == 1:
                self.probe.arm(1)
        self.hooks.loaders()
        _renew_lock_in_forks(self)
        _ACTIVE = self
        return self

    def uninstall(self) -> None:
        global _ACTIVE
        if self.probe is not None:
            self.probe.disarm()
        with self.lock:
            self._finish_shadow()
        self.hooks.undo()
        if _ACTIVE is self:
            _ACTIVE = None

    def quiet(self) -> ContextManager[None]:
        """Our own tensor work: kept out of the step probe's op record, and never given a pinned
        op's replayed outputs (:attr:`own_work`: whether this thread is inside one). Entered
        several times a step: without a probe, an object's ``__enter__``/``__exit__`` (a
        generator-based context manager costs a few times more)."""
        if self.probe is None:
            return self._depth
        return self._quiet_probed()

    @contextlib.contextmanager
    def _quiet_probed(self) -> Iterator[None]:
        with self._depth, self.probe.quiet():
            yield

    @property
    def own_work(self) -> bool:
        """Whether this thread is doing repro-check's own tensor work (inside :meth:`quiet`)."""
        return getattr(self._own, "depth", 0) > 0

    # ---- what the hooks report -----------------------------------------------------------
    def on_step_activity(self) -> None:
        """A DataLoader fetch, a backward call or an optimizer step: the step in progress has
        started by now (its RNG states are taken, unless already)."""
        assert self.signals is not None
        with self.lock:
            self.signals.step_starts()

    def before_step_work(self) -> None:
        """A backward call or an optimizer step is about to run: with ``--max-steps`` reached,
        the run is stopped here, as it starts a step past the limit. A script whose own loop
        ends at the limit is not stopped: it evaluates and returns, and its final metrics are
        compared (an evaluation needs neither backward nor an optimizer step)."""
        if self.max_steps is not None and self.step >= self.max_steps:
            self.flush()
            raise StopTraining(self.step)
        if self._trained is not None and (self.optimizers_made == 0 or self.shadowing()):
            # what the last step without an optimizer trained, as the script's update left
            # it: read before this step's gradient computation (whose hooks may update it)
            with self.lock, self.quiet():
                trained, self._trained = self._trained, None
                self._trained_in = fingerprint.tensors(trained, defer=True) if trained else None
        for starting in self.step_starting:
            starting()
        if self.signals is not None:
            self.signals.idle_fetch = False

    def on_batch(self, item: Any) -> None:
        assert self.signals is not None
        with self.lock:
            self.signals.add_batch(item)

    def on_epoch(self, loader: Any, it: Any) -> None:
        with self.lock:
            self.progress.epoch_started(loader, it, self.step)

    def on_flagged(self, op: str, fallback: str | None) -> bool:
        """An op PyTorch warns is nondeterministic; True the first time (it is shown then)."""
        with self.lock:
            if op in self.flagged:
                return False
            self.flagged[op] = self.step + 1
            self.emit({"flagged": {"op": op, "step": self.step + 1,
                                   "where": _caller() or fallback}})
            return True

    def on_backward(self, tensors: Any, leaves: list[Any] | None) -> None:
        t = tensors[0] if isinstance(tensors, (tuple, list)) and len(tensors) == 1 else tensors
        try:
            loss = t.detach().clone() if t.numel() == 1 else None
        except AttributeError:
            loss = None
        with self.lock:
            self.backward_calls += 1
            if loss is not None:
                self.last_loss = self._local.loss = loss
            if self.optimizers_made == 0 or self.shadowing():
                grads = None
                found = list(leaves or ())
                self.trained = lambda: ((str(i), leaf) for i, leaf in enumerate(found))
                if leaves:
                    with self.quiet():
                        grads = fingerprint.tensors(
                            ((str(i), leaf.grad) for i, leaf in enumerate(leaves)), defer=True)
                updated = [(str(i), leaf) for i, leaf in enumerate(leaves or ())]
                if self.optimizers_made == 0:
                    self._record_step(grads, None, updated=updated)
                else:
                    self._shadow_step(loss, grads, updated)

    # ---- gradients without an optimizer (see repro_check.child.observe.gradients) -----------------
    def computing_now(self) -> bool:
        """Whether this thread is inside a gradient computation that is being recorded."""
        return getattr(self._own, "computing", 0) > 0

    def computing(self) -> ContextManager[None]:
        """A recorded gradient computation runs: the ones nested in it are part of it."""
        return self._computing

    def note_gradient(self) -> None:
        """A gradient was computed inside a function transform (``vmap`` of ``grad``): the
        outermost transform's call is the step (:meth:`take_noted`)."""
        self._own.noted = True

    def take_noted(self) -> bool:
        """Whether a gradient was computed inside since the last call; resets it."""
        noted = getattr(self._own, "noted", False)
        self._own.noted = False
        return noted

    def on_gradients(self, loss: Any, grads: list[tuple[str, Any]],
                     trained: list[tuple[str, Any]]) -> None:
        """A step without an optimizer ended in a gradient computation (``torch.autograd.grad``,
        a ``torch.func`` transform): ``loss`` the scalar differentiated (None when unknown),
        ``grads`` what it returned, ``trained`` the tensors it differentiated with respect to
        (read as the next step starts: its ``updated`` signal)."""
        try:
            loss = loss.detach().clone() if loss is not None and loss.numel() == 1 else None
        except (AttributeError, RuntimeError):
            loss = None
        with self.lock:
            self.backward_calls += 1
            with self.quiet():
                fp = fingerprint.tensors(grads, defer=True) if grads else None
            if self.optimizers_made:
                self._shadow_step(loss, fp, trained)
            else:
                self._record_step(fp, None, loss=loss, updated=trained)

    # ---- an optimizer made but never stepped ---------------------------------------------
    def shadowing(self) -> bool:
        """Whether gradient computations are kept aside: the run made an optimizer and has not
        stepped it yet. If it never does (it builds one, then updates by hand), they are its
        steps, emitted when the run ends (:meth:`_finish_shadow`); the first optimizer step
        drops them, so a run that steps its optimizer counts exactly its optimizer steps."""
        return (self.optimizers_made > 0 and self.optimizer_steps == 0
                and len(self._shadow) < self.SHADOW_LIMIT)

    def _shadow_step(self, loss: Any, grads: fingerprint.Fingerprint | None,
                     trained: list[tuple[str, Any]]) -> None:
        """Keep one gradient computation aside (called under the lock). No RNG states and no
        batch: taking them would move where the optimizer's first step takes its own."""
        signals: dict[str, Any] = {}
        trained_in, self._trained_in = self._trained_in, None
        if trained_in is not None:
            signals[UPDATED] = trained_in
        signals["loss"] = None
        if grads is not None:
            signals["grads"] = grads
        self._trained = trained
        self._shadow.append((signals, loss))

    # ---- parameters changed without any gradient -----------------------------------------
    def watching_in_place(self) -> bool:
        """Whether ``torch.no_grad`` blocks are watched for parameters changed in place: only
        while nothing else could be a step (no optimizer made, no gradient computed); once
        something else can, never again."""
        return self.optimizers_made == 0 and self.backward_calls == 0 and self.step == 0

    def no_grad_entered(self, frame: Any) -> None:
        """A ``torch.no_grad`` block starts (entered from ``frame``)."""
        if self.watching_in_place() and not self.own_work:
            with self.quiet():
                self.in_place.entered(frame)

    def no_grad_exited(self) -> None:
        if self.no_grad_ended:  # empty but while the control waits: no copy on every block
            for ended in list(self.no_grad_ended):
                ended()
        if not self.watching_in_place():
            if self.in_place.steps or self.in_place.params:
                self.in_place.drop()
            return
        if self.own_work:
            return
        with self.quiet():
            changed = self.in_place.exited()
            if changed and len(self.in_place.steps) < self.in_place.LIMIT:
                fp = fingerprint.tensors(changed, defer=True)
                with self.lock:
                    self.in_place.steps.append({"loss": None, UPDATED: fp})

    def _finish_shadow(self) -> None:
        """The run ends without any optimizer step: the gradient computations kept aside are
        its steps; in a run without any gradient, the blocks that changed its parameters in
        place (called under the lock)."""
        shadow, self._shadow = self._shadow, []
        in_place, self.in_place.steps = self.in_place.steps, []
        if self.optimizer_steps or self.step:
            return
        if not shadow and self.watching_in_place():
            shadow = [(signals, None) for signals in in_place]
        for signals, loss in shadow:
            self.step += 1
            self.outbox.add(self.step, signals, loss, self.FLUSH_EVERY, self.FLUSH_SECONDS)

    def on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Before the optimizer's step: its gradients (this thread's)."""
        self.before_step_work()
        self.on_step_activity()
        if self.step == 0:
            with self.lock:
                self.initial.before_optimizer_step(optimizer)
        with self.quiet():
            self._local.grads = fingerprint.tensors(
                ((name, p.grad) for name, p in _optimizer_params(optimizer)), defer=True)
        if self.probe is not None:
            self.probe.gradients(_optimizer_params(optimizer))
            self.probe.phase = "optimizer"

    def on_optimizer_stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """After the optimizer's step: the step is recorded."""
        with self.lock:  # steps are numbered in the order they complete
            if not self.optimizer_steps:
                self._shadow, self._trained, self._trained_in = [], None, None
            self.optimizer_steps += 1
            if self.probe is not None:
                self.probe.phase = "forward"
            with self.quiet():
                params = self.params_fingerprint(optimizer)
            grads, self._local.grads = getattr(self._local, "grads", None), None
            self.trained = lambda: _optimizer_params(optimizer)
            self._record_step(grads, params)

    def params_fingerprint(self, optimizer: Any) -> fingerprint.Fingerprint:
        """The ``params`` signal after an optimizer step: the parameters it updates."""
        return fingerprint.tensors(_optimizer_params(optimizer), defer=True, keep=True)

    # ---- recording a step ----------------------------------------------------------------
    def _record_step(self, grads: fingerprint.Fingerprint | None,
                     params: fingerprint.Fingerprint | None, loss: Any = _THREADS_LOSS,
                     updated: list[tuple[str, Any]] | None = None) -> None:
        """Number the step that just ended and pass its record on (called under the lock).

        ``loss``: the step's loss tensor (None: it has none), by default the one this thread
        last called backward on. ``updated``: the tensors a step without an optimizer trains,
        fingerprinted as the next step's gradient computation starts (after the script's own
        update, wherever and however it made it): that step's ``updated`` signal."""
        assert self.signals is not None
        self.step += 1
        self.progress.step_recorded()
        signals = self.signals.take()
        if self.step == 1:
            signals = self.initial.place(signals)
            self.signals.counting = False
            if self.signals.samples is not None:
                self.emit({"info": {"batch_samples": self.signals.samples}})
        for take in self.extra_signals:
            signals.update(take())
        if grads is not None:
            signals["grads"] = grads
        if params is not None:
            signals["params"] = params
        if loss is _THREADS_LOSS:
            loss = getattr(self._local, "loss", None)
            loss = self.last_loss if loss is None else loss
        if updated is not None:
            trained_in, self._trained_in = self._trained_in, None
            if trained_in is not None:
                signals = _before_loss(signals, UPDATED, trained_in)
            self._trained = updated
            # what the negative control plants in: the tensors this step differentiated
            self.trained = lambda: iter(updated)
        self.outbox.add(self.step, signals, loss, self.FLUSH_EVERY, self.FLUSH_SECONDS)
        for what in fingerprint.take_unreadable():
            self.emit({"warning": f"fingerprints count a tensor they could not read by its type "
                                  f"only: {what}"})
        for watch in self.watchers:
            watch()
        self._after_step()

    def _after_step(self) -> None:
        """The probe's window and ``--max-steps``, once step ``self.step`` is recorded."""
        probe = self.probe
        if probe is not None and probe.step == self.step:
            probe.disarm()
        if self.max_steps is not None and self.step >= self.max_steps:
            self.flush()  # the run stops when it starts another step (see before_step_work)
        if probe is not None and self.probe_step == self.step + 1:
            probe.arm(self.step + 1)

    def flush(self) -> None:
        """Emit the steps still held on a device: their losses and fingerprints reach the host
        together, one copy per device for the whole batch. Called where the run stops or ends
        (and at ``--max-steps``): steps kept aside become its steps if it has no other
        (:meth:`_finish_shadow`)."""
        with self.lock:
            self._finish_shadow()
            self.outbox.flush()

    # ---- metrics -------------------------------------------------------------------------
    def metric(self, name: str, value: Any, source: str = metricset.LOG_METRIC) -> None:
        """Record final metric ``name`` from ``source`` (``log_metric``, ``return``, a logging
        library): a name another source recorded, or one in another source's namespace, is
        recorded under a name of its own (:class:`~repro_check.child.observe.metricset.Names`)."""
        enc = values.encode(value)
        if enc is None:
            self.emit({"warning": f"metric {metricset.short_name(str(name))!r} ignored: "
                                  f"{type(value).__name__} is not a number"})
            return
        self._put(str(name), enc, source)

    def _put(self, name: str, enc: dict[str, Any], source: str) -> None:
        with self.lock:
            self.metrics[self.metric_names.name_for(name, source)] = enc

    def warn(self, text: str) -> None:
        self.emit({"warning": text})

    def metrics_from_return(self, result: Any, prefix: str = "") -> None:
        """Take the target's return value: a number, a one-element tensor, or a dict of them."""
        if result is None:
            return
        if isinstance(result, dict):
            for name, val in metricset.flatten(result, self.warn, "the returned dict"):
                enc = values.encode(val)
                if enc is not None:
                    self._put(f"{prefix}{name}", enc, metricset.RETURN)
            return
        if values.encode(result) is not None:
            self.metric(prefix.rstrip(".") or "return", result, metricset.RETURN)

    def final_metrics(self) -> dict[str, Any]:
        """The metrics for the run's metrics line: never more than one line can hold."""
        with self.lock:
            return metricset.fold(self.metrics, self.warn)


class _Count:
    """A context manager that counts, per thread, how deep inside it the thread is (in
    ``local``'s attribute ``name``)."""

    __slots__ = ("local", "name")

    def __init__(self, local: threading.local, name: str) -> None:
        self.local = local
        self.name = name

    def __enter__(self) -> None:
        setattr(self.local, self.name, getattr(self.local, self.name, 0) + 1)

    def __exit__(self, *exc: object) -> None:
        setattr(self.local, self.name, getattr(self.local, self.name) - 1)


def _before_loss(signals: dict[str, Any], name: str, value: Any) -> dict[str, Any]:
    """``signals`` with ``name`` put right before ``loss`` (the order a step happens in)."""
    out: dict[str, Any] = {}
    for key, v in signals.items():
        if key == "loss":
            out[name] = value
        out[key] = v
    out.setdefault(name, value)
    return out


def _renew_lock_in_forks(recorder: Recorder) -> None:
    """A process forked while another thread held the lock (a DataLoader worker) gets a fresh
    one: the thread that held it does not exist there."""
    ref = weakref.ref(recorder)

    def renew() -> None:
        rec = ref()
        if rec is not None:
            rec.lock = threading.RLock()

    os.register_at_fork(after_in_child=renew)


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
    """``file:line`` of the innermost frame of the target's own code on the stack (the rule of
    :func:`repro_check.child.observe.origin.is_library`), from the caller of ``on_flagged`` outward."""
    return origin.caller(2)
