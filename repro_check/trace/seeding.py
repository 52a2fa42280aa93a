"""What both processes know of seeding: the components, in the order they are applied, the
global streams in words, the seeds every component accepts, and the environment a run starts
with (what must be set before its interpreter or CUDA starts).

The parent checks ``--seed`` and ``--without`` with these and sets the environment; the run
applies the components (:mod:`repro_check.child.seeding.components`) and its seeding watch names
the streams the same way the cause of a check does.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from repro_check.errors import UsageError
from repro_check.trace import protocol

#: every component, in the order it is applied (defined with the protocol both sides share)
COMPONENTS: tuple[str, ...] = protocol.COMPONENTS

#: the global streams a seeding call can set, in words (the seeding watch's warnings and the
#: cause of a check say them the same way)
STREAM_NAMES: dict[str, str] = {
    "python": "Python's random",
    "numpy": "numpy's global generator",
    "torch": "torch",
}

#: largest seed every component accepts (numpy's legacy seed and PYTHONHASHSEED are 32-bit)
MAX_SEED = protocol.MAX_SEED

CUBLAS_WORKSPACE = ":4096:8"
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def select_components(without: Iterable[str] = (), no_seed: bool = False) -> tuple[str, ...]:
    """Return the components that are on, in :data:`COMPONENTS` order; unknown names raise."""
    off = {name.strip() for name in without if name.strip()}
    unknown = sorted(off - set(COMPONENTS))
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(name, COMPONENTS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(
            f"unknown seeding component {name!r}{hint}; components: {', '.join(COMPONENTS)}"
        )
    if no_seed:
        return ()
    return tuple(c for c in COMPONENTS if c not in off)


def check_seed(seed: int) -> int:
    """Validate a seed against the narrowest range any component accepts."""
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(f"--seed must be between 0 and {MAX_SEED}, got {seed}")
    return seed


def child_environment(
    base: Mapping[str, str], seed: int | None, components: Iterable[str], threads: int | None
) -> dict[str, str]:
    """The environment a run starts with: what must be set before the interpreter or CUDA starts."""
    on = set(components)
    env = dict(base)
    if "hashseed" in on and seed is not None:
        env["PYTHONHASHSEED"] = str(seed)
    else:
        # an inherited PYTHONHASHSEED would hide that hashing is not seeded
        env["PYTHONHASHSEED"] = "random"
    if "deterministic_algorithms" in on:
        env.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    if "threads" in on and threads is not None:
        for name in THREAD_ENV_VARS:
            env[name] = str(threads)
        env["MKL_DYNAMIC"] = "FALSE"
        env["OMP_DYNAMIC"] = "FALSE"
    return env
