"""Runs made through the public Python API, once a session, shared by the tests that read them.

A run imports torch in a fresh process (seconds), so each report here serves every test that
asserts something about it: the API's results (test_api), the JSON report's keys and types
(test_report_model) and what the summaries show (test_gate_render). A module that uses them
names this module in ``pytest_plugins``, so each fixture is made once however many modules use
it (importing a fixture by name would make it once a module).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import repro_check

from .api_targets import DIVERGE_AT, PRINTED, SEED, TINY, TINY_ARGS, Golden


@pytest.fixture(scope="session")
def api_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("api-runs")


@pytest.fixture(scope="session")
def same_check(api_tmp: Path) -> Any:
    """Two seeded runs of a script that reports its accuracy with ``log_metric``."""
    return repro_check.check(PRINTED, seed=SEED, runs=2, trace_dir=api_tmp / "same")


@pytest.fixture(scope="session")
def diverging_check(api_tmp: Path) -> Any:
    """Two runs whose losses take OS entropy from step ``DIVERGE_AT`` on."""
    return repro_check.check(TINY, args=[*TINY_ARGS, "--diverge-at", str(DIVERGE_AT)], seed=SEED,
                             runs=2, trace_dir=api_tmp / "diverging")


@pytest.fixture(scope="session")
def golden(api_tmp: Path) -> Golden:
    path = api_tmp / "goldens" / "tiny.json"  # the folder does not exist yet: record makes it
    report = repro_check.record(TINY, path, args=TINY_ARGS, seed=SEED, runs=1,
                                trace_dir=api_tmp / "record")
    return Golden(path, report, report.to_dict())


@pytest.fixture(scope="session")
def verify_same(golden: Golden, api_tmp: Path) -> Any:
    """The golden's target verified with nothing else given: the golden's settings are used."""
    return repro_check.verify(TINY, golden.path, trace_dir=api_tmp / "verify-same")


@pytest.fixture(scope="session")
def verify_other_seed(golden: Golden, api_tmp: Path) -> Any:
    # a copy with a long name, so that the replay line is longer than a terminal line
    long = api_tmp / "goldens" / ("a-golden-with-a-rather-long-file-name-" * 2 + "tiny.json")
    shutil.copyfile(golden.path, long)
    return repro_check.verify(TINY, long, seed=SEED + 1, trace_dir=api_tmp / "verify-seed")


@pytest.fixture(scope="session")
def failed_record(api_tmp: Path) -> Any:
    """A record whose only run raises at step 2: no golden may be written."""
    path = api_tmp / "goldens" / "failed.json"
    report = repro_check.record(TINY, path, args=[*TINY_ARGS, "--raise-at", "2"], seed=SEED,
                                trace_dir=api_tmp / "record-failed")
    return report, path
