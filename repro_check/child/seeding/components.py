"""Full seeding, one small function a component.

Each function sets one source of randomness or nondeterminism and returns what it did, so the
trace can say exactly which components were on. Collecting RNG state lives in ``rngstate`` and is
kept apart from setting it. The components, their names and the seeds they take are the
vocabulary both processes share (:mod:`repro_check.trace.seeding`); environment variables that
are read only at interpreter or CUDA start (``PYTHONHASHSEED``, ``CUBLAS_WORKSPACE_CONFIG``, the
OpenMP/MKL thread counts) are set by the parent in the child's environment, see
:func:`repro_check.trace.seeding.child_environment`.
"""

from __future__ import annotations

import functools
import hashlib
import os
import random
import sys
from collections.abc import Iterable
from typing import Any

from repro_check.child import patches
from repro_check.trace.seeding import MAX_SEED


def derive_seed(seed: int, *purpose: object) -> int:
    """A stable 63-bit seed for one purpose (e.g. the k-th DataLoader), independent of hashing."""
    text = ":".join(str(p) for p in (seed, *purpose)).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") >> 1


def seed_python(seed: int) -> int:
    """Seed the ``random`` module's global generator."""
    random.seed(seed)
    return seed


def seed_numpy(seed: int) -> int | None:
    """Seed numpy's legacy global generator; None when numpy is not installed."""
    try:
        # numpy on use (it may be absent): import repro_check and a run's start never load it
        import numpy as np
    except ImportError:
        return None
    np.random.seed(seed)
    return seed


def seed_torch(seed: int) -> int:
    """Seed torch's default CPU generator only (CUDA is its own component)."""
    import torch

    torch.default_generator.manual_seed(seed)
    return seed


def seed_cuda(seed: int) -> int:
    """Seed every CUDA device's generator; lazy, so it does not start CUDA."""
    import torch

    torch.cuda.manual_seed_all(seed)
    return seed


def configure_cudnn() -> dict[str, bool]:
    """Turn cuDNN autotuning off and ask for deterministic cuDNN kernels."""
    import torch

    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    return {"benchmark": False, "deterministic": True}


def enable_deterministic_algorithms(warn_only: bool = False) -> dict[str, Any]:
    """Make PyTorch raise (or warn) on ops it knows to be nondeterministic."""
    import torch

    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(True, warn_only=warn_only)
    else:
        # the same without importing inductor (seconds per run): inductor reads this variable
        # when it is first imported, and torch.use_deterministic_algorithms sets only that besides
        os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1"
        torch._C._set_deterministic_algorithms(True, warn_only=warn_only)
    return {
        "enabled": True,
        "warn_only": warn_only,
        "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    }


def fix_threads(threads: int) -> int:
    """Use the same intra-op thread count in every run: thread count changes result bits."""
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:
        pass  # inter-op pool already started; it does not change result bits
    return torch.get_num_threads()


#: set (to the rank) in every rank of a distributed run; DataLoader workers inherit it
RANK_ENV = "REPRO_CHECK_RANK"


def _seeded_worker_init(worker_id: int, user_fn: Any = None) -> None:
    """Seed ``random`` and numpy in a DataLoader worker from its torch seed, then call the user's.

    In a distributed run the worker's torch seed is first mixed with the rank: every rank draws
    the same loader seed (so samplers shuffle alike), but random augmentations in workers must
    not repeat the same numbers on every rank.
    """
    import torch

    rank = os.environ.get(RANK_ENV)
    if rank is not None:
        torch.manual_seed(derive_seed(torch.initial_seed(), "rank", rank))
    worker_seed = torch.initial_seed() % (MAX_SEED + 1)
    random.seed(worker_seed)
    try:
        # numpy on use (it may be absent): import repro_check and a run's start never load it
        import numpy as np

        np.random.seed(worker_seed)
    except ImportError:
        pass
    if user_fn is not None:
        user_fn(worker_id)


def seed_dataloaders(seed: int, generators: bool = True) -> int:
    """Give every DataLoader made without a generator one derived from the seed (unless not
    ``generators``: a resume, where the script could not save it) and seed its workers.

    The k-th DataLoader constructed gets ``derive_seed(seed, "dataloader", k)``, so shuffling and
    the workers' base seeds do not depend on how much of torch's global stream ran before.
    Returns the number of loaders patched so far (0 at install time).
    """
    import torch.utils.data as tud

    loader_cls = tud.DataLoader
    if patches.PATCHES.has("seeding.loaders", loader_cls, "__init__"):
        return 0
    counter = {"made": 0}

    def seeded(given: dict[str, Any]) -> None:
        if generators and given.get("generator") is None:
            counter["made"] += 1
            import torch  # loaded already: a DataLoader is being made

            gen = torch.Generator()
            gen.manual_seed(derive_seed(seed, "dataloader", counter["made"]))
            given["generator"] = gen
        given["worker_init_fn"] = functools.partial(
            _seeded_worker_init, user_fn=given.get("worker_init_fn"))

    patches.PATCHES.wrap_arguments("seeding.loaders", loader_cls, "__init__",
                                   ("worker_init_fn", "generator"), seeded)
    return 0


def apply(
    seed: int, components: Iterable[str], threads: int | None, warn_only: bool = False,
    loader_generators: bool = True,
) -> dict[str, Any]:
    """Apply every component that is on, in order; return what each one did."""
    on = set(components)
    done: dict[str, Any] = {}
    if "hashseed" in on:
        done["hashseed"] = os.environ.get("PYTHONHASHSEED")
    if "python" in on:
        done["python"] = seed_python(seed)
    if "numpy" in on:
        done["numpy"] = seed_numpy(seed)
    if "torch" in on:
        done["torch"] = seed_torch(seed)
    if "cuda" in on:
        done["cuda"] = seed_cuda(seed)
    if "cudnn" in on:
        done["cudnn"] = configure_cudnn()
    if "deterministic_algorithms" in on:
        done["deterministic_algorithms"] = enable_deterministic_algorithms(warn_only)
    if "dataloader" in on:
        seed_dataloaders(seed, loader_generators)
        done["dataloader"] = True if loader_generators else "workers"
    if "threads" in on and threads is not None:
        done["threads"] = fix_threads(threads)
    return done
