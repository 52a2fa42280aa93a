from __future__ import annotations

import numpy as np
import torch

from repro_check import fingerprint


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
