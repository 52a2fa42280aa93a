"""Fingerprints of tensors: a hash of the exact bytes together with dtype and shape.

Order-sensitive by construction (a permuted batch must differ), unlike a sum or xor reduction such
as ``torch.hash_tensor``. On the CPU the bytes go through xxh3 without a copy when the tensor is
contiguous; without the xxhash package, blake2b is used instead.

A tensor on an accelerator is digested where it lives (:func:`device_digest`): only 16 bytes
ever reach the host, and only when asked. With ``defer=True`` the result is a :class:`Deferred`
that still holds those bytes on the device, so a training loop is not synchronised at every
step; :func:`resolve` turns many of them into text with one copy per device.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, Protocol, Union, cast, overload


class Hasher(Protocol):
    """What fingerprints take of a hash object (xxh3 or blake2b)."""

    def update(self, data: bytes | memoryview, /) -> None: ...

    def hexdigest(self) -> str: ...

    def copy(self) -> Hasher: ...


try:
    import xxhash

    def _hasher() -> Hasher:
        return cast(Hasher, xxhash.xxh3_128())

    ALGORITHM = "xxh3_128"
except ImportError:  # pragma: no cover - xxhash is a dependency, this is a safety net

    def _hasher() -> Hasher:
        return hashlib.blake2b(digest_size=16)

    ALGORITHM = "blake2b_128"


def hasher() -> Hasher:
    """A fresh hash object of the algorithm fingerprints use (``update``, ``hexdigest``)."""
    return _hasher()


#: (dtypes numpy views as they are, ``torch.strided``, the tensor classes whose memory is their
#: own: a subclass may be a wrapper with none), looked up on first use so that importing this
#: module does not import torch
_FAST: tuple[frozenset[Any], Any, frozenset[type]] | None = None


def _fast_case() -> tuple[frozenset[Any], Any, frozenset[type]]:
    global _FAST
    import torch

    plain: set[type] = {torch.Tensor, torch.nn.Parameter}
    buffer = getattr(torch.nn, "Buffer", None)
    if isinstance(buffer, type):
        plain.add(buffer)
    _FAST = (frozenset({torch.float32, torch.float64, torch.int64, torch.int32, torch.int16,
                        torch.int8, torch.uint8}), torch.strided, frozenset(plain))
    return _FAST


#: ``ctypes`` array types of a given length (``c_char * n``), made once per length
_ARRAYS: dict[int, Any] = {}


#: the views of the tensors read lately (:func:`_plain`), by ``id``: (a weak reference to the
#: tensor, its address, its shape, its header, the view); an entry goes when its tensor does
_VIEWS: dict[int, tuple[Any, int, Any, bytes, Any]] = {}
#: entries at most: past it, views are made and not kept
_VIEWS_LIMIT = 65536


def _plain(t: Any, keep: bool = False) -> tuple[bytes, Any] | None:
    """The header and the bytes of a dense, contiguous CPU tensor of a dtype hashed as it is
    (the common case: parameters, gradients, optimizer state, batches), or None for any other.

    The bytes are a ``ctypes`` array over the tensor's memory: no tensor and no numpy array is
    made, which was most of what a small tensor's fingerprint cost. The array holds no
    reference to the tensor (it is read at once, while the caller holds the tensor) and is kept
    for the tensor's next fingerprint (parameters and optimizer state are read every step) as
    long as the tensor lives at the same address with the same shape, contiguous, when
    ``keep`` says it lives long (a gradient or a batch is a new tensor every step: keeping its
    view would cost more than it saves). Only torch's own classes qualify: a subclass may be a
    wrapper without memory of its own."""
    key = id(t)
    if keep:
        entry = _VIEWS.get(key)
        if entry is not None:
            ref, address, shape, header, data = entry
            if ref() is t and t.data_ptr() == address and t.shape == shape and t.is_contiguous():
                return header, data
    direct, strided, plain = _FAST or _fast_case()
    if not (type(t) in plain and t.layout is strided and t.dtype in direct and _on_host(t)
            and not t.is_nested and t.is_contiguous()):
        return None
    shape, size, address = t.shape, t.nbytes, t.data_ptr()
    header = _header(t.dtype, shape)
    if not size:
        return header, b""
    if not address:
        return None
    array = _ARRAYS.get(size)
    if array is None:
        array = ctypes.c_char * size
        if len(_ARRAYS) < 4096:
            _ARRAYS[size] = array
    data = array.from_address(address)
    if keep and len(_VIEWS) < _VIEWS_LIMIT:
        _VIEWS[key] = (weakref.ref(t, _forget(key)), address, shape, header, data)
    return header, data


def _forget(key: int) -> Callable[[Any], None]:
    """What drops a kept view when its tensor goes."""

    def forget(_: Any) -> None:
        _VIEWS.pop(key, None)

    return forget


def _bytes_view(t: Any) -> Any:
    """The tensor's bytes on the CPU, without a copy when it is contiguous."""
    fast = _plain(t)
    if fast is not None:
        return fast[1]
    direct = (_FAST or _fast_case())[0]
    t = t.detach()
    import torch

    t = _flat(t.cpu())
    if t.dtype not in direct:  # bfloat16, float16, bool, complex, float8...: the same bytes
        t = t.view(torch.uint8)
    return memoryview(t.numpy()).cast("B")


def _flat(t: Any) -> Any:
    """The tensor dense, contiguous and one-dimensional, where it is (its bytes in order)."""
    t = t.detach()
    if t.is_sparse:
        t = t.to_dense()
    if t.is_quantized:
        t = t.int_repr()
    return t.contiguous().reshape(-1)


# ---- on an accelerator ---------------------------------------------------------------------

#: the on-device digest's name (recorded in a trace's environment)
DEVICE_ALGORITHM = "mix32x2"

_M32 = 0xFFFFFFFF
#: per lane: (position multiplier, first and second mixing multiplier); all odd and below 2**31,
#: so every product of a 32-bit value stays inside int64 and each multiply is a bijection mod 2**32
_LANES = ((0x61C88647, 0x7FEB352D, 0x2C1B3C6D), (0x3C6EF375, 0x1B873593, 0x5BD1E995))
#: 32-bit words per chunk: bounds the digest's scratch memory to a few times 32 MiB
DEVICE_CHUNK = 1 << 22


def _words(t: Any) -> Any:
    """The tensor's bytes as a flat int32 tensor on its device (zero-padded to whole words)."""
    import torch

    data = _flat(t).view(torch.uint8)
    pad = -data.numel() % 4
    if pad:
        data = torch.cat([data, data.new_zeros(pad)])
    return data.view(torch.int32)


def device_digest(*tensors: Any) -> Any:
    """An exact, order-sensitive digest of the bytes of tensors on one device, computed there.

    The tensors' 32-bit words, one after the other, each xor-ed with a function of its position,
    go through a bijective multiply-xorshift mixer; the mixed words are summed in int64. Two lanes
    with different constants give 64 bits. A single changed word always changes both sums (the
    mixer is a bijection); any other change slips through with odds near 2**-64. Integer sums do
    not depend on the reduction order, so the digest is the same on every device and in every run.
    Small tensors are concatenated into chunks of up to :data:`DEVICE_CHUNK` words, so a model of
    many small parameters costs a few dozen kernels, not a few dozen per parameter.
    Returns an int64 tensor of shape (2,) on the tensors' device, without synchronising.
    """
    import torch

    device = tensors[0].device
    sums = [torch.zeros((), dtype=torch.int64, device=device) for _ in _LANES]
    offset = 0
    batch: list[Any] = []
    held = 0

    def mix() -> None:
        nonlocal offset, batch, held
        words = batch[0] if len(batch) == 1 else torch.cat(batch)
        x = words.to(torch.int64)
        x &= _M32
        pos = torch.arange(offset, offset + x.numel(), dtype=torch.int64, device=device)
        pos &= _M32
        for lane, (p, a, b) in enumerate(_LANES):
            y = pos * p
            y &= _M32
            y ^= x
            y ^= y >> 16
            y *= a
            y &= _M32
            y ^= y >> 15
            y *= b
            y &= _M32
            y ^= y >> 16
            sums[lane] += y.sum()
        offset += x.numel()
        batch, held = [], 0

    for t in tensors:
        words = _words(t)
        start, n = 0, words.numel()
        while start < n:
            take = min(n - start, DEVICE_CHUNK - held)
            batch.append(words[start:start + take])
            held += take
            start += take
            if held == DEVICE_CHUNK:
                mix()
    if batch:
        mix()
    return torch.stack(sums)


class Deferred:
    """A fingerprint whose device digests have not reached the host yet.

    Holds the host-side hash of everything else (names, dtypes, shapes, CPU bytes, and a marker
    where each device tensor was) and, in order, what is still to be fed into it: device
    digests (one per device), texts, bytes, and nested Deferreds. :func:`resolve` finishes it.
    """

    __slots__ = ("_hasher", "_tail")

    def __init__(self, hasher: Hasher, tail: list[Any]) -> None:
        self._hasher = hasher
        self._tail = tail

    def _digests(self) -> Iterator[Any]:
        for item in self._tail:
            if isinstance(item, Deferred):
                yield from item._digests()
            elif not isinstance(item, (str, bytes)):
                yield item

    def _text(self, fetched: dict[int, bytes]) -> str:
        h = self._hasher.copy()
        for item in self._tail:
            if isinstance(item, bytes):
                h.update(item)
            elif isinstance(item, str):
                h.update(item.encode())
            elif isinstance(item, Deferred):
                h.update(item._text(fetched).encode())
            else:
                h.update(fetched[id(item)])
        return h.hexdigest()


Fingerprint = Union[str, Deferred]


def resolve(values: Sequence[Any]) -> list[Any]:
    """``values`` with every :class:`Deferred` turned into its text (other values as they are),
    copying all their device digests to the host at once: one transfer per device."""
    deferred = [v for v in values if isinstance(v, Deferred)]
    if not deferred:
        return list(values)
    import torch

    by_device: dict[Any, list[Any]] = defaultdict(list)
    for d in deferred:
        for digest in d._digests():
            by_device[digest.device].append(digest)
    fetched: dict[int, bytes] = {}
    for group in by_device.values():
        rows = torch.stack(group).cpu().numpy()
        for digest, row in zip(group, rows):
            fetched[id(digest)] = row.tobytes()
    return [v._text(fetched) if isinstance(v, Deferred) else v for v in values]


#: tensor types a fingerprint could not read, with the first error (see :func:`take_unreadable`)
_UNREADABLE: dict[str, str] = {}
_REPORTED: set[str] = set()


def take_unreadable() -> list[str]:
    """What could not be fingerprinted since the last call, one line per tensor type. Such a
    tensor counts by its type only, the same in every run, so it can not cause a divergence."""
    new = [f"{name} ({error})" for name, error in _UNREADABLE.items() if name not in _REPORTED]
    _REPORTED.update(_UNREADABLE)
    return new


_HEADERS: dict[tuple[Any, Any], bytes] = {}


def _header(dtype: Any, shape: Any) -> bytes:
    """``b"torch.float32(3, 4);"``: what precedes a tensor's bytes (memoized: made every step)."""
    key = (dtype, shape)
    found = _HEADERS.get(key)
    if found is None:
        found = f"{dtype}{tuple(shape)};".encode()
        if len(_HEADERS) < 4096:
            _HEADERS[key] = found
    return found


#: set in runs compared across devices: CPU tensors get the device digest too, so the same
#: bytes give the same fingerprint on the CPU and on a GPU
DEVICE_DIGEST_ENV = "REPRO_CHECK_DEVICE_DIGEST"
_DIGEST_EVERYWHERE = os.environ.get(DEVICE_DIGEST_ENV) == "1"


def _on_host(t: Any) -> bool:
    """Whether a tensor's bytes can be hashed where they are (the CPU)."""
    return t.is_cpu and not _DIGEST_EVERYWHERE


class _Builder:
    """A hash in progress: CPU bytes go straight in, device tensors become digests for later."""

    __slots__ = ("h", "on_device", "keep")

    def __init__(self, keep: bool = False) -> None:
        self.h = _hasher()
        self.on_device: dict[Any, list[Any]] = {}
        #: the tensors live long: their views are kept (:func:`_plain`)
        self.keep = keep

    def tensor(self, t: Any) -> None:
        try:
            plain = _plain(t, self.keep)
            if plain is not None:  # the common case, in as few calls as possible
                h = self.h
                h.update(plain[0])
                if plain[1]:
                    h.update(plain[1])
            elif t.layout is (_FAST or _fast_case())[1] and not t.is_nested and not t.is_quantized:
                self.h.update(_header(t.dtype, t.shape))  # the common case first
                self._data(t)
            else:
                self._unusual(t)
        except Exception as e:  # noqa: BLE001 - never break a training over a fingerprint
            self.h.update(f"<unreadable {type(t).__qualname__}>;".encode())
            _UNREADABLE.setdefault(type(t).__qualname__, f"{type(e).__name__}: {e}"[:300])

    def _data(self, t: Any) -> None:
        if not t.numel():
            return
        if _on_host(t):
            self.h.update(_bytes_view(t))
        elif t.device.type != "meta":  # a meta tensor has no bytes: dtype and shape are all
            self.h.update(b"<device>")
            self.on_device.setdefault(t.device, []).append(t.detach())

    def _unusual(self, t: Any) -> None:
        """Nested, sparse and quantized tensors: by their parts, each exactly."""
        import torch

        t = t.detach()
        if t.is_nested:
            parts = t.unbind()
            self.h.update(f"nested{t.dtype}[{len(parts)}];".encode())
            for part in parts:
                self.tensor(part)
            return
        self.h.update(_header(t.dtype, t.shape))
        if t.is_quantized:
            scheme = t.qscheme()
            self.h.update(f"{scheme};".encode())
            if scheme in (torch.per_tensor_affine, torch.per_tensor_symmetric):
                self.h.update(f"{t.q_scale()!r},{t.q_zero_point()};".encode())
            else:
                self.tensor(t.q_per_channel_scales())
                self.tensor(t.q_per_channel_zero_points())
            self._data(t.int_repr())
            return
        if t.layout is not torch.sparse_coo:
            t = t.to_sparse()  # CSR, CSC, BSR, BSC: the same entries as coordinates
        t = t.coalesce()
        self.h.update(b"sparse;")
        self.tensor(t.indices())
        self.tensor(t.values())

    def finish(self, defer: bool) -> Fingerprint:
        if not self.on_device:
            return self.h.hexdigest()
        tail: list[Any] = []
        for group in self.on_device.values():  # one digest per device, in order of appearance
            try:
                tail.append(device_digest(*group))
            except Exception:  # noqa: BLE001 - a device without these integer ops: copy instead
                tail.append(b"<copied>" + b"".join(bytes(_bytes_view(t)) for t in group))
        d = Deferred(self.h, tail)
        return d if defer else resolve([d])[0]


def update(h: Any, t: Any) -> None:
    """Feed one CPU tensor (dtype, shape, bytes) into hash ``h``."""
    h.update(_header(t.dtype, t.shape))
    if t.numel():
        h.update(_bytes_view(t))


@overload
def tensor(t: Any, defer: Literal[False] = False) -> str: ...
@overload
def tensor(t: Any, defer: bool) -> Fingerprint: ...
def tensor(t: Any, defer: bool = False) -> Fingerprint:
    """The fingerprint of one tensor."""
    b = _Builder()
    b.tensor(t)
    return b.finish(defer)


@overload
def tensors(items: Iterable[tuple[str, Any]], defer: Literal[False] = False,
            keep: bool = False) -> str: ...
@overload
def tensors(items: Iterable[tuple[str, Any]], defer: bool, keep: bool = False) -> Fingerprint: ...
def tensors(items: Iterable[tuple[str, Any]], defer: bool = False,
            keep: bool = False) -> Fingerprint:
    """The fingerprint of named tensors in the given order (e.g. ``model.named_parameters()``);
    ``None`` values (a parameter without a gradient) count by name. Device tensors are digested
    on their device; ``defer=True`` may return a :class:`Deferred` instead of text. ``keep``:
    the tensors live long (parameters, optimizer state), read again every step."""
    b = _Builder(keep)
    h = b.h
    for name, t in items:
        h.update(name.encode() + b"\0")
        if t is None:
            h.update(b"<none>;")
        else:
            b.tensor(t)
    return b.finish(defer)


@overload
def combine(parts: Iterable[Fingerprint], defer: Literal[False] = False) -> str: ...
@overload
def combine(parts: Iterable[Fingerprint], defer: bool) -> Fingerprint: ...
def combine(parts: Iterable[Fingerprint], defer: bool = False) -> Fingerprint:
    """One fingerprint of several, in order (e.g. the batches a step drew): the hash of their
    texts, whether or not some are still deferred."""
    parts = list(parts)
    if any(isinstance(p, Deferred) for p in parts):
        d = Deferred(_hasher(), parts)
        return d if defer else resolve([d])[0]
    h = _hasher()
    for p in parts:
        assert isinstance(p, str)  # no Deferred part: checked above
        h.update(p.encode())
    return h.hexdigest()


@overload
def nested(obj: Any, defer: Literal[False] = False) -> str: ...
@overload
def nested(obj: Any, defer: bool) -> Fingerprint: ...
def nested(obj: Any, defer: bool = False) -> Fingerprint:
    """The fingerprint of whatever a DataLoader yields: tensors, numbers, strings, and lists,
    tuples and dicts of them (dicts in insertion order)."""
    b = _Builder()
    try:
        _feed(b, obj, depth=0)
    except Exception as e:  # noqa: BLE001 - never break a training over a fingerprint
        b.h.update(f"<unreadable {type(obj).__qualname__}>".encode())  # the same in every run
        _UNREADABLE.setdefault(type(obj).__qualname__, f"{type(e).__name__}: {e}"[:300])
    return b.finish(defer)


def _feed(b: _Builder, obj: Any, depth: int, in_object: bool = False) -> None:
    """Feed one item of a batch. Content is hashed, never an address: an object of another class
    counts by its attributes (one level deep: an object inside one counts by its class), anything
    else by its class only."""
    h = b.h
    if depth > 20:
        h.update(b"<deep>")
        return
    cls = type(obj)
    mod = cls.__module__
    if mod.startswith("torch") and hasattr(obj, "dtype") and hasattr(obj, "shape"):
        h.update(b"T")
        b.tensor(obj)
    elif mod == "numpy" and hasattr(obj, "dtype"):
        _feed_array(b, obj, depth)
    elif isinstance(obj, (str, bytes, int, float, bool)) or obj is None:
        h.update(f"{cls.__name__}:{obj!r};".encode())
    elif isinstance(obj, (list, tuple)):
        h.update(b"[" if isinstance(obj, list) else b"(")
        for v in obj:
            _feed(b, v, depth + 1, in_object)
        h.update(b"]")
    elif isinstance(obj, dict) or _is_mapping(obj):
        h.update(b"{")
        for k, v in obj.items():
            _feed(b, k, depth + 1, in_object)
            _feed(b, v, depth + 1, in_object)
        h.update(b"}")
    elif isinstance(obj, (set, frozenset)):
        h.update(b"<set>")
        for v in sorted(obj, key=repr):
            _feed(b, v, depth + 1, in_object)
        h.update(b"</set>")
    elif hasattr(cls, "__array_interface__") and not in_object:  # e.g. a PIL image
        # numpy on use (it may be absent): import repro_check and a run's start never load it
        import numpy as np

        h.update(f"<{cls.__qualname__}>".encode())
        _feed_array(b, np.asarray(obj), depth)
    elif not in_object and not isinstance(obj, type) and hasattr(obj, "__dict__"):
        h.update(f"<{cls.__qualname__}:".encode())  # a dataclass or any other object
        for k, v in vars(obj).items():
            _feed(b, k, depth + 1, True)
            _feed(b, v, depth + 1, True)
        h.update(b">")
    else:
        h.update(f"<{cls.__qualname__}>".encode())


def _is_mapping(obj: Any) -> bool:
    return isinstance(obj, Mapping)  # e.g. UserDict subclasses such as tokenizer outputs


def _feed_array(b: _Builder, obj: Any, depth: int) -> None:
    """A numpy array or scalar: its bytes, or for an object array its items one by one."""
    # numpy on use (it may be absent): import repro_check and a run's start never load it
    import numpy as np

    arr = np.asarray(obj)
    b.h.update(f"N{arr.dtype}{arr.shape};".encode())
    if not arr.size:
        return
    if arr.dtype.hasobject:
        for item in arr.reshape(-1).tolist():
            _feed(b, item, depth + 1)
        return
    flat = np.ascontiguousarray(arr).reshape(-1)
    b.h.update(flat.view(np.uint8).data)
