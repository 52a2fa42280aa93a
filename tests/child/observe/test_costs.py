"""The capture's costs by part (``REPRO_CHECK_CAPTURE_COSTS``), what ``make bench`` prints as
"capture, by part": the timers themselves here, a whole run's parts in tests/test_bench.py."""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from repro_check.child.observe import costs


@pytest.fixture
def fake_module() -> Iterator[types.ModuleType]:
    """A module with a function and a class method to time, gone again after the test."""
    mod = types.ModuleType("fake_costs_target")

    def work(x: int) -> int:
        return x + 1

    class Thing:
        def step(self, x: int) -> int:
            if x < 0:
                raise ValueError("negative")
            return x * 2

    mod.work = work  # type: ignore[attr-defined]
    mod.Thing = Thing  # type: ignore[attr-defined]
    sys.modules[mod.__name__] = mod
    yield mod
    del sys.modules[mod.__name__]


def test_each_part_counts_its_calls_and_seconds_even_when_it_raises(
        fake_module: types.ModuleType, tmp_path: Path) -> None:
    c = costs.Costs(str(tmp_path / "costs.json"))
    c.install((costs.Part("plain", "fake_costs_target", "work"),
               costs.Part("method", "fake_costs_target", "Thing.step")))
    thing = fake_module.Thing()
    assert [fake_module.work(1), thing.step(3), thing.step(4)] == [2, 6, 8]
    with pytest.raises(ValueError):
        thing.step(-1)
    assert fake_module.Thing.step.__name__ == "step"  # wrapped, still named as it was
    c.write(steps=2)
    data = json.loads((tmp_path / "costs.json").read_text())
    assert data["steps"] == 2
    assert {k: v["calls"] for k, v in data["parts"].items()} == {"plain": 1, "method": 3}
    assert all(v["seconds"] >= 0 for v in data["parts"].values())
    assert list(tmp_path.iterdir()) == [tmp_path / "costs.json"]  # no temporary left


def test_a_file_that_cannot_be_written_leaves_nothing_and_does_not_raise(tmp_path: Path) -> None:
    c = costs.Costs(str(tmp_path / "missing-folder" / "costs.json"))
    c.write(steps=1)
    assert list(tmp_path.iterdir()) == []


def test_nothing_is_wrapped_without_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from repro_check.child.observe import capture

    monkeypatch.delenv(costs.COSTS_VAR, raising=False)
    before = capture.Recorder.on_batch
    assert costs.from_environment(1) is None
    assert capture.Recorder.on_batch is before


def test_every_part_names_a_function_that_exists() -> None:
    """A part whose function was renamed would stop the bench's runs from starting."""
    import importlib

    for part in costs.PARTS:
        owner = importlib.import_module(part.module)
        for name in part.qualname.split("."):
            owner = getattr(owner, name)
        assert callable(owner), part


@pytest.mark.parametrize(("run", "control", "rank", "expected"), [
    (1, False, None, "/x/costs.json"),
    (2, False, None, "/x/costs.run-2.json"),
    (3, True, None, "/x/costs.control.json"),
    (1, False, "5", "/x/costs.rank-5.json"),
    (2, False, "0", "/x/costs.run-2.rank-0.json"),
])
def test_the_runs_of_one_check_write_files_of_their_own(run: int, control: bool,
                                                         rank: str | None, expected: str) -> None:
    assert costs.path_of("/x/costs.json", run, control, rank) == expected


def test_the_variable_is_taken_so_the_targets_processes_do_not_write(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    monkeypatch.setenv(costs.COSTS_VAR, str(tmp_path / "c.json"))
    monkeypatch.setattr(costs.Costs, "install", lambda self, parts=costs.PARTS: None)
    got = costs.from_environment(2)
    assert got is not None and got.path == str(tmp_path / "c.run-2.json")
    assert costs.COSTS_VAR not in os.environ
