"""Step capture on unmodified scripts of every TARGET form."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import FIXTURES, run_cli


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("capture")


def test_no_optimizer_counts_backward_calls(tmp: Path) -> None:
    res = run_cli("manual_sgd:main", tmp=tmp / "sgd")
    assert res.code == 0, res.stdout
    assert res.report["steps"] == [12, 12]
    assert set(res.report["metrics"][0]) == {"return"}


def test_whole_script_runs_as_main_with_arguments(tmp: Path) -> None:
    from repro_check.trace import load_trace

    res = run_cli("script_main.py", "--", "7", tmp=tmp / "script")
    assert res.code == 0, res.stdout
    assert res.report["steps"] == [7, 7]
    tr = load_trace(res.report["run_results"][0]["trace"])
    assert "ran 7 steps, __name__=__main__" in tr.end["output_tail"]


def test_file_function_form_from_another_folder(tmp: Path) -> None:
    res = run_cli(str(FIXTURES / "tiny.py") + ":main", "--", "--steps", "4",
                  tmp=tmp / "file", cwd=tmp)
    assert res.code == 0, res.stdout + res.stderr
    assert res.report["steps"] == [4, 4]


def test_log_metric_for_scripts_that_print(tmp: Path) -> None:
    res = run_cli("printed_metric:main", tmp=tmp / "printed")
    assert res.code == 0, res.stdout
    assert set(res.report["metrics"][0]) == {"accuracy"}
    assert any("'ignored'" in w for w in res.report["warnings"])


def test_log_metric_outside_a_run_does_nothing() -> None:
    import repro_check

    assert repro_check.log_metric("x", 1.5) == 1.5
