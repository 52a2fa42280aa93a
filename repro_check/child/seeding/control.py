"""The negative control's plant, inside the one run of a check that is made to differ.

Once the runs of a check agree, one more run is started like them, told
(:class:`~repro_check.trace.protocol.ControlSettings`) to change one value by one unit in the
last place: a check that cannot see that change cannot claim the runs are the same. Where:

``step``
    right after step ``step`` is recorded (its signals are taken by then), one element of a
    tensor that step trained (:attr:`~repro_check.child.observe.capture.Recorder.trained`): of the
    elements its gradient reaches, the one where a change moves the loss most (see
    :func:`pick`); without gradients, the first floating tensor's largest element. Without an
    optimizer (a hand-written update follows the step) the change is made after that update,
    as the next module is called (the update could round a change made before it away), and,
    when no module is called before the next step, after that step, with the element's
    gradient moved too.
``forward``
    the runs recorded no step: before the first call of a module that holds floating
    parameters, its first parameter's largest element; when no such module is ever called,
    final metric ``metric`` as reported.

What was planted is reported once as ``{"info": {"control": {...}}}``: the tensor's name (a
model's parameter by its qualified name when it can be found), dtype, shape, the element's
index, the step after which it was planted, and the value before and after.

A resume's control (:func:`leave_out`) is a resumed run that leaves one restored state out on
purpose: every call that would put back a random generator's state, or an optimizer's state,
does nothing. Each call left out is reported once as ``{"info": {"control": {"left_out":
...}}}``.
"""

from __future__ import annotations

import importlib
import math
import struct
import sys
from collections.abc import Callable, Iterable
from typing import Any

from repro_check.child.observe import origin
from repro_check.child import patches
from repro_check.trace import values
from repro_check.trace.protocol import ControlSettings

Emit = Callable[[dict[str, Any]], None]

FEATURE = "control.forward"
LEAVE_OUT = "control.leave_out"

#: the calls that put a random generator's state back: (module, attribute)
RNG_RESTORES = (("torch", "set_rng_state"), ("torch.random", "set_rng_state"),
                ("torch.cuda", "set_rng_state"), ("torch.cuda", "set_rng_state_all"),
                ("torch.cuda.random", "set_rng_state"),
                ("torch.cuda.random", "set_rng_state_all"), ("random", "setstate"),
                ("numpy.random", "set_state"))

#: integer views of the float dtypes a change is planted in, by element size
_INT_VIEW = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def install(recorder: Any, emit: Emit, settings: ControlSettings | None) -> Plant | None:
    """Arm the plant of a control run (None for any other run)."""
    if settings is None:
        return None
    return Plant(recorder, emit, settings).install()


def leave_out(state: str | None, emit: Emit) -> object | None:
    """A resume's control: make every call that restores ``state`` (``"rng"``: the global
    generators of Python, NumPy, torch and CUDA; ``"optimizer"``: ``Optimizer.load_state_dict``)
    do nothing in this run; returns the token the patches are held by (None: nothing left out)."""
    if state is None:
        return None
    token = object()
    told: set[str] = set()

    def skipping(label: str) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            def left_out(*args: Any, **kwargs: Any) -> None:
                if label not in told:
                    told.add(label)
                    emit({"info": {"control": {"left_out": label}}})

            return left_out

        return make

    if state == "optimizer":
        # the run entry imported torch before this
        from torch.optim.optimizer import Optimizer

        patches.PATCHES.wrap(LEAVE_OUT, Optimizer, "load_state_dict",
                             skipping("torch.optim.Optimizer.load_state_dict"), token=token)
        return token
    for module_name, name in RNG_RESTORES:
        module = sys.modules.get(module_name)
        if module is None and module_name == "numpy.random":
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
        if module is not None and callable(getattr(module, name, None)):
            patches.PATCHES.wrap(LEAVE_OUT, module, name, skipping(f"{module_name}.{name}"),
                                 token=token)
    return token


class Plant:
    """Plants the control's change once, where :class:`ControlSettings` says, and reports it."""

    def __init__(self, recorder: Any, emit: Emit, settings: ControlSettings) -> None:
        self.rec = recorder
        self.emit = emit
        self.settings = settings
        self.done = False
        #: a step without an optimizer was recorded at the control's step: the change waits
        #: for the script's own update, and goes in once it is seen (the tensor picked changed
        #: in place in a ``torch.no_grad`` block) or before the next module runs
        self.waiting = False
        #: what the waiting change goes into (name, tensor, flat index), with its version then
        self._picked: tuple[str, Any, int] | None = None
        self._version = 0

    def install(self) -> Plant:
        if self.settings.where == "step":
            self.rec.watchers.append(self.after_step)
        else:
            self._hook_forward()
        return self

    def _hook_forward(self) -> None:
        from torch.nn.modules.module import register_module_forward_pre_hook

        patches.PATCHES.hook(FEATURE, "torch.nn.modules.module."
                             "register_module_forward_pre_hook",
                             register_module_forward_pre_hook, self.before_forward,
                             token=self)

    # ---- where the change goes -----------------------------------------------------------
    def after_step(self) -> None:
        """A step was recorded: at the control's step, plant in what it trained. Without an
        optimizer, the script's own update follows the step, and a change of one unit in the
        last place made before it can be rounded away by it (the updated value one binade
        up): the change then waits for the update, and goes in as the ``torch.no_grad`` block
        that updated the tensor ends (:meth:`after_no_grad`) or as the next module is called
        (:meth:`before_forward`), or, when neither comes before the next step is recorded,
        after that step."""
        if self.done:
            return
        if self.waiting and self.rec.step > self.settings.step:
            self._stop_waiting()
        elif self.rec.step != self.settings.step:
            return
        elif self.rec.optimizers_made == 0 and not self.waiting:
            self._wait()
            return
        self.done = True
        picked = self._pick_trained()
        if picked is None:
            return
        with self.rec.quiet():
            name, tensor, index = picked
            # without an optimizer the update (the script's own) comes after this: its
            # gradient moves too, so that the update carries the change even where it dwarfs
            # the value (a parameter that starts at zero)
            gradient = self.rec.optimizers_made == 0 and _same_shape_grad(tensor)
            self._plant(tensor, index, _label(name, tensor), self.rec.step, gradient)

    def before_forward(self, module: Any, args: Any) -> None:
        """A module is about to run: before any step, plant in its first floating parameter;
        after a step without an optimizer that the change waits on, in what that step
        trained, as the script's update left it."""
        if self.done:
            return
        if self.waiting:
            if self._runs_picked(module):
                self._plant_waiting()
            return
        if self.rec.step > 0:
            return
        try:
            params = [(n, p) for n, p in module.named_parameters()
                      if p.is_floating_point() and p.numel()]
        except Exception:  # noqa: BLE001 - a module whose parameters cannot be listed: the next
            return
        if not params:
            return
        self.done = True
        name, tensor = params[0]
        with self.rec.quiet():
            self._plant(tensor, largest(tensor), f"{_module_name(module)}.{name}", 0)
        patches.PATCHES.release(self)  # planted once: every later call goes untouched

    def _wait(self) -> None:
        """Pick what the step trained now, and wait for the script's update of it."""
        picked = self._pick_trained()
        if picked is None:
            self.done = True
            return
        self.waiting, self._picked = True, picked
        self._version = int(getattr(picked[1], "_version", 0))
        self.rec.no_grad_ended.append(self.after_no_grad)
        self._hook_forward()

    def _pick_trained(self) -> tuple[str, Any, int] | None:
        """What the change goes into among the tensors the last step trained; when there is
        none, say so in the control's report."""
        trained = self.rec.trained
        with self.rec.quiet():
            picked = pick(list(trained()) if trained is not None else [])
        if picked is None:
            self._report({"planted": False, "step": self.rec.step,
                          "why": f"step {self.rec.step} trained no floating tensor that "
                                 "could be changed"})
        return picked

    def _stop_waiting(self) -> None:
        """Plant as before: the waiting is over (no update seen, no module called)."""
        self.waiting = False
        patches.PATCHES.release(self)
        if self.after_no_grad in self.rec.no_grad_ended:
            self.rec.no_grad_ended.remove(self.after_no_grad)

    def after_no_grad(self) -> None:
        """A ``torch.no_grad`` block ended: if the tensor the change waits for was changed in
        it (the script's update), plant now, before the next step's forward uses it."""
        picked = self._picked
        if self.waiting and not self.done and picked is not None \
                and getattr(picked[1], "_version", self._version) != self._version:
            self._plant_waiting()

    def _runs_picked(self, module: Any) -> bool:
        """Whether ``module`` holds the tensor the change waits for: an update into new
        tensors (``torch.func``'s dict of parameters) leaves the picked one unused, and the
        change then goes in after the next step, into what that step trained."""
        picked = self._picked
        if picked is None:
            return False
        try:
            return any(p is picked[1] for p in module.parameters())
        except Exception:  # noqa: BLE001 - a module whose parameters cannot be listed: the next
            return False

    def _plant_waiting(self) -> None:
        self._stop_waiting()
        self.done = True
        picked = self._picked
        if picked is None:
            return
        name, tensor, index = picked
        with self.rec.quiet():
            self._plant(tensor, index, _label(name, tensor), self.rec.step)

    def metrics(self) -> None:
        """The run ends: with nothing planted yet (no module was called), plant in the final
        metric the control names, as reported."""
        if self.done or self.settings.where != "forward":
            return
        self.done = True
        name = self.settings.metric
        if name not in self.rec.metrics:  # named otherwise here: the first this run recorded
            name = next(iter(sorted(self.rec.metrics)), None)
        enc = self.rec.metrics.get(name) if name is not None else None
        nudged = nudge_encoded(enc) if enc is not None else None
        if name is None or enc is None or nudged is None:
            self._report({"planted": False, "step": self.rec.step,
                          "why": "no module with floating parameters was called and no final "
                                 "metric could be changed"})
            return
        self.rec.metrics[name] = nudged
        self._report({"planted": True, "tensor": f"metric:{name}", "dtype": enc.get("dtype"),
                      "shape": [], "index": [], "step": self.rec.step, "where": "metric",
                      "before": enc.get("value"), "after": nudged.get("value")})

    # ---- the change itself ---------------------------------------------------------------
    def _plant(self, tensor: Any, flat: int, name: str, step: int,
               gradient: bool = False) -> None:
        index = unravel(flat, tuple(tensor.shape))
        before, after = nudge(tensor, index)
        if gradient:  # the update subtracts it: its change goes the way the value's went
            nudge(tensor.grad, index, -1 if after > before else 1)
        in_place = getattr(self.rec, "in_place", None)
        if in_place is not None:  # our change is not one of the script's in-place updates
            in_place.accept(tensor)
        self._report({"planted": True, "tensor": name,
                      "dtype": str(tensor.dtype).removeprefix("torch."),
                      "shape": list(tensor.shape), "index": list(index), "step": step,
                      "where": self.settings.where, "before": values.readable_float(before),
                      "after": values.readable_float(after), "gradient": gradient})

    def _report(self, body: dict[str, Any]) -> None:
        self.emit({"info": {"control": body}})


def pick(tensors: Iterable[tuple[str, Any]]) -> tuple[str, Any, int] | None:
    """The tensor and flat element to change, in any of the tensors: of the elements the
    gradient reaches, the one where ``|value * grad|`` is largest (to first order, how much a
    change of one unit in the last place moves the loss, and the larger the value, the less an
    update after it, or a sum it enters, rounds the change away); where every value reached is
    zero (a parameter that starts at zero, before a hand-written update), the largest
    ``|grad|`` (the largest value after that update). Without gradients, the first floating
    tensor's largest element."""
    import torch

    first: tuple[str, Any, int] | None = None
    best: tuple[tuple[float, float], str, Any, int] | None = None
    for name, t in tensors:
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or not t.numel() \
                or t.element_size() not in _INT_VIEW or t.is_sparse:
            continue
        if first is None:
            first = (name, t, largest(t))
        if not _same_shape_grad(t):
            continue
        g, v = _head(t.grad).float().abs(), _head(t).float().abs()
        reached = (g > 0) & torch.isfinite(g) & torch.isfinite(v)
        if not bool(reached.any()):
            continue
        zero = torch.zeros_like(g)
        product = torch.where(reached, v * g, zero)
        grads = torch.where(reached, g, zero)
        top = float(product.max())
        index = int(torch.argmax(product)) if top > 0 else int(torch.argmax(grads))
        score = (top, float(grads[index]))
        if best is None or score > best[0]:
            best = (score, name, t, index)
    if best is not None:
        return best[1], best[2], best[3]
    return first


#: elements of a tensor looked at to choose the one to change: the first this many, so that a
#: huge embedding costs no copy of its size (on a device that may be nearly full)
SCANNED = 1 << 22


def _head(t: Any) -> Any:
    """The first :data:`SCANNED` elements of ``t``, flat, detached."""
    flat = t.detach().reshape(-1)
    return flat[:SCANNED]


def largest(t: Any) -> int:
    """The flat index of ``t``'s element of largest magnitude (a finite one when there is)."""
    import torch

    values = _head(t).float().abs()
    values = torch.where(torch.isfinite(values), values, torch.zeros_like(values))
    return int(torch.argmax(values))


def unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The index of element ``flat`` (row-major) of a tensor of ``shape``."""
    out: list[int] = []
    for size in reversed(shape):
        out.append(flat % size)
        flat //= size
    return tuple(reversed(out))


def nudge(tensor: Any, index: tuple[int, ...], direction: int = 0) -> tuple[float, float]:
    """Move one element one unit in the last place, in place, unseen by autograd: away from zero
    (``direction`` 0), or towards +inf (1) or -inf (-1); returns the value before and after."""
    import torch

    with torch.no_grad():
        element = tensor.detach()[index] if index else tensor.detach()
        before = float(element.item())
        if direction == 0:
            direction = -1 if math.copysign(1.0, before) < 0 else 1
        size = element.element_size()
        bits = element.view(getattr(torch, _INT_VIEW[size]))
        if before == 0:  # the smallest subnormal of the direction's sign
            bits.fill_(1 if direction > 0 else 1 - (1 << (8 * size - 1)))
        elif (before > 0) == (direction > 0):  # the magnitude grows: the next bit pattern
            bits.add_(1)
        else:
            bits.sub_(1)
        return before, float(element.item())


def nudge_encoded(enc: dict[str, Any]) -> dict[str, Any] | None:
    """A recorded value (:mod:`repro_check.trace.values`) one unit in the last place away from
    zero (an integer one more, a bool flipped); None for a value that cannot be moved."""
    dtype, bits = enc.get("dtype"), enc.get("bits")
    if not isinstance(bits, str):
        return None
    try:
        if dtype in ("float16", "bfloat16", "float32", "float64"):
            width = len(bits) * 4
            raw = (int(bits, 16) + 1) % (1 << width)
            moved = dict(enc, bits=f"{raw:0{len(bits)}x}")
            x = values.to_float(moved)
            moved["value"] = values.readable_float(x)
            return moved
        if dtype == "int":
            return values.encode_int(int(bits, 16) + 1)
        if dtype == "bool":
            return {"dtype": "bool", "bits": "0" if bits == "1" else "1", "value": bits != "1"}
    except (ValueError, struct.error):
        return None
    return None


def _same_shape_grad(tensor: Any) -> bool:
    """Whether ``tensor`` has a dense floating gradient of its own shape (one that can move)."""
    grad = getattr(tensor, "grad", None)
    return grad is not None and grad.is_floating_point() and grad.layout == tensor.layout \
        and grad.shape == tensor.shape and grad.element_size() in _INT_VIEW


def _label(name: str, tensor: Any) -> str:
    """A trained tensor by a model's parameter name when a model built in the run holds it
    (``Net.fc1.weight``, named as the modules' state at the end names it), else as the step's
    signals name it (``0.1``: group 0, parameter 1)."""
    try:
        for root, module in origin.SITES.named_roots():
            for pname, p in module.named_parameters():
                if p is tensor:
                    return f"{root}.{pname}"
    except Exception:  # noqa: BLE001 - a name is a nicety
        pass
    return name


def _module_name(module: Any) -> str:
    """A model by the name the script gave it where it was built (``model``), else its class."""
    try:
        return origin.assigned_name(origin.SITES.site(module)) or type(module).__name__
    except Exception:  # noqa: BLE001 - a name is a nicety
        return type(module).__name__


