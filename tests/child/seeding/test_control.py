"""The negative control's plant inside a run (child/seeding/control.py), in this process: the 1-ulp
change, the element chosen, a metric's change, and a resume's states left out."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from repro_check.child.seeding import control
from repro_check.child import patches
from repro_check.trace import values


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("x", [1.5, -0.375, 0.0, 3e-5])
def test_nudge_moves_one_element_one_ulp_in_place(dtype: torch.dtype, x: float) -> None:
    t = torch.full((3, 4), x, dtype=dtype).t()  # not contiguous: changed where it lives
    t.requires_grad_(True)
    x = t.detach()[0, 0].item()  # as the dtype holds it
    before, after = control.nudge(t, (2, 1))
    changed = t.detach()[2, 1]
    assert changed.item() != x and before == x and after == changed.item()
    assert abs(changed.item()) > abs(x)  # away from zero
    if dtype in (torch.float32, torch.float64):  # nothing representable lies between
        start = torch.tensor(x, dtype=dtype)
        assert torch.nextafter(start, torch.tensor(float("inf") if x >= 0 else float("-inf"),
                                                   dtype=dtype)) == changed
    others = t.detach().clone()
    others[2, 1] = x
    assert bool((others == x).all()), "no other element moved"
    assert t.grad is None and t.requires_grad


def test_pick_takes_the_element_of_largest_value_times_gradient_in_any_tensor() -> None:
    small = torch.tensor([0.1, -0.2], requires_grad=True)
    big = torch.tensor([[5.0, -9.0], [7.0, 1.0]], requires_grad=True)
    small.grad = torch.tensor([1.0, 1.0])
    big.grad = torch.tensor([[1.0, 0.0], [1.0, 1.0]])  # -9.0 is not reached by the gradient
    name, t, index = control.pick([("0.0", small), ("0.1", big)]) or ("", None, -1)
    assert (name, t is big, control.unravel(index, tuple(big.shape))) == ("0.1", True, (1, 0))


def test_pick_where_every_value_reached_is_zero_takes_the_largest_gradient() -> None:
    w = torch.zeros(3, requires_grad=True)  # before a hand-written update: all still zero
    w.grad = torch.tensor([1.0, -5.0, 2.0])
    assert control.pick([("0", w)]) == ("0", w, 1)


def test_pick_without_gradients_takes_the_first_floating_tensor_largest_element() -> None:
    ints = torch.arange(4)
    w = torch.tensor([0.5, -3.0, 2.0])
    assert control.pick([("a", ints), ("b", w)]) == ("b", w, 1)
    assert control.pick([("a", ints)]) is None


@pytest.mark.parametrize("enc, moved", [
    (values.encode_float64(0.1), 0.10000000000000002),
    (values.encode_int(41), 42),
    ({"dtype": "bool", "bits": "1", "value": True}, False),
])
def test_a_metric_as_reported_moves_one_unit(enc: dict[str, Any], moved: Any) -> None:
    out = control.nudge_encoded(enc)
    assert out is not None and out["value"] == moved and out["bits"] != enc["bits"]


def test_a_float32_metric_moves_one_ulp() -> None:
    enc = values.encode_tensor(torch.tensor(0.25, dtype=torch.float32))
    out = control.nudge_encoded(enc)
    assert out is not None
    assert values.to_float(out) == torch.nextafter(torch.tensor(0.25), torch.tensor(1.0)).item()


def test_leave_out_rng_makes_every_restore_do_nothing_and_says_so() -> None:
    said: list[dict[str, Any]] = []
    torch.manual_seed(1)
    saved_torch, saved_python = torch.get_rng_state(), random.getstate()
    torch.rand(3)
    random.random()
    moved_torch, moved_python = torch.get_rng_state(), random.getstate()
    token = control.leave_out("rng", said.append)
    try:
        torch.set_rng_state(saved_torch)
        random.setstate(saved_python)
        torch.random.set_rng_state(saved_torch)
        assert torch.equal(torch.get_rng_state(), moved_torch)
        assert random.getstate() == moved_python
    finally:
        patches.PATCHES.release(token)
    left = [d["info"]["control"]["left_out"] for d in said]
    assert left == ["torch.set_rng_state", "random.setstate", "torch.random.set_rng_state"]
    torch.set_rng_state(saved_torch)  # released: restores again
    assert torch.equal(torch.get_rng_state(), saved_torch)


def test_leave_out_optimizer_keeps_a_fresh_optimizer_state() -> None:
    said: list[dict[str, Any]] = []
    w = torch.nn.Parameter(torch.ones(2))
    trained = torch.optim.Adam([w], lr=0.1)
    w.grad = torch.ones(2)
    trained.step()
    state = trained.state_dict()
    fresh = torch.optim.Adam([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    token = control.leave_out("optimizer", said.append)
    try:
        fresh.load_state_dict(state)
    finally:
        patches.PATCHES.release(token)
    assert not fresh.state  # nothing restored
    assert said == [{"info": {"control": {"left_out":
                                          "torch.optim.Optimizer.load_state_dict"}}}]
    fresh.load_state_dict(state)
    assert fresh.state


class _Recorder:
    """What a plant reads of the step recorder: the step, the optimizers made, what the last
    step trained."""

    def __init__(self, params: list[tuple[str, torch.Tensor]], optimizers: int = 0) -> None:
        self.step, self.optimizers_made, self.watchers = 0, optimizers, []
        self.no_grad_ended: list[Any] = []
        self.trained = lambda: iter(params)

    def quiet(self) -> Any:
        import contextlib

        return contextlib.nullcontext()

    def record(self) -> None:
        self.step += 1
        for watcher in self.watchers:
            watcher()

    def no_grad_exited(self) -> None:
        """What the wrapped ``torch.no_grad().__exit__`` tells the recorder."""
        for ended in list(self.no_grad_ended):
            ended()


def test_without_an_optimizer_the_change_goes_in_after_the_scripts_own_update() -> None:
    """A hand-written update after the step could round a 1-ulp change made before it away
    (seen on a CPU whose kernels gave a value that the update moved one binade up): the change
    waits for the update and goes in as the next module is called."""
    from repro_check.trace.protocol import ControlSettings

    model = torch.nn.Linear(2, 1)
    said: list[dict[str, Any]] = []
    rec = _Recorder(list(model.named_parameters()))
    plant = control.Plant(rec, said.append, ControlSettings("step", 1)).install()
    try:
        model(torch.ones(1, 2)).sum().backward()
        rec.record()  # step 1 recorded: nothing planted yet, the update comes next
        assert not said and plant.waiting
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.5 * p.grad
        updated = {n: p.detach().clone() for n, p in model.named_parameters()}
        model(torch.ones(1, 2))  # the next module call: planted, after the update
        (info,) = [s["info"]["control"] for s in said]
        assert info["planted"] and info["step"] == 1 and info["gradient"] is False
        changed = [n for n, p in model.named_parameters() if not torch.equal(p, updated[n])]
        assert changed == [info["tensor"].rsplit(".", 1)[-1]]
        model(torch.ones(1, 2))
        assert len(said) == 1  # once
    finally:
        patches.PATCHES.release(plant)


def test_without_a_module_call_the_change_goes_in_after_the_next_step() -> None:
    from repro_check.trace.protocol import ControlSettings

    w = torch.ones(3, requires_grad=True)
    said: list[dict[str, Any]] = []
    rec = _Recorder([("w", w)])
    plant = control.Plant(rec, said.append, ControlSettings("step", 1)).install()
    try:
        (w * 2).sum().backward()
        rec.record()
        assert not said
        rec.record()  # step 2, no module called in between: planted now, gradient too
        (info,) = [s["info"]["control"] for s in said]
        assert info["planted"] and info["step"] == 2 and info["gradient"] is True
    finally:
        patches.PATCHES.release(plant)


def test_without_an_optimizer_the_change_goes_in_as_the_block_that_updates_it_ends() -> None:
    """A loop of ``autograd.grad`` and a hand update calls no module: the change goes in as the
    ``torch.no_grad`` block that updated the tensor ends, so the next step's loss carries it."""
    from repro_check.trace.protocol import ControlSettings

    w = torch.ones(3, requires_grad=True)
    said: list[dict[str, Any]] = []
    rec = _Recorder([("w", w)])
    plant = control.Plant(rec, said.append, ControlSettings("step", 1)).install()
    try:
        (g,) = torch.autograd.grad((w * 2).sum(), [w])
        rec.record()
        with torch.no_grad():
            (w * 3).sum()  # a block that changes nothing: still waiting
        rec.no_grad_exited()
        assert not said and plant.waiting
        with torch.no_grad():
            w.sub_(0.5 * g)
        updated = w.detach().clone()
        rec.no_grad_exited()
        (info,) = [s["info"]["control"] for s in said]
        assert info["planted"] and info["step"] == 1 and info["gradient"] is False
        assert not torch.equal(w.detach(), updated) and not plant.waiting
        assert rec.no_grad_ended == []  # nothing left to call
        rec.record()
        assert len(said) == 1  # once
    finally:
        patches.PATCHES.release(plant)
