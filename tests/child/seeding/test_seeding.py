"""Each seeding component really takes effect in the run (fixtures/probe.py reports them)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from repro_check.child.seeding import components as seeding
from repro_check.trace import seeding as vocabulary
from repro_check.errors import UsageError

from ...conftest import CliResult, run_cli


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> CliResult:
    # its metrics are the streams' draws, which no trained tensor reaches: the negative control
    # cannot show in them (UNVERIFIED), and what is tested here is the streams
    return run_cli("probe:main", "--seed", "123", "--threads", "2", "--no-control",
                   tmp=tmp_path_factory.mktemp("s"))


@pytest.fixture(scope="module")
def unseeded(tmp_path_factory: pytest.TempPathFactory) -> CliResult:
    return run_cli("probe:main", "--no-seed", tmp=tmp_path_factory.mktemp("u"))


@pytest.fixture(scope="module")
def without_numpy(tmp_path_factory: pytest.TempPathFactory) -> CliResult:
    return run_cli("probe:main", "--seed", "123", "--without", "numpy", tmp=tmp_path_factory.mktemp("n"))


def test_full_seeding_reproduces_every_stream(seeded: CliResult) -> None:
    assert seeded.code == 0, seeded.stdout + seeded.stderr
    m1, m2 = seeded.report["metrics"]
    assert m1 == m2


def test_streams_get_the_seed(seeded: CliResult) -> None:
    m = seeded.report["metrics"][0]
    assert m["python"] == random.Random(123).random()
    assert m["numpy"] == float(np.random.RandomState(123).rand())
    expected = torch.rand((), generator=torch.Generator().manual_seed(123))
    assert m["torch"] == float(expected)


def test_hashseed_threads_and_flags(seeded: CliResult) -> None:
    m = seeded.report["metrics"][0]
    assert m["hashseed_env"] == 123 and m["hash_randomization"] == 1
    assert m["threads"] == 2 and seeded.report["threads"] == 2
    assert m["cudnn_deterministic"] == 1 and m["cudnn_benchmark"] == 0
    assert m["deterministic_algorithms"] == 1
    assert seeded.report["components"] == list(vocabulary.COMPONENTS)
    assert seeded.report["environment"]["threads"] == 2


def test_no_seed_changes_every_stream(unseeded: CliResult) -> None:
    assert unseeded.code == 1
    assert unseeded.report["components"] == [] and unseeded.report["seed"] is None
    m1, m2 = unseeded.report["metrics"]
    for name in ("python", "numpy", "torch", "hash"):
        assert m1[name] != m2[name], name
    assert m1["hashseed_env"] == -2  # PYTHONHASHSEED=random, not inherited
    assert m1["deterministic_algorithms"] == 0


def test_turning_one_component_off_changes_only_its_stream(without_numpy: CliResult) -> None:
    assert without_numpy.code == 1
    assert without_numpy.report["divergent_signal"] == "metric:numpy"
    m1, m2 = without_numpy.report["metrics"]
    assert {k for k in m1 if m1[k] != m2[k]} == {"numpy"}
    assert "numpy" not in without_numpy.report["components"]


def test_unknown_component_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="did you mean 'numpy'"):
        vocabulary.select_components(["numpi"])


def test_seed_range() -> None:
    with pytest.raises(UsageError):
        vocabulary.check_seed(2**32)
    assert vocabulary.check_seed(0) == 0


def test_child_environment_sets_what_is_read_at_start() -> None:
    env = vocabulary.child_environment({"PYTHONHASHSEED": "0"}, 7, vocabulary.COMPONENTS, 3)
    assert env["PYTHONHASHSEED"] == "7" and env["OMP_NUM_THREADS"] == "3"
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    off = vocabulary.child_environment({"PYTHONHASHSEED": "0"}, 7, (), None)
    assert off["PYTHONHASHSEED"] == "random" and "OMP_NUM_THREADS" not in off


def test_derived_seeds_are_stable_and_distinct() -> None:
    assert seeding.derive_seed(1, "dataloader", 1) == seeding.derive_seed(1, "dataloader", 1)
    assert seeding.derive_seed(1, "dataloader", 1) != seeding.derive_seed(1, "dataloader", 2)


