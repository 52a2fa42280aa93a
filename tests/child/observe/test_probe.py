"""The step probe in this process: two 'runs' of one step that differ in a planted place."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from repro_check.diagnose.localize import EnvironmentSides, compare
from repro_check.trace.probes import ProbeOp
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


def compiled_step(compiled: bool, shift: float = 0.0) -> list[dict[str, Any]]:
    """One probed step (the second) of a small model, compiled or eager; ``shift``: a constant
    the model adds, which torch.compile bakes into its graph."""
    records: list[dict[str, Any]] = []
    probe = StepProbe(lambda event: records.append(event["probe"]))
    torch._dynamo.reset()  # a process that compiled many models runs further ones eagerly
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), Shift(shift), nn.Linear(8, 1))
    run = torch.compile(model) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in (1, 2):
        if step == 2:
            probe.arm(2)
        run(torch.randn(16, 4)).sum().backward()
        if step == 2:
            probe.gradients((f"0.{i}", p) for i, p in enumerate(model.parameters()))
        opt.step()
        opt.zero_grad()
        if step == 2:
            probe.disarm()
    return records


def test_a_compiled_model_runs_compiled_under_the_probe_and_is_recorded_as_a_whole() -> None:
    """The op recorder steps aside while a compiled model runs (under a dispatch mode PyTorch
    would run it eagerly, and a compiled model's difference is in its compiled kernels): the
    model is recorded once, at its wrapper, under its eager name, with its output's values;
    the step's end says it ran compiled."""
    eager, compiled = compiled_step(False), compiled_step(True)
    names = [[(r["m"], r.get("c", False)) for r in recs
              if r["k"] == "module" and r["ph"] == "forward"] for recs in (eager, compiled)]
    assert names[0] == [("Sequential.0", False), ("Sequential.1", False),
                        ("Sequential.2", False), ("Sequential.3", False), ("Sequential", False)]
    assert names[1] == [("Sequential", True)]
    model_out = [r for r in compiled if r["k"] == "module" and r["ph"] == "forward"][0]
    assert model_out["v"]["shape"] == [16, 1]
    assert compiled[-1] == {"k": "disarmed", "step": 2, "records": compiled[-2]["i"],
                            "compiled": "Sequential", "ran_compiled": True}
    eager_ops = [r["op"] for r in eager if r["k"] == "op" and r["ph"] == "forward"]
    compiled_ops = [r["op"] for r in compiled if r["k"] == "op" and r["ph"] == "forward"]
    assert "aten::addmm" in eager_ops and "aten::addmm" not in compiled_ops
    grads = [r["p"] for r in compiled if r["k"] == "grad"]
    assert grads == ["Sequential.0.weight", "Sequential.0.bias", "Sequential.3.weight",
                     "Sequential.3.bias"]


def test_pytorch_debugmode_records_the_calls_inside_a_compiled_model_with_fingerprints() -> None:
    """While the compiled model runs compiled, DebugMode records what it dispatches (inductor's
    extern addmm), each call with its inputs' and output's fingerprints, just before the
    model's output record; an eager model has no such record."""
    compiled = compiled_step(True)
    calls = [r for r in compiled if r["k"] == "calls"]
    assert len(calls) == 1 and calls[0]["m"] == "Sequential"
    names = [c[0] for c in calls[0]["calls"]]
    assert calls[0]["n"] == len(names) and any("addmm" in n for n in names)
    assert all(len(c) == 3 and c[2] for c in calls[0]["calls"])
    assert calls[0]["graphs"] >= 1
    model_out = next(r for r in compiled if r["k"] == "module" and r.get("c"))
    assert model_out["i"] == calls[0]["i"] + 1
    again = [r for r in compiled_step(True) if r["k"] == "calls"][0]
    assert again["calls"] == calls[0]["calls"]  # the same values: the same fingerprints
    assert not [r for r in compiled_step(False) if r["k"] == "calls"]


def test_a_compiled_model_that_differs_is_the_culprit_with_its_largest_difference() -> None:
    a, b = compiled_step(True), compiled_step(True, shift=1e-3)
    loc = compare(2, a, b)
    assert loc.found and loc.module == "Sequential" and loc.op is None
    assert loc.cause == "compute" and loc.inputs_agree
    diff = loc.output_difference
    assert diff is not None and diff.compiled and diff.shape == [16, 1]
    out_a = [r for r in a if r["k"] == "module" and r["ph"] == "forward"][0]
    out_b = [r for r in b if r["k"] == "module" and r["ph"] == "forward"][0]
    values_a = torch.tensor(ProbeOp.parse(out_a).values.data)  # type: ignore[union-attr]
    values_b = torch.tensor(ProbeOp.parse(out_b).values.data)  # type: ignore[union-attr]
    gap = (values_a - values_b).abs()
    assert diff.largest == gap.max().item() and diff.at == [int(gap.argmax()), 0]
    assert "the compiled Sequential (torch.compile) returns other bits" in loc.detail
    assert f"largest |Δ| {diff.largest:.3g} at [{diff.at[0]}, 0]" in loc.detail


def test_a_compiled_step_that_agrees_in_forward_names_the_first_gradient_that_differs() -> None:
    """Forward outputs with the same bits and a gradient that differs: the detail places the
    difference in the compiled backward and names the parameter."""
    a, b = compiled_step(True), compiled_step(True)
    grad_b = next(r for r in b if r["k"] == "grad" and r["p"] == "Sequential.3.bias")
    grad_b["out"] = "planted"
    planted = ProbeOp.parse(grad_b)
    loc = compare(2, a, b)
    assert not loc.found and loc.output_difference is not None
    assert loc.output_difference.largest == 0.0
    assert loc.gradient_difference is not None
    assert loc.gradient_difference.module == "Sequential.3.bias"
    assert planted is not None and "which ran compiled" in loc.detail
    assert "its output has the same bits in the runs" in loc.detail
    assert "the first parameter whose gradient differs is 'Sequential.3.bias'" in loc.detail
    assert compare(2, a, compiled_step(True)).gradient_difference is None


def test_eager_against_compiled_pairs_the_model_and_says_how_far_it_is() -> None:
    loc = compare(2, compiled_step(False), compiled_step(True, shift=1e-3),
                  environments=EnvironmentSides("compile=off", "compile=on", compiled=True))
    assert not loc.found and loc.first_module_forward == "Sequential"
    diff = loc.output_difference
    assert diff is not None and diff.compiled and diff.largest is not None and diff.largest > 0
    assert "(the compiled model as a whole, with the same inputs: largest |Δ|" in loc.detail
