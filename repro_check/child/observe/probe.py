"""The step probe: during one chosen step, record every tensor op and every module's output.

Armed by the recorder when the step to localize starts and disarmed when it ends, so a long run
pays nothing for the other steps. While armed it records, in execution order:

* every ATen op that reaches the dispatcher (a ``TorchDispatchMode``): its name, the fingerprint
  of each argument before it runs and of each result after, the phase (``data`` while a DataLoader
  yields, ``forward``, ``backward``, ``optimizer``) and the module it belongs to;
* every module's forward inputs and output (global forward pre/post hooks), and the gradient that
  flows back into its output (a tensor hook on the output, which, unlike full module backward
  hooks, also works for modules that modify tensors in place);
* every tensor the target's code makes from data outside torch (``torch.tensor``,
  ``torch.as_tensor``, ``torch.asarray``, ``torch.from_numpy``, ``torch.frombuffer``: an
  environment's observation, a numpy array, bytes from the OS), with the line that made it
  (``{"k": "made"}``), so that a value no op produced is traced to where it entered;
* what other hooks note (:meth:`StepProbe.note`): the observations an RL environment's
  ``reset``/``step`` returned (``{"k": "env"}``, :mod:`repro_check.child.observe.env_hooks`).

An op in forward belongs to the innermost module whose forward is running. An op in backward
belongs to the module that created the autograd node being executed: each module, when its
forward returns, claims the not yet claimed nodes between its outputs and its inputs (inner
modules return first, so they claim first). Module names are qualified by the model they belong
to: the root module (a module called while no other module's forward runs) is named by its class,
its submodules by that and their qualified names from ``named_modules()`` (``Generator.main.0``,
``Discriminator.main.0``: a GAN's two models share their submodule names). A second root of a
class already seen is named by the variable its construction line assigns to (``netD2``), or
``Class#2``.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator
from types import FrameType
from typing import Any

from repro_check.child.observe import origin
from repro_check.child.observe.compiled_calls import CompiledCalls, unique_graphs
from repro_check.child.observe.tracing import compiling
from repro_check.child import patches
from repro_check.trace import fingerprint
from repro_check.trace.probes import VALUES_LIMIT

Emit = Callable[[dict[str, Any]], None]

#: torch's functions that make a tensor from data outside torch (numpy arrays, Python values,
#: buffers)
FACTORIES: tuple[str, ...] = ("tensor", "as_tensor", "asarray", "from_numpy", "frombuffer")
#: non-tensor arguments with a longer ``repr`` are hashed
_SHORT_REPR = 48
#: op namespaces that compute nothing (profiler ranges): not recorded
_UNRECORDED = ("profiler::",)


def _tensors_in(obj: Any, depth: int = 0) -> Iterator[Any]:
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)) and depth < 4:
        for x in obj:
            yield from _tensors_in(x, depth + 1)
    elif isinstance(obj, dict) and depth < 4:
        for x in obj.values():
            yield from _tensors_in(x, depth + 1)


def _plain(a: Any, depth: int = 0) -> bool:
    """Whether ``repr(a)`` is a faithful, address-free text of the value."""
    import torch

    if a is None or isinstance(a, (bool, int, float, complex, str, torch.dtype, torch.device,
                                   torch.layout, torch.memory_format)):
        return True
    if isinstance(a, (list, tuple)) and depth < 3:
        return all(_plain(x, depth + 1) for x in a)
    return False


def output_values(output: Any) -> dict[str, Any] | None:
    """The values of a model's output (its first tensor, floating point, at most
    :data:`~repro_check.trace.probes.VALUES_LIMIT` of them) as the record's ``v``, from which
    the parent tells the largest difference of two sides; None for any other output."""
    import torch

    t = next(_tensors_in(output), None)
    if (t is None or not t.is_floating_point() or t.numel() > VALUES_LIMIT
            or t.device.type == "meta"):
        return None
    try:
        values = array("d", t.detach().to("cpu", torch.float64).reshape(-1).tolist())
    except Exception:  # noqa: BLE001 - a tensor without readable values (a subclass): none
        return None
    return {"shape": list(t.shape), "b64": base64.b64encode(values.tobytes()).decode()}


def compiled_code() -> str | None:
    """``code`` when this process has run code ``torch.compile`` made (a graph dynamo
    captured), else None; never imports dynamo itself."""
    return "code" if unique_graphs() else None


def compiled_wrapper(module: Any) -> bool:
    """``torch.compile(model)``'s wrapper (an ``OptimizedModule``): not a module of the model.
    Left out, the model inside is the root and its modules have the names they have eager, so
    a compiled and an eager run's modules and ops line up."""
    return type(module).__name__ == "OptimizedModule" and hasattr(module, "_orig_mod")


def arg_fingerprint(a: Any) -> str:
    """One argument or result of an op: tensors by their bytes, numbers and other plain values
    by ``repr``, anything else (handles, opaque objects) by its type only."""
    import torch

    try:
        if isinstance(a, torch.Tensor) or (
            isinstance(a, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in a)
        ):
            return fingerprint.nested(a)
    except Exception as e:  # noqa: BLE001 - a tensor without bytes (meta, subclass): say so
        return f"<{type(a).__name__}: {type(e).__name__}>"
    if not _plain(a):
        return f"<{type(a).__name__}>"
    text = repr(a)
    if len(text) <= _SHORT_REPR:
        return text
    h = fingerprint.hasher()
    h.update(text.encode())
    return h.hexdigest()


class StepProbe:
    """Records one step's ops and module outputs as ``{"probe": {...}}`` trace records."""

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self.step: int | None = None
        self.phase = "forward"
        self.seq = 0
        self._quiet = 0
        self._mode: Any = None
        self._handles: list[Any] = []
        #: (name, the grad_fn nodes of its inputs, fingerprint of its inputs) per running forward
        self._stack: list[tuple[str, set[Any], str]] = []
        self._names: dict[int, str] = {}
        #: the class of the compiled model the armed step called (torch.compile's wrapper)
        self.compiled: str | None = None
        #: a compiled model ran compiled in the armed step (the recorder stepped aside)
        self.ran_compiled = False
        #: per compiled model running now: its wrapper, the recorder's mode taken off the
        #: stack while it runs (None: the recorder stayed, the model runs eagerly), and
        #: PyTorch's DebugMode recording inside it meanwhile
        self._aside: list[tuple[Any, Any, CompiledCalls | None]] = []
        self._roots: list[Any] = []
        self._labels: set[str] = set()
        self._node_module: dict[Any, str] = {}
        self._hooked: dict[int, Any] = {}
        #: called with the probe once it is armed (what others kept from before the step)
        self.on_arm: list[Callable[[StepProbe], None]] = []

    # ---- arming --------------------------------------------------------------------------
    @property
    def armed(self) -> bool:
        return self.step is not None

    def arm(self, step: int) -> None:
        import torch.nn.modules.module as mod
        from torch.utils._python_dispatch import TorchDispatchMode

        probe = self

        class _Ops(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                                   kwargs: Any = None) -> Any:
                return probe._op(func, args, kwargs or {})

        self.step = step
        self.phase = "forward"
        self.emit({"probe": {"k": "armed", "step": step}})
        self._handles.append(mod.register_module_forward_pre_hook(self._forward_pre))
        self._handles.append(mod.register_module_forward_hook(self._forward_post))
        self._mode = _Ops()
        self._mode.__enter__()
        self._wrap_factories()
        for then in self.on_arm:
            try:
                then(self)
            except Exception:  # noqa: BLE001 - never break the target
                pass

    def disarm(self) -> None:
        if self.step is None:
            return
        self._unwrap_factories()
        if self._mode is not None:
            try:
                self._mode.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - the target left its own mode on top; ours goes with it
                pass
            self._mode = None
        for h in self._handles:
            h.remove()
        self._handles.clear()
        mark: dict[str, Any] = {"k": "disarmed", "step": self.step, "records": self.seq}
        compiled = self.compiled or compiled_code()
        if compiled:
            mark["compiled"] = compiled
        if self.ran_compiled:
            mark["ran_compiled"] = True
        self.emit({"probe": mark})
        self.compiled = None
        self.ran_compiled = False
        for _, _, calls in reversed(self._aside):  # a compiled forward that raised
            if calls is not None:
                try:
                    calls.stop()
                except Exception:  # noqa: BLE001 - never break the target
                    pass
        self._aside.clear()
        self.step = None
        self._stack.clear()
        self._node_module.clear()
        self._hooked.clear()

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Ops run inside this block (repro-check's own fingerprinting) are not recorded."""
        self._quiet += 1
        try:
            yield
        finally:
            self._quiet -= 1

    def note(self, rec: dict[str, Any]) -> None:
        """Record ``rec`` (another hook's record, such as an environment call) while armed."""
        if self.step is None or self._quiet:
            return
        with self.quiet():
            self._record(rec)

    def _record(self, rec: dict[str, Any]) -> None:
        self.seq += 1
        rec["i"] = self.seq
        self.emit({"probe": rec})

    # ---- tensors made from outside data ---------------------------------------------------
    def _wrap_factories(self) -> None:
        import torch

        for name in FACTORIES:
            if getattr(torch, name, None) is not None:
                patches.PATCHES.wrap("probe.factories", torch, name,
                                     functools.partial(self._made, name), token=self)

    def _unwrap_factories(self) -> None:
        patches.PATCHES.release(self)

    def _made(self, name: str, original: Any) -> Any:
        probe = self

        @functools.wraps(original)
        def make(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            if probe.step is not None and not probe._quiet:
                try:
                    frame: FrameType | None = sys._getframe(1)
                    while frame is not None and origin.is_library(frame.f_code.co_filename):
                        frame = frame.f_back
                    loc = None if frame is None else {
                        "file": frame.f_code.co_filename, "line": frame.f_lineno,
                        "function": frame.f_code.co_name}
                    with probe.quiet():
                        probe._record({"k": "made", "fn": f"torch.{name}", "loc": loc,
                                       "out": arg_fingerprint(out)})
                except Exception:  # noqa: BLE001 - never break the target
                    pass
            return out

        return make

    # ---- modules -------------------------------------------------------------------------
    def _name(self, module: Any) -> str:
        key = id(module)
        name = self._names.get(key)
        if name is not None:
            return name
        if not self._stack:  # a root: name it and everything inside it
            self._roots.append(module)
            root_label = self._root_label(module)
            for qual, sub in module.named_modules(remove_duplicate=False):
                self._names.setdefault(id(sub), f"{root_label}.{qual}" if qual else root_label)
            return self._names[key]
        name = f"{self._stack[-1][0]}/{type(module).__name__}"  # not registered under the root
        self._names[key] = name
        self._roots.append(module)  # keep it alive, so its id is not reused
        return name

    def _root_label(self, module: Any) -> str:
        """The class name, unless another root took it: then the name the model was assigned
        to where it was built, or ``Class#k``."""
        label = type(module).__name__
        if label in self._labels:
            variable = origin.assigned_name(origin.SITES.site(module))
            label = variable if variable and variable not in self._labels else label
            k = 2
            while label in self._labels:
                label, k = f"{type(module).__name__}#{k}", k + 1
        self._labels.add(label)
        return label

    def _forward_pre(self, module: Any, args: Any) -> None:
        if compiling():
            return
        if compiled_wrapper(module):
            if self.step is not None:
                self.compiled = type(module._orig_mod).__name__
                if not self._quiet:
                    self._enter_compiled(module, args)
            return
        if self._quiet:
            return
        with self.quiet():
            self._stack.append(self._entry(module, args))

    def _entry(self, module: Any, args: Any) -> tuple[str, set[Any], str]:
        """(name, the grad_fn nodes of its inputs, fingerprint of its inputs) of a forward
        that starts."""
        name = self._name(module)
        boundary = {t.grad_fn for t in _tensors_in(args) if t.grad_fn is not None}
        return name, boundary, fingerprint.nested(args)

    def _enter_compiled(self, module: Any, args: Any) -> None:
        """A compiled model starts: the recorder's mode leaves the dispatch stack while it runs,
        since PyTorch runs compiled code eagerly under a dispatch mode, and the difference of a
        compiled step lies in its compiled kernels. Its output is recorded as the output of
        the model inside (named as in an eager run), with its values."""
        aside = None
        try:
            from torch.utils._python_dispatch import (_get_current_dispatch_mode,
                                                      _pop_mode_temporarily)

            if self._mode is not None and _get_current_dispatch_mode() is self._mode:
                aside = _pop_mode_temporarily()
                aside.__enter__()
                self.ran_compiled = True
        except Exception:  # noqa: BLE001 - a PyTorch without these: the model runs eagerly
            aside = None
        calls = None
        if aside is not None:  # else the model's own hooks record it, eagerly
            with self.quiet():
                self._stack.append(self._entry(module._orig_mod, args))
            calls = CompiledCalls(arg_fingerprint)
            calls.start()
        self._aside.append((module, aside, calls))

    def _forward_post(self, module: Any, args: Any, output: Any) -> None:
        if compiling():
            return
        compiled = compiled_wrapper(module)
        if compiled:
            if not self._aside or self._aside[-1][0] is not module:
                return
            _, aside, calls = self._aside.pop()
            if aside is None:
                return
            inside = calls.stop() if calls is not None else {"missing": "not recorded"}
            aside.__exit__(None, None, None)
        if self._quiet or not self._stack:
            return
        name, boundary, in_fp = self._stack.pop()
        if compiled:
            with self.quiet():
                self._record({"k": "calls", "m": name, **inside})
        with self.quiet():
            outputs = list(_tensors_in(output))
            rec: dict[str, Any] = {"k": "module", "ph": "forward", "m": name, "in": in_fp,
                                   "out": fingerprint.nested(output)}
            if compiled:
                rec["c"] = True
            if not self._stack:  # a model's output: its values, for the largest difference
                values = output_values(output)
                if values is not None:
                    rec["v"] = values
            self._record(rec)
            self._claim_nodes(name, outputs, boundary)
            for n, t in enumerate(outputs):
                if t.requires_grad and id(t) not in self._hooked:
                    try:
                        t.register_hook(functools.partial(self._output_grad, name, n))
                    except RuntimeError:
                        continue
                    self._hooked[id(t)] = t  # kept alive for the step: ids stay unique

    def _claim_nodes(self, name: str, outputs: list[Any], boundary: set[Any]) -> None:
        todo = [t.grad_fn for t in outputs if t.grad_fn is not None]
        seen: set[Any] = set()
        while todo:
            node = todo.pop()
            if node in seen or node in boundary:
                continue
            seen.add(node)
            self._node_module.setdefault(node, name)
            for nxt, _ in node.next_functions:
                if nxt is not None:
                    todo.append(nxt)

    def _output_grad(self, name: str, index: int, grad: Any) -> None:
        if self.step is None:
            return
        with self.quiet():
            self._record({"k": "module", "ph": "backward", "m": name, "n": index,
                          "out": arg_fingerprint(grad)})

    def gradients(self, params: Iterable[tuple[str, Any]]) -> None:
        """The gradients the optimizer is about to use (``{"k": "grad"}``), each named by its
        model's module path where a recorded model holds it (else by the optimizer's group
        and position), with its values: where a compiled model's backward runs fused kernels
        that no op record shows, the first parameter whose gradient differs still names the
        module, and how far."""
        if self.step is None or self._quiet:
            return
        with self.quiet():
            try:
                names = {id(p): f"{self._names.get(id(root), type(root).__name__)}.{qual}"
                         for root in self._roots if hasattr(root, "named_parameters")
                         for qual, p in root.named_parameters()}
                for position, p in params:
                    grad = getattr(p, "grad", None)
                    if grad is None:
                        continue
                    rec: dict[str, Any] = {"k": "grad", "p": names.get(id(p), position),
                                           "out": arg_fingerprint(grad)}
                    values = output_values(grad)
                    if values is not None:
                        rec["v"] = values
                    self._record(rec)
            except Exception:  # noqa: BLE001 - never break the target
                pass

    # ---- ops -----------------------------------------------------------------------------
    def _op(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        schema = getattr(func, "_schema", None)
        name = schema.name if schema is not None else str(func)
        if self._quiet or name.startswith(_UNRECORDED):
            return func(*args, **kwargs)
        import torch

        ins = [arg_fingerprint(a) for a in args] + [arg_fingerprint(v) for v in kwargs.values()]
        out = func(*args, **kwargs)
        node = torch._C._current_autograd_node()
        if node is not None:
            phase, module = "backward", self._node_module.get(node)
        else:
            phase = self.phase
            module = self._stack[-1][0] if self._stack and phase in ("forward", "data") else None
        outs = out if isinstance(out, (tuple, list)) else (out,)
        self._record({"k": "op", "ph": phase, "m": module, "op": name,
                      "in": ins, "out": [arg_fingerprint(o) for o in outs]})
        return out
