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


def test_init_is_its_own_cause_with_where_the_model_was_built() -> None:
    assert classify("init") == "init"
    models = [{"class": "Net", "where": "train.py:20", "order": 3}]
    seeds = {1: [{"component": "torch", "key": "torch.manual_seed", "value": 42,
                  "where": "train.py:31", "order": 5}]}
    got, why = cause.classify(reproducible=False, failed=False, divergent_signal="init",
                              environments=[{}, {}], uses_dataloader=True, seedings=seeds,
                              models=models)
    assert got == "init" and "Net built at train.py:20" in why
    assert "before the script seeds torch (torch.manual_seed at train.py:31)" in why
    assert "init" in cause.CAUSES and "init" in cause.EXPLANATION


def seed_records(source: str | None, values: tuple[Any, ...] = (1, 2),
                 component: str = "torch") -> dict[int, list[dict[str, Any]]]:
    key = {"torch": "torch.manual_seed", "python": "random.seed"}[component]
    return {run: [{"component": component, "key": key, "value": v, "where": "t.py:9",
                   "source": source}] for run, v in enumerate(values, 1)}


@pytest.mark.parametrize("signal", ["rng.torch", "batch", "loss", "init", "metric:acc"])
def test_a_seed_from_the_clock_is_named_whatever_showed_first(signal: str) -> None:
    got, why = cause.classify(reproducible=False, failed=False, divergent_signal=signal,
                              environments=[{}, {}], uses_dataloader=True,
                              seedings=seed_records("clock"))
    assert got == "rng" and "seeded from the clock (torch.manual_seed at t.py:9" in why
    assert "run 1: 1, run 2: 2" in why


def test_a_seed_that_differs_between_runs_is_named_on_an_rng_divergence() -> None:
    seeds = {**seed_records("unseeded python", component="python")}
    for run, recs in seed_records("unseeded python", (3, 4)).items():
        seeds[run] = seeds[run] + recs
    _, why = cause.classify(reproducible=False, failed=False, divergent_signal="rng.torch",
                            environments=[{}, {}], uses_dataloader=True, seedings=seeds)
    assert why.startswith("torch is seeded from Python's random, itself unseeded "
                          "(torch.manual_seed at t.py:9; run 1: 3, run 2: 4)")
    # a constant seed explains nothing; a reproducible check has no cause to name
    _, why = cause.classify(reproducible=False, failed=False, divergent_signal="rng.torch",
                            environments=[{}, {}], uses_dataloader=True,
                            seedings=seed_records(None, (7, 7)))
    assert why == cause.EXPLANATION["rng"]
    assert classify(None, reproducible=True) == "none"
