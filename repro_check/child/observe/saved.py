"""What a run leaves: every file it saves, tensor by tensor, and its modules' state at its end.

A script whose every optimizer step agrees can still ship an artifact that differs: an EMA copy of
the model updated with a decay that differs between the runs, BatchNorm statistics, a saved array.
So, in every run, each save is described where it is made, from the object handed to it (never by
reading a file back): every tensor and array it holds, by its key path (``model.0.weight``,
``arr_0``, ``2.bias``), dtype, shape and a fingerprint of its exact bytes
(:mod:`repro_check.trace.fingerprint`). Numbers, strings, timestamps and other values in a
checkpoint are not compared: they are bookkeeping (an epoch counter, the time of the save), and a
timestamp must not make two runs differ. The record goes to the parent as an ``info`` line
(:class:`repro_check.trace.protocol.SavedRecord`), which pairs the saves of the runs by their order.

Saves watched (the function the script calls, or a library calls for it):

* ``torch.save`` (a path, an open file, or an in-memory buffer the script then writes out: a
  save into memory is described when the script's own code makes it, or a framework's save it
  is part of; torch itself saves a tensor's storage into memory whenever a tensor is pickled),
  ``torch.serialization.save``, ``safetensors.torch.save_file`` and ``save_model``,
  ``safetensors.numpy.save_file``, safetensors' ``save`` (the bytes of a file, in memory),
  ``numpy.save``, ``numpy.savetxt``, ``numpy.savez`` and ``numpy.savez_compressed``,
  ``torch.jit.save`` (a scripted model's parameters and buffers), ``pickle.dump`` to a file (a
  state dict pickled by hand), ``pickle.dumps`` called by the script of something that holds a
  tensor or an array (bytes it writes itself), ``torch.distributed.checkpoint.save``;
* the framework saves built on them, Lightning's ``Trainer.save_checkpoint`` and the Hugging Face
  ``Trainer._save_checkpoint``: the saves inside them are compared (a buffer Lightning writes to
  its file is named by that file).

A save made inside another watched save (``save_model`` calls ``save_file``) is part of the
outer one. What is not watched: ``pickle.Pickler`` and ``pickle.dumps`` of what holds no tensor,
a file written by other means (``json``, ``open(...).write``, ``ndarray.tofile``, h5py, joblib),
``torch.export`` and ONNX exports, and anything saved by a process the target starts.

At the end of the run (the target returned, or ``--max-steps`` stopped it), the state of every
top-level ``nn.Module`` still reachable is described the same way (``kind: "state"``): its
parameters, its buffers (BatchNorm running statistics), and tensors it holds as plain attributes,
so that an EMA copy or a shadow model that no optimizer steps is compared even when it is never
saved. The modules are those built during the run (``nn.Module.__init__``, and copies made by
``copy.deepcopy`` or unpickled, through ``__setstate__``), held from the last step on so that a
target function's locals still count once it returned.

Hooks go through the patch registry as ``saved.files`` (the save functions) and
``saved.modules`` (``nn.Module.__setstate__``).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import importlib.util
import os
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

from repro_check.child.observe import checkpoint, origin
from repro_check.child import patches
from repro_check.trace import fingerprint
from repro_check.trace.protocol import SAVED_FILE, SAVED_STATE

Emit = Callable[[dict[str, Any]], None]
Where = Callable[[tuple[Any, ...], dict[str, Any]], tuple[Any, Any]]

#: tensors described one by one in a save; the rest are folded into one entry (``(more)``)
MAX_TENSORS = 20000
#: objects visited while walking one saved object, at most (a huge object graph is cut there)
MAX_VISITS = 200000
#: how deep the walk goes into nested containers and objects
MAX_DEPTH = 24
#: the key of the entry that stands for the tensors past :data:`MAX_TENSORS`
MORE = "(more)"


# ---- walking what was saved --------------------------------------------------------------------
def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _join(prefix: str, key: Any) -> str:
    text = str(key)[:200]
    return f"{prefix}.{text}" if prefix and text else prefix or text


def walk(obj: Any) -> Iterator[tuple[str, Any]]:
    """Every tensor and array ``obj`` holds, with its key path, in the order a save would write
    them: dict keys, list and tuple indices, dataclass fields, the attributes of other objects,
    a module's parameters and buffers, an optimizer's state dict. Numbers, strings and the like
    are left out (not compared); so is anything past :data:`MAX_DEPTH` or :data:`MAX_VISITS`."""
    import torch

    seen: set[int] = set()
    visits = 0

    def go(x: Any, key: str, depth: int) -> Iterator[tuple[str, Any]]:
        nonlocal visits
        visits += 1
        if visits > MAX_VISITS or depth > MAX_DEPTH:
            return
        if isinstance(x, torch.Tensor):
            yield key, x
            return
        if x is None or isinstance(x, (str, bytes, bytearray, int, float, complex, bool)):
            return
        np = sys.modules.get("numpy")
        if np is not None and isinstance(x, np.ndarray):
            if x.dtype.hasobject:  # an array of Python objects: each item, by its index
                for i, item in enumerate(x.reshape(-1).tolist()):
                    yield from go(item, _join(key, i), depth + 1)
            else:
                yield key, x
            return
        if np is not None and isinstance(x, np.generic):
            return  # a numpy scalar counts as a number
        if isinstance(x, _SKIPPED):
            return
        if id(x) in seen:
            return  # shared or cyclic: walked once
        seen.add(id(x))
        if isinstance(x, torch.nn.Module):
            yield from _module_tensors(x, key)
        elif isinstance(x, torch.optim.Optimizer):
            yield from go(_state_dict(x), key, depth + 1)
        elif isinstance(x, dict) or _is_mapping(x):
            for k, v in list(x.items()):
                yield from go(v, _join(key, k), depth + 1)
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                yield from go(v, _join(key, i), depth + 1)
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            for f in dataclasses.fields(x):
                yield from go(getattr(x, f.name, None), _join(key, f.name), depth + 1)
        elif hasattr(x, "__dict__"):
            try:
                attrs = list(vars(x).items())
            except TypeError:
                return
            for k, v in attrs:
                yield from go(v, _join(key, k), depth + 1)

    yield from go(obj, "", 0)


#: what the walk never goes into: sets (no order), classes, functions, modules
_SKIPPED = (set, frozenset, type, types.FunctionType, types.MethodType, types.BuiltinFunctionType,
            types.ModuleType, functools.partial)


def _is_mapping(x: Any) -> bool:
    # the standard library's abstract classes: only for objects that are not dicts
    from collections.abc import Mapping

    return isinstance(x, Mapping)


def _state_dict(x: Any) -> Any:
    try:
        return x.state_dict()
    except Exception:  # noqa: BLE001 - an object in an unusual state: left out
        return None


def _module_tensors(module: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """A module's parameters, then its buffers (non-persistent ones too), each once."""
    try:
        named = list(module.named_parameters()) + list(module.named_buffers())
    except Exception:  # noqa: BLE001 - a module in an unusual state: left out
        return
    for name, t in named:
        yield _join(prefix, name), t


def _attribute_tensors(module: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """Tensors a module and its submodules hold as plain attributes (not parameters or buffers):
    a shadow copy kept in a list or a dict, a cached statistic."""
    import torch

    try:
        modules = list(module.named_modules())
    except Exception:  # noqa: BLE001 - a module in an unusual state: left out
        return
    for name, m in modules:
        for attr, value in list(vars(m).items()):
            if attr.startswith("_") or isinstance(value, torch.nn.Module):
                continue
            if isinstance(value, (torch.Tensor, list, tuple, dict)):
                for key, t in walk(value):
                    if _is_tensor(t):
                        yield _join(_join(prefix, name), _join(attr, key) if key else attr), t


def describe(items: Iterator[tuple[str, Any]]) -> tuple[list[list[Any]], int]:
    """``[key, dtype, shape, fingerprint]`` of each tensor or array (device tensors digested where
    they are, one transfer per device), the first :data:`MAX_TENSORS` one by one and the rest
    folded into one entry; and how many there were."""
    rows: list[list[Any]] = []
    digests: list[Any] = []
    rest = fingerprint.hasher()
    count = 0
    for key, x in items:
        count += 1
        if _is_tensor(x):
            dtype, shape = str(x.dtype).removeprefix("torch."), list(x.shape)
            digest: Any = fingerprint.tensor(x, defer=True)
        else:
            dtype, shape = str(x.dtype), list(x.shape)
            digest = fingerprint.nested(x)
        if count <= MAX_TENSORS:
            rows.append([key, dtype, shape, None])
            digests.append(digest)
        else:
            rest.update(f"{key}\0{dtype}{shape}".encode())
            rest.update(str(fingerprint.resolve([digest])[0]).encode())
    for row, text in zip(rows, fingerprint.resolve(digests)):
        row[3] = text
    if count > MAX_TENSORS:
        rows.append([MORE, f"{count - MAX_TENSORS} tensors", [], rest.hexdigest()])
    return rows, count


# ---- where a save was made ---------------------------------------------------------------------
def location(frame: Any) -> dict[str, Any] | None:
    """The innermost frame of the target's own code from ``frame`` outward, as ``{"file",
    "line", "function"}`` (a framework's save is placed at the script's call into it)."""
    while frame is not None:
        code = frame.f_code
        if not origin.is_library(code.co_filename):
            return {"file": code.co_filename, "line": frame.f_lineno, "function": code.co_name}
        frame = frame.f_back
    return None


def called_by_script(frame: Any) -> bool:
    """Whether the call being made from ``frame`` (past repro-check's own wrappers) comes from
    the target's own code, not from a library: torch saves a tensor's storage into memory each
    time a tensor is pickled, which is no save of the script's."""
    while frame is not None and origin.is_own(frame.f_code.co_filename):
        frame = frame.f_back
    return frame is not None and not origin.is_library(frame.f_code.co_filename)


def shown_path(path: str | None, cwd: str) -> str | None:
    """A saved file's path as the reports show it: relative to the run's working folder when it
    is inside it, else as it is."""
    if path is None:
        return None
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:
        return path
    return path if rel.startswith(os.pardir) else rel


def _numpy_path(f: Any, suffix: str) -> str | None:
    """Where ``numpy.save``/``savez`` write ``f``: a path gets the suffix it lacks, as numpy
    adds it."""
    if isinstance(f, (str, os.PathLike)):
        text = os.fspath(f)
        if isinstance(text, str) and not text.endswith(suffix):
            text += suffix
        return os.path.abspath(text)
    return checkpoint.path_of(f)


# ---- watching the saves ------------------------------------------------------------------------
class SavedFiles:
    """Describes every save the run makes, and its modules' state at its end."""

    def __init__(self, recorder: Any, emit: Emit) -> None:
        self.rec = recorder
        self.emit = emit
        self.owner = os.getpid()
        self.cwd = os.getcwd()
        self.local = threading.local()
        self.lock = threading.Lock()
        self.order = 0
        self.modules = ModuleState(recorder)
        self.frameworks: FrameworkSaves | None = None
        self.ended = False

    # -- one save ---------------------------------------------------------------------------
    def wrap(self, kind: str, original: Callable[..., Any], where: Where) -> Any:
        """``original`` wrapped: ``where(args, kwargs)`` gives (object saved, path). A save with
        an object is described (unless inside another that is); a framework's save (no object)
        names the file of the buffers saved inside it."""
        saved = self

        @functools.wraps(original)
        def save(*args: Any, **kwargs: Any) -> Any:
            if os.getpid() != saved.owner:
                return original(*args, **kwargs)
            stack = saved.local.__dict__.setdefault("stack", [])
            try:
                obj, path = where(args, kwargs)
            except Exception:  # noqa: BLE001 - where it went cannot be told: the object counts
                obj, path = None, None
            inside = any(outer[0] for outer in stack)
            stack.append((obj is not None, kind, path))
            try:
                result = original(*args, **kwargs)
            finally:
                stack.pop()
            if obj is not None and not inside:
                outer = next((o for o in reversed(stack) if o[2] is not None), None)
                if path is None and outer is not None:
                    path, kind_shown = outer[2], f"{kind} ({outer[1]})"
                elif path is None and not called_by_script(sys._getframe(1)):
                    return result  # torch's own (pickling a tensor saves its storage to memory)
                else:
                    kind_shown = kind
                try:
                    saved.saved(kind_shown, obj, path, sys._getframe(1))
                except Exception as e:  # noqa: BLE001 - never break a save over its description
                    saved.emit({"warning": f"a save ({kind}) could not be described: "
                                           f"{type(e).__name__}: {e}"[:500],
                                "incomplete": True})
            return result

        return save

    def saved(self, kind: str, obj: Any, path: str | None, frame: Any) -> None:
        with self.rec.quiet():
            rows, count = describe(walk(obj))
        if kind == IN_MEMORY_PICKLE and not count:
            return  # a pickle of anything but tensors (a config, a message) is no saved result
        with self.lock:
            self.order += 1
            order = self.order
        self.emit({"info": {"saved": {
            "kind": SAVED_FILE, "order": order, "saver": kind,
            "path": shown_path(path, self.cwd), "step": self.rec.step,
            "location": location(frame), "count": count, "tensors": rows}}})

    # -- the end of the run -----------------------------------------------------------------
    def target_returned(self) -> None:
        """The target returned (or was stopped at ``--max-steps``): the modules' state."""
        if self.ended or os.getpid() != self.owner:
            return
        self.ended = True
        gc.collect()  # a module left in a reference cycle is gone in every run alike
        try:
            with self.rec.quiet():
                rows, count = describe(self.modules.tensors())
        except Exception as e:  # noqa: BLE001 - never fail a run over its end state
            self.emit({"warning": f"the modules' state at the end could not be described: "
                                  f"{type(e).__name__}: {e}"[:500], "incomplete": True})
            return
        self.emit({"info": {"saved": {
            "kind": SAVED_STATE, "order": 0, "saver": "modules", "path": None,
            "step": self.rec.step, "location": None, "count": count, "tensors": rows}}})

    # -- installing -------------------------------------------------------------------------
    def install(self) -> SavedFiles:
        import torch

        registry = patches.PATCHES
        obj, to = checkpoint.first_arg(0, "obj"), checkpoint.first_arg(1, "f")
        for owner in (torch, torch.serialization):  # torch.serialization.save called directly
            registry.wrap(FEATURE, owner, "save", lambda inner: self.wrap(
                "torch.save", inner, lambda a, k: (obj(a, k), checkpoint.path_of(to(a, k)))),
                token=self)
        module, to = checkpoint.first_arg(0, "m"), checkpoint.first_arg(1, "f")
        registry.wrap(FEATURE, torch.jit, "save", lambda inner: self.wrap(
            "torch.jit.save", inner, lambda a, k: (module(a, k), checkpoint.path_of(to(a, k)))),
            token=self)
        self._pickle()
        self._numpy()
        self._safetensors()
        self.frameworks = FrameworkSaves(self.rec, self).install()
        self.modules.install()
        return self

    def _pickle(self) -> None:
        """``pickle.dump`` to a file (a state dict pickled by hand), and ``pickle.dumps`` called by
        the script (bytes it writes itself) of what holds a tensor; ``pickle.dump`` into memory
        is not described."""
        import pickle  # the standard library's: loaded by torch anyway

        obj, file = checkpoint.first_arg(0, "obj"), checkpoint.first_arg(1, "file")

        def where(a: tuple[Any, ...], k: dict[str, Any]) -> tuple[Any, Any]:
            path = checkpoint.path_of(file(a, k))
            return (obj(a, k) if path is not None else None), path

        patches.PATCHES.wrap(FEATURE, pickle, "dump", lambda inner: self.wrap(
            "pickle.dump", inner, where), token=self)
        # the bytes of a pickle the script writes itself: described when they hold a tensor
        patches.PATCHES.wrap(FEATURE, pickle, "dumps", lambda inner: self.wrap(
            IN_MEMORY_PICKLE, inner, lambda a, k: (obj(a, k), None)), token=self)

    def _numpy(self) -> None:
        if importlib.util.find_spec("numpy") is None:
            return
        # numpy comes with torch's usual installs; without it there is nothing to watch
        import numpy as np

        arr, file = checkpoint.first_arg(1, "arr"), checkpoint.first_arg(0, "file")

        def npy(a: tuple[Any, ...], k: dict[str, Any]) -> tuple[Any, Any]:
            return np.asanyarray(arr(a, k)), _numpy_path(file(a, k), ".npy")

        def npz(a: tuple[Any, ...], k: dict[str, Any]) -> tuple[Any, Any]:
            named = {f"arr_{i}": v for i, v in enumerate(a[1:])}
            named.update({n: v for n, v in k.items() if n not in ("file", "allow_pickle")})
            return named, _numpy_path(file(a, k), ".npz")

        text = checkpoint.first_arg(1, "X"), checkpoint.first_arg(0, "fname")

        def txt(a: tuple[Any, ...], k: dict[str, Any]) -> tuple[Any, Any]:
            return np.asanyarray(text[0](a, k)), _numpy_path(text[1](a, k), "")

        registry = patches.PATCHES
        registry.wrap(FEATURE, np, "save", lambda inner: self.wrap("numpy.save", inner, npy),
                      token=self)
        registry.wrap(FEATURE, np, "savetxt", lambda inner: self.wrap(
            "numpy.savetxt", inner, txt), token=self)
        for name in ("savez", "savez_compressed"):
            registry.wrap(FEATURE, np, name, functools.partial(
                lambda label, inner: self.wrap(label, inner, npz), f"numpy.{name}"), token=self)

    def _safetensors(self) -> None:
        if importlib.util.find_spec("safetensors") is None:
            return
        registry = patches.PATCHES
        tensors, model = checkpoint.first_arg(0, "tensors"), checkpoint.first_arg(0, "model")
        filename = checkpoint.first_arg(1, "filename")
        for module_name in ("safetensors.torch", "safetensors.numpy"):
            try:
                module = importlib.import_module(module_name)
            except Exception as e:  # noqa: BLE001 - an unusual install: its saves go unseen
                registry.skip(FEATURE, module_name, f"{type(e).__name__}: {e}")
                continue
            for name, what in (("save_file", tensors), ("save_model", model)):
                if hasattr(module, name):
                    registry.wrap(FEATURE, module, name, functools.partial(
                        lambda label, get, inner: self.wrap(
                            label, inner, lambda a, k: (get(a, k), checkpoint.path_of(
                                filename(a, k)))), f"{module_name}.{name}", what), token=self)
            if hasattr(module, "save"):  # the bytes of a file, which the script writes itself
                registry.wrap(FEATURE, module, "save", functools.partial(
                    lambda label, inner: self.wrap(label, inner, lambda a, k: (
                        tensors(a, k), None)), f"{module_name}.save"), token=self)

    def uninstall(self) -> None:
        if self.frameworks is not None:
            self.frameworks.uninstall()
        self.modules.uninstall()
        patches.PATCHES.release(self)


#: ``pickle.dumps`` called by the script: a save only when what it pickles holds a tensor
IN_MEMORY_PICKLE = "pickle.dumps"


#: the feature the save functions are wrapped as (:data:`repro_check.child.patches.ORDER`)
FEATURE = "saved.files"


class FrameworkSaves(checkpoint.FrameworkSaves):
    """Lightning's and the HF Trainer's saves, and ``torch.distributed.checkpoint``'s, wrapped
    for every run (as :mod:`repro_check.child.observe.checkpoint` wraps them for a resume)."""

    failure = "the files saved through {name} are not compared"
    feature = FEATURE

    def install(self) -> FrameworkSaves:
        super().install()
        return self


# ---- the modules' state ------------------------------------------------------------------------
class ModuleState:
    """The top-level modules of the run, held from the last step on, and their tensors."""

    def __init__(self, recorder: Any) -> None:
        self.rec = recorder
        self.held: list[Any] = []
        self.known = -1

    def install(self) -> ModuleState:
        import torch.nn as nn

        def make(original: Any) -> Any:
            @functools.wraps(original)
            def __setstate__(module: Any, state: Any) -> None:
                original(module, state)
                try:  # a copy (copy.deepcopy) or an unpickled model: where it was made
                    origin.SITES.note(module, sys._getframe(1))
                except Exception:  # noqa: BLE001 - a site is a nicety; never break the target
                    pass

            return __setstate__

        patches.PATCHES.wrap("saved.modules", nn.Module, "__setstate__", make, token=self)
        self.rec.step_starting.append(self.hold)
        return self

    def uninstall(self) -> None:
        if self.hold in self.rec.step_starting:
            self.rec.step_starting.remove(self.hold)
        patches.PATCHES.release(self)

    def hold(self) -> None:
        """Before each backward call and optimizer step: keep the modules alive now (a target
        function's locals are gone once it returns), when they changed since the last look."""
        sites = origin.SITES.sites
        if len(sites) == self.known:
            return
        self.held = []  # what only we held goes first
        self.held = list(sites.keys())
        self.known = len(sites)

    def roots(self) -> list[tuple[str, Any]]:
        """The top-level modules with tensors, named (:meth:`~repro_check.child.observe.origin.
        ModelSites.named_roots`), those this run held alive included."""
        return origin.SITES.named_roots(self.held)

    def tensors(self) -> Iterator[tuple[str, Any]]:
        for name, m in self.roots():
            yield from _module_tensors(m, name)
            yield from _attribute_tensors(m, name)


def install(recorder: Any, emit: Emit) -> SavedFiles:
    """Describe every save of the run, and its modules' state at its end."""
    return SavedFiles(recorder, emit).install()
