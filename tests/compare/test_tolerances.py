"""Tolerance options, ulps and bands: how a value is judged, and what says it was."""

from __future__ import annotations

import numpy as np
import pytest

from repro_check.trace import values
from repro_check.compare.steps import Policy
from repro_check.errors import UsageError
from repro_check.compare.tolerances import ToleranceOptions, from_cli, parse_config
from repro_check.trace.values import Tolerance


def f32(x: float) -> dict:
    return values.encode(np.float32(x))  # type: ignore[return-value]


def test_cli_specs_build_a_policy_per_name() -> None:
    opts = from_cli(atol=["1e-6", "loss=1e-5"], rtol=["metric:accuracy=1e-3"], ulps=["metric:*=4"])
    policy = opts.policy()
    assert policy.default == Tolerance(atol=1e-6)
    assert policy.for_name("loss") == Tolerance(atol=1e-5)
    assert policy.for_name("metric:accuracy") == Tolerance(atol=1e-6, rtol=1e-3)
    assert policy.for_name("metric:mse") == Tolerance(atol=1e-6, ulps=4)
    assert policy.for_name("grad_norm") == Tolerance(atol=1e-6)
    assert opts.to_args() == ["--atol", "1e-06", "--atol", "loss=1e-05",
                              "--rtol", "metric:accuracy=0.001", "--ulps", "metric:*=4"]
    assert from_cli().policy().describe() == "exact bits"


def test_command_line_overrides_the_config() -> None:
    cfg = ToleranceOptions(atol=parse_config("atol", {"default": 1e-3, "loss": 1e-4}, "atol"),
                           band_widen=2.0)
    merged = cfg.merged(from_cli(atol=["loss=1e-8"], no_band=True))
    assert merged.atol == {"default": 1e-3, "loss": 1e-8}
    assert merged.band_widen == 2.0 and merged.use_band is False


@pytest.mark.parametrize("kind, item, message", [
    ("atol", "loss=abc", "expected a number"),
    ("atol", "-1", "finite number >= 0"),
    ("rtol", "nan", "finite number >= 0"),
    ("ulps", "1.5", "whole number of ulps"),
    ("atol", "metric:=1", "invalid name"),
])
def test_bad_values_are_usage_errors(kind: str, item: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        from_cli(**{kind: [item]})


def test_band_widen_below_one_is_refused() -> None:
    with pytest.raises(UsageError, match="--band-widen must be a number >= 1"):
        ToleranceOptions(band_widen=0.5).policy()


def test_ulp_distance_counts_representable_floats() -> None:
    a = np.float32(0.1)
    b = np.nextafter(np.nextafter(a, np.float32(1)), np.float32(1))
    assert values.ulp_distance(f32(a), f32(b)) == 2
    assert values.ulp_distance(f32(-0.0), f32(0.0)) == 0
    neg = np.nextafter(np.float32(0), np.float32(-1))
    assert values.ulp_distance(f32(neg), f32(np.nextafter(np.float32(0), np.float32(1)))) == 2
    assert values.ulp_distance(f32(0.1), values.encode_float64(0.1)) is None  # dtypes differ
    assert values.ulp_distance(f32(float("nan")), f32(0.1)) is None
    assert values.equal(f32(a), f32(b), Tolerance(ulps=2))
    assert not values.equal(f32(a), f32(b), Tolerance(ulps=1))
    assert Tolerance(ulps=2).describe() == "ulps=2"


def test_judge_names_what_accepted_each_value() -> None:
    policy = Policy(per_name={"loss": Tolerance(atol=1e-3)}, band_widen=2.0)
    band = {"min": f32(1.0), "max": f32(1.1)}
    assert policy.judge("loss", f32(1.0), f32(1.0)) == "exact"
    assert policy.judge("loss", f32(1.0), f32(1.0005)) == "tolerance"
    assert policy.judge("metric:x", f32(1.0), f32(1.0005)) is None
    assert policy.judge("metric:x", f32(1.0), f32(1.12), band) == "band"  # [0.95, 1.15]
    assert policy.judge("metric:x", f32(1.0), f32(1.2), band) is None
    assert policy.rule("metric:x", band) == "exact bits; band [0.94999999, 1.15] widened x2"
    assert policy.rule("loss") == "atol=0.001, rtol=0 (loss)"
    assert Policy(use_band=False).judge("x", f32(1.0), f32(1.05), band) is None
