"""Step capture on unmodified scripts of every TARGET form."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ...api_targets import STEPS, TINY, Golden
from ...conftest import FIXTURES, CliResult, run_cli

# the shared API runs (same_check, golden, verify_same): made once a session
pytest_plugins = ["tests.api_runs"]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("capture")


def test_no_optimizer_counts_backward_calls(tmp: Path) -> None:
    res = run_cli("manual_sgd:main", tmp=tmp / "sgd")
    assert res.code == 0, res.stdout
    assert res.report["steps"] == [12, 12]
    assert set(res.report["metrics"][0]) == {"return"}


@pytest.fixture(scope="module")
def whole_script(tmp: Path) -> tuple[CliResult, Path]:
    """fixtures/capture_whole_script.py checked once (two runs): run as a whole script with
    arguments, leaving work for interpreter exit in its folder."""
    out = tmp / "exit-work"
    out.mkdir()
    # two runs: the control run (stopped at step 2) would leave its own exit work beside theirs
    return run_cli("capture_whole_script.py", "--no-control", "--", "7", str(out),
                   tmp=tmp / "script"), out


def test_whole_script_runs_as_main_with_arguments(whole_script: tuple[CliResult, Path]) -> None:
    from repro_check.trace.format import load_trace

    res, _ = whole_script
    assert res.code == 0, res.stdout + res.stderr
    assert res.report["steps"] == [7, 7]
    tr = load_trace(res.report["run_results"][0]["trace"])
    assert "ran 7 steps, __name__=__main__" in tr.end["output_tail"]


def test_file_function_form_from_another_folder(golden: Golden, verify_same: Any) -> None:
    """FILE.py:FUNCTION with the file's path, run from elsewhere: the shared API record and
    verify of fixtures/tiny.py (tests/api_runs.py), started from this process's folder."""
    assert Path.cwd().resolve() != FIXTURES.resolve(), "run the tests from the checkout"
    assert TINY == f"{FIXTURES / 'tiny.py'}:main"
    assert golden.report.exit_code == 0 and golden.data["steps"] == [STEPS]
    d = verify_same.to_dict()
    assert d["exit_code"] == 0 and d["reproducible"] is True, d
    assert d["steps"] == [STEPS, STEPS]


def test_log_metric_for_scripts_that_print(same_check: Any) -> None:
    """printed_metric.py's two runs, shared with the API's tests (tests/api_runs.py)."""
    d = same_check.to_dict()
    assert d["exit_code"] == 0, d
    # what it logs, and what it prints ("Accuracy: 0.375"), picked from its output
    assert set(d["metrics"][0]) == {"accuracy", "printed:accuracy"}
    assert any("'ignored'" in w for w in d["warnings"])


def test_log_metric_outside_a_run_does_nothing() -> None:
    import repro_check

    assert repro_check.log_metric("x", 1.5) == 1.5


class _Stream:
    """An iterable dataset without a length."""

    def __new__(cls):  # built lazily so the module imports without torch
        import torch
        from torch.utils.data import IterableDataset

        class Stream(IterableDataset):
            def __iter__(self):
                return iter(torch.zeros(3, 2))

        return Stream()


def _expected_steps(make_loop) -> list[int]:
    """The expected-steps records the recorder emits while the loop trains in this process."""
    from repro_check.child.observe.capture import Recorder

    events: list[dict] = []
    rec = Recorder(events.append).install()
    try:
        make_loop()()
    finally:
        rec.uninstall()
    return [e["info"]["expected_steps"] for e in events if "expected_steps" in e.get("info", {})]


def _loaders():
    """A model with its optimizer (made after the recorder is installed), a training loader of 5
    batches, an evaluation loader of 3, and a training step."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(TensorDataset(torch.randn(10, 2)), batch_size=2)
    val = DataLoader(TensorDataset(torch.randn(6, 2)), batch_size=2)

    def step(x) -> None:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    return train, val, step


def test_expected_steps_follow_the_training_loader_not_evaluation() -> None:
    def make_loop():
        train, val, step = _loaders()

        def loop() -> None:
            for _ in val:  # a sanity evaluation before training
                pass
            for _ in range(2):
                for (x,) in train:
                    step(x)
                for _ in val:
                    pass
            for _ in _Stream():  # no length: no expectation, no error
                pass

        return loop

    assert _expected_steps(make_loop) == [3, 5, 10]


def test_expected_steps_ignore_an_evaluation_inside_an_epoch() -> None:
    def make_loop():
        train, val, step = _loaders()

        def loop() -> None:
            for i, (x,) in enumerate(train):
                step(x)
                if i == 1:
                    for _ in val:
                        pass

        return loop

    assert _expected_steps(make_loop) == [5]


def test_expected_steps_with_a_new_loader_every_epoch() -> None:
    def make_loop():
        from torch.utils.data import DataLoader

        train, _, step = _loaders()

        def loop() -> None:
            for _ in range(3):
                for (x,) in DataLoader(train.dataset, batch_size=5):  # 2 batches
                    step(x)

        return loop

    assert _expected_steps(make_loop) == [2, 4, 6]


# ---- per-step signals, recorded in this process ------------------------------------------
import random  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from repro_check.child.observe import capture  # noqa: E402

SIGNAL_ORDER = ["rng.python", "rng.numpy", "rng.torch", "rng.cuda", "init", "batch", "loss",
                "lr", "opt", "scaler", "grads", "params"]


@contextmanager
def recording(**options: Any) -> Iterator[list[dict[str, Any]]]:
    """A Recorder installed in this process; yields the list its records go to."""
    events: list[dict[str, Any]] = []
    rec = capture.Recorder(events.append, **options).install()
    try:
        yield events
    finally:
        rec.uninstall()


def steps(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["signals"] for e in events if "step" in e]


def train(order: list[int] | None = None, fetches_per_step: int = 1, steps_: int = 3,
          draw: Callable[[], Any] | None = None, init_seed: int = 0) -> list[dict[str, Any]]:
    torch.manual_seed(init_seed)
    x = torch.arange(48, dtype=torch.float32).reshape(12, 4) / 48
    if order is not None:
        x = x[order]
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=2)
    with recording() as events:
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        batches = iter(loader)
        for _ in range(steps_):
            opt.zero_grad()
            for _ in range(fetches_per_step):
                xb, yb = next(batches)
                if draw is not None:
                    draw()
                torch.nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
    return steps(events)


def test_signals_recorded_in_the_order_a_step_happens() -> None:
    for signals in train():
        names = list(signals)
        assert {"batch", "loss", "grads", "params"} <= set(names)
        assert names == [n for n in SIGNAL_ORDER if n in names]


def _epochs(model: torch.nn.Module, opt: Any, loader: Any, epochs: int) -> None:
    for _ in range(epochs):
        for xb, yb in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()


def test_lazy_states_measure_a_resumed_first_step_where_the_reference_is() -> None:
    """A resume's runs take each step's RNG states at its first activity, an epoch's end being
    none: the first step of epoch 2 (after the new iterator drew its seeds from torch's global
    RNG) is measured as a run that starts at epoch 2 from the same state measures its step 1."""
    x = torch.arange(16, dtype=torch.float32).reshape(8, 2) / 16
    data = TensorDataset(x, x.sum(1, keepdim=True))

    def run(epochs: int, state: Any = None) -> tuple[list[dict[str, Any]], Any]:
        with recording() as events:
            capture.active().signals.lazy = True  # type: ignore[union-attr]
            torch.manual_seed(0)
            model = torch.nn.Linear(2, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(data, batch_size=4, shuffle=True)
            if state is not None:
                torch.set_rng_state(state)
            _epochs(model, opt, loader, epochs)
        return steps(events), torch.get_rng_state()

    reference, _ = run(2)
    _, after_epoch_1 = run(1)
    resumed, _ = run(1, after_epoch_1)
    assert resumed[0]["rng.torch"] == reference[2]["rng.torch"]


def test_lazy_states_leave_out_batches_skipped_before_a_resumed_first_step() -> None:
    """A resumed loader that fetches and drops the batches its epoch already saw (the HF
    Trainer's skip_first_batches): the first step's batch is the one it trained on."""
    x = torch.arange(16, dtype=torch.float32).reshape(8, 2) / 16
    data = TensorDataset(x, x.sum(1, keepdim=True))

    def run(skip: int) -> list[dict[str, Any]]:
        with recording() as events:
            capture.active().signals.lazy = True  # type: ignore[union-attr]
            model = torch.nn.Linear(2, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            batches = iter(DataLoader(data, batch_size=2))
            for _ in range(skip):
                next(batches)
            for xb, yb in batches:
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(xb), yb).backward()
                opt.step()
        return steps(events)

    whole, skipped = run(0), run(2)
    assert [s["batch"] for s in skipped] == [s["batch"] for s in whole[2:]]


def test_the_parameters_going_into_step_1_are_recorded_once() -> None:
    plain, again, other = train(), train(), train(init_seed=1)
    assert "init" in plain[0] and all("init" not in s for s in plain[1:])
    assert plain[0]["init"] == again[0]["init"] != other[0]["init"]
    assert plain[0]["batch"] == other[0]["batch"]  # only the model's start differs


def test_a_permuted_batch_differs_and_accumulated_fetches_combine() -> None:
    plain = train()
    swapped = train(order=[1, 0] + list(range(2, 12)))
    assert plain[0]["batch"] != swapped[0]["batch"]
    assert plain[1]["batch"] == swapped[1]["batch"]
    accumulated = train(fetches_per_step=2)
    assert accumulated[0]["batch"] != plain[0]["batch"]
    assert len(accumulated) == 3 and accumulated[0]["grads"] != plain[0]["grads"]


def test_a_stream_is_recorded_once_the_run_draws_from_it() -> None:
    unused = train()
    assert all("rng.python" not in s for s in unused)
    random.seed(1)
    used = train(draw=random.random)
    assert all("rng.python" in s for s in used)
    assert len({s["rng.python"] for s in used}) == 3  # the state at each step's start


def test_without_optimizer_grads_come_from_the_leaves() -> None:
    w = torch.zeros(3, requires_grad=True)
    x = torch.ones(5, 3)
    with recording() as events:
        for _ in range(2):
            (x @ w - 1).pow(2).mean().backward()
            with torch.no_grad():
                w -= 0.1 * w.grad
                w.grad.zero_()
    got = steps(events)
    assert len(got) == 2 and all("grads" in s and "params" not in s for s in got)
    assert got[0]["grads"] != got[1]["grads"]
    assert "init" in got[0] and "init" not in got[1]  # the leaves before the first backward


def test_flagged_ops_are_reported_once_with_their_step() -> None:
    before = torch.are_deterministic_algorithms_enabled()
    x = torch.rand(1, 1, 4, 4)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with pytest.warns(UserWarning, match="max_unpool"), recording(flag_ops=True) as events:
            w = torch.nn.Parameter(torch.ones(1))
            opt = torch.optim.SGD([w], lr=0.1)
            for _ in range(3):
                out, idx = torch.nn.functional.max_pool2d(x * w, 2, return_indices=True)
                torch.nn.functional.max_unpool2d(out, idx, 2).sum().backward()
                opt.step()
    finally:
        torch.use_deterministic_algorithms(before)
    flagged = [e["flagged"] for e in events if "flagged" in e]
    assert [f["op"] for f in flagged] == ["max_unpooling2d_forward_out"]
    assert flagged[0]["step"] == 1 and flagged[0]["where"].startswith(__file__)


def test_steps_held_on_a_device_are_emitted_in_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every tensor treated as a device tensor: fingerprints stay deferred until a batch of
    steps is flushed, then arrive as text, in step order, with their losses."""
    from repro_check.trace import fingerprint

    monkeypatch.setattr(fingerprint, "_on_host", lambda t: False)
    monkeypatch.setattr(fingerprint, "_VIEWS", {})  # views of host tensors kept: none
    monkeypatch.setattr(capture.Recorder, "FLUSH_EVERY", 2)
    monkeypatch.setattr(capture.Recorder, "FLUSH_SECONDS", 3600.0)
    emitted_at: list[tuple[int, int]] = []
    events: list[dict[str, Any]] = []

    def emit(event: dict[str, Any]) -> None:
        if "step" in event:
            emitted_at.append((event["step"], rec.step))
        events.append(event)

    rec = capture.Recorder(emit).install()
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(10, 4)
        for xb in DataLoader(TensorDataset(x), batch_size=2):
            opt.zero_grad()
            model(xb[0]).sum().backward()
            opt.step()
        assert emitted_at == [(1, 2), (2, 2), (3, 4), (4, 4)]  # step 5 still held
        rec.flush()
    finally:
        rec.uninstall()
    assert [s for s, _ in emitted_at] == [1, 2, 3, 4, 5]
    got = steps(events)
    for signals in got:
        assert all(isinstance(signals[k], str) for k in ("batch", "grads", "params"))
        assert signals["loss"]["dtype"] == "float32"
    assert len({s["params"] for s in got}) == 5 and len({s["batch"] for s in got}) == 5


def test_a_slow_step_is_not_held_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from repro_check.trace import fingerprint

    monkeypatch.setattr(fingerprint, "_on_host", lambda t: False)
    monkeypatch.setattr(fingerprint, "_VIEWS", {})  # views of host tensors kept: none
    monkeypatch.setattr(capture.Recorder, "FLUSH_SECONDS", 0.0)
    assert len(train()) == 3  # each step flushed as it ends, nothing left for a final flush


def test_a_run_still_does_what_the_script_left_for_exit(
        whole_script: tuple[CliResult, Path]) -> None:
    """Runs skip the collector's passes at exit, not the exit: atexit handlers run and files the
    script never closed are flushed."""
    res, out = whole_script
    assert res.code == 0, res.stdout + res.stderr
    logs, handlers = sorted(out.glob("*.log")), sorted(out.glob("*.atexit"))
    assert len(logs) == 2 and len(handlers) == 2
    for log in logs:
        assert log.read_text().splitlines()[-1].startswith("step 7 loss ")
    assert all(h.read_text() == "atexit ran\n" for h in handlers)


def test_a_tensor_capture_can_not_read_does_not_stop_the_training(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from repro_check.trace import fingerprint

    real, real_plain = fingerprint._bytes_view, fingerprint._plain

    def picky(t: Any, real: Any = real) -> Any:
        if t.dim() == 2 and t.shape[1] == 4:  # the Linear's weight and its gradient
            raise TypeError("unsupported tensor")
        return real(t)

    monkeypatch.setattr(fingerprint, "_UNREADABLE", {})
    monkeypatch.setattr(fingerprint, "_REPORTED", set())
    monkeypatch.setattr(fingerprint, "_bytes_view", picky)
    monkeypatch.setattr(fingerprint, "_plain", lambda t, keep=False: picky(t, real_plain))
    events: list[dict[str, Any]] = []
    rec = capture.Recorder(events.append).install()
    try:
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
    finally:
        rec.uninstall()
    assert len(steps(events)) == 3
    warnings = [e["warning"] for e in events if "warning" in e]
    # said once per type (the weight is a Parameter, its gradient a Tensor), not once per step
    assert len(warnings) == 2 and all("unsupported tensor" in w for w in warnings)
    assert {w.split(": ")[1].split(" ")[0] for w in warnings} == {"Parameter", "Tensor"}


@pytest.mark.slow
def test_steps_from_several_threads_are_numbered_once_each_in_every_trace(tmp: Path) -> None:
    """Three models trained in three threads: whatever the interleaving, every trace is valid
    and numbered 1..30, and each step carries its own thread's loss (the same 30 losses in every
    run, in the order the optimizer steps completed)."""
    from repro_check.trace.format import load_trace

    res = run_cli("threads_train.py:main", "--runs", "4", tmp=tmp / "threads")
    assert res.code in (0, 1), res.stdout + res.stderr  # the interleaving may differ: no failure
    assert res.report["steps"] == [30, 30, 30, 30]
    losses = []
    for r in res.report["run_results"]:
        trace = load_trace(r["trace"])
        assert [s.step for s in trace.steps] == list(range(1, 31))
        losses.append(sorted(s.signals["loss"]["bits"] for s in trace.steps))
    assert all(run == losses[0] for run in losses)


def _train_then_evaluate(steps_: int, accumulate: int = 1) -> str:
    """``steps_`` optimizer steps (``accumulate`` backward calls each), then an evaluation with
    a DataLoader and no backward; how the loop ended."""
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps_):
        opt.zero_grad()
        for _ in range(accumulate):
            model(torch.ones(2, 4)).sum().backward()
        opt.step()
    with torch.no_grad():
        for (xb,) in loader:
            model(xb)
    return "returned"


@pytest.mark.parametrize("steps_, accumulate, ended, recorded", [
    (3, 1, "returned", 3),  # the script's own loop ends at the limit: it evaluates and returns
    (5, 1, "stopped", 3),   # a fourth step starts: stopped at its backward
    (5, 2, "stopped", 3),   # with accumulation too, at the first backward of step 4
    (2, 1, "returned", 2),
])
def test_max_steps_stops_a_run_only_when_it_starts_a_step_past_the_limit(
        steps_: int, accumulate: int, ended: str, recorded: int) -> None:
    with recording(max_steps=3) as events:
        try:
            how = _train_then_evaluate(steps_, accumulate)
        except capture.StopTraining:
            how = "stopped"
    assert how == ended and len(steps(events)) == recorded


def test_the_samples_of_a_batch_are_its_first_tensors_leading_size() -> None:
    from repro_check.child.observe.capture import leading_size

    x, y = torch.zeros(8, 3), torch.zeros(8)
    assert leading_size((x, y)) == 8 and leading_size([x]) == 8
    assert leading_size({"input_ids": torch.zeros(4, 9, dtype=torch.long)}) == 4
    assert leading_size((["text a", "text b"], torch.zeros(2, 5))) == 2  # the first tensor
    assert leading_size(torch.tensor(3.0)) is None and leading_size(["a", 1]) is None
    assert leading_size([[[[[[x]]]]]]) is None  # nested past any collate: not looked for
