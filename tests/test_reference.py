"""The reference MNIST workload: seeded runs agree on every step and on accuracy; unseeded do not."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro_check.report.model import Report

from .conftest import SHARED_MNIST, run_cli
from .recorded import BOTH, replayed_or_live


def test_embedded_subset_reproduces(tmp_path: Path) -> None:
    res = run_cli("repro_check.workloads.mnist:main", "--seed", "123", tmp=tmp_path, cwd=tmp_path)
    assert res.code == 0, res.stdout + res.stderr
    assert res.report["steps"] == [157, 157]  # 10,000 images / batch 64
    acc = [m["accuracy"] for m in res.report["metrics"]]
    assert acc[0] == acc[1] and 0.7 < acc[0] < 1.0


@pytest.fixture(params=BOTH)
def unseeded(request: pytest.FixtureRequest, tmp_path: Path) -> Report:
    """The packaged workload (the MLP of fixtures/train.py without its torchvision imports)
    under --no-seed --max-steps 3."""
    return replayed_or_live(request.param, "mnist_unseeded", tmp_path)


def test_unseeded_diverges_at_step_1(unseeded: Report) -> None:
    r = unseeded.to_dict()
    assert r["exit_code"] == 1
    # model initialisation draws from torch's unseeded stream: its state differs before step 1
    assert r["first_divergent_step"] == 1 and r["divergent_signal"] == "rng.torch"
    assert r["cause"] == "rng"


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_MNIST.is_dir(),
                    reason=f"the full MNIST set is not at {SHARED_MNIST} (set REPRO_CHECK_MNIST)")
def test_full_mnist_reproduces_all_938_steps(tmp_path: Path) -> None:
    res = run_cli("train:main", "--seed", "123", "--", "--data", str(SHARED_MNIST), tmp=tmp_path)
    assert res.code == 0, res.stdout + res.stderr
    assert res.report["steps"] == [938, 938]
    acc = [m["accuracy"] for m in res.report["metrics"]]
    assert acc[0] == acc[1] and acc[0] > 0.9


def test_missing_data_folder_is_a_clear_target_failure(tmp_path: Path) -> None:
    res = run_cli("repro_check.workloads.mnist:main", "--", "--data", str(tmp_path / "none"),
                  tmp=tmp_path, cwd=tmp_path)
    assert res.code == 3
    assert "no MNIST IDX files" in res.report["error"] or "no MNIST IDX files" in res.stdout
