"""The step probe in this process: two 'runs' of one step that differ in a planted place."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from repro_check.diagnose.localize import compare
from repro_check.child.observe.probe import StepProbe, arg_fingerprint


class Shift(nn.Module):
    """Adds a constant that the test sets per 'run' (a value from outside torch)."""

    def __init__(self, amount: float) -> None:
        super().__init__()
        self.amount = amount

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.amount


class _NoisyGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, noise: float) -> torch.Tensor:
        ctx.noise = noise
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * (1.0 + ctx.noise), None


class GradNoise(nn.Module):
    """Identity in forward; scales the gradient by a per-'run' factor in backward."""

    def __init__(self, noise: float) -> None:
        super().__init__()
        self.noise = noise

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _NoisyGrad.apply(x, self.noise)


def one_step(shift: float = 0.0, grad_noise: float = 0.0) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    probe = StepProbe(lambda event: records.append(event["probe"]))
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(4, 8), nn.ReLU(inplace=True), Shift(shift),
        nn.Sequential(nn.Linear(8, 8), GradNoise(grad_noise)), nn.Linear(8, 1),
    )
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    probe.arm(3)
    loss = nn.functional.mse_loss(model(x), y)
    probe.phase = "backward"
    loss.backward()
    probe.phase = "forward"
    probe.disarm()
    return records


def test_identical_steps_agree_op_by_op() -> None:
    a, b = one_step(), one_step()
    assert [r["k"] for r in a][0] == "armed" and a[-1]["k"] == "disarmed"
    loc = compare(3, a, b)
    assert not loc.found and loc.ops_compared > 20
    ops = [r for r in a if r.get("k") == "op"]
    assert {"forward", "backward"} <= {r["ph"] for r in ops}
    assert "aten::threshold_backward" in {r["op"] for r in ops if r["m"] == "Sequential.1"}


def test_forward_difference_names_module_and_op() -> None:
    loc = compare(3, one_step(shift=0.0), one_step(shift=1e-3))
    assert loc.found and loc.phase == "forward"
    assert loc.module == "Sequential.2" and loc.op == "aten::add"
    assert loc.inputs_agree is False and loc.differing_inputs == [1]
    assert loc.first_module_forward == "Sequential.2"


def test_backward_difference_is_attributed_to_the_module_that_made_the_node() -> None:
    loc = compare(3, one_step(grad_noise=0.0), one_step(grad_noise=1e-3))
    assert loc.found and loc.phase == "backward"
    assert loc.module == "Sequential.3.1" and loc.op == "aten::mul"
    assert loc.first_module_forward is None and loc.first_module_backward is not None


def test_opaque_arguments_are_fingerprinted_by_type_not_address() -> None:
    assert arg_fingerprint(object()) == "<object>"
    assert arg_fingerprint(0.1) == "0.1" and arg_fingerprint([1, 2]) == "[1, 2]"
    t = torch.arange(4.0)
    assert arg_fingerprint(t) != arg_fingerprint(t.flip(0))


def test_a_compiled_model_is_named_as_eager_and_said_to_run_eagerly_under_the_probe() -> None:
    """torch.compile's wrapper is no module of the model: the modules inside have their eager
    names, and the step's end says a compiled model ran (eagerly, under the op recorder), so
    ops that agree are not taken for a step that agrees."""
    def step(compiled: bool) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        probe = StepProbe(lambda event: records.append(event["probe"]))
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        run = torch.compile(model) if compiled else model
        probe.arm(1)
        run(torch.randn(16, 4)).sum().backward()
        probe.disarm()
        return records

    eager, compiled = step(False), step(True)
    names = [[r["m"] for r in recs if r["k"] == "module" and r["ph"] == "forward"]
             for recs in (eager, compiled)]
    assert names[0] == names[1] == ["Sequential.0", "Sequential.1", "Sequential.2", "Sequential"]
    assert compiled[-1]["k"] == "disarmed" and compiled[-1]["compiled"] == "Sequential"
    loc = compare(1, eager, compiled)
    assert not loc.found and "calls the compiled Sequential (torch.compile)" in loc.detail
    assert "no op or module inside it can be named" in loc.detail
