"""What a run's result can depend on besides the code: versions, devices, threads, flags."""

from __future__ import annotations

import hashlib
import os
import platform
import sys
from typing import Any


def _versions() -> dict[str, Any]:
    out: dict[str, Any] = {"python": platform.python_version()}
    try:
        import numpy

        out["numpy"] = numpy.__version__
    except ImportError:
        out["numpy"] = None
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda"] = torch.version.cuda
    except ImportError:
        out["torch"] = None
    return out


def fingerprint(target_source: str | None = None) -> dict[str, Any]:
    """The environment of the current process (call inside a run, after seeding)."""
    import torch

    env: dict[str, Any] = _versions()
    env["platform"] = platform.platform()
    env["machine"] = platform.machine()
    env["threads"] = torch.get_num_threads()
    env["interop_threads"] = torch.get_num_interop_threads()
    env["hash_randomization"] = bool(sys.flags.hash_randomization)
    env["PYTHONHASHSEED"] = os.environ.get("PYTHONHASHSEED")
    env["CUBLAS_WORKSPACE_CONFIG"] = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    env["deterministic_algorithms"] = torch.are_deterministic_algorithms_enabled()
    env["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    env["cudnn_deterministic"] = bool(torch.backends.cudnn.deterministic)
    if torch.cuda.is_available():
        env["device"] = "cuda"
        env["device_name"] = torch.cuda.get_device_name(0)
        env["device_count"] = torch.cuda.device_count()
        env["cudnn"] = torch.backends.cudnn.version()
    else:
        env["device"] = "cpu"
        env["device_name"] = platform.processor() or platform.machine()
    env["target_sha256"] = source_hash(target_source) if target_source else None
    return env


def source_hash(path: str) -> str | None:
    """sha256 of the target's source file, so a changed script shows in the environment."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None
