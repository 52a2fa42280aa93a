"""A CleanRL-style DQN (fixtures/dqn_cleanrl.py) whose gymnasium vector environment is reset once,
without a seed, before the loop: the check's own cause is that reset (``rng``, at its line),
not "a nondeterministic computation", though the reset ran many environment steps before step
1. Its twin, reset with ``envs.reset(seed=...)`` as CleanRL writes it, stays reproducible."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..conftest import FIXTURES, CliResult, run_cli

pytestmark = pytest.mark.frameworks

SCRIPT = FIXTURES / "dqn_cleanrl.py"


def line_of(text: str) -> int:
    return next(n for n, line in enumerate(SCRIPT.read_text().splitlines(), 1) if text in line)


@pytest.fixture(scope="module")
def gym() -> None:
    pytest.importorskip("gymnasium", reason="gymnasium is not installed (make test-frameworks "
                        "installs it and runs these tests)")


@pytest.fixture(scope="module")
def unseeded(gym: None, tmp_path_factory: pytest.TempPathFactory) -> CliResult:
    return run_cli("dqn_cleanrl.py:main", "--max-steps", "3",
                   tmp=tmp_path_factory.mktemp("dqn-unseeded"))


@pytest.fixture(scope="module")
def seeded(gym: None, tmp_path_factory: pytest.TempPathFactory) -> CliResult:
    return run_cli("dqn_cleanrl.py:main", "--max-steps", "3", "--", "--seed-env",
                   tmp=tmp_path_factory.mktemp("dqn-seeded"))


def test_the_unseeded_reset_before_the_loop_is_the_checks_cause(unseeded: CliResult) -> None:
    res = unseeded
    assert res.code == 1, res.stdout + res.stderr
    r = res.report
    assert r is not None and r["first_divergent_step"] == 1
    assert r["cause"] == "rng", r["cause_detail"]
    assert r["cause_location"] == {"file": str(SCRIPT), "line": line_of("obs, _ = envs.reset()"),
                                   "function": "main"}
    assert "nondeterministic computation" not in r["cause_detail"]
    assert "env.reset() at" in r["cause_detail"] and "call 1, before step 1" in r["cause_detail"]
    assert "envs.reset(seed=...)" in r["cause_detail"]


def test_the_twin_reset_with_a_seed_stays_reproducible(seeded: CliResult) -> None:
    res = seeded
    assert res.code == 0, res.stdout + res.stderr
    r = res.report
    assert r is not None and r["cause"] == "none" and r["steps"] == [3, 3]


def test_the_twin_sends_the_same_environment_calls_in_both_runs(seeded: CliResult) -> None:
    """The evidence could have shown a difference: both runs sent their calls (a reset, then
    steps with their actions), and they agree."""
    r = seeded.report
    assert r is not None
    calls = []
    for run in r["run_results"]:
        lines = [json.loads(line) for line in Path(run["trace"]).read_text().splitlines()]
        calls.append([rec["info"]["env"] for rec in lines if "env" in rec.get("info", {})])
    assert calls[0] and calls[0] == calls[1]
    assert calls[0][0]["call"] == "reset" and calls[0][1]["call"] == "step"
    assert calls[0][1]["action"] is not None and calls[0][-1]["step"] >= 1


def test_its_diagnosis_names_the_reset_too(gym: None, tmp_path: Path) -> None:
    """diagnose: the cause's location and the localization's env_call are the reset, not the
    line where the sampled batch enters the Q-network."""
    from repro_check.commands.diagnose import diagnose

    report = diagnose(f"{SCRIPT}:main", ablate=[], max_sources=0, max_steps=2,
                      trace_dir=tmp_path / "dqn")
    d = report.to_dict()
    reset = {"file": str(SCRIPT), "line": line_of("obs, _ = envs.reset()"), "function": "main"}
    assert d["cause"] == "rng" and d["cause_location"] == reset, d["cause_detail"]
    loc = d["localization"]
    assert loc["env_call"] == {"call": "reset", **reset}, loc
    assert "seed what produced it" not in loc["detail"] and "envs.reset(seed=...)" in loc["detail"]


#: 300 environment steps before the evaluation: its reset comes after the first 256 calls
LONG = ["--total-timesteps", "300", "--learning-starts", "280", "--seed-env", "--eval"]


@pytest.fixture(scope="module")
def evaluated(gym: None, tmp_path_factory: pytest.TempPathFactory) -> CliResult:
    return run_cli("dqn_cleanrl.py:main", "--", *LONG, tmp=tmp_path_factory.mktemp("dqn-eval"))


@pytest.fixture(scope="module")
def evaluated_seeded(gym: None, tmp_path_factory: pytest.TempPathFactory) -> CliResult:
    return run_cli("dqn_cleanrl.py:main", "--", *LONG, "--seed-eval",
                   tmp=tmp_path_factory.mktemp("dqn-eval-seeded"))


def test_an_evaluation_reset_after_training_is_named_for_the_metrics(evaluated: CliResult) -> None:
    """Training agrees; the evaluation environment, reset without a seed after 301 calls of the
    training's, gives another return: named at its reset (the first call at a new place)."""
    r = evaluated.report
    assert evaluated.code == 1 and r is not None, evaluated.stdout + evaluated.stderr
    assert r["first_divergent_step"] is None and r["divergent_signal"].startswith("metric:eval_")
    assert r["cause"] == "rng", r["cause_detail"]
    assert r["cause_location"] == {"file": str(SCRIPT),
                                   "line": line_of("obs, _ = env.reset(seed=seed)"),
                                   "function": "evaluate"}
    assert "call 302, after step" in r["cause_detail"]


def test_the_evaluation_reset_with_a_seed_stays_reproducible(evaluated_seeded: CliResult) -> None:
    r = evaluated_seeded.report
    assert evaluated_seeded.code == 0 and r is not None, evaluated_seeded.stdout
    assert r["cause"] == "none"


def test_unseeded_action_spaces_are_named_at_the_step_given_another_action(
        gym: None, tmp_path: Path) -> None:
    """The environments reset with a seed, their action spaces unseeded: the epsilon-greedy
    actions sampled from them differ while every observation agreed, before step 1. Named at
    the envs.step() given another action, not "a nondeterministic computation"."""
    res = run_cli("dqn_cleanrl.py:main", "--max-steps", "2", "--", "--seed-env",
                  "--no-seed-actions", tmp=tmp_path)
    r = res.report
    assert res.code == 1 and r is not None, res.stdout + res.stderr
    assert r["cause"] == "rng", r["cause_detail"]
    assert r["cause_location"] == {"file": str(SCRIPT), "line": line_of("= envs.step(actions)"),
                                   "function": "main"}
    assert r["cause_detail"].startswith("the action given to env.step() at ")
    assert "before step 1" in r["cause_detail"] and "action_space.seed(" in r["cause_detail"]
