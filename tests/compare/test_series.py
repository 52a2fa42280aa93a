"""The bounded, thinned series behind the loss curves and the difference per step."""

from __future__ import annotations

import math

from repro_check.compare.series import Thinned


def fill(thin: Thinned, pairs: list[tuple[int, float]]) -> list[tuple[int, float]]:
    for step, value in pairs:
        thin.add(step, value)
    return thin.values()


def test_a_sample_is_bounded_evenly_spaced_and_keeps_both_ends() -> None:
    pts = fill(Thinned(cap=100), [(s, float(s)) for s in range(1, 10_001)])
    assert len(pts) <= 101 and pts[0] == (1, 1.0) and pts[-1] == (10_000, 10_000.0)
    gaps = {b[0] - a[0] for a, b in zip(pts[:-2], pts[1:-1])}
    assert len(gaps) == 1  # one stride


def test_a_short_stream_is_kept_whole() -> None:
    pairs = [(s, s / 10) for s in range(1, 50)]
    assert fill(Thinned(cap=100), pairs) == pairs
    assert fill(Thinned(cap=100, peaks=True), pairs) == pairs
    assert Thinned(cap=10).values() == [] and Thinned(cap=10, peaks=True).values() == []


def test_peaks_survive_thinning_at_their_bucket() -> None:
    pairs = [(s, 0.0) for s in range(1, 5001)]
    pairs[3332] = (3333, 7.5)
    pts = fill(Thinned(cap=64, peaks=True), pairs)
    assert len(pts) <= 65 and pts[0][0] == 1
    assert max(v for _, v in pts) == 7.5
    spike = next(s for s, v in pts if v == 7.5)
    assert spike <= 3333 < spike + 128  # the first step of the bucket that holds it
    # a plain sample of the same stream loses the spike
    assert max(v for _, v in fill(Thinned(cap=64), pairs)) == 0.0


def test_a_nan_in_a_bucket_is_kept() -> None:
    zeros = [(s, 0.0) for s in range(1, 5)]  # then stride 2
    for tail in ([(5, math.nan), (6, 0.5)], [(5, 0.5), (6, math.nan)]):
        pts = fill(Thinned(cap=4, peaks=True), zeros + tail)
        assert pts[:2] == [(1, 0.0), (3, 0.0)] and pts[2][0] == 5 and math.isnan(pts[2][1])


def test_the_bucket_still_filling_is_shown_last() -> None:
    thin = Thinned(cap=4, peaks=True)
    fill(thin, [(s, float(s % 3)) for s in range(1, 9)])  # 8 values: stride 2 then 4
    # merged buckets keep the point of the half that peaks
    assert thin.stride == 4 and thin.values() == [(2, 2.0), (5, 2.0)]
    thin.add(9, 0.25)
    assert thin.values() == [(2, 2.0), (5, 2.0), (9, 0.25)]
