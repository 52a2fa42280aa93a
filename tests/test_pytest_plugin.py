"""The pytest plugin, in pytest sessions of its own (pytester)."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from .conftest import ROOT, cli_env

pytest_plugins = ["pytester"]

TRAINING = '''
import os

import pytest
import torch


def train(noisy=False, steps=3):
    # no torch.optim (its first use imports torch._dynamo, seconds a run): each backward call
    # is a step, and the update is written out
    model = torch.nn.Linear(4, 1)
    x = torch.randn(16, 4)
    for _ in range(steps):
        loss = model(x).pow(2).mean()
        if noisy:
            loss = loss * (1 + int.from_bytes(os.urandom(2), "little") * 1e-6)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
                p.grad = None
    return {"final": loss.item()}


@pytest.mark.reproducible(seed=3)
def test_trains_reproducibly():
    train()


@pytest.mark.reproducible(seed=3, max_steps=2)
def test_trains_with_noise():
    train(noisy=True)


def test_fixture_checks_a_target(assert_reproducible):
    report = assert_reproducible("test_training.py:train", seed=1, runs=2)
    assert report.reproducible and [r.steps for r in report.results] == [3, 3]


@pytest.mark.reproducible(seed=3)
def test_takes_a_fixture(tmp_path):
    pass


def test_plain():
    assert 1 + 1 == 2
'''


def test_marker_and_fixture_in_a_session(pytester: pytest.Pytester) -> None:
    # one session serves every assertion: each marked test costs two training processes
    pytester.makepyfile(test_training=TRAINING)
    result = pytester.runpytest("-p", "repro_check.pytest_plugin", "-rA")
    result.assert_outcomes(passed=3, failed=2)
    out = result.stdout.str()
    for name in ("test_trains_reproducibly", "test_fixture_checks_a_target", "test_plain"):
        assert f"PASSED test_training.py::{name}" in out
    # a training function that is not reproducible fails with the divergence report
    section = out.split("_ test_trains_with_noise _")[1].split("_ test_takes_a_fixture _")[0]
    assert "is not reproducible (exit 1)" in section
    assert "First divergence: step 1, signal loss, run 2 vs run 1" in section
    assert "Replay:\nrepro-check " in section and "test_training.py:test_trains_with_noise" in section
    assert "--max-steps 1" in section
    # the marker cannot run a function that needs fixtures in a fresh process: it says so
    assert "cannot take fixtures (tmp_path)" in out


def test_plugin_is_registered_and_cheap_to_import() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    entry = meta["project"]["entry-points"]["pytest11"]
    assert list(entry.values()) == ["repro_check.pytest_plugin"]
    code = ("import sys, repro_check.pytest_plugin as p; "
            "assert callable(p.pytest_configure) and callable(p.pytest_pyfunc_call); "
            "heavy = [m for m in ('torch', 'rich', 'numpy') if m in sys.modules]; "
            "print(heavy); sys.exit(1 if heavy else 0)")
    proc = subprocess.run([sys.executable, "-c", code], env=cli_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_sessions_that_do_not_use_it_are_unaffected(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("x", [1, 2])
        def test_ordinary(x, tmp_path):
            assert x in (1, 2) and tmp_path.exists()
        """
    )
    result = pytester.runpytest("-p", "repro_check.pytest_plugin", "--strict-markers")
    result.assert_outcomes(passed=2)
    markers = pytester.runpytest("-p", "repro_check.pytest_plugin", "--markers")
    markers.stdout.fnmatch_lines(["*@pytest.mark.reproducible(target=None*"])


@pytest.mark.slow
def test_assert_resumes_fails_naming_the_state_not_restored(pytester: pytest.Pytester) -> None:
    """The resume fixture in a session of its own (one resume: three runs): a checkpoint without
    the optimizer's state fails the test, naming what was not restored; a bad keyword is a
    TypeError."""
    script = ROOT / "fixtures" / "resume" / "train.py"
    pytester.makepyfile(test_resuming=f'''
import pytest


def test_resumes(assert_resumes, tmp_path):
    assert_resumes("{script}:main", at=3, resume_args="--resume {{checkpoint}}",
                   args=["--out", str(tmp_path / "out"), "--no-opt"], max_steps=8)


def test_runs_is_not_a_resume_keyword(assert_resumes):
    with pytest.raises(TypeError, match="runs"):
        assert_resumes("train.py", at=3, runs=3)
''')
    result = pytester.runpytest("-p", "repro_check.pytest_plugin", "-rA")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    # the learning rate too: it lives in the optimizer's param groups, and the scheduler's
    # restored state changes it only at its next step
    assert "does not resume exactly (exit 1; not restored: optimizer, lr)" in out
    assert "RESUME DIFFERS" in out and "PASSED test_resuming.py::test_runs_is_not" in out
