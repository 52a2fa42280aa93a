from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from repro_check.trace import values
from repro_check.trace.values import Tolerance


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("x", [0.1, -0.0, 0.0, float("nan"), float("inf"), float("-inf"), 3e-5])
def test_tensor_round_trip_keeps_bits(dtype: torch.dtype, x: float) -> None:
    t = torch.tensor(x, dtype=dtype)
    enc = values.encode(t)
    assert enc is not None and enc["dtype"] == str(dtype).removeprefix("torch.")
    back = torch.tensor(values.to_float(enc), dtype=dtype)
    assert back.view(torch.int16 if t.element_size() == 2 else
                     {4: torch.int32, 8: torch.int64}[t.element_size()]).item() == \
        t.view(torch.int16 if t.element_size() == 2 else
               {4: torch.int32, 8: torch.int64}[t.element_size()]).item()


def test_negative_zero_differs_from_zero_on_bits_only() -> None:
    a, b = values.encode(0.0), values.encode(-0.0)
    assert not values.equal(a, b, Tolerance())
    assert values.equal(a, b, Tolerance(atol=1e-12))


def test_nan_equals_nan_of_same_bits_and_under_tolerance() -> None:
    a = values.encode(torch.tensor(float("nan")))
    assert values.equal(a, dict(a), Tolerance())
    other_nan = values.encode(float("nan"))
    assert values.equal(a, other_nan, Tolerance(rtol=1e-3))
    assert not values.equal(a, values.encode(1.0), Tolerance(rtol=1.0))


def test_one_ulp_differs_exactly_but_passes_a_tolerance() -> None:
    a = torch.tensor(0.18224825, dtype=torch.float32)
    b = torch.nextafter(a, torch.tensor(1.0))
    ea, eb = values.encode(a), values.encode(b)
    assert not values.equal(ea, eb, Tolerance())
    assert values.equal(ea, eb, Tolerance(atol=1e-7))
    absdiff, rel = values.differences(ea, eb)
    assert absdiff == pytest.approx(float(b - a)) and rel is not None and rel > 0


def test_numpy_and_python_scalars() -> None:
    assert values.encode(np.float32(0.5))["bits"] == "3f000000"
    assert values.encode(7)["value"] == 7
    assert values.encode(True)["value"] is True
    assert values.encode("text") is None
    assert values.encode(torch.ones(3)) is None


def test_readable_shows_enough_digits_to_tell_float32_apart() -> None:
    a = torch.tensor(0.18224825, dtype=torch.float32)
    b = torch.nextafter(a, torch.tensor(1.0))
    assert values.readable(values.encode(a)) != values.readable(values.encode(b))


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_float64_round_trip(x: float) -> None:
    enc = values.encode(x)
    y = values.to_float(enc)
    assert (math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y))
    assert values.is_valid(enc)


def test_encode_tensors_in_a_batch_like_one_at_a_time() -> None:
    import torch

    from repro_check.trace import values

    items = [torch.tensor(0.1), None, torch.tensor([2.5], dtype=torch.float64), torch.tensor(3)]
    assert values.encode_tensors(items) == [
        values.encode_tensor(items[0]), None, values.encode_tensor(items[2]),
        values.encode_tensor(items[3])]


def test_canonical_bits_are_one_text_per_value() -> None:
    for written, canonical in (({"dtype": "float32", "bits": "3F800000"}, "3f800000"),
                               ({"dtype": "int", "bits": "00FF"}, "ff"),
                               ({"dtype": "int64", "bits": "-0a"}, "-a"),
                               ({"dtype": "int", "bits": "-0"}, "0"),
                               ({"dtype": "bigint", "bits": "AB"}, "ab"),
                               ({"dtype": "float16", "bits": "0000"}, "0000")):
        assert values.canonicalize(dict(written))["bits"] == canonical
    assert values.encode(255)["bits"] == values.canonicalize(values.encode(255))["bits"]


def test_a_number_is_read_from_what_is_compared_never_from_the_readable_value() -> None:
    """``value`` is a readable copy: a file could set it to anything while its bits say
    otherwise, and a tolerance or band judged by it would accept a value the bits refute."""
    from repro_check.compare import printed

    assert values.to_float({"dtype": "int", "bits": "ff", "value": 3}) == 255.0
    assert values.to_float({"dtype": "bool", "bits": "1", "value": False}) == 1.0
    assert math.isnan(values.to_float({"dtype": "float1e999", "bits": "3f800000", "value": 1.0}))
    lying = {**printed.encode("0.95"), "value": 0.5}
    assert values.to_float(lying) == 0.95
    assert math.isnan(values.to_float({**lying, "text": "0.5"}))  # a text its bits do not hold
    assert values.to_float(printed.encode("9876/10000")) == 0.9876
    band = {"min": values.encode_float64(0.0), "max": values.encode_float64(1.0)}
    assert not values.in_band({"dtype": "weird", "bits": "ff", "value": 0.5}, band)
    assert not values.in_band({"dtype": "int", "bits": "ff", "value": 0.5}, band)


def test_a_one_element_tensor_keeps_its_exact_bits() -> None:
    """Random float16/32/64 bit patterns (NaN payloads, subnormals, both zeros and infinities
    among them) are encoded with the tensor's own bits, whichever way a value is read."""
    import struct

    rng = np.random.default_rng(7)
    edges = [0, 1, 2**15 - 1]  # +0, the smallest subnormal, a NaN, as words of each width
    cases = [(np.concatenate([rng.integers(-2**15, 2**15, 6000), edges]).astype(np.int16),
              torch.float16, ">h"),
             (np.concatenate([rng.integers(-2**31, 2**31, 6000), edges]).astype(np.int32),
              torch.float32, ">i"),
             (np.concatenate([rng.integers(-2**63, 2**63 - 1, 6000, dtype=np.int64), edges]),
              torch.float64, ">q")]
    for words, dtype, fmt in cases:
        floats = torch.from_numpy(words).view(dtype)
        for word, t in zip(words.tolist(), floats):
            assert values.encode_tensor(t)["bits"] == struct.pack(fmt, word).hex(), (dtype, word)
