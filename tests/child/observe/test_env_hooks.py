"""The RL environment hooks in this process, on real gymnasium: which call of the script
returned which observation, recorded for the step probe."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from repro_check.child.observe import env_hooks
from repro_check.child.observe.probe import StepProbe, arg_fingerprint

pytestmark = pytest.mark.frameworks


@pytest.fixture(scope="module")
def gym() -> Any:
    """gymnasium, looked for only when a test here runs (make test deselects them by their
    marker; a module-level import skip would show as a skip there)."""
    return pytest.importorskip("gymnasium", reason="gymnasium is not installed (make "
                               "test-frameworks installs it and runs these tests)")


def test_env_calls_are_recorded_where_the_script_made_them_during_the_probed_step(gym: Any) -> None:
    """The call before the probe arms is recorded when it arms (the observation a step starts
    from); a wrapped environment's call counts once, at the script's line, with the digest the
    probe gives the tensor made from its observation; nothing is recorded once disarmed, and
    uninstalling restores gymnasium's classes."""
    records: list[dict[str, Any]] = []
    probe = StepProbe(records.append)
    hooks = env_hooks.install(SimpleNamespace(probe=probe, emit=records.append))
    try:
        class Tiny(gym.Env):  # defined after the hooks: wrapped through __init_subclass__
            observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
            action_space = gym.spaces.Discrete(2)

            def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
                super().reset(seed=seed)
                return self.np_random.random(3).astype(np.float32), {}

            def step(self, action: int) -> Any:
                return self.np_random.random(3).astype(np.float32), 0.0, False, False, {}

        env = gym.wrappers.TimeLimit(gym.wrappers.OrderEnforcing(Tiny()), 5)
        reset_line = sys._getframe().f_lineno + 1
        first, _ = env.reset(seed=3)
        assert not [r for r in records if "probe" in r]  # not armed: nothing digested yet
        probe.arm(1)
        try:
            step_line = sys._getframe().f_lineno + 1
            second, *_ = env.step(0)
        finally:
            probe.disarm()
        env.step(1)
        env_recs = [r["probe"] for r in records if r.get("probe", {}).get("k") == "env"]
        assert [(r["call"], r["loc"]["line"]) for r in env_recs] == [
            ("reset", reset_line), ("step", step_line)]
        assert env_recs[0]["loc"]["file"] == __file__
        assert env_recs[0]["loc"]["function"] == (
            "test_env_calls_are_recorded_where_the_script_made_them_during_the_probed_step")
        assert env_recs[0]["obs"] == arg_fingerprint(torch.as_tensor(first))
        assert env_recs[1]["obs"] == arg_fingerprint(torch.as_tensor(second))
        assert env_recs[0]["obs"] != env_recs[1]["obs"]
    finally:
        hooks.uninstall()
    assert not getattr(Tiny.reset, "__repro_check_hook__", False)
    assert not getattr(gym.Wrapper.step, "__repro_check_hook__", False)
    assert "__init_subclass__" not in gym.Env.__dict__


def test_a_runs_first_calls_are_sent_for_the_check_without_a_probe(
        gym: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside any probe (a check's run): each of the first RECORDED_CALLS outermost calls is
    sent with its number, line, the digests of its observation and action, and the steps done;
    after them only the first call at a new place (an evaluation's reset), up to NEW_SITES."""
    monkeypatch.setattr(env_hooks, "RECORDED_CALLS", 3)
    monkeypatch.setattr(env_hooks, "NEW_SITES", 1)
    records: list[dict[str, Any]] = []
    recorder = SimpleNamespace(probe=None, emit=records.append, step=0)
    hooks = env_hooks.install(recorder)
    try:
        class Walk(gym.Env):
            observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
            action_space = gym.spaces.Discrete(2)

            def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
                super().reset(seed=seed)
                return self.np_random.random(2).astype(np.float32), {}

            def step(self, action: int) -> Any:
                return self.np_random.random(2).astype(np.float32), 0.0, False, False, {}

        envs = gym.vector.SyncVectorEnv([lambda: gym.wrappers.TimeLimit(Walk(), 50)])
        line = sys._getframe().f_lineno + 1
        first, _ = envs.reset(seed=1)
        recorder.step = 2
        for k in range(4):  # calls 2-5 at one place: the first two sent, as calls 2 and 3
            envs.step(np.array([k % 2]))
        evaluation = gym.wrappers.TimeLimit(Walk(), 5)
        eval_line = sys._getframe().f_lineno + 1
        evaluation.reset()  # call 6, at a new place: sent
        evaluation.reset()  # call 7, another new place, past NEW_SITES: not sent
    finally:
        hooks.uninstall()
    sent = [r["info"]["env"] for r in records if "env" in r.get("info", {})]
    assert [(s["n"], s["call"], s["step"]) for s in sent] == [(1, "reset", 0), (2, "step", 2),
                                                               (3, "step", 2), (6, "reset", 2)]
    assert sent[0]["loc"]["line"] == line and sent[0]["action"] is None
    assert sent[3]["loc"]["line"] == eval_line
    assert sent[0]["obs"] == arg_fingerprint(torch.as_tensor(first))
    assert sent[1]["action"] == arg_fingerprint(torch.as_tensor(np.array([0])))
    assert sent[1]["action"] != sent[2]["action"]
