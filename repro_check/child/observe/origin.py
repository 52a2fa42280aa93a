"""Where things came from in the target's own code: the call that seeded a stream, the line that
built a model.

A report that says "the runs differ" is only half an answer; "``Net`` was built at train.py:20,
before the script seeded torch at train.py:26" is the other half. Both places are the innermost
frame of the target's own code on the stack: not the standard library, an installed package
(``transformers.set_seed`` is reported where the script called into transformers), torch or
repro-check itself (its bundled workloads count as target code).

Model sites: ``nn.Module.__init__`` is wrapped to note, for each module, where it was built and
in which order (a counter shared with the seeding watch, so the report can tell whether the
model was built before the script seeded itself). The top-level modules are found only when
asked, among those whose parameters an optimizer holds.
"""

from __future__ import annotations

import functools
import itertools
import linecache
import os
import random
import re
import sys
import sysconfig
import threading
import weakref
from collections.abc import Iterable
from typing import Any
from repro_check.child import patches

_ORDER = itertools.count(1)
_ORDER_LOCK = threading.Lock()


def tick() -> int:
    """The next number of one order shared by seeding calls and model constructions."""
    with _ORDER_LOCK:
        return next(_ORDER)


def _library_roots() -> tuple[str, ...]:
    roots = set()
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        if paths.get(key):
            roots.add(os.path.realpath(paths[key]) + os.sep)
    for path in sys.path:
        if path.rstrip(os.sep).endswith(("site-packages", "dist-packages")):
            roots.add(os.path.realpath(path) + os.sep)
    roots.add(_PACKAGE)
    torch = sys.modules.get("torch")
    torch_file = getattr(torch, "__file__", None) if torch is not None else None
    if torch_file:
        roots.add(os.path.dirname(os.path.realpath(torch_file)) + os.sep)
    return tuple(roots)


_ROOTS: tuple[str, ...] | None = None
#: this package, and its bundled workloads (the target's own code when run)
#: (repro_check/, from child/observe/)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))) + os.sep
_WORKLOADS = os.path.join(_PACKAGE, "workloads") + os.sep
_IS_LIBRARY: dict[str, bool] = {}


def is_library(path: str) -> bool:
    """Whether ``path`` (a code object's file name) is not the target's own code."""
    known = _IS_LIBRARY.get(path)
    if known is not None:
        return known
    global _ROOTS
    if _ROOTS is None:
        _ROOTS = _library_roots()
    if path.startswith("<"):
        found = True
    else:
        real = os.path.realpath(path)
        found = real.startswith(_ROOTS) and not real.startswith(_WORKLOADS)
    _IS_LIBRARY[path] = found
    return found


#: torch's own wrappers around a call (``torch._dynamo`` wraps ``torch.manual_seed`` in
#: ``_disable_dynamo`` once it is imported): frames a call passes through on its way from the
#: target's code to the function it called
_TRANSPARENT = (os.sep + os.path.join("torch", "_compile.py"),
                os.sep + os.path.join("torch", "_dynamo", "eval_frame.py"))


def is_transparent(path: str) -> bool:
    """Whether a frame of ``path`` only passes a call on (torch's wrappers)."""
    return path.endswith(_TRANSPARENT)


_PASSES_ON: dict[str, bool] = {}


def is_own(path: str) -> bool:
    """Whether ``path`` is repro-check's own code (its bundled workloads are the target's)."""
    real = os.path.realpath(path)
    return real.startswith(_PACKAGE) and not real.startswith(_WORKLOADS)


def passes_on(path: str) -> bool:
    """Whether a frame of ``path`` only passes a call on from the target's code to what it
    called: torch's wrappers, repro-check's own (the hooks of :mod:`repro_check.child.patches`)
    and ``random.py`` (``random.Random()`` seeds itself through its ``seed`` method). The frames
    such a call leaves inside a library are :func:`is_library`'s, not these."""
    known = _PASSES_ON.get(path)
    if known is None:

        known = _PASSES_ON[path] = is_transparent(path) or is_own(path) or (
            os.path.realpath(path) == os.path.realpath(random.__file__))
    return known


def direct_caller(frame: Any) -> Any:
    """The frame that made the call ``frame`` is in, past torch's wrappers."""
    while frame is not None and is_transparent(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def site_of(frame: Any) -> str | None:
    """``file:line`` of the innermost frame of the target's own code, from ``frame`` outward."""
    while frame is not None:
        path = frame.f_code.co_filename
        if not is_library(path):
            return f"{path}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def caller(depth: int = 1) -> str | None:
    """``file:line`` in the target's own code of the call being made ``depth`` frames up."""
    try:
        return site_of(sys._getframe(depth + 1))
    except ValueError:
        return None


_ASSIGNED = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?::[^=]*)?=(?!=)")


def assigned_name(site: str | None) -> str | None:
    """The name a site's line assigns to (``netG = Generator()`` gives ``netG``), if any."""
    if not site:
        return None
    path, _, line = site.rpartition(":")
    try:
        text = linecache.getline(path, int(line))
    except (ValueError, OSError):
        return None
    match = _ASSIGNED.match(text)
    return match.group(1) if match else None


def shared_memory(tensor: Any) -> bool:
    """Whether a CPU tensor's storage is in shared memory (``Tensor.is_shared`` is always true
    of a CUDA tensor, which says nothing of other processes)."""
    try:
        return tensor.device.type == "cpu" and bool(tensor.is_shared())
    except Exception:  # noqa: BLE001 - a tensor subclass in an unusual state
        return False


class ModelSites:
    """Where each ``nn.Module`` was built, in build order; asked for the top-level models."""

    def __init__(self) -> None:
        self.sites: weakref.WeakKeyDictionary[Any, tuple[str | None, int]] = \
            weakref.WeakKeyDictionary()
        self.installed = False

    def install(self) -> ModelSites:
        """Note where each module is built (installing again changes nothing)."""
        import torch.nn as nn

        sites = self

        def make(original: Any) -> Any:
            @functools.wraps(original)
            def __init__(module: Any, *args: Any, **kwargs: Any) -> None:
                original(module, *args, **kwargs)
                try:
                    sites.note(module, sys._getframe(1))
                except Exception:  # noqa: BLE001 - a site is a nicety; never break the target
                    pass

            return __init__

        patches.PATCHES.wrap("origin.models", nn.Module, "__init__", make, token=self)
        self.installed = True
        return self

    def uninstall(self) -> None:
        patches.PATCHES.release(self)
        self.installed = False

    def note(self, module: Any, frame: Any) -> None:
        """Record where ``module`` is being built: the first frame outside its own ``__init__``
        chain (``super().__init__()`` calls), then outward to the target's own code."""
        while frame is not None and frame.f_code.co_name == "__init__":
            code = frame.f_code
            if not code.co_argcount or frame.f_locals.get(code.co_varnames[0]) is not module:
                break
            frame = frame.f_back
        self.sites[module] = (site_of(frame), tick())

    def site(self, module: Any) -> str | None:
        found = self.sites.get(module)
        return found[0] if found else None

    def models_holding(self, tensors: Iterable[Any]) -> list[dict[str, Any]]:
        """The top-level modules (built under this watch, no other's submodule) that hold any of
        ``tensors`` as a parameter, in build order: ``{"class", "name", "where", "order"}``, and
        ``"shared": true`` where those parameters are in memory shared with other processes
        (``model.share_memory()``: other processes may update them while this one trains)."""
        ids = {id(t) for t in tensors}
        modules = list(self.sites.items())
        inner = {id(child) for module, _ in modules for child in module.children()}
        found = []
        for module, (where, order) in modules:
            if id(module) in inner:
                continue
            held = [p for p in module.parameters() if id(p) in ids]
            if held:
                model = {"class": type(module).__name__, "name": assigned_name(where),
                         "where": where, "order": order}
                if any(shared_memory(p) for p in held):
                    model["shared"] = True
                found.append(model)
        return sorted(found, key=lambda m: m["order"])

    def named_roots(self, also: Iterable[Any] = ()) -> list[tuple[str, Any]]:
        """The top-level modules holding a tensor (a parameter or a buffer), of those built
        under this watch and ``also`` (modules kept alive elsewhere), in build order: each named
        as the line that built it assigns it (``ema = copy.deepcopy(model)``: ``ema``), else by
        its class; a name taken before gets ``#k`` (``self.layers``, ``self.layers#2``). One
        naming for every part of a run that names a model's tensors (the modules' state at the
        end, the negative control's planted tensor), so that they name the same tensor alike."""
        modules = {id(m): m for m in [*also, *list(self.sites.keys())]}
        inner: set[int] = set()
        for m in modules.values():
            try:
                inner.update(id(c) for c in m.children())
            except Exception:  # noqa: BLE001 - a module in an unusual state
                continue
        tops = [m for k, m in modules.items() if k not in inner]
        tops.sort(key=lambda m: self.sites.get(m, (None, 0))[1])
        named: list[tuple[str, Any]] = []
        taken: dict[str, int] = {}
        for m in tops:
            try:
                if not any(True for _ in itertools.chain(m.parameters(), m.buffers())):
                    continue
            except Exception:  # noqa: BLE001 - a module in an unusual state
                continue
            name = assigned_name(self.site(m)) or type(m).__name__
            taken[name] = taken.get(name, 0) + 1
            named.append((name if taken[name] == 1 else f"{name}#{taken[name]}", m))
        return named


#: the sites of this process (installed by the run entry)
SITES = ModelSites()
