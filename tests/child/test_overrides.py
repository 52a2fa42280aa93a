"""``--across workers=`` and ``start=``: every DataLoader gets the environment's worker count and
start method, the script unmodified; the undo restores what was replaced."""

from __future__ import annotations

import multiprocessing

import torch
from torch.utils.data import DataLoader, TensorDataset

from repro_check.child import overrides


def _data() -> TensorDataset:
    return TensorDataset(torch.arange(8.0))


def test_worker_count_is_imposed_by_keyword_and_by_position() -> None:
    args, kwargs = overrides.loader_arguments((_data(), 2), {"num_workers": 4}, 0, None)
    assert kwargs["num_workers"] == 0
    args, kwargs = overrides.loader_arguments((_data(), 2, False, None, None, 4), {}, 2, None)
    assert args[5] == 2


def test_no_workers_drops_the_options_torch_refuses_without_them() -> None:
    undo = overrides.install({"num_workers": 0})
    try:
        loader = DataLoader(_data(), batch_size=2, num_workers=2, prefetch_factor=4,
                            persistent_workers=True, multiprocessing_context="spawn")
        assert loader.num_workers == 0 and loader.multiprocessing_context is None
        assert [b[0].tolist() for b in loader][:1] == [[0.0, 1.0]]
    finally:
        undo()
    assert DataLoader(_data(), num_workers=2).num_workers == 2  # undone


def test_start_method_goes_to_workers_and_to_processes_the_target_starts() -> None:
    said: list[str] = []
    before = multiprocessing.get_start_method(allow_none=True)
    original = multiprocessing.set_start_method
    undo = overrides.install({"num_workers": 2, "start_method": "spawn"}, said.append)
    try:
        loader = DataLoader(_data(), batch_size=2)
        assert loader.num_workers == 2
        assert loader.multiprocessing_context.get_start_method() == "spawn"
        assert multiprocessing.get_start_method() == "spawn"
        multiprocessing.set_start_method("fork")  # the script's own choice is ignored, noted
        assert multiprocessing.get_start_method() == "spawn"
        assert said and "'fork'" in said[0]
    finally:
        undo()
        multiprocessing.set_start_method(before, force=True)
    assert multiprocessing.set_start_method == original
    assert DataLoader(_data()).num_workers == 0


def test_nothing_to_impose_changes_nothing() -> None:
    init = DataLoader.__init__
    overrides.install({})()
    overrides.install(None)()
    assert DataLoader.__init__ is init
