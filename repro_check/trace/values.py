"""Exact scalar values: stored as dtype and bits, so NaN, inf and -0.0 survive a round trip.

A recorded loss or metric is a small dict ``{"dtype": ..., "bits": ..., "value": ...}``; ``bits``
is the hex of the value's own bytes (big-endian integer of the same width), ``value`` a readable
float (or "nan"/"inf"/"-inf") that is never used for comparison.
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
from dataclasses import dataclass
from typing import Any, cast

Encoded = dict[str, Any]

_FLOAT_WIDTH = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
_HEX = re.compile(r"[0-9a-fA-F]+")
_SIGNED_HEX = re.compile(r"-?[0-9a-fA-F]+")


def readable_float(x: float) -> float | str:
    """A float as JSON can hold it: NaN and the infinities as strings."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def encode_float64(x: float) -> Encoded:
    """A Python float, exactly."""
    bits = struct.unpack(">Q", struct.pack(">d", x))[0]
    return {"dtype": "float64", "bits": f"{bits:016x}", "value": readable_float(x)}


#: ``bits`` of an integer hold at most this many characters (a sign and 256 bits)
MAX_INT_BITS = 64
#: the dtype of an integer too wide for :data:`MAX_INT_BITS`: ``bits`` is a digest of its exact
#: hex text, so it is still compared (for equality only), never dropped
BIGINT = "bigint"


def encode_int(x: int) -> Encoded:
    """A Python int, exactly; one too wide for the format is stored as a :data:`BIGINT` digest."""
    text = format(x, "x")
    if len(text) <= MAX_INT_BITS:
        return {"dtype": "int", "bits": text, "value": x}
    digest = hashlib.blake2b(text.encode("ascii"), digest_size=16).hexdigest()
    try:
        approx = f"~{float(x):.6e}"
    except OverflowError:
        approx = f"~{'-' if x < 0 else ''}2**{abs(x).bit_length() - 1}"
    return {"dtype": BIGINT, "bits": digest, "value": f"{approx} [{digest[:8]}]"}


#: float dtypes read through their bits alone:
#: (dtype name, integer view dtype, struct format of those bits, struct format of the float,
#: its smallest normal number)
_FAST_FLOATS: dict[Any, tuple[str, Any, str, str, float]] = {}


def _fast_floats() -> dict[Any, tuple[str, Any, str, str, float]]:
    import torch

    _FAST_FLOATS.update({
        dtype: (name, as_int, bits, fmt, torch.finfo(dtype).tiny)
        for dtype, name, as_int, bits, fmt in (
            (torch.float32, "float32", torch.int32, ">i", ">f"),
            (torch.float64, "float64", torch.int64, ">q", ">d"),
            (torch.float16, "float16", torch.int16, ">h", ">e"))})
    return _FAST_FLOATS


def encode_tensor(t: Any) -> Encoded:
    """A one-element tensor, exactly (it is moved to the CPU: call in batches on a device)."""
    fast = (_FAST_FLOATS or _fast_floats()).get(t.dtype)
    if fast is not None and t.is_cpu:
        # the common case (a loss): one read of the value, whose bits are exact (see below)
        name, as_int, bits_format, float_format, tiny = fast
        value = t.item()
        if abs(value) >= tiny:
            # a normal number (or an infinity): a float64 holds it exactly and packs back to
            # the same bits; zeros, subnormals (which flush-to-zero modes may change on the
            # way) and NaNs (their payload is the tensor's own) are read as bits below
            return {"dtype": name, "bits": struct.pack(float_format, value).hex(),
                    "value": readable_float(value)}
        packed = struct.pack(bits_format, t.detach().reshape(()).view(as_int).item())
        return {"dtype": name, "bits": packed.hex(),
                "value": readable_float(struct.unpack(float_format, packed)[0])}
    import torch

    t = t.detach().reshape(()).cpu()
    dtype = str(t.dtype).removeprefix("torch.")
    if t.is_complex():
        re, im = encode_tensor(t.real), encode_tensor(t.imag)
        return {"dtype": dtype, "bits": re["bits"] + im["bits"], "value": str(complex(t.item()))}
    if t.dtype == torch.bool:
        return {"dtype": "bool", "bits": "1" if bool(t) else "0", "value": bool(t)}
    if not t.is_floating_point():
        return {"dtype": dtype, "bits": format(int(t.item()), "x"), "value": int(t.item())}
    size = t.element_size()
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
    raw = int(t.view(as_int).item()) & ((1 << (8 * size)) - 1)
    return {"dtype": dtype, "bits": f"{raw:0{2 * size}x}", "value": readable_float(float(t.item()))}


def encode_tensors(items: list[Any]) -> list[Encoded | None]:
    """Many one-element tensors (None allowed), those on a device copied to the host together:
    one transfer per device and dtype instead of one synchronisation each."""
    out: list[Encoded | None] = [None] * len(items)
    groups: dict[tuple[Any, Any], list[int]] = {}
    for i, t in enumerate(items):
        if t is None:
            continue
        if t.is_cpu:
            out[i] = encode_tensor(t)
        else:
            groups.setdefault((t.device, t.dtype), []).append(i)
    if groups:
        import torch

        for index in groups.values():
            host = torch.stack([items[i].detach().reshape(()) for i in index]).cpu()
            for i, value in zip(index, host):
                out[i] = encode_tensor(value)
    return out


def encode(x: Any) -> Encoded | None:
    """Encode a number, a numpy scalar or a one-element tensor; None for anything else."""
    if isinstance(x, bool):
        return {"dtype": "bool", "bits": "1" if x else "0", "value": x}
    if isinstance(x, int):
        return encode_int(x)
    if isinstance(x, float):
        return encode_float64(x)
    mod = type(x).__module__
    if mod.startswith("torch"):
        try:
            if x.numel() == 1:
                return encode_tensor(x)
        except (AttributeError, RuntimeError):
            return None
        return None
    if mod == "numpy":
        try:
            # numpy on use (it may be absent): import repro_check and a run's start never load it
            import numpy as np

            if isinstance(x, np.ndarray) and x.size != 1:
                return None
            arr = np.asarray(x).reshape(())
        except (ImportError, ValueError):
            return None
        if arr.dtype.kind == "f":
            width = arr.dtype.itemsize
            raw = int.from_bytes(arr.astype(arr.dtype.newbyteorder(">")).tobytes(), "big")
            return {"dtype": str(arr.dtype), "bits": f"{raw:0{2 * width}x}",
                    "value": readable_float(float(arr))}
        if arr.dtype.kind in "iu":
            return {"dtype": str(arr.dtype), "bits": format(int(arr), "x"), "value": int(arr)}
        if arr.dtype.kind == "b":
            return {"dtype": "bool", "bits": "1" if bool(arr) else "0", "value": bool(arr)}
    return None


def to_float(enc: Encoded) -> float:
    """The exact value of an encoded scalar as a Python float (wider types round to float64),
    always from what is compared (its bits, or a printed value's text checked against them),
    never from the readable ``value``; NaN for a dtype whose bits give no number (a digest, a
    complex, a dtype this reader does not know), so that no tolerance or band accepts it."""
    dtype, bits = enc.get("dtype"), str(enc.get("bits", ""))
    width = _FLOAT_WIDTH.get(str(dtype))
    if width is None:
        try:
            if dtype in _INT_DTYPES:
                return float(int(bits, 16))
            if dtype == PRINTED:
                return _printed_number(enc)
        except (TypeError, ValueError, OverflowError):
            pass
        return math.nan
    raw = int(bits, 16).to_bytes(width, "big")
    if dtype == "bfloat16":
        return cast(float, struct.unpack(">f", raw + b"\x00\x00")[0])
    return cast(float, struct.unpack({2: ">e", 4: ">f", 8: ">d"}[width], raw)[0])


#: the dtype of a number printed by the run (see :mod:`repro_check.compare.printed`): ``bits``
#: are the hex of its text's UTF-8 bytes, or of their 32-byte BLAKE2b digest when longer
PRINTED = "printed"
_PRINTED_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
                             r"|[-+]?(?:nan|inf(?:inity)?)", re.IGNORECASE)


def _printed_number(enc: Encoded) -> float:
    """The number a printed value's text stands for, when the text is the one its bits hold."""
    text = enc.get("text")
    if not isinstance(text, str):
        return math.nan
    raw = text.encode("utf-8", "backslashreplace")
    held = raw.hex() if len(raw) <= 32 else hashlib.blake2b(raw, digest_size=32).hexdigest()
    top, _, bottom = text.partition("/")
    if held != enc.get("bits") or not _PRINTED_NUMBER.fullmatch(top) \
            or (bottom and not _PRINTED_NUMBER.fullmatch(bottom)):
        return math.nan
    if not bottom:
        return float(top)
    return float(top) / float(bottom) if float(bottom) else math.nan


#: the longest readable ``value`` text (a complex number, an approximate wide integer)
MAX_VALUE_TEXT = 200


def is_valid(enc: Any) -> bool:
    """Whether ``enc`` has the shape of an encoded scalar (for readers of untrusted files)."""
    if not isinstance(enc, dict) or not isinstance(enc.get("dtype"), str) \
            or len(enc["dtype"]) > 40:
        return False
    bits = enc.get("bits")
    if not isinstance(bits, str) or len(bits) > MAX_INT_BITS:
        return False
    value = enc.get("value")
    if isinstance(value, str):
        if len(value) > MAX_VALUE_TEXT:
            return False
    elif not (value is None or isinstance(value, (bool, int, float))):
        return False
    elif isinstance(value, float) and math.isinf(value):
        return False  # a reader refuses such numbers; this is for values made in memory
    width = _FLOAT_WIDTH.get(enc["dtype"])
    if width is not None:  # exactly the bytes of the value: hex digits only, no sign
        return len(bits) == 2 * width and _HEX.fullmatch(bits) is not None
    return _SIGNED_HEX.fullmatch(bits) is not None


#: dtypes whose ``bits`` are the value itself in signed hex (one canonical text per value)
_INT_DTYPES = frozenset({"int", "bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                         "uint32", "uint64"})
_NOT_CANONICAL = re.compile(r"[A-F]|^-?0.|^-0$")


def canonicalize(enc: Encoded) -> Encoded:
    """Put the ``bits`` of a valid encoded scalar in the form the writers make (lower-case hex,
    an integer without leading zeros), in place: bits are compared as text, and a value written
    another way by hand or by another tool is still the same value."""
    bits = enc["bits"]
    if not _NOT_CANONICAL.search(bits):
        return enc
    if enc["dtype"] in _INT_DTYPES:
        enc["bits"] = format(int(bits, 16), "x")
    else:
        enc["bits"] = bits.lower()
    return enc


@dataclass(frozen=True)
class Tolerance:
    """How two values are judged equal: exact bits unless atol, rtol or ulps are given.

    A value passes when any tolerance that is set accepts it: ``|a - b| <= atol + rtol * |b|``
    (b the reference), or at most ``ulps`` representable values apart in their own dtype.
    """

    atol: float = 0.0
    rtol: float = 0.0
    ulps: int = 0

    @property
    def exact(self) -> bool:
        return self.atol == 0.0 and self.rtol == 0.0 and self.ulps == 0

    def describe(self) -> str:
        if self.exact:
            return "exact bits"
        parts = []
        if self.atol or self.rtol:
            parts += [f"atol={self.atol:g}", f"rtol={self.rtol:g}"]
        if self.ulps:
            parts.append(f"ulps={self.ulps}")
        return ", ".join(parts)


def _ordered(enc: Encoded) -> int | None:
    """The bits of a float as an integer that counts representable values in order."""
    width = _FLOAT_WIDTH.get(str(enc.get("dtype")))
    if width is None:
        return None
    raw = int(str(enc.get("bits")), 16)
    sign = 1 << (8 * width - 1)
    return -(raw & (sign - 1)) if raw & sign else raw


def ulp_distance(a: Encoded, b: Encoded) -> int | None:
    """How many representable values of their (common) float dtype lie between a and b.

    None when the dtypes differ, are not floats, or either value is NaN or infinite.
    """
    if a.get("dtype") != b.get("dtype"):
        return None
    oa, ob = _ordered(a), _ordered(b)
    if oa is None or ob is None:
        return None
    x, y = to_float(a), to_float(b)
    if math.isnan(x) or math.isnan(y) or math.isinf(x) or math.isinf(y):
        return None
    return abs(oa - ob)


def equal(a: Encoded | None, b: Encoded | None, tol: Tolerance) -> bool:
    """Compare two encoded scalars under ``tol``; NaN equals NaN when the bits (or both) are NaN."""
    if a is None or b is None:
        return a is None and b is None
    if a.get("dtype") == b.get("dtype") and a.get("bits") == b.get("bits"):
        return True
    if tol.exact or BIGINT in (a.get("dtype"), b.get("dtype")):
        return False  # a digest is equal or not: no tolerance applies to it
    x, y = to_float(a), to_float(b)
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if math.isinf(x) or math.isinf(y):
        return x == y
    if tol.ulps:
        dist = ulp_distance(a, b)
        if dist is not None and dist <= tol.ulps:
            return True
    if tol.atol or tol.rtol:  # ``a`` is the reference: the relative part scales with it
        return abs(x - y) <= tol.atol + tol.rtol * abs(x)
    return False


def band_limits(band: Any, widen: float = 1.0) -> tuple[float, float] | None:
    """The accepted interval of a stored band ``{"min": enc, "max": enc}``, widened about its
    centre by ``widen``; None when the band is not two finite numbers."""
    if not isinstance(band, dict) or not is_valid(band.get("min")) or not is_valid(band.get("max")):
        return None
    lo, hi = to_float(band["min"]), to_float(band["max"])
    if any(math.isnan(v) or math.isinf(v) for v in (lo, hi)) or lo > hi:
        return None
    if widen != 1.0:
        half = (hi - lo) / 2
        lo, hi = lo - (widen - 1.0) * half, hi + (widen - 1.0) * half
    return lo, hi


def in_band(value: Encoded | None, band: Any, widen: float = 1.0) -> bool:
    """Whether an encoded value lies inside a stored band (see :func:`band_limits`)."""
    limits = band_limits(band, widen)
    if value is None or limits is None or not is_valid(value):
        return False
    x = to_float(value)
    return not math.isnan(x) and limits[0] <= x <= limits[1]


def differences(a: Encoded | None, b: Encoded | None) -> tuple[float | None, float | None]:
    """Absolute difference of two encoded scalars, and relative to ``a`` (the reference); None
    where undefined."""
    if a is None or b is None:
        return None, None
    x, y = to_float(a), to_float(b)
    if math.isnan(x) or math.isnan(y) or math.isinf(x) or math.isinf(y):
        return None, None
    absdiff = abs(x - y)
    rel = absdiff / abs(x) if x != 0 else (0.0 if absdiff == 0 else math.inf)
    return absdiff, rel


def readable(enc: Encoded | None) -> str:
    """A short human form, enough digits to tell two float32 values apart."""
    if enc is None:
        return "—"
    dtype = enc.get("dtype")
    if dtype in _FLOAT_WIDTH:
        x = to_float(enc)
        if math.isnan(x) or math.isinf(x):
            return str(x)
        if dtype == "float64":
            return repr(x)
        if dtype == "bfloat16":
            return f"{x:.4g}"
        import numpy as np  # shortest text that reads back as the same float32/float16

        return str(np.float32(x) if dtype == "float32" else np.float16(x))
    return str(enc.get("value"))
