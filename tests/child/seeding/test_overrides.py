"""``--across workers=``, ``start=`` and ``compile=``: what the run's configuration asks is imposed
inside the process through the patch registry, the script unmodified; listed, and undone."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from repro_check import targets  # noqa: E402
from repro_check.child.seeding import overrides  # noqa: E402
from repro_check.child import patches  # noqa: E402
from repro_check.trace.protocol import RunConfig  # noqa: E402


def told(**changes: object) -> RunConfig:
    return RunConfig(run=1, target=targets.parse("train.py")).replace(**changes)


def _data() -> TensorDataset:
    return TensorDataset(torch.arange(8.0))


@pytest.fixture()
def clean() -> Iterator[None]:
    """Every override taken out again (and the start method put back) whatever the test did."""
    was = multiprocessing.get_start_method(allow_none=True)
    yield
    overrides.remove()
    patches.PATCHES.undo()
    multiprocessing.set_start_method(was, force=True)
    os.environ.pop(overrides.COMPILE_OFF_ENV, None)


def test_the_configuration_carries_the_overrides_to_the_run() -> None:
    config = told(num_workers=2, start_method="spawn", compile=False)
    back = RunConfig.from_json(config.to_json())
    assert (back.num_workers, back.start_method, back.compile) == (2, "spawn", False)
    assert overrides.imposes(back) and not overrides.imposes(told())
    assert not overrides.imposes(told(compile=True))  # on: the script compiles as it does


def test_worker_count_is_imposed_by_keyword_and_by_position(clean: None) -> None:
    init = DataLoader.__init__
    overrides.install(told(num_workers=0))
    assert DataLoader(_data(), 2, num_workers=4).num_workers == 0
    # dataset, batch_size, shuffle, sampler, batch_sampler, num_workers by position
    assert DataLoader(_data(), 2, False, None, None, 3).num_workers == 0
    rows = {row.target: row.features for row in patches.PATCHES.listing()}
    assert rows["torch.utils.data.dataloader.DataLoader.__init__"] == ("overrides.loaders",)
    overrides.remove()
    assert DataLoader.__init__ is init and DataLoader(_data(), num_workers=2).num_workers == 2


def test_no_workers_drops_the_options_torch_refuses_without_them(clean: None) -> None:
    overrides.install(told(num_workers=0))
    loader = DataLoader(_data(), batch_size=2, num_workers=2, prefetch_factor=4,
                        persistent_workers=True, multiprocessing_context="spawn")
    assert loader.num_workers == 0 and loader.multiprocessing_context is None
    assert [b[0].tolist() for b in loader][:1] == [[0.0, 1.0]]


def test_start_method_goes_to_workers_and_to_processes_the_target_starts(clean: None) -> None:
    said: list[str] = []
    original = multiprocessing.set_start_method
    before = multiprocessing.get_start_method(allow_none=True)
    overrides.install(told(num_workers=2, start_method="spawn"), said.append)
    loader = DataLoader(_data(), batch_size=2)
    assert loader.num_workers == 2
    assert loader.multiprocessing_context.get_start_method() == "spawn"
    assert multiprocessing.get_start_method() == "spawn"
    multiprocessing.set_start_method("fork")  # the script's own choice is ignored, noted
    assert multiprocessing.get_start_method() == "spawn"
    assert said and "'fork'" in said[0]
    features = {row.target: row.features for row in patches.PATCHES.listing()}
    assert features["multiprocessing.set_start_method"] == ("overrides.start_method",)
    overrides.remove()
    assert multiprocessing.set_start_method == original
    assert multiprocessing.get_start_method(allow_none=True) == before
    assert DataLoader(_data()).num_workers == 0


def test_compile_off_is_pytorchs_own_switch_in_the_process_environment(clean: None) -> None:
    assert overrides.COMPILE_OFF_ENV not in os.environ
    overrides.install(told(compile=False))
    assert os.environ[overrides.COMPILE_OFF_ENV] == "1"
    rows = {row.target: row.features for row in patches.PATCHES.listing()}
    assert rows[f"os.environ[{overrides.COMPILE_OFF_ENV}]"] == ("overrides.compile",)

    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    assert torch.compile(double) is double  # nothing compiled: the function as it is
    overrides.remove()
    assert overrides.COMPILE_OFF_ENV not in os.environ


def test_nothing_to_impose_changes_nothing(clean: None) -> None:
    init = DataLoader.__init__
    overrides.install(told())
    overrides.install(told(compile=True))
    assert DataLoader.__init__ is init and patches.PATCHES.listing() == []
    assert overrides.COMPILE_OFF_ENV not in os.environ
