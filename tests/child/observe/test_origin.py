"""Where a model was built, in this process: the site of the top-level model an optimizer's
parameters belong to, and the names the probe gives two models of one class."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from repro_check.child.observe import origin  # noqa: E402
from repro_check.child.observe.probe import StepProbe  # noqa: E402

HERE = os.path.abspath(__file__)


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x: Any) -> Any:
        return self.fc(x)


class Net(Block):
    """A subclass chain: ``Net.__init__`` -> ``Block.__init__`` -> ``nn.Module.__init__``."""

    def __init__(self) -> None:
        super().__init__(4)
        self.head = nn.Linear(4, 1)

    def forward(self, x: Any) -> Any:
        return self.head(super().forward(x))


@pytest.fixture()
def sites(monkeypatch: pytest.MonkeyPatch) -> Iterator[origin.ModelSites]:
    monkeypatch.setattr(origin, "SITES", origin.ModelSites())
    yield origin.SITES.install()
    origin.SITES.uninstall()  # nn.Module.__init__ put back


def line_of(text: str) -> int:
    with open(HERE) as fh:
        return next(i for i, line in enumerate(fh, 1) if text in line)


def test_the_top_level_model_and_where_it_was_built(sites: origin.ModelSites) -> None:
    student = Net()  # built here
    lone = nn.Linear(2, 2)
    found = sites.models_holding(student.parameters())
    assert found == [{"class": "Net", "name": "student",
                      "where": f"{HERE}:{line_of('student = Net()  # built here')}",
                      "order": found[0]["order"]}]
    assert sites.site(student.fc).startswith(f"{HERE}:")  # inside Block.__init__
    assert sites.models_holding(lone.parameters())[0]["class"] == "Linear"
    assert sites.models_holding([]) == []


def test_library_frames_are_skipped() -> None:
    assert origin.is_library(torch.__file__) and origin.is_library(os.__file__)
    assert origin.is_library(origin.__file__) and not origin.is_library(HERE)
    assert origin.caller(0).startswith(f"{HERE}:")
    assert origin.assigned_name("no-such-file.py:3") is None


def test_two_models_of_one_class_get_distinct_qualified_names(sites: origin.ModelSites) -> None:
    records: list[dict[str, Any]] = []
    probe = StepProbe(lambda event: records.append(event["probe"]))
    student = Net()
    teacher = Net()
    probe.arm(1)
    x = torch.ones(2, 4)
    student(x)
    teacher(x)
    probe.disarm()
    names = [r["m"] for r in records if r.get("k") == "module"]
    assert names == ["Net.fc", "Net.head", "Net", "teacher.fc", "teacher.head", "teacher"]


class Layers:
    """Layers kept in a plain list (pytorch/examples' forward-forward MNIST): no module holds
    them, and the line that builds each assigns the list."""

    def __init__(self) -> None:
        self.layers: list[Any] = []
        for _ in range(2):
            self.layers = self.layers + [nn.Linear(3, 3)]


def test_named_roots_name_each_top_level_model_once_in_build_order(
        sites: origin.ModelSites) -> None:
    student = Net()
    act = nn.ReLU()  # no tensor: not a root
    held = Layers()
    teacher = Net()
    names = [(name, m) for name, m in sites.named_roots()]
    assert [n for n, _ in names] == ["student", "self.layers", "self.layers#2", "teacher"]
    assert [m for _, m in names] == [student, *held.layers, teacher]
    assert all(m is not act for _, m in names)
    assert sites.named_roots(also=[student]) == names  # a module twice is one root


def test_a_model_in_shared_memory_is_said_to_be(sites: origin.ModelSites) -> None:
    shared = Net()
    shared.share_memory()
    own = Net()
    found = sites.models_holding([*shared.parameters(), *own.parameters()])
    assert [(m["name"], m.get("shared")) for m in found] == [("shared", True), ("own", None)]
    assert origin.shared_memory(shared.fc.weight) and not origin.shared_memory(own.fc.weight)
    assert not origin.shared_memory(object())
