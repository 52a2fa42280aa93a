"""Fingerprints of the global RNG streams' states, for the per-step ``rng.*`` signals.

Only collection lives here; setting the streams is :mod:`repro_check.child.seeding.components`. Each stream is
read without being advanced and without side effects: numpy is read only when the process
already imported it, and a CUDA generator only once the process has started CUDA (reading it
earlier would start CUDA, which changes what the run does).
"""

from __future__ import annotations

import ctypes
import random
import struct
import sys
from typing import Any

from repro_check.trace import fingerprint
from repro_check.child import patches

#: the streams in the order their signals are recorded
STREAMS: tuple[str, ...] = ("python", "numpy", "torch", "cuda")

#: the value of ``rng.cuda`` while CUDA is available but not started yet (its state is still the
#: one the seeding queued)
CUDA_NOT_STARTED = "not-started"


def python_state() -> str:
    """The ``random`` module's global Mersenne Twister: its 625 words and the cached gauss.

    The words are combined with Python's tuple hash, which for integers does not depend on
    ``PYTHONHASHSEED``. Building that tuple costs several microseconds, paid at every step, so
    the generator's raw state (read in place, see :func:`_raw_python_state`) is compared with the
    last one first: a run that does not draw from ``random`` pays for a copy of 2.5 kB.
    """
    global _LAST_PYTHON
    inst = random._inst
    raw = _raw_python_state(inst)
    if raw is not None:
        key = (raw, getattr(inst, "gauss_next", None))
        if _LAST_PYTHON is not None and _LAST_PYTHON[0] == key:
            return _LAST_PYTHON[1]
    version, words, gauss = random.getstate()
    text = f"{version}:{hash(words) & 0xFFFFFFFFFFFFFFFF:016x}:{gauss!r}"
    if raw is not None:
        _LAST_PYTHON = (key, text)
    return text


#: (raw state and cached gauss, its text) of the last :func:`python_state`
_LAST_PYTHON: tuple[tuple[bytes, Any], str] | None = None
#: where CPython keeps a Random object's index and 624 words, once checked against getstate()
_RAW_OFFSET: int | None = None
_RAW_CHECKED = False
_MT_BYTES = 4 + 624 * 4


def _raw_python_state(inst: Any) -> bytes | None:
    """The bytes of the C struct behind a ``random.Random`` (index, then the 624 words), right
    after the object header, as CPython lays it out. Used only after it was seen to agree with
    ``getstate()`` in this process; None where it does not (another interpreter, another layout)."""
    global _RAW_OFFSET, _RAW_CHECKED
    if not _RAW_CHECKED:
        _RAW_CHECKED = True
        try:
            probe = random.Random(12345)
            probe.random()
            _, words, _ = probe.getstate()
            offset = object.__basicsize__
            raw = ctypes.string_at(id(probe) + offset, _MT_BYTES)
            index = struct.unpack_from("i", raw, 0)[0]
            if type(probe).__basicsize__ >= offset + _MT_BYTES and \
                    struct.unpack_from("624I", raw, 4) + (index,) == words:
                _RAW_OFFSET = offset
        except Exception:  # noqa: BLE001 - no fast path; getstate() every time
            _RAW_OFFSET = None
        if _RAW_OFFSET is None:
            patches.PATCHES.skip("rngstate.python", "random.Random (its C state, read in place)",
                                 "this interpreter lays it out otherwise: read with getstate()")
    if _RAW_OFFSET is None or type(inst).__basicsize__ < _RAW_OFFSET + _MT_BYTES:
        return None
    return ctypes.string_at(id(inst) + _RAW_OFFSET, _MT_BYTES)


#: bytes of numpy's MT19937 state struct: 624 32-bit words and the position
_MT19937_BYTES = 624 * 4 + 4


def numpy_state() -> str | None:
    """numpy's legacy global generator (what ``np.random.seed`` sets); None when not imported.

    The Mersenne Twister's words and position are read through the bit generator's documented
    ctypes interface (a copy of 2.5 kB, where ``np.random.get_state()`` costs about 50 µs);
    ``get_state`` is the fallback. Generators from ``np.random.default_rng()`` are not global and
    have no state to read here.
    """
    np = sys.modules.get("numpy")
    if np is None or not hasattr(np, "random"):
        return None
    h = fingerprint.hasher()
    try:
        bit_generator = np.random.mtrand._rand._bit_generator
        if type(bit_generator).__name__ != "MT19937":
            raise TypeError(type(bit_generator).__name__)
        h.update(ctypes.string_at(bit_generator.ctypes.state_address, _MT19937_BYTES))
        return h.hexdigest()
    except Exception:  # noqa: BLE001 - another numpy layout: take the slow, public way
        pass
    try:
        name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    except Exception:  # noqa: BLE001 - a partially imported or replaced numpy
        return None
    h.update(f"{name};{pos};{has_gauss};{float(cached).hex()};".encode())
    h.update(memoryview(np.ascontiguousarray(keys)).cast("B"))
    return h.hexdigest()


def torch_state() -> str | None:
    """torch's default CPU generator."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    h = fingerprint.hasher()  # what fingerprint.tensor gives, without its checks for odd tensors
    fingerprint.update(h, torch.default_generator.get_state())
    return h.hexdigest()


def cuda_state(available: bool) -> str | None:
    """Every CUDA device's default generator; None without CUDA."""
    if not available:
        return None
    import torch

    if not torch.cuda.is_initialized():
        return CUDA_NOT_STARTED
    return fingerprint.tensors((str(i), s) for i, s in enumerate(torch.cuda.get_rng_state_all()))


def cuda_available() -> bool:
    """Whether this process can use CUDA (asked once a run: the answer does not change)."""
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken driver is "no CUDA" here
        return False


def signals(cuda: bool) -> dict[str, Any]:
    """``{"rng.python": ..., "rng.numpy": ..., "rng.torch": ..., "rng.cuda": ...}``, in that
    order, leaving out streams this process does not have."""
    out: dict[str, Any] = {"rng.python": python_state()}
    for name, value in (("rng.numpy", numpy_state()), ("rng.torch", torch_state()),
                        ("rng.cuda", cuda_state(cuda))):
        if value is not None:
            out[name] = value
    return out
