"""Nothing the hooks of ``child/`` put into a run may break a compiled library that checks what it
imports: a check of a script that imports and uses them is REPRODUCIBLE, with steps in every run
(pandas crashed the second run while the moved clock replaced ``datetime.datetime``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..conftest import CliResult, run_cli

SCRIPT = "compat/compiled_libraries.py"
#: what the test extras install (``make test``)
IN_TEST_EXTRAS = ("pandas", "matplotlib", "PIL")
#: everything a training script commonly pulls in: ``make test-frameworks`` installs them
ALL = ("pandas", "pyarrow", "scipy", "sklearn", "matplotlib", "PIL", "h5py", "numba", "polars")


def assert_reproducible_in_every_run(result: CliResult, runs: int) -> None:
    assert result.code == 0, result.stdout + result.stderr
    report: Any = result.report
    assert report is not None and report["reproducible"] is True
    assert report["steps"] == [6] * runs and report["steps_compared"] == 6
    assert all(r["status"] == "completed" for r in report["run_results"]), report["run_results"]
    assert "REPRODUCIBLE" in result.stdout and "SIGSEGV" not in result.stdout + result.stderr


@pytest.fixture(scope="module")
def with_pandas(tmp_path_factory: pytest.TempPathFactory) -> CliResult:
    """Two runs (run 2 on a moved clock) of a script that imports pandas, matplotlib and Pillow
    before torch."""
    return run_cli(SCRIPT, "--seed", "1", "--", *IN_TEST_EXTRAS,
                   tmp=tmp_path_factory.mktemp("compiled"))


def test_a_script_importing_pandas_is_checked_in_every_run(with_pandas: CliResult) -> None:
    assert_reproducible_in_every_run(with_pandas, 2)


def test_a_clock_seed_read_through_pandas_is_still_found(tmp_path: Path) -> None:
    """``pandas.Timestamp.now()`` calls the real ``datetime.now``, which the moved clock moves in
    place: a seed taken from it differs between runs started in the same second, and is named
    as a seed from the clock at its line."""
    result = run_cli(SCRIPT, "--seed", "1", "--", "pandas", "--seed-from-pandas-clock", tmp=tmp_path)
    report: Any = result.report
    assert result.code == 1 and report is not None, result.stdout + result.stderr
    assert report["first_divergent_step"] == 1 and report["divergent_signal"] == "rng.torch"
    assert report["cause"] == "rng" and "seeded from the clock" in report["cause_detail"]
    assert report["cause_location"]["file"].endswith(SCRIPT)
    assert report["steps"] == [6, 6]


@pytest.mark.frameworks
def test_every_common_compiled_library_survives_the_hooks(tmp_path: Path) -> None:
    """pandas, pyarrow, scipy, scikit-learn, matplotlib, Pillow, h5py, numba and polars, each
    imported before torch and used; ``make test-frameworks`` installs them (the script fails,
    and so this test, where one is missing: it is never skipped)."""
    assert_reproducible_in_every_run(
        run_cli(SCRIPT, "--seed", "1", "--", *ALL, tmp=tmp_path, timeout=600), 2)


@pytest.mark.frameworks
def test_diagnose_pins_a_clock_seed_with_every_library_imported(tmp_path: Path) -> None:
    """diagnose's pinned runs add hooks of their own (the private generators' classes, the
    reseeding pins): with the compiled libraries imported they still run, and the clock seed
    read through pandas is the one source found, at its line."""
    result = run_cli("diagnose", SCRIPT, "--", *ALL, "--seed-from-pandas-clock", tmp=tmp_path,
                     traces=False, timeout=900)
    report: Any = result.report
    assert result.code == 1 and report is not None, result.stdout + result.stderr
    assert [(s["cause"], s["signal"]) for s in report["sources"]] == [("rng", "rng.torch")]
    assert report["sources"][0]["location"]["file"].endswith(SCRIPT)
    assert "with the 1 source(s) above pinned, the runs agree" in " ".join(result.stdout.split())
