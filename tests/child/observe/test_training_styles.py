"""A step for every way a script trains (fixtures/styles): each style's script recorded in this
process (twice, and once with its planted difference) must part at the step the difference is
planted at, and its twin must agree at every step. One check through the command line shows
the planted difference of a hand-written ``torch.autograd.grad`` loop, the issue's own case,
end to end (its returned metric is rounded, so it agrees by chance)."""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from repro_check.child.observe import capture, checkpoint, origin

from ...conftest import FIXTURES, CliResult, run_cli

STYLES = FIXTURES / "styles"
_NAMES = itertools.count()

#: (script, twin, planted twin, steps, the first step and signal at which the planted twin parts)
CASES: list[tuple[str, str, str, int, int, str]] = [
    # torch.autograd.grad, then p.sub_(lr * g) under no_grad
    ("autograd_grad", "main", "planted", 6, 4, "updated"),
    # .grad fields filled from autograd.grad, then p.data.add_(p.grad, alpha=-lr)
    ("autograd_grad", "grad_fields", "grad_fields_planted", 6, 4, "updated"),
    # torch.func: grad_and_value, grad, vjp, vmap(grad) on functional_call, new tensors each step
    ("func_loop", "main", "planted", 5, 3, "loss"),
    ("func_loop", "grad_only", "grad_only_planted", 5, 3, "grads"),
    ("func_loop", "vjp_loop", "vjp_loop_planted", 5, 3, "loss"),
    ("func_loop", "per_sample", "per_sample_planted", 5, 3, "grads"),
    ("func_loop", "legacy", "legacy_planted", 5, 3, "loss"),
    # an optimizer class of the script's own (not torch.optim), after backward
    ("own_optimizer", "main", "planted", 6, 4, "updated"),
    # LBFGS: the closure runs several times a step, one step per optimizer.step
    ("closures", "main", "planted", 4, 3, "loss"),
    # two optimizers (a GAN): the discriminator's step then the generator's, each iteration
    ("gan", "main", "planted", 8, 5, "loss"),
    # the attacker's round: param.data = ..., param.copy_(...), torch.optim._functional.sgd
    ("by_hand", "data_assign", "data_assign_planted", 5, 4, "updated"),
    ("by_hand", "copy", "copy_planted", 5, 4, "updated"),
    ("by_hand", "functional_sgd", "functional_sgd_planted", 5, 4, "updated"),
    # ... an update inside backward (a post-accumulate-grad hook), torch.autograd.functional.vjp
    ("by_hand", "in_backward", "in_backward_planted", 5, 4, "updated"),
    ("by_hand", "autograd_functional", "autograd_functional_planted", 5, 4, "updated"),
    # ... a torch.optim optimizer made for its zero_grad() only, never stepped
    ("by_hand", "optimizer_unstepped", "optimizer_unstepped_planted", 5, 4, "updated"),
    # no gradient and no optimizer: parameters changed in place in @torch.no_grad() functions
    ("no_grad_only", "main", "planted", 5, 3, "updated"),
    # one gradient a subnormal instead of 0, rounded away by Adam: only the gradients differ
    ("absorbed", "main", "planted", 5, 3, "grads"),
]


@contextmanager
def recording(optimizer_signals: bool = False) -> Iterator[list[dict[str, Any]]]:
    """A Recorder installed in this process, with the model sites a run notes; with
    ``optimizer_signals``, the optimizer's signals of a step too (``lr``, ``opt``)."""
    events: list[dict[str, Any]] = []
    origin.SITES.install()
    rec = capture.Recorder(events.append).install()
    optimizer = checkpoint.Checkpoints(rec, events.append, None).install() if optimizer_signals else None
    try:
        yield events
    finally:
        if optimizer is not None:
            optimizer.uninstall()
        rec.uninstall()
        origin.SITES.uninstall()


def record(script: str, function: str, optimizer_signals: bool = False) -> list[dict[str, Any]]:
    """The steps of ``fixtures/styles/SCRIPT.py:FUNCTION`` run in this process, the script
    imported afresh under the recorder (as a run imports it: after the hooks are in), without
    the RNG signals (this process's global streams are the tests', not a fresh run's)."""
    with recording(optimizer_signals) as events:
        spec = importlib.util.spec_from_file_location(f"styles_{next(_NAMES)}",
                                                      STYLES / f"{script}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        getattr(module, function)()
    return [{k: v for k, v in e["signals"].items() if not k.startswith("rng.")}
            for e in events if "step" in e]


def first_divergence(a: list[dict[str, Any]],
                     b: list[dict[str, Any]]) -> tuple[int, str] | None:
    for step, (x, y) in enumerate(zip(a, b), 1):
        for name in dict.fromkeys([*x, *y]):
            if x.get(name) != y.get(name):
                return step, name
    return None if len(a) == len(b) else (min(len(a), len(b)) + 1, "steps")


@pytest.fixture(scope="module")
def recorded() -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Every case's twin recorded twice and its planted twin once, in this process."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for script, twin, planted, *_ in CASES:
        out[(script, twin)] = record(script, twin)
        out[(script, twin + "#again")] = record(script, twin)
        out[(script, planted)] = record(script, planted)
    return out


@pytest.mark.parametrize("script, twin, planted, steps, at, signal", CASES,
                         ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_every_training_style_has_steps_and_its_planted_difference_is_seen_where_planted(
        recorded: dict[tuple[str, str], list[dict[str, Any]]], script: str, twin: str,
        planted: str, steps: int, at: int, signal: str) -> None:
    a, again, other = (recorded[(script, twin)], recorded[(script, twin + "#again")],
                       recorded[(script, planted)])
    assert len(a) == len(again) == len(other) == steps
    assert first_divergence(a, again) is None  # the twin stays reproducible
    assert first_divergence(a, other) == (at, signal)
    assert ("grads" in a[0]) is (script != "no_grad_only")
    # the parameters going into step 1, except in steps kept aside until the run ends
    assert ("init" in a[0]) is (script != "no_grad_only" and twin != "optimizer_unstepped")


def test_a_gradient_rounded_away_by_the_optimizer_is_seen_in_the_gradients_alone() -> None:
    """Why every step's record keeps the gradients: with one gradient different at step 3 and
    rounded away by Adam, every other signal of every step (loss, optimizer state and lr,
    parameters) is the same bits in both runs. A record without the gradients would call these
    runs reproducible; a record of the parameters alone cannot stand in for them."""
    a, other = (record("absorbed", name, optimizer_signals=True) for name in ("main", "planted"))
    assert {"loss", "grads", "opt", "lr", "params"} <= set(a[1])
    differing = [(step, name) for step, (x, y) in enumerate(zip(a, other), 1)
                 for name in dict.fromkeys([*x, *y]) if x.get(name) != y.get(name)]
    assert differing == [(3, "grads")]


def test_a_step_without_an_optimizer_records_the_tensors_trained_after_the_update(
        recorded: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
    steps = recorded[("autograd_grad", "main")]
    assert len(steps) == 6
    assert all("params" not in s for s in steps)
    # from step 2: what the previous step trained, after the script's update, before the loss
    assert "updated" not in steps[0] and all(list(s)[:2] == ["updated", "loss"] for s in steps[1:])
    assert len({s["updated"] for s in steps[1:]}) == 5 and steps[1]["updated"] != steps[0]["init"]
    assert all(s["loss"] is not None for s in steps)
    # a torch.func.grad step knows no loss; grad_and_value's does
    assert all(s["loss"] is None for s in recorded[("func_loop", "grad_only")])
    assert all(s["loss"] is not None for s in recorded[("func_loop", "main")])
    # torch.optim steps are what they were: params after the optimizer, no `updated`
    assert all("params" in s and "updated" not in s for s in recorded[("gan", "main")])


def test_gradients_nested_in_one_computation_are_one_step() -> None:
    """A transform's own autograd.grad, and a grad under vmap, are part of the outer step."""
    steps = record("func_loop", "per_sample")
    assert len(steps) == 5


def test_with_an_optimizer_autograd_grad_is_no_step() -> None:
    """A gradient penalty's torch.autograd.grad in a torch.optim loop counts nothing."""
    with recording() as events:
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            x = torch.randn(4, 3, requires_grad=True)
            out = model(x).sum()
            (g,) = torch.autograd.grad(out, x, create_graph=True)
            opt.zero_grad()
            (out + g.pow(2).sum()).backward()
            opt.step()
    assert len([e for e in events if "step" in e]) == 3


def test_torch_compile_tracing_a_model_counts_no_step_and_fingerprints_no_trace() -> None:
    """torch.compile traces the backward of a compiled model with torch.autograd.grad on
    tracing tensors (FunctionalTensor): that call is the compiler's, not a step of the script's
    hand-written loop, and its tensors are never fingerprinted. (Under deterministic
    algorithms, as every run has them, no torch.func level marks that call as nested.)"""
    import torch._functorch.config as aot
    import torch._inductor.config as inductor

    torch._dynamo.reset()
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    # traced afresh: a cached compiled graph (of an earlier test run) is not traced at all
    with recording() as events, inductor.patch(fx_graph_cache=False), \
            aot.patch(enable_autograd_cache=False):
        torch.manual_seed(0)
        model = torch.compile(torch.nn.Linear(3, 1))
        x = torch.randn(8, 3)
        params = list(model.parameters())
        opt = torch.optim.SGD(params, lr=0.1)  # for its zero_grad only: the loop is the steps
        for _ in range(3):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p.sub_(0.1 * g)
    torch.use_deterministic_algorithms(was)
    torch._dynamo.reset()
    steps = [e for e in events if "step" in e]
    assert len(steps) == 3
    assert all(s["signals"]["loss"] is not None and "grads" in s["signals"] for s in steps)
    assert [e for e in events if "warning" in e] == []


@pytest.fixture(scope="module")
def cli_planted(tmp_path_factory: pytest.TempPathFactory) -> CliResult:
    """The issue's case: updates by hand from torch.autograd.grad, the third one's learning rate
    from os.urandom, a rounded metric."""
    return run_cli(str(STYLES / "autograd_grad.py") + ":planted",
                   tmp=tmp_path_factory.mktemp("styles") / "planted")


def test_a_hand_written_autograd_grad_loop_is_not_reproducible_at_the_planted_step(
        cli_planted: CliResult) -> None:
    res = cli_planted
    assert res.code == 1, res.stdout + res.stderr
    assert res.report is not None
    assert res.report["first_divergent_step"] == 4  # the parameters the third update left
    assert res.report["divergent_signal"] == "updated"
    assert res.report["steps"] == [6, 6]
    evidence = res.report["evidence"]
    assert evidence["training_seen"] is True and evidence["steps"] >= 4
    assert "First divergence: step 4, signal updated" in res.stdout


@pytest.fixture(scope="module")
def cli_twin(tmp_path_factory: pytest.TempPathFactory) -> CliResult:
    """A torch.func loop that is reproducible: its steps are what the verdict rests on."""
    return run_cli(str(STYLES / "func_loop.py") + ":main",
                   tmp=tmp_path_factory.mktemp("styles") / "twin")


@pytest.mark.slow
def test_a_torch_func_loop_is_reproducible_on_its_steps(cli_twin: CliResult) -> None:
    res = cli_twin
    assert res.code == 0, res.stdout + res.stderr
    assert res.report is not None and res.report["steps"] == [5, 5]
    # the saved tensors: the parameters the functional loop keeps in a module at its end
    saved = res.report["saved_tensors_compared"]
    assert saved > 0 and res.report["evidence"] == {
        "steps": 5, "metrics": 1, "saved_tensors": saved, "training_seen": True}
    assert "REPRODUCIBLE" in res.stdout
    assert f"rests on 5 steps, 1 metric and {saved} saved tensors" in " ".join(res.stdout.split())
