"""Step capture on unmodified scripts of every TARGET form."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import FIXTURES, run_cli


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("capture")


def test_no_optimizer_counts_backward_calls(tmp: Path) -> None:
    res = run_cli("manual_sgd:main", tmp=tmp / "sgd")
    assert res.code == 0, res.stdout
    assert res.report["steps"] == [12, 12]
    assert set(res.report["metrics"][0]) == {"return"}


def test_whole_script_runs_as_main_with_arguments(tmp: Path) -> None:
    from repro_check.trace import load_trace

    res = run_cli("script_main.py", "--", "7", tmp=tmp / "script")
    assert res.code == 0, res.stdout
    assert res.report["steps"] == [7, 7]
    tr = load_trace(res.report["run_results"][0]["trace"])
    assert "ran 7 steps, __name__=__main__" in tr.end["output_tail"]


def test_file_function_form_from_another_folder(tmp: Path) -> None:
    res = run_cli(str(FIXTURES / "tiny.py") + ":main", "--", "--steps", "4",
                  tmp=tmp / "file", cwd=tmp)
    assert res.code == 0, res.stdout + res.stderr
    assert res.report["steps"] == [4, 4]


def test_log_metric_for_scripts_that_print(tmp: Path) -> None:
    res = run_cli("printed_metric:main", tmp=tmp / "printed")
    assert res.code == 0, res.stdout
    assert set(res.report["metrics"][0]) == {"accuracy"}
    assert any("'ignored'" in w for w in res.report["warnings"])


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
    from repro_check.capture import Recorder

    events: list[dict] = []
    rec = Recorder(events.append).install()
    try:
        make_loop()()
    finally:
        rec.uninstall()
    return [e["info"]["expected_steps"] for e in events if "info" in e]


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
