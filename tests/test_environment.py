"""The environment fingerprint and how two of them are compared."""

from __future__ import annotations

import torch

from repro_check.child import environment
from repro_check.child import seeding
from repro_check.child.environment import differences, fingerprint, run_settings


def test_fingerprint_has_what_the_bits_depend_on() -> None:
    env = fingerprint(__file__, seed=5, components=seeding.COMPONENTS)
    assert env["torch"] == torch.__version__ and env["python"].count(".") == 2
    for key in ("cuda", "cudnn", "device", "device_name", "threads", "interop_threads",
                "deterministic_algorithms", "cudnn_deterministic", "cudnn_benchmark",
                "cpu_capability", "CUBLAS_WORKSPACE_CONFIG", "OMP_NUM_THREADS"):
        assert key in env, key
    assert env["threads"] == torch.get_num_threads()
    assert env["seed"] == 5 and env["seed_components"] == list(seeding.COMPONENTS)
    assert env["target_sha256"] == environment.source_hash(__file__) and len(env["target_sha256"]) == 64


def test_differences_list_every_key_best_known_first() -> None:
    a = {"python": "3.11.7", "torch": "2.13.0", "threads": 1, "zeta": 1, "device_name": "A100"}
    b = {"python": "3.11.7", "torch": "2.14.1", "threads": 4, "device_name": "H100", "extra": True}
    diffs = differences(a, b)
    assert [d.key for d in diffs] == ["torch", "device_name", "threads", "extra", "zeta"]
    assert diffs[0].describe() == "golden recorded with torch 2.13.0, this run 2.14.1"
    assert diffs[1].describe("a.json", "b.json") == "a.json recorded with device A100, b.json H100"
    assert diffs[3].describe() == "golden recorded with extra none, this run True"
    assert differences(a, dict(a)) == []


def test_run_settings_join_the_header_and_the_fingerprint() -> None:
    header = {"target": "t.py:main", "args": ["--lr", "0.1"], "seed": 3, "components": ["torch"],
              "max_steps": None, "environment": {"torch": "2.14.1"}}
    env = run_settings(header)
    assert env["seed"] == 3 and env["seed_components"] == ["torch"] and env["target"] == "t.py:main"
    other = run_settings({**header, "args": []})
    assert [d.describe() for d in differences(env, other)] == [
        "golden recorded with target arguments --lr 0.1, this run none"]
