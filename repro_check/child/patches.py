"""Every hook repro-check puts into the process it runs in, in one registry.

The features of a run (the step capture, the seeding watch, diagnose's pins, the moved clock, the
recorded processes, the logged metrics, ...) wrap functions of torch, the standard library and
training frameworks. Several of them wrap the same function (``DataLoader.__init__`` has three),
so this module owns every wrap:

* one installed wrapper per patched callable however many features need it: the features'
  wrappers are composed around the original in the order :data:`ORDER` states (first listed,
  innermost: it runs nearest the original), whatever order they were installed in;
* a feature wraps a callable once (installing it again replaces its wrapper: idempotent), and is
  removed again by the object that installed it (:meth:`PatchRegistry.release`);
* :meth:`PatchRegistry.undo` puts back the exact objects that were there before (an attribute a
  class only inherited is deleted again);
* a feature that relies on a private internal checks it first and, when it is missing or not
  what it expects, is skipped with a reason (:meth:`PatchRegistry.skip`) instead of breaking
  the target;
* :meth:`PatchRegistry.listing` says what is patched, by which features in which order, and
  what was skipped: under ``REPRO_CHECK_DEBUG`` a run writes it on its stderr and its trace
  (``{"info": {"patches": [...]}}``), and the tests read it.

Composition happens when a feature is installed or removed, never at call time: the installed
wrapper is the outermost feature's own function, so a hooked call costs what the features'
wrappers cost and nothing more.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from repro_check.trace.protocol import patch_line

#: every feature that wraps or replaces something in the process, innermost first: where two
#: features wrap the same callable, the one listed first runs inside the other (nearer the
#: original). The orders that matter:
#:
#: * ``DataLoader.__init__``: an ``--across`` environment's worker count and start method nearest
#:   the original, whatever the script or the features outside pass; the seeding watch sees the arguments the script passed (it makes
#:   the ``worker_init_fn`` a :class:`~repro_check.child.observe.watch.WorkerWatch`), then the pins note
#:   the loader once it is made, then seeding gives it a generator and seeds its workers before
#:   the (watched) ``worker_init_fn`` runs;
#: * ``DataLoader.__iter__`` and the iterator's ``__next__``: diagnose's pins (a substituted
#:   batch) inside the step capture, which fingerprints what the script receives;
#: * ``random.seed``, ``torch.seed``, ``torch.manual_seed``, ``numpy.random.seed``: the pins'
#:   reseeding records inside the seeding watch, which sees the script's call first;
#: * ``os._exit``: the run's flush inside a recorded process's end of stream.
ORDER: tuple[str, ...] = (
    "overrides.loaders",     # DataLoader.__init__: an --across environment's workers, start method
    "overrides.start_method",  # multiprocessing's set_start_method: the environment's kept
    "overrides.compile",     # os.environ[TORCHDYNAMO_DISABLE]: --across compile=off
    "seeding.loaders",       # DataLoader.__init__: a generator, seeded workers
    "pin.loaders",           # DataLoader.__init__, __iter__: where each loader is made, its epochs
    "pin.data",              # the DataLoader iterator's __next__: diagnose's substituted batches
    "pin.reseeding",         # the global seeding calls: diagnose's reseeding records and pins
    "pin.generators",        # torch.Generator, random.Random, numpy.random.default_rng
    "watch.loaders",         # DataLoader.__init__: worker_init_fn watched in spawned workers
    "watch.seeding",         # the global seeding calls: the script's own seeding, reported
    "watch.draws",           # DataLoader fetchers' fetch: the global streams a fetch draws from
    "capture.step_hooks",    # torch's global optimizer step hooks (registered, not wrapped)
    "capture.backward",      # torch.autograd.backward
    "gradients.autograd",    # torch.autograd.grad: a step without an optimizer
    "gradients.func",        # torch.func.grad, grad_and_value, vjp, vmap: the same
    "gradients.no_grad",     # torch.no_grad's __enter__, __exit__: parameters changed without grads
    "capture.batches",       # the DataLoader iterator's __next__
    "capture.optimizers",    # Optimizer.__init__
    "capture.epochs",        # DataLoader.__iter__: the expected steps
    "capture.alerts",        # warnings._showwarnmsg: ops flagged nondeterministic
    "checkpoint.signals",    # the optimizer pre-step hook (lr, opt), GradScaler.__init__
    "checkpoint.saves",      # torch.save, safetensors, DCP, Lightning's and HF's saves (resume)
    "saved.files",           # torch.save, safetensors, numpy.save/savez, DCP, Lightning, HF: compared
    "saved.modules",         # nn.Module.__setstate__: copies of models (deepcopy), for the end state
    "rank.models",           # DistributedDataParallel.__init__
    "origin.models",         # nn.Module.__init__: where each model is built
    "clock",                 # time.time & co., datetime.datetime.now and utcnow (in place)
    "main.flush",            # os._exit: the held steps are handed over first
    "processes.end",         # os._exit in a recorded process: its stream ends first
    "processes.start",       # BaseProcess.start: each process the run starts is numbered
    "processes.bootstrap",   # BaseProcess._bootstrap: a numbered process records its stream
    "processes.preparation",  # spawn.get_preparation_data: a spawned process is seeded first
    "metric_hooks",          # logging calls of TensorBoard, Lightning, HF, wandb, mlflow
    "env_hooks",             # gymnasium environments' reset and step
    "probe.factories",       # torch.as_tensor & co. while the step probe is armed
    "control.forward",       # torch's global module forward pre-hook: the control's plant
    "control.leave_out",     # a resume's control: RNG state setters or Optimizer.load_state_dict
)

#: private internals read without patching anything: a guard that finds one changed takes the
#: public (slower) way and says so in the listing (:meth:`PatchRegistry.skip`)
GUARDED: tuple[str, ...] = (
    "rngstate.python",       # random's Mersenne Twister read in place (ctypes), not getstate()
)

#: what an absent attribute or key is
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()


def label_of(owner: Any, name: Any) -> str:
    """``module.Class.name`` or ``module.name``: how a target is named in the listing."""
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}.{name}"
    module = getattr(owner, "__name__", None)
    return f"{module}.{name}" if isinstance(module, str) else f"{type(owner).__name__}[{name!r}]"


def is_sealed(cls: type) -> bool:
    """Whether ``cls`` refuses ``setattr`` on itself: a type of compiled code (``datetime``,
    ``int``), whose attributes cannot be set from Python."""
    return bool(cls.__flags__ & _IMMUTABLE_TYPE) or not (cls.__flags__ & _HEAP_TYPE)


#: ``Py_TPFLAGS_HEAPTYPE`` and ``Py_TPFLAGS_IMMUTABLETYPE`` (CPython's ``object.h``)
_HEAP_TYPE = 1 << 9
_IMMUTABLE_TYPE = 1 << 8


def write_sealed(cls: type, name: str, value: Any) -> None:
    """Set (or with :data:`MISSING`, delete) ``name`` in the own namespace of a type compiled
    code made, keeping the type itself: the object stays the one compiled libraries check (its
    size, its identity), where a stand-in subclass would not (pandas' compiled modules crash
    when ``datetime.datetime`` is a subclass). The type's attribute cache is then cleared.
    Raises :class:`SealedTypeError` where this interpreter keeps no such namespace."""
    import ctypes  # only for a sealed type: most runs never patch one
    import gc  # likewise

    namespaces = [d for d in gc.get_referents(cls.__dict__) if isinstance(d, dict)]
    if len(namespaces) != 1 or namespaces[0].keys() != cls.__dict__.keys():
        raise SealedTypeError(f"{cls.__qualname__}'s namespace cannot be reached")
    namespace = namespaces[0]
    if value is MISSING:
        namespace.pop(name, None)
    else:
        namespace[name] = value
    ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))
    if (cls.__dict__.get(name, MISSING) is not value):
        raise SealedTypeError(f"{cls.__qualname__}.{name} did not take the new value")


class SealedTypeError(RuntimeError):
    """A type of compiled code could not be patched in place on this interpreter."""


class _Target:
    """One patched attribute (or mapping key) and the features that wrap it."""

    def __init__(self, owner: Any, name: Any, item: bool, label: str) -> None:
        self.owner = owner
        self.name = name
        self.item = item
        self.label = label
        self.original = self.read()
        #: feature -> (token of what installed it, make(inner) -> wrapper)
        self.features: dict[str, tuple[Any, Callable[[Any], Any]]] = {}
        self.installed: Any = MISSING
        self.notes: list[str] = []

    def read(self) -> Any:
        """The value held now: the attribute of the owner itself (not one a class inherits)."""
        if self.item:
            return self.owner.get(self.name, MISSING)
        if isinstance(self.owner, type):
            return self.owner.__dict__.get(self.name, MISSING)
        return getattr(self.owner, self.name, MISSING)

    def base(self) -> Any:
        """What the innermost feature wraps: the original, or what a class inherits."""
        if self.original is not MISSING or self.item:
            return None if self.original is MISSING else self.original
        if isinstance(self.owner, type):
            return getattr(super(self.owner, self.owner), self.name, None)
        return None

    def write(self, value: Any) -> None:
        if self.item:
            if value is MISSING:
                self.owner.pop(self.name, None)
            else:
                self.owner[self.name] = value
        elif isinstance(self.owner, type) and is_sealed(self.owner):
            write_sealed(self.owner, self.name, value)
        elif value is MISSING:
            if self.read() is not MISSING:
                delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, value)

    def ordered(self, order: dict[str, int]) -> list[str]:
        return sorted(self.features, key=lambda f: order[f])

    def compose(self, order: dict[str, int]) -> None:
        """Put the features' wrappers, in order, around the original (or the original back)."""
        now = self.read()
        if now is not self.installed and now is not self.original:
            # the target's own code (or a test) set it since: ours goes back on top of the
            # original, as a Hooks.replace/undo pair always did
            self.notes.append(f"found {getattr(now, '__qualname__', type(now).__name__)} "
                              "set over ours, replaced")
        if not self.features:
            self.write(self.original)
            self.installed = MISSING
            return
        value = self.base()
        for feature in self.ordered(order):
            value = self.features[feature][1](value)
        self.write(value)
        self.installed = value


@dataclass(frozen=True)
class Row:
    """One line of the listing: a patched target and its features (innermost first), a hook
    registered through an API, or a feature skipped (``skipped``: why)."""

    target: str
    features: tuple[str, ...]
    skipped: str | None = None

    def text(self) -> str:
        return patch_line(self.as_dict())

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"target": self.target, "features": list(self.features)}
        if self.skipped is not None:
            out["skipped"] = self.skipped
        return out


class PatchRegistry:
    """The patches of one process (see the module docstring); :data:`PATCHES` is the one a run
    uses."""

    def __init__(self, order: Iterable[str] = ORDER) -> None:
        self.order = {feature: i for i, feature in enumerate(order)}
        self.guarded = set(GUARDED)
        self.lock = threading.RLock()
        self._targets: dict[tuple[int, Any], _Target] = {}
        #: hooks registered through an API (torch's global hooks): (feature, label, token, handle)
        self._hooks: list[tuple[str, str, Any, Any]] = []
        self._skipped: dict[tuple[str, str], str] = {}

    def _known(self, feature: str) -> None:
        if feature not in self.order:
            raise ValueError(f"feature {feature!r} is not in the patch order")

    # ---- installing ----------------------------------------------------------------------
    def wrap(self, feature: str, owner: Any, name: Any, make: Callable[[Any], Any], *,
             token: Any = None, item: bool = False, label: str | None = None) -> None:
        """Have ``feature`` wrap ``owner.name`` (``owner[name]`` with ``item``): ``make(inner)``
        returns the wrapper of ``inner``, the original or the wrapper of the feature just inside
        this one. It may be called again whenever the target's features change, so it only makes
        the wrapper. Installing a feature again replaces its wrapper (and its token)."""
        self._known(feature)
        with self.lock:
            key = (id(owner), name)
            target = self._targets.get(key)
            if target is None or target.owner is not owner:
                target = self._targets[key] = _Target(owner, name, item,
                                                      label or label_of(owner, name))
            target.features[feature] = (token, make)
            try:
                target.compose(self.order)
            except SealedTypeError:  # left as it was: the caller skips the feature
                del target.features[feature]
                if not target.features:
                    del self._targets[key]
                raise

    def wrap_arguments(self, feature: str, owner: Any, name: str, names: Iterable[str],
                       edit: Callable[[dict[str, Any]], None], *, token: Any = None) -> bool:
        """Have ``feature`` change the arguments of every call of ``owner.name`` by name
        (``edit`` gets ``inspect.BoundArguments.arguments`` of the call, given by position or by
        keyword), then call the inner function with them. False, and the feature listed as
        skipped, when the signature lacks a parameter in ``names`` (another version)."""
        arguments = Arguments(self.original(owner, name), names)
        if arguments.missing:
            self.skip(feature, label_of(owner, name),
                      f"no parameter {', '.join(arguments.missing)}")
            return False

        def make(original: Any) -> Any:
            @functools.wraps(original)  # frameworks read its signature to rebuild loaders
            def wrapper(first: Any, *args: Any, **kwargs: Any) -> Any:
                bound = arguments.bind((first, *args), kwargs)
                if bound is None:  # arguments the signature does not take: it says so itself
                    return original(first, *args, **kwargs)
                edit(bound.arguments)
                return original(*bound.args, **bound.kwargs)

            return wrapper

        self.wrap(feature, owner, name, make, token=token)
        return True

    def replace(self, feature: str, owner: Any, name: Any, value: Any, *, token: Any = None,
                item: bool = False, label: str | None = None) -> None:
        """Have ``feature`` set ``owner.name`` to ``value`` (a stand-in class, a function that
        does not call the original)."""
        self.wrap(feature, owner, name, lambda inner: value, token=token, item=item, label=label)

    def hook(self, feature: str, label: str, register: Callable[[Any], Any], hook: Any, *,
             token: Any = None) -> None:
        """Register ``hook`` through an API that returns a removable handle (torch's global
        optimizer hooks), listed and removed like a wrap."""
        self._known(feature)
        with self.lock:
            self._hooks.append((feature, label, token, register(hook)))

    def skip(self, feature: str, target: str, reason: str) -> None:
        """A feature that relies on a private internal found it missing or changed: it is not
        installed, and the listing says why."""
        if feature not in self.guarded:
            self._known(feature)
        with self.lock:
            self._skipped[(feature, target)] = reason

    # ---- asking --------------------------------------------------------------------------
    def has(self, feature: str, owner: Any, name: Any) -> bool:
        target = self._targets.get((id(owner), name))
        return target is not None and target.owner is owner and feature in target.features

    def original(self, owner: Any, name: Any) -> Any:
        """What ``owner.name`` was before any feature wrapped it (:data:`MISSING` when absent)."""
        target = self._targets.get((id(owner), name))
        if target is not None and target.owner is owner:
            return target.original
        return _Target(owner, name, False, "").read()

    def listing(self) -> list[Row]:
        """What is patched now, by which features (innermost first), and what was skipped."""
        with self.lock:
            rows = [Row(t.label, tuple(t.ordered(self.order)))
                    for t in self._targets.values() if t.features]
            hooks: dict[str, list[str]] = {}
            for feature, label, _, _ in self._hooks:
                hooks.setdefault(label, []).append(feature)
            rows += [Row(label, tuple(sorted(set(f), key=lambda x: self.order[x])))
                     for label, f in hooks.items()]
            rows.sort(key=lambda r: r.target)
            rows += [Row(target, (feature,), reason)
                     for (feature, target), reason in sorted(self._skipped.items())]
            return rows

    def targets(self) -> list[tuple[Any, Any, bool, Any]]:
        """Every target touched since the last :meth:`undo`: (owner, name, item, original)."""
        with self.lock:
            return [(t.owner, t.name, t.item, t.original) for t in self._targets.values()]

    # ---- removing ------------------------------------------------------------------------
    def release(self, token: Any) -> None:
        """Remove every feature ``token`` installed (a recorder being uninstalled)."""
        self._drop(lambda feature, owner: owner is token)

    def remove(self, feature: str) -> None:
        """Remove ``feature`` from every target it wraps."""
        self._drop(lambda f, owner: f == feature)

    def _drop(self, which: Callable[[str, Any], bool]) -> None:
        with self.lock:
            for key, target in list(self._targets.items()):
                gone = [f for f, (token, _) in target.features.items() if which(f, token)]
                if gone:
                    for feature in gone:
                        del target.features[feature]
                    target.compose(self.order)
                    if not target.features:  # its original is back
                        del self._targets[key]
            keep = []
            for entry in self._hooks:
                if which(entry[0], entry[2]):
                    entry[3].remove()
                else:
                    keep.append(entry)
            self._hooks = keep

    def undo(self) -> None:
        """Put every original back, exactly (an attribute a class only inherited is deleted)."""
        with self.lock:
            for target in reversed(list(self._targets.values())):
                target.write(target.original)
            self._targets.clear()
            for entry in reversed(self._hooks):
                entry[3].remove()
            self._hooks.clear()
            self._skipped.clear()


#: the patches of this process
PATCHES = PatchRegistry()


def _fresh_lock() -> None:
    """A process forked while another thread held the lock gets a fresh one."""
    PATCHES.lock = threading.RLock()


os.register_at_fork(after_in_child=_fresh_lock)


class Arguments:
    """A callable's parameters by name, so that a wrapper reads and changes an argument whether
    the caller gave it by position or by keyword (``DataLoader(ds, 4, True, ..., worker_init_fn)``).
    ``missing``: the parameters asked for that the signature does not have (a version whose
    signature changed: the feature is skipped)."""

    def __init__(self, func: Any, names: Iterable[str]) -> None:
        try:
            self.signature: inspect.Signature | None = inspect.signature(func)
            params = self.signature.parameters
            self.missing = [n for n in names if n not in params]
        except (TypeError, ValueError) as e:
            self.signature = None
            self.missing = [f"no signature: {e}"]

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The call's arguments bound to names (``inspect.BoundArguments``: change
        ``.arguments``, call with ``.args`` and ``.kwargs``), or None when they do not fit the
        signature (the original then raises its own error)."""
        if self.signature is None:
            return None
        try:
            return self.signature.bind_partial(*args, **kwargs)
        except TypeError:
            return None


def debug_lines(registry: PatchRegistry | None = None) -> list[str]:
    """The listing as text, one line a target (what ``REPRO_CHECK_DEBUG`` shows)."""
    return [row.text() for row in (registry or PATCHES).listing()]
