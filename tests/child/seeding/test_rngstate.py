"""RNG state fingerprints: one per global stream, unchanged by reading, changed by drawing."""

from __future__ import annotations

import random

import numpy as np
import torch

from repro_check.child.seeding import rngstate


def test_streams_in_order_and_reading_does_not_advance() -> None:
    first = rngstate.signals(cuda=False)
    assert list(first) == ["rng.python", "rng.numpy", "rng.torch"]
    assert rngstate.signals(cuda=False) == first


def test_each_draw_changes_only_its_stream() -> None:
    for draw, name in ((random.random, "rng.python"), (np.random.rand, "rng.numpy"),
                       (torch.rand, "rng.torch")):
        before = rngstate.signals(cuda=False)
        draw(1) if name != "rng.python" else draw()
        after = rngstate.signals(cuda=False)
        assert [k for k in before if before[k] != after[k]] == [name]


def test_the_same_seed_gives_the_same_state() -> None:
    np.random.seed(3)
    a = rngstate.numpy_state()
    np.random.rand(5)
    np.random.seed(3)
    assert rngstate.numpy_state() == a
    state = np.random.get_state()
    np.random.rand(1)
    np.random.set_state(state)
    assert rngstate.numpy_state() == a


def test_cuda_without_a_device_is_left_out() -> None:
    assert rngstate.cuda_state(available=False) is None


def test_python_state_read_in_place_agrees_with_getstate(monkeypatch) -> None:
    import random

    from repro_check.child.seeding import rngstate

    def slow() -> str:
        with monkeypatch.context() as m:
            m.setattr(rngstate, "_raw_python_state", lambda inst: None)
            return rngstate.python_state()

    random.seed(7)
    seen = set()
    for draw in (lambda: None, random.random, lambda: random.gauss(0, 1),
                 lambda: random.gauss(0, 1), lambda: random.seed(7), random.random):
        draw()
        fast = rngstate.python_state()
        assert fast == slow()
        assert rngstate.python_state() == fast  # the cached answer
        seen.add(fast)
    assert len(seen) == 4  # seed, draw, gauss, and a gauss served from its cache (same words)
    assert rngstate._raw_python_state(random._inst) is not None  # the fast path is in use here
