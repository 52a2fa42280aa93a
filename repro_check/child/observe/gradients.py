"""Steps of a script that trains without a torch.optim optimizer.

A run that makes a ``torch.optim`` optimizer counts its optimizer steps, whatever else it does
(a run that makes one and never steps it has its gradient computations as its steps, kept aside
until it ends: :meth:`repro_check.child.observe.capture.Recorder.shadowing`). A run that makes none
trains by hand: a meta-learning loop, a hand-written optimizer class, a
physics-informed net, a ``torch.func`` loop over a dict of parameters. Its steps are its gradient
computations, each one step, numbered in the order they run:

* a call of ``torch.autograd.backward`` (``loss.backward()``; wrapped in
  :mod:`repro_check.child.observe.capture`);
* a call of ``torch.autograd.grad``;
* a call of a function made by ``torch.func.grad`` or ``torch.func.grad_and_value``, or of the
  ``vjp_fn`` that ``torch.func.vjp`` returns;
* a call of a function made by ``torch.func.vmap`` inside which one of those ran (per-sample
  gradients): the ``vmap`` call is the step.

Only the outermost computation counts: a gradient computed inside another (a reentrant
checkpoint's recomputation, the ``autograd.grad`` a ``torch.func`` transform runs, a ``grad``
under ``vmap``) is part of it. A step's signals are those of an optimizer step, taken from what
the computation shows: the loss (the scalar differentiated, when it is one: ``grad_and_value``'s
value, ``vjp``'s output), the gradients it returned, and, from step 2, ``updated``: the tensors
the previous step differentiated with respect to, fingerprinted as this step's computation
starts, so after the script's own update of them, however it makes it (``p -= lr * g`` under
``no_grad``, ``p.data = ...``, ``p.copy_(...)``, ``torch.optim._functional``, a class with its
own ``step()``, a hook inside ``backward``). A step is emitted as its gradient computation ends,
so a run that crashes keeps every step it made; the update after the last step is seen only in
what the run returns. A functional update that makes new tensors leaves the old ones as they
were: the difference shows in the next step's gradients and loss.

A run that computes no gradient at all and makes no optimizer may still change its parameters
in place (an evolution strategy): :class:`InPlaceWatch` makes its ``torch.no_grad`` blocks that
did so its steps.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from repro_check.child.observe import origin
from repro_check.child.observe.tracing import compiling
from repro_check.child import patches

#: the ``torch.func`` transforms whose functions are wrapped, and what each returns
TRANSFORMS: tuple[str, ...] = ("grad", "grad_and_value", "vjp", "vmap")


def install(hooks: Any, rec: Any) -> None:
    """Wrap ``torch.autograd.grad`` and the ``torch.func`` transforms, through ``hooks``
    (:class:`repro_check.child.observe.capture.Hooks`) for recorder ``rec``."""
    import torch.autograd

    def make_grad(original: Any) -> Any:
        @functools.wraps(original)
        def grad(outputs: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            if (rec.optimizers_made and not rec.shadowing()) or compiling():
                return original(outputs, inputs, *args, **kwargs)
            if rec.computing_now() or in_transform():
                rec.note_gradient()
                return original(outputs, inputs, *args, **kwargs)
            trained = named_tensors(inputs)
            _starts(rec, trained)
            with rec.computing():
                result = original(outputs, inputs, *args, **kwargs)
            rec.on_gradients(_single(outputs), named_tensors(result), trained)
            return result

        return grad

    hooks.replace("gradients.autograd", torch.autograd, "grad", make_grad)
    try:
        # torch.func is torch's own (2.0 and later); an older torch has none to wrap
        import torch.func as func
    except ImportError:
        patches.PATCHES.skip("gradients.func", "torch.func", "this torch has no torch.func")
        return
    for name in TRANSFORMS:
        original = getattr(func, name, None)
        if original is None:
            patches.PATCHES.skip("gradients.func", f"torch.func.{name}",
                                 f"this torch has no torch.func.{name}")
            continue
        hooks.replace("gradients.func", func, name, _transform(rec, name))
    _legacy(hooks, rec)


def _legacy(hooks: Any, rec: Any) -> None:
    """The deprecated ``functorch`` package's transforms call torch's private modules at call
    time (``torch._functorch.apis.grad``, ``torch._functorch.eager_transforms.vjp``): those are
    wrapped too, and skipped, with the reason listed, where this torch has them elsewhere."""
    private = (("torch._functorch.apis", ("grad", "grad_and_value", "vmap")),
               ("torch._functorch.eager_transforms", ("vjp",)))
    for module_name, names in private:
        try:
            # private to torch: looked for, never relied on
            module = importlib.import_module(module_name)
        except ImportError:
            patches.PATCHES.skip("gradients.func", module_name, "not in this torch")
            continue
        for name in names:
            if not callable(getattr(module, name, None)):
                patches.PATCHES.skip("gradients.func", f"{module_name}.{name}",
                                     "not in this torch")
                continue
            hooks.replace("gradients.func", module, name, _transform(rec, name))


def install_no_grad(hooks: Any, rec: Any) -> None:
    """Wrap ``torch.no_grad``'s ``__enter__`` and ``__exit__`` (the decorator form goes through
    them too): the outermost block of a thread tells ``rec`` where it starts and ends."""
    import torch

    cls = torch.no_grad
    if not all(name in vars(cls) for name in ("__enter__", "__exit__")):
        patches.PATCHES.skip("gradients.no_grad", "torch.no_grad",
                             "this torch's no_grad has no __enter__ and __exit__ of its own")
        return

    def make_enter(original: Any) -> Any:
        @functools.wraps(original)
        def __enter__(self: Any) -> Any:
            rec.no_grad_entered(sys._getframe(1))
            return original(self)

        return __enter__

    def make_exit(original: Any) -> Any:
        @functools.wraps(original)
        def __exit__(self: Any, *exc: Any) -> Any:
            try:
                return original(self, *exc)
            finally:
                rec.no_grad_exited()

        return __exit__

    hooks.replace("gradients.no_grad", cls, "__enter__", make_enter)
    hooks.replace("gradients.no_grad", cls, "__exit__", make_exit)


class InPlaceWatch:
    """Steps of a run that computes no gradient at all and makes no optimizer, yet changes its
    parameters (an evolution strategy, a Hebbian rule): each outermost ``torch.no_grad`` block of
    the script's own code after which a parameter of a model the run built has changed in place
    (its version counter moved since the last block) is one, its ``updated`` signal the
    parameters that changed. They are kept aside and become the run's steps only if it ends
    without any other (a gradient computation or an optimizer drops them), so no other script
    counts differently. A change through ``.data`` moves no version counter and is not seen.

    The parameters are listed again only when a model was built since (a block then takes their
    versions as it starts); otherwise a block costs one read of each version as it ends."""

    #: steps kept aside at most
    LIMIT = 100_000

    def __init__(self) -> None:
        #: the parameters (weak references) with their names and versions when last read
        self.params: list[tuple[str, Any, int]] = []
        #: how many modules had been built when they were listed
        self.modules = -1
        self.steps: list[dict[str, Any]] = []
        self.local = threading.local()

    def _listed(self) -> None:
        """List the parameters of every module built so far and still alive, named by the
        module's place among them (in build order) and their own name, with their versions."""
        params: list[tuple[str, Any, int]] = []
        modules = list(origin.SITES.sites.keys())
        for k, module in enumerate(modules):
            for name, p in list(getattr(module, "_parameters", {}).items()):
                if p is not None:
                    params.append((f"{k}.{name}", weakref.ref(p), p._version))
        self.params, self.modules = params, len(modules)

    def _changed(self) -> list[tuple[str, Any]]:
        """The parameters whose version moved since last read (each read again)."""
        changed: list[tuple[str, Any]] = []
        for i, (name, ref, version) in enumerate(self.params):
            p = ref()
            if p is not None and p._version != version:
                changed.append((name, p))
                self.params[i] = (name, ref, p._version)
        return changed

    def entered(self, frame: Any) -> None:
        """A block starts, entered from ``frame``: an outermost one written in the script's own
        code is watched (a library's, such as ``torch.nn.init``'s, is not)."""
        depth = getattr(self.local, "depth", 0)
        self.local.depth = depth + 1
        if depth == 0:
            self.local.watched = _own_block(frame)
            if self.local.watched and len(origin.SITES.sites) != self.modules:
                self._listed()

    def exited(self) -> list[tuple[str, Any]]:
        """The parameters a watched outermost block changed (none for any other block)."""
        depth = getattr(self.local, "depth", 1) - 1
        self.local.depth = max(depth, 0)
        if depth == 0 and getattr(self.local, "watched", False):
            self.local.watched = False
            return self._changed()
        return []

    def accept(self, tensor: Any) -> None:
        """``tensor`` was changed by repro-check itself (the negative control's plant): its new
        version is no change of the script's."""
        for i, (name, ref, _) in enumerate(self.params):
            if ref() is tensor:
                self.params[i] = (name, ref, tensor._version)

    def drop(self) -> None:
        self.steps.clear()
        self.params, self.modules = [], -1


def _own_block(frame: Any) -> bool:
    """Whether a ``torch.no_grad`` block entered from ``frame`` is the script's own: written in
    its code, or a function of its own decorated with ``@torch.no_grad()`` (entered from
    torch's decorator, whose ``func`` is the script's)."""
    if frame is None:
        return False
    path = frame.f_code.co_filename
    if path.endswith(_DECORATOR):
        code = getattr(frame.f_locals.get("func"), "__code__", None)
        return code is not None and not origin.is_library(code.co_filename)
    return not origin.is_library(path)


#: the file of torch's context-manager decorator (``@torch.no_grad()`` enters from there)
_DECORATOR = os.path.join("torch", "utils", "_contextlib.py")


def in_transform() -> bool:
    """Whether a ``torch.func`` transform is running on this thread (its tensors are wrapped
    ones, not what the script holds)."""
    # torch on use: only called from inside a hooked gradient computation
    import torch

    try:
        return torch._C._functorch.maybe_current_level() is not None
    except AttributeError:  # a torch without functorch levels: no transform can run
        return False


def named_tensors(obj: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """The tensors in ``obj`` (a tensor, or lists, tuples and dicts of them), named by their
    path (``0``, ``weight``, ``1.bias``): stable across runs of the same script."""
    # torch on use: only called from inside a hooked gradient computation
    import torch

    if isinstance(obj, torch.Tensor) or obj is None:
        return [(prefix or "0", obj)]
    out: list[tuple[str, Any]] = []
    if isinstance(obj, dict):
        items: Any = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return out
    for key, value in items:
        if isinstance(value, (torch.Tensor, dict, list, tuple)) or value is None:
            out += named_tensors(value, f"{prefix}.{key}" if prefix else str(key))
    return out


def _single(outputs: Any) -> Any:
    """The loss of a gradient computation: its output, when that is one tensor."""
    if isinstance(outputs, (list, tuple)):
        return outputs[0] if len(outputs) == 1 else None
    return outputs


def _starts(rec: Any, trained: list[tuple[str, Any]]) -> None:
    """A step starts: ``--max-steps`` may stop the run here, the step's RNG states are taken,
    and at the first step, the tensors it trains are the ``init`` signal. Nothing, while the
    run keeps its gradient computations aside for an optimizer it has not stepped yet."""
    if rec.optimizers_made:
        return
    rec.before_step_work()
    rec.on_step_activity()
    if rec.step == 0:
        rec.initial.before_backward([t for _, t in trained if t is not None])


def _transform(rec: Any, kind: str) -> Callable[[Any], Any]:
    """The wrapper maker of ``torch.func.<kind>``: the function it returns is wrapped."""

    def make(original: Any) -> Any:
        try:
            signature: inspect.Signature | None = inspect.signature(original)
        except (TypeError, ValueError):
            signature = None

        @functools.wraps(original)
        def transform(*args: Any, **kwargs: Any) -> Any:
            made = original(*args, **kwargs)
            bound = None
            if signature is not None:
                try:
                    bound = signature.bind(*args, **kwargs)
                    bound.apply_defaults()
                except TypeError:
                    bound = None
            if bound is None:
                return made
            options = dict(bound.arguments)
            if kind == "vjp":
                return _vjp(rec, made, options)
            if not callable(made):
                return made
            return _gradient_function(rec, kind, made, options)

        return transform

    return make


def _gradient_function(rec: Any, kind: str, made: Any, options: dict[str, Any]) -> Any:
    """A function made by ``grad``, ``grad_and_value`` or ``vmap``, wrapped: its outermost calls
    are steps (``vmap``'s only when a gradient was computed inside)."""
    argnums = options.get("argnums", 0)
    has_aux = bool(options.get("has_aux", False))

    @functools.wraps(made)
    def call(*args: Any, **kwargs: Any) -> Any:
        if (rec.optimizers_made and not rec.shadowing()) or compiling():
            return made(*args, **kwargs)
        if rec.computing_now() or in_transform():
            rec.note_gradient()
            return made(*args, **kwargs)
        if kind == "vmap":
            rec.take_noted()
            with rec.computing():
                out = made(*args, **kwargs)
            if rec.take_noted():
                trained = named_tensors(list(args))
                _starts(rec, trained)
                rec.on_gradients(None, named_tensors(out), trained)
            return out
        picked = argnums if isinstance(argnums, tuple) else (argnums,)
        trained = named_tensors([args[i] for i in picked if isinstance(i, int) and i < len(args)])
        _starts(rec, trained)
        with rec.computing():
            out = made(*args, **kwargs)
        grads, loss = out, None
        if kind == "grad_and_value" and isinstance(out, tuple) and len(out) == 2:
            grads, value = out
            loss = value[0] if has_aux and isinstance(value, tuple) and value else value
        elif has_aux and isinstance(out, tuple) and len(out) == 2:
            grads = out[0]
        rec.on_gradients(loss, named_tensors(grads), trained)
        return out

    return call


def _vjp(rec: Any, made: Any, options: dict[str, Any]) -> Any:
    """``torch.func.vjp``'s result with its ``vjp_fn`` wrapped: a call of it is a step, whose
    loss is the output ``vjp`` computed and whose trained tensors are the primals."""
    if not isinstance(made, tuple) or len(made) < 2 or not callable(made[1]):
        return made
    output, vjp_fn = made[0], made[1]
    primals = options.get("primals", ())

    @functools.wraps(vjp_fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if (rec.optimizers_made and not rec.shadowing()) or compiling():
            return vjp_fn(*args, **kwargs)
        if rec.computing_now() or in_transform():
            rec.note_gradient()
            return vjp_fn(*args, **kwargs)
        trained = named_tensors(list(primals))
        _starts(rec, trained)
        with rec.computing():
            out = vjp_fn(*args, **kwargs)
        rec.on_gradients(output, named_tensors(out), trained)
        return out

    return (output, call, *made[2:])
