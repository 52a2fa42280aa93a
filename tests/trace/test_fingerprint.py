from __future__ import annotations

import numpy as np
import pytest
import torch

from repro_check.trace import fingerprint


def test_permutation_changes_the_fingerprint() -> None:
    t = torch.arange(64, dtype=torch.float32)
    assert fingerprint.tensor(t) != fingerprint.tensor(t.flip(0))
    assert fingerprint.tensor(t) == fingerprint.tensor(t.clone())


def test_dtype_and_shape_are_part_of_it() -> None:
    t = torch.zeros(4, 4)
    assert fingerprint.tensor(t) != fingerprint.tensor(t.reshape(16))
    assert fingerprint.tensor(t) != fingerprint.tensor(t.to(torch.int32))


def test_non_contiguous_and_half_precision() -> None:
    t = torch.randn(8, 8)
    assert fingerprint.tensor(t.t()) == fingerprint.tensor(t.t().contiguous())
    assert fingerprint.tensor(t.to(torch.bfloat16)) != fingerprint.tensor(t.to(torch.float16))


def test_one_bit_flip_is_seen() -> None:
    t = torch.randn(1000)
    u = t.clone()
    u.view(torch.int32)[500] ^= 1
    assert fingerprint.tensor(t) != fingerprint.tensor(u)


def test_named_tensors_and_nested_batches() -> None:
    a = [("w", torch.ones(2)), ("b", None)]
    assert fingerprint.tensors(a) != fingerprint.tensors([("b", None), ("w", torch.ones(2))])
    batch = (torch.arange(6).reshape(2, 3), {"id": [1, 2], "x": np.arange(3)})
    same = (torch.arange(6).reshape(2, 3), {"id": [1, 2], "x": np.arange(3)})
    other = (torch.arange(6).reshape(2, 3), {"id": [2, 1], "x": np.arange(3)})
    assert fingerprint.nested(batch) == fingerprint.nested(same)
    assert fingerprint.nested(batch) != fingerprint.nested(other)


# ---- the on-device digest, exercised on the CPU ---------------------------------------------


def test_device_digest_is_exact_order_sensitive_and_chunk_independent(monkeypatch) -> None:
    g = torch.Generator().manual_seed(3)
    t = torch.randn(1000, generator=g)
    d = fingerprint.device_digest(t)
    assert d.dtype == torch.int64 and d.shape == (2,)
    assert torch.equal(d, fingerprint.device_digest(t.clone()))
    for word in (0, 517, 999):
        for bit in (0, 22, 31):
            flipped = t.clone()
            flipped.view(torch.int32)[word] ^= 1 << bit if bit < 31 else -(1 << 31)
            differs = fingerprint.device_digest(flipped) != d
            assert bool(differs.all()), (word, bit)  # one changed word changes both lanes
    assert not torch.equal(fingerprint.device_digest(t.flip(0)), d)
    swapped = t.clone()
    swapped[[3, 4]] = swapped[[4, 3]]
    assert not torch.equal(fingerprint.device_digest(swapped), d)
    monkeypatch.setattr(fingerprint, "DEVICE_CHUNK", 64)
    assert torch.equal(fingerprint.device_digest(t), d)  # chunking does not change it


def test_device_digest_cancelling_differences_do_not_collide() -> None:
    """Differences that cancel in any weighted sum (+1/-1 ulp at i, i+1 and -1/+1 at j, j+1)."""
    t = torch.randn(4096, generator=torch.Generator().manual_seed(5))
    base = fingerprint.device_digest(t)
    for i, j in ((10, 2000), (0, 4094), (100, 101 + 64)):
        u = t.clone()
        w = u.view(torch.int32)
        w[i] += 1
        w[i + 1] -= 1
        w[j] -= 1
        w[j + 1] += 1
        assert not torch.equal(fingerprint.device_digest(u), base)


def test_device_digest_of_every_layout() -> None:
    odd = torch.tensor([1, 2, 3], dtype=torch.uint8)  # 3 bytes: padded to a whole word
    assert not torch.equal(fingerprint.device_digest(odd),
                           fingerprint.device_digest(torch.tensor([1, 2, 4], dtype=torch.uint8)))
    t = torch.randn(7, 5)
    for x in (t.to(torch.bfloat16), t.to(torch.float16), t.double(), t > 0, t.to(torch.int64),
              torch.complex(t, t), t.t(), t.to_sparse()):
        d = fingerprint.device_digest(x)
        assert d.shape == (2,) and torch.equal(d, fingerprint.device_digest(x.clone()))
    assert torch.equal(fingerprint.device_digest(t.t()), fingerprint.device_digest(t.t().contiguous()))


def test_deferred_fingerprints_match_immediate_ones(monkeypatch) -> None:
    """With every tensor treated as a device tensor, deferring changes when, never what."""
    monkeypatch.setattr(fingerprint, "_on_host", lambda t: False)
    monkeypatch.setattr(fingerprint, "_VIEWS", {})  # views of host tensors kept: none
    a = [("w", torch.randn(3, 3)), ("g", None), ("b", torch.arange(5))]
    now = fingerprint.tensors(a)
    later = fingerprint.tensors(a, defer=True)
    assert isinstance(now, str) and isinstance(later, fingerprint.Deferred)
    batch = [torch.ones(2, 2), {"ids": [1, 2]}]
    parts = [fingerprint.nested(batch, defer=True), "plain-text-part"]
    combined = fingerprint.combine(parts, defer=True)
    resolved = fingerprint.resolve([later, "as-is", combined, later])
    assert resolved == [now, "as-is", fingerprint.combine([fingerprint.nested(batch), "plain-text-part"]),
                        now]
    assert fingerprint.tensors(list(reversed(a))) != now


def test_device_and_host_fingerprints_never_mix_up() -> None:
    """The same tensor named the same way hashes differently on a device (its own algorithm), so
    a CPU trace and a GPU trace can not agree by accident."""
    t = [("w", torch.randn(4))]
    host = fingerprint.tensors(t)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fingerprint, "_on_host", lambda x: False)
        m.setattr(fingerprint, "_VIEWS", {})  # views of host tensors kept: none
        assert fingerprint.tensors(t) != host


def test_device_digest_of_many_tensors_is_one_chunked_stream(monkeypatch) -> None:
    g = torch.Generator().manual_seed(11)
    parts = [torch.randn(n, generator=g) for n in (5, 300, 1, 77)]
    whole = fingerprint.device_digest(*parts)
    assert torch.equal(whole, fingerprint.device_digest(torch.cat(parts)))
    monkeypatch.setattr(fingerprint, "DEVICE_CHUNK", 16)
    assert torch.equal(fingerprint.device_digest(*parts), whole)  # chunks cut across tensors
    assert not torch.equal(fingerprint.device_digest(*reversed(parts)), whole)


def test_a_device_without_the_integer_ops_falls_back_to_a_copy(monkeypatch) -> None:
    monkeypatch.setattr(fingerprint, "_on_host", lambda t: False)
    monkeypatch.setattr(fingerprint, "_VIEWS", {})  # views of host tensors kept: none
    items = [("w", torch.randn(6)), ("b", torch.randn(2))]
    digested = fingerprint.tensors(items)

    def unsupported(*tensors):
        raise NotImplementedError("no int64 bitwise ops here")

    monkeypatch.setattr(fingerprint, "device_digest", unsupported)
    copied = fingerprint.tensors(items)
    assert copied != digested and copied == fingerprint.tensors(items)
    changed = [("w", items[0][1] + 1), items[1]]
    assert fingerprint.tensors(changed) != copied


@pytest.mark.filterwarnings("ignore::UserWarning")  # prototype, beta and deprecated APIs, on purpose
def test_nested_sparse_quantized_and_meta_tensors_are_read_by_their_parts() -> None:
    a, b = torch.randn(2), torch.randn(3)
    nested = torch.nested.nested_tensor([a, b])
    assert fingerprint.tensor(nested) == fingerprint.tensor(torch.nested.nested_tensor([a, b]))
    assert fingerprint.tensor(nested) != fingerprint.tensor(torch.nested.nested_tensor([a, b + 1]))
    dense = torch.tensor([[0.0, 1.5], [2.5, 0.0]])
    coo = dense.to_sparse()
    assert fingerprint.tensor(coo) == fingerprint.tensor(dense.to_sparse_csr())
    duplicated = torch.sparse_coo_tensor([[0, 1, 1], [1, 0, 0]], [1.5, 2.0, 0.5], (2, 2))
    assert fingerprint.tensor(duplicated) == fingerprint.tensor(coo)  # coalesced first
    assert fingerprint.tensor(coo * 2) != fingerprint.tensor(coo)
    q = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
    assert fingerprint.tensor(q) != fingerprint.tensor(
        torch.quantize_per_tensor(q.dequantize(), 0.2, 0, torch.qint8))  # the scale counts
    f8 = torch.randn(5).to(torch.float8_e4m3fn)
    assert fingerprint.tensor(f8) != fingerprint.tensor(f8.view(torch.uint8))  # dtype counts
    assert fingerprint.tensor(torch.empty(3, device="meta")) == \
        fingerprint.tensor(torch.empty(3, device="meta"))


def test_a_tensor_that_can_not_be_read_counts_by_its_type(monkeypatch) -> None:
    def broken(t, *_):
        raise RuntimeError("no bytes for you")

    monkeypatch.setattr(fingerprint, "_UNREADABLE", {})
    monkeypatch.setattr(fingerprint, "_REPORTED", set())
    monkeypatch.setattr(fingerprint, "_bytes_view", broken)
    monkeypatch.setattr(fingerprint, "_plain", broken)
    first = fingerprint.tensors([("w", torch.randn(3))])
    assert first == fingerprint.tensors([("w", torch.randn(3))])  # the same in every run
    assert fingerprint.take_unreadable() == ["Tensor (RuntimeError: no bytes for you)"]
    fingerprint.tensors([("w", torch.randn(3))])
    assert fingerprint.take_unreadable() == []  # said once


def test_batches_of_other_kinds_count_by_content_never_by_address() -> None:
    import dataclasses
    from collections import UserDict

    def obj_array(*items):
        arr = np.empty(len(items), dtype=object)
        arr[:] = items
        return arr

    # equal content held by different objects: object arrays hash items, not pointers
    assert fingerprint.nested(obj_array("".join(["a", "b"]), [1])) == \
        fingerprint.nested(obj_array("ab", [1]))
    assert fingerprint.nested(obj_array("ab", [1])) != fingerprint.nested(obj_array("ab", [2]))
    days = np.array(["2020-01-01", "2020-01-02"], dtype="datetime64[D]")
    assert fingerprint.nested(days) != fingerprint.nested(days[::-1])

    @dataclasses.dataclass
    class Batch:
        x: torch.Tensor
        ids: list

    class Encoding(UserDict):
        pass

    assert fingerprint.nested(Batch(torch.ones(2), [1])) == fingerprint.nested(Batch(torch.ones(2), [1]))
    assert fingerprint.nested(Batch(torch.ones(2), [1])) != fingerprint.nested(Batch(torch.zeros(2), [1]))
    assert fingerprint.nested(Encoding(input_ids=torch.ones(3))) != \
        fingerprint.nested(Encoding(input_ids=torch.zeros(3)))
    assert fingerprint.nested({3, 1, 2}) == fingerprint.nested({2, 3, 1})


def test_the_fast_path_hashes_the_bytes_the_slow_one_does() -> None:
    """Dense CPU tensors are read through a view of their memory (no copy, no numpy array): the
    fingerprint is the same as hashing their header and their bytes read through numpy, so
    goldens recorded before stay valid; a subclass and a strided view take the careful path."""

    class Tagged(torch.Tensor):
        pass

    base = torch.randn(6, 5)
    cases = [base, torch.nn.Parameter(base.clone()), torch.arange(7), base.to(torch.uint8),
             torch.empty(0, 3), base.t(), base[:, 1], base.as_subclass(Tagged), base[2:]]
    for t in cases:
        h = fingerprint.hasher()
        h.update(f"{t.dtype}{tuple(t.shape)};".encode())
        flat = t.detach().contiguous().reshape(-1)
        if flat.numel():
            h.update(memoryview(flat.numpy()).cast("B"))
        assert fingerprint.tensor(t) == h.hexdigest(), (t.dtype, tuple(t.shape), type(t))


def test_a_kept_view_follows_its_tensor() -> None:
    """The view kept for a tensor read again (a parameter, every step) reads its memory as it is
    now, and is made anew when the tensor moved, changed shape or layout in place."""

    def fresh(t: torch.Tensor) -> str:
        return fingerprint.tensors([("t", t.detach().clone().contiguous())])

    def kept(t: torch.Tensor) -> str:
        return fingerprint.tensors([("t", t)], keep=True)

    w = torch.nn.Parameter(torch.randn(4, 4))
    assert kept(w) == fresh(w)
    with torch.no_grad():
        w.mul_(2)  # in place: the same memory
    assert kept(w) == fresh(w)
    w.data = torch.randn(4, 4)  # new memory
    assert kept(w) == fresh(w)
    t = torch.randn(4, 4)
    kept(t)
    t.transpose_(0, 1)  # same memory and shape, no longer contiguous
    assert kept(t) == fresh(t)
    u = torch.arange(12.0)
    kept(u)
    u.resize_(3, 4)  # same memory, another shape
    assert kept(u) == fresh(u)
    u.set_(torch.zeros(3, 4).untyped_storage(), 0, (3, 4))
    assert kept(u) == fresh(u)
    before = len(fingerprint._VIEWS)
    gone = torch.randn(8)
    kept(gone)
    assert len(fingerprint._VIEWS) == before + 1
    del gone
    assert len(fingerprint._VIEWS) == before  # the entry went with its tensor
    fingerprint.tensors([("t", torch.randn(8))])
    assert len(fingerprint._VIEWS) == before  # a tensor not said to live long: nothing kept
