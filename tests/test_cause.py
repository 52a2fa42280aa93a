"""Root-cause rules: which first difference points to which cause."""

from __future__ import annotations

from typing import Any

import pytest

from repro_check.compare import cause


def classify(signal: str | None, reproducible: bool = False, envs: Any = None,
             dataloader: bool = True, failed: bool = False) -> str | None:
    env = {"torch": "2.14", "threads": 1}
    return cause.classify(reproducible=reproducible, failed=failed, divergent_signal=signal,
                          environments=envs or [env, dict(env)], uses_dataloader=dataloader)[0]


@pytest.mark.parametrize("signal, expected", [
    ("rng.python", "rng"), ("rng.numpy", "rng"), ("rng.torch", "rng"), ("rng.cuda", "rng"),
    ("batch", "data"), ("loss", "compute"), ("grads", "compute"), ("params", "compute"),
    ("metric:accuracy", "metrics"),
])
def test_first_signal_gives_the_cause(signal: str, expected: str) -> None:
    assert classify(signal) == expected


def test_reproducible_failed_and_shorter_runs() -> None:
    assert classify(None, reproducible=True) == "none"
    assert classify("loss", failed=True) is None
    assert classify("steps", dataloader=True) == "data"
    assert classify("steps", dataloader=False) == "compute"


def test_a_different_environment_comes_first() -> None:
    a = {"torch": "2.14", "threads": 1, "started": 1.0}
    b = {"torch": "2.13", "threads": 1, "started": 2.0}
    got, why = cause.classify(reproducible=False, failed=False, divergent_signal="loss",
                              environments=[a, b], uses_dataloader=True)
    assert got == "environment" and "torch: '2.14' in run 1, '2.13' in run 2" in why
    assert cause.environment_differences([a, {**a, "started": 9.0}]) == []
    assert classify("loss", envs=[a, {**a, "started": 9.0}]) == "compute"
