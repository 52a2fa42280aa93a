"""The environment fingerprint and how two of them are compared."""

from __future__ import annotations

import torch

from repro_check.trace import environment
from repro_check.trace import seeding
from repro_check.trace.environment import differences, fingerprint, run_settings


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


#: the keys of a trace header's ``environment``, in order: the trace format is public
HEADER_KEYS = [
    "python", "numpy", "torch", "torch_git", "cuda", "platform", "machine", "cpu_capability",
    "threads", "interop_threads", "hash_randomization", "PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "deterministic_algorithms",
    "cudnn_benchmark", "cudnn_deterministic", "cudnn", "device", "device_name", "device_count",
    "device_capability", "fingerprints", "seed", "seed_components", "target_sha256",
]


def fake_cuda(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: f"GPU {i}")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, i))


def test_fingerprint_keys_keep_the_trace_format() -> None:
    keys = list(fingerprint())
    assert keys[:len(HEADER_KEYS)] == HEADER_KEYS
    # after them only the GPU numerics environment, where this machine has one
    assert all(k in environment.OPTIONAL_KEYS or environment.numerics_variable(k)
               for k in keys[len(HEADER_KEYS):]), keys
    env = fingerprint()
    assert env["device"] == "cpu" and env["device_count"] == 0 and env["device_capability"] is None


def test_fingerprint_of_cuda_devices(monkeypatch) -> None:
    fake_cuda(monkeypatch)
    env = fingerprint()
    assert list(env)[:len(HEADER_KEYS)] == HEADER_KEYS
    assert (env["device"], env["device_name"], env["device_count"], env["device_capability"]) \
        == ("cuda", "GPU 0", 2, "9.0")


def test_doctor_shows_what_the_fingerprint_records(monkeypatch) -> None:
    from repro_check.doctor.checkup import environment as doctor_environment

    fake_cuda(monkeypatch)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    facts = environment.collect()
    env, shown = fingerprint(), doctor_environment()
    assert [d["name"] for d in shown["devices"]] == ["GPU 0", "GPU 1", facts.processor]
    assert [d.get("capability") for d in shown["devices"][:2]] == ["9.0", "9.1"]
    for key in ("python", "torch", "cuda", "cudnn", "numpy", "platform", "hash_randomization"):
        assert shown[key] == env[key], key
    for name in environment.ENV_VARS:
        assert shown["variables"][name] == env[name], name
    assert shown["variables"]["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert shown["threads"] == {"intra_op": env["threads"], "inter_op": env["interop_threads"]}
    for flag in ("deterministic_algorithms", "cudnn_benchmark", "cudnn_deterministic"):
        assert shown["flags"][flag] == env[flag], flag
    assert list(shown["variables"]) == [*environment.THREAD_VARIABLES,
                                        *environment.DETERMINISM_VARIABLES]


#: set in the test's environment: what decides GPU numerics, and what does not
NUMERICS = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple", "NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0",
            "CUBLASLT_WORKSPACE_SIZE": "1024", "CUDNN_LOGINFO_DBG": "1",
            "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1", "TORCHINDUCTOR_DETERMINISTIC": "1",
            "NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/tmp/nccl.log", "TORCH_HOME": "/tmp/t",
            "TORCHINDUCTOR_CACHE_DIR": "/tmp/c", "TORCH_LOGS": "+dynamo", "NVTE_DEBUG": "1"}


def test_fingerprint_records_the_gpu_numerics_variables(monkeypatch) -> None:
    for name, value in NUMERICS.items():
        monkeypatch.setenv(name, value)
    env = fingerprint()
    recorded = {k: env[k] for k in NUMERICS if k in env}
    assert recorded == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple",
                        "NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0",
                        "CUBLASLT_WORKSPACE_SIZE": "1024",
                        "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1",
                        "TORCHINDUCTOR_DETERMINISTIC": "1"}
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    monkeypatch.delenv("NVTE_ALLOW_NONDETERMINISTIC_ALGO")
    other = fingerprint()
    assert [d.describe() for d in differences(env, other) if d.key.isupper()] == [
        "golden recorded with NCCL_ALGO Ring, this run Tree",
        "golden recorded with NVTE_ALLOW_NONDETERMINISTIC_ALGO 0, this run none"]


def test_nccl_and_cublas_versions_where_present(monkeypatch) -> None:
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 3))
    env = fingerprint()
    assert env["nccl"] == "2.27.3"
    monkeypatch.setattr(torch.version, "cuda", None)  # a CPU build: neither is recorded
    assert "nccl" not in fingerprint() and "cublas" not in fingerprint()
    old = {k: v for k, v in env.items() if k not in ("nccl", "cublas")}
    # a trace from before the versions were recorded: not a difference; two versions are
    assert [d.key for d in differences(old, env)] == []
    assert [d.describe() for d in differences(env, {**env, "nccl": "2.21.5"})] == [
        "golden recorded with NCCL 2.27.3, this run 2.21.5"]


def test_doctor_shows_the_numerics_variables(monkeypatch) -> None:
    from repro_check.doctor.checkup import environment as doctor_environment

    monkeypatch.setenv("NCCL_ALGO", "Ring")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    shown = doctor_environment()
    assert shown["numerics_variables"].get("NCCL_ALGO") == "Ring"
    assert "NCCL_DEBUG" not in shown["numerics_variables"]
