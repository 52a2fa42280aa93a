"""What a run's result can depend on besides the code: versions, devices, threads, flags.

:func:`fingerprint` is recorded in every trace header (inside the run, after seeding);
:func:`differences` lists what differs between two of them, so ``verify`` and ``diff`` can say
"golden recorded with torch 2.13.0, this run 2.14.1" when a divergence comes with a change.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: environment variables read by PyTorch or its math libraries that change result bits
ENV_VARS = ("PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "CUDA_VISIBLE_DEVICES")

#: readable names of fingerprint keys, in the order differences are listed
LABELS = {
    "target_sha256": "target source (sha256)",
    "target": "target",
    "args": "target arguments",
    "max_steps": "max steps",
    "torch": "torch",
    "cuda": "CUDA",
    "cudnn": "cuDNN",
    "device": "device type",
    "device_name": "device",
    "device_count": "device count",
    "device_capability": "device capability",
    "threads": "threads",
    "interop_threads": "inter-op threads",
    "seed": "seed",
    "seed_components": "seed components",
    "deterministic_algorithms": "deterministic algorithms",
    "cudnn_deterministic": "cudnn.deterministic",
    "cudnn_benchmark": "cudnn.benchmark",
    "cpu_capability": "CPU capability",
    "python": "Python",
    "numpy": "numpy",
    "torch_git": "torch build",
    "platform": "platform",
    "machine": "machine",
}


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
        out["torch_git"] = getattr(torch.version, "git_version", None)
        out["cuda"] = torch.version.cuda
    except ImportError:
        out["torch"] = None
    return out


def _cpu_capability() -> str | None:
    """The vector instruction set torch picked (AVX2, AVX512...): kernels, hence bits, differ."""
    try:
        import torch

        return str(torch.backends.cpu.get_cpu_capability())
    except (ImportError, AttributeError, RuntimeError):
        return None


def fingerprint(
    target_source: str | None = None,
    seed: int | None = None,
    components: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The environment of the current process (call inside a run, after seeding)."""
    import torch

    env: dict[str, Any] = _versions()
    env["platform"] = platform.platform()
    env["machine"] = platform.machine()
    env["cpu_capability"] = _cpu_capability()
    env["threads"] = torch.get_num_threads()
    env["interop_threads"] = torch.get_num_interop_threads()
    env["hash_randomization"] = bool(sys.flags.hash_randomization)
    for name in ENV_VARS:
        env[name] = os.environ.get(name)
    env["deterministic_algorithms"] = torch.are_deterministic_algorithms_enabled()
    env["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    env["cudnn_deterministic"] = bool(torch.backends.cudnn.deterministic)
    try:
        env["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() \
            else None
    except RuntimeError:
        env["cudnn"] = None
    if torch.cuda.is_available():
        env["device"] = "cuda"
        env["device_name"] = torch.cuda.get_device_name(0)
        env["device_count"] = torch.cuda.device_count()
        env["device_capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    else:
        env["device"] = "cpu"
        env["device_name"] = platform.processor() or platform.machine()
        env["device_count"] = 0
        env["device_capability"] = None
    from repro_check.trace import fingerprint as fingerprints

    env["fingerprints"] = f"{fingerprints.ALGORITHM}, {fingerprints.DEVICE_ALGORITHM} on devices"
    env["seed"] = seed
    env["seed_components"] = list(components) if components is not None else None
    env["target_sha256"] = source_hash(target_source) if target_source else None
    return env


def source_hash(path: str) -> str | None:
    """sha256 of the target's source file, so a changed script shows in the environment."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


@dataclass(frozen=True)
class Difference:
    """One fingerprint key whose value differs between a reference and another run."""

    key: str
    reference: Any
    value: Any

    @property
    def label(self) -> str:
        return LABELS.get(self.key, self.key)

    def describe(self, ref_name: str = "golden", other_name: str = "this run") -> str:
        """E.g. ``golden recorded with torch 2.13.0, this run 2.14.1``."""
        return (f"{ref_name} recorded with {self.label} {_show(self.key, self.reference)}, "
                f"{other_name} {_show(self.key, self.value)}")

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "reference": self.reference,
                "value": self.value}


def _show(key: str, value: Any) -> str:
    if value is None:
        return "none"
    if key == "target_sha256" and isinstance(value, str):
        return value[:12]
    if key == "args" and isinstance(value, (list, tuple)):
        return shlex.join(map(str, value)) if value else "none"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or "none"
    return str(value)


def differences(reference: Mapping[str, Any] | None, other: Mapping[str, Any] | None) -> list[Difference]:
    """Every key whose value differs (a key only one side has counts), best-known keys first."""
    ref, oth = dict(reference or {}), dict(other or {})
    keys = [k for k in LABELS if k in ref or k in oth]
    keys += sorted(k for k in {*ref, *oth} if k not in LABELS)
    return [Difference(k, ref.get(k), oth.get(k)) for k in keys if ref.get(k) != oth.get(k)]


def run_settings(header: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a run that belong in an environment comparison beside the fingerprint
    (older traces kept seed and components only in the header)."""
    env = dict(header.get("environment") or {})
    env.setdefault("seed", header.get("seed"))
    env.setdefault("seed_components", header.get("components"))
    if header.get("target") is not None:
        env["target"] = header.get("target")
    if header.get("args") is not None:
        env["args"] = list(header.get("args") or [])
    env["max_steps"] = header.get("max_steps")
    return env
