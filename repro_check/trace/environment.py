"""What a run's result can depend on besides the code: versions, devices, threads, flags.

:func:`collect` reads them once, for both of their readers: :func:`fingerprint`, recorded in
every trace header (inside the run, after seeding), and ``repro-check doctor``'s environment
table. :func:`differences` lists what differs between two fingerprints, so ``verify`` and
``diff`` can say "golden recorded with torch 2.13.0, this run 2.14.1" when a divergence comes
with a change.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

#: environment variables that set the thread counts of PyTorch's math libraries
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "OMP_DYNAMIC", "MKL_DYNAMIC")
#: other environment variables that change result bits, or where and how kernels run
DETERMINISM_VARIABLES = ("PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", "CUDA_VISIBLE_DEVICES",
                         "CUDA_LAUNCH_BLOCKING")
#: the variables every trace header records (the trace format is public: these stay as they are)
ENV_VARS = ("PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "CUDA_VISIBLE_DEVICES")

#: prefixes of the variables that decide GPU numerics: collective algorithms and protocols
#: (NCCL), Transformer Engine's kernels (NVTE), cuBLAS/cuBLASLt and cuDNN workspaces and
#: algorithms; every variable set with one of them is recorded in the trace header
NUMERICS_PREFIXES = ("NCCL_", "NVTE_", "CUBLAS_", "CUBLASLT_", "CUDNN_")
#: torch's own variables that change numerics: determinism, TF32, inductor's random draws
TORCH_NUMERICS_WORDS = ("DETERMINISTIC", "TF32", "FALLBACK_RANDOM", "CUBLAS", "CUDNN",
                        "PRECISION")
#: parts of a variable's name that say it only logs, dumps or locates files (no numerics)
NOT_NUMERICS = ("DEBUG", "LOG", "DUMP", "FILE", "DIR", "PATH", "HOME", "TRACE", "SOCKET_IFNAME")
#: fingerprint keys some machines cannot give (a library missing): compared only when both
#: traces have them, so a trace from before they were recorded shows no difference
OPTIONAL_KEYS = frozenset({"nccl", "cublas"})

#: readable names of fingerprint keys, in the order differences are listed
LABELS = {
    "target_sha256": "target source (sha256)",
    "target": "target",
    "args": "target arguments",
    "max_steps": "max steps",
    "torch": "torch",
    "cuda": "CUDA",
    "cudnn": "cuDNN",
    "nccl": "NCCL",
    "cublas": "cuBLAS",
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


@dataclass
class Facts:
    """The environment of this process as :func:`collect` read it; None where it cannot be read
    (torch missing, a build without CUDA libraries)."""

    python: str
    implementation: str
    executable: str
    platform: str
    machine: str
    #: the CPU's name: ``platform.processor()``, else the machine
    processor: str
    hash_randomization: bool
    numpy: str | None
    cpu_count: int | None
    usable_cpus: int | None
    #: every variable of THREAD_VARIABLES and DETERMINISM_VARIABLES, in that order (None: unset)
    variables: dict[str, str | None]
    torch: str | None = None
    torch_git: str | None = None
    cuda: str | None = None
    cudnn: int | None = None
    #: the vector instruction set torch picked (AVX2, AVX512...): kernels, hence bits, differ
    cpu_capability: str | None = None
    cuda_available: bool = False
    #: (name, compute capability such as "9.0") of every visible CUDA device
    cuda_devices: list[tuple[str | None, str | None]] = field(default_factory=list)
    mps_available: bool = False
    threads: int | None = None
    interop_threads: int | None = None
    #: the determinism switches, by the names doctor shows them under
    flags: dict[str, Any] = field(default_factory=dict)
    #: the NCCL version torch runs with, "2.27.3" (None: a build without NCCL)
    nccl: str | None = None
    #: the cuBLAS library's version, from its installed package (None: not installed so)
    cublas: str | None = None
    #: every set variable that decides GPU numerics (:func:`numerics_variables`), by name
    numerics: dict[str, str] = field(default_factory=dict)


def _quiet(fn: Callable[[], Any]) -> Any:
    """A value that some builds cannot give (no CUDA libraries): None instead of an error."""
    try:
        return fn()
    except Exception:  # noqa: BLE001
        return None


def _numpy_version() -> str | None:
    try:
        # numpy on use (it may be absent): import repro_check and a run's start never load it
        import numpy

        return numpy.__version__
    except Exception:  # noqa: BLE001 - a broken install is reported as missing
        return None


def numerics_variable(name: str) -> bool:
    """A variable that decides GPU numerics: NCCL's, Transformer Engine's, cuBLAS's, cuDNN's,
    and torch's determinism, TF32 and inductor switches; not those that only log or locate."""
    if any(part in name for part in NOT_NUMERICS):
        return False
    if name.startswith(NUMERICS_PREFIXES):
        return True
    return name.startswith(("TORCH_", "TORCHINDUCTOR_", "PYTORCH_")) and any(
        word in name for word in TORCH_NUMERICS_WORDS)


def numerics_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The set variables :func:`numerics_variable` keeps, sorted by name."""
    env = os.environ if environ is None else environ
    return {name: env[name] for name in sorted(env) if numerics_variable(name)}


def _package_version(*names: str) -> str | None:
    """The version of the first of these installed distributions (the CUDA libraries' wheels)."""
    # on use: only a run's fingerprint and doctor read installed packages
    import importlib.metadata

    for name in names:
        try:
            return importlib.metadata.version(name)
        except Exception:  # noqa: BLE001 - not installed, or broken metadata: none
            continue
    return None


def _nccl_version(torch: Any) -> str | None:
    version = _quiet(lambda: torch.cuda.nccl.version())
    if isinstance(version, tuple):
        return ".".join(map(str, version))
    return str(version) if isinstance(version, int) else None


def _capability(torch: Any, index: int) -> str | None:
    capability = _quiet(lambda: torch.cuda.get_device_capability(index))
    return ".".join(map(str, capability)) if capability else None


def collect() -> Facts:
    """Versions, devices, threads, the variables that set them and the determinism flags.

    Works without torch (doctor's environment table then says so); reads nothing that changes
    the process's random state.
    """
    facts = Facts(
        python=platform.python_version(),
        implementation=platform.python_implementation(),
        executable=sys.executable,
        platform=platform.platform(),
        machine=platform.machine(),
        processor=platform.processor() or platform.machine(),
        hash_randomization=bool(sys.flags.hash_randomization),
        numpy=_numpy_version(),
        cpu_count=os.cpu_count(),
        usable_cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        variables={name: os.environ.get(name)
                   for name in (*THREAD_VARIABLES, *DETERMINISM_VARIABLES)},
        numerics=numerics_variables(),
    )
    try:
        import torch
    except Exception:  # noqa: BLE001 - torch missing or broken
        return facts
    cudnn = torch.backends.cudnn
    facts.torch = torch.__version__
    facts.torch_git = getattr(torch.version, "git_version", None)
    facts.cuda = torch.version.cuda
    facts.cudnn = _quiet(lambda: cudnn.version() if cudnn.is_available() else None)  # type: ignore[no-untyped-call]
    facts.cpu_capability = _quiet(lambda: str(torch.backends.cpu.get_cpu_capability()))
    facts.cuda_available = bool(_quiet(torch.cuda.is_available))
    if facts.cuda_available:
        facts.cuda_devices = [(_quiet(partial(torch.cuda.get_device_name, i)), _capability(torch, i))
                              for i in range(_quiet(torch.cuda.device_count) or 0)]
    facts.mps_available = bool(_quiet(lambda: torch.backends.mps.is_available()))
    facts.threads = torch.get_num_threads()
    facts.interop_threads = torch.get_num_interop_threads()
    if facts.cuda is not None:  # a CUDA build: its NCCL and cuBLAS
        facts.nccl = _nccl_version(torch)
        facts.cublas = _package_version("nvidia-cublas-cu13", "nvidia-cublas-cu12",
                                         "nvidia-cublas-cu11", "nvidia-cublas")
    facts.flags = {
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn_enabled": bool(cudnn.enabled),
        "cudnn_benchmark": bool(cudnn.benchmark),
        "cudnn_deterministic": bool(cudnn.deterministic),
        "cuda_matmul_allow_tf32": _quiet(lambda: bool(torch.backends.cuda.matmul.allow_tf32)),
        "cudnn_allow_tf32": _quiet(lambda: bool(cudnn.allow_tf32)),
        "float32_matmul_precision": _quiet(torch.get_float32_matmul_precision),
    }
    return facts


def fingerprint(
    target_source: str | None = None,
    seed: int | None = None,
    components: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The environment of the current process (call inside a run, after seeding).

    Its keys, their order and values are the trace header's ``environment``: a public format.
    """
    facts = collect()
    env: dict[str, Any] = {"python": facts.python, "numpy": facts.numpy, "torch": facts.torch}
    if facts.torch is not None:
        env["torch_git"] = facts.torch_git
        env["cuda"] = facts.cuda
    env["platform"] = facts.platform
    env["machine"] = facts.machine
    env["cpu_capability"] = facts.cpu_capability
    env["threads"] = facts.threads
    env["interop_threads"] = facts.interop_threads
    env["hash_randomization"] = facts.hash_randomization
    for name in ENV_VARS:
        env[name] = facts.variables[name]
    for flag in ("deterministic_algorithms", "cudnn_benchmark", "cudnn_deterministic"):
        env[flag] = facts.flags.get(flag)
    env["cudnn"] = facts.cudnn
    if facts.cuda_devices:
        device_name, capability = facts.cuda_devices[0]
        env["device"] = "cuda"
        env["device_name"] = device_name
        env["device_count"] = len(facts.cuda_devices)
        env["device_capability"] = capability
    else:
        env["device"] = "cpu"
        env["device_name"] = facts.processor
        env["device_count"] = 0
        env["device_capability"] = None
    # with torch, only when the environment is fingerprinted
    from repro_check.trace import fingerprint as fingerprints

    env["fingerprints"] = f"{fingerprints.ALGORITHM}, {fingerprints.DEVICE_ALGORITHM} on devices"
    env["seed"] = seed
    env["seed_components"] = list(components) if components is not None else None
    env["target_sha256"] = source_hash(target_source) if target_source else None
    # the GPU numerics environment, where there is one (absent keys: not set, not installed)
    if facts.nccl is not None:
        env["nccl"] = facts.nccl
    if facts.cublas is not None:
        env["cublas"] = facts.cublas
    for name, value in facts.numerics.items():
        env.setdefault(name, value)
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
    """Every key whose value differs (a key only one side has counts, but for
    :data:`OPTIONAL_KEYS`), best-known keys first."""
    ref, oth = dict(reference or {}), dict(other or {})
    keys = [k for k in LABELS if k in ref or k in oth]
    keys += sorted(k for k in {*ref, *oth} if k not in LABELS)
    return [Difference(k, ref.get(k), oth.get(k)) for k in keys if ref.get(k) != oth.get(k)
            and (k not in OPTIONAL_KEYS or (k in ref and k in oth))]


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
