"""A bounded, thinned series of (step, value) points from a stream of unknown length.

Reports draw whole runs (a loss curve, the difference per step) however long they are, so the
points are kept per bucket of ``stride`` consecutive values; when ``cap`` points are held, the
stride doubles and neighbouring buckets merge, keeping the memory and the report's size flat.
"""

from __future__ import annotations

import math

Point = tuple[int, float]


class Thinned:
    """At most about ``cap`` points of a stream: one per bucket of ``stride`` values.

    With ``peaks`` a bucket keeps its largest value (a NaN among its values wins), at the first
    step of the stretch that held it, so a spike in a difference series survives thinning; its
    point is known once the bucket is complete, and the bucket still filling is shown last.
    Without, a bucket keeps its first point (an evenly spaced sample of a curve), and the last
    point seen is shown last, so both ends of the curve stay.
    """

    def __init__(self, cap: int, peaks: bool = False) -> None:
        self.cap = max(2, cap)
        self.peaks = peaks
        self.stride = 1
        self.seen = 0
        self.points: list[Point] = []
        #: with ``peaks``: the point of the bucket still filling, and how many values it has
        self.bucket: Point | None = None
        self.filled = 0
        self.last: Point | None = None

    def add(self, step: int, value: float) -> None:
        self.last = (step, value)
        if self.peaks:
            point = self._fill(step, value)
        else:
            point = (step, value) if self.seen % self.stride == 0 else None
        self.seen += 1
        if point is None:
            return
        self.points.append(point)
        if len(self.points) >= self.cap:
            self.points = [self.merge(self.points[i : i + 2])
                           for i in range(0, len(self.points), 2)]
            self.stride *= 2

    def _fill(self, step: int, value: float) -> Point | None:
        """The bucket's point once it is complete (``peaks``), else None."""
        b = self.bucket
        if b is None or value > b[1] or math.isnan(value):
            b = (step if b is None else b[0], value)
        self.filled += 1
        if self.filled < self.stride:
            self.bucket = b
            return None
        self.bucket, self.filled = None, 0
        return b

    def merge(self, pair: list[Point]) -> Point:
        """The point two neighbouring buckets keep when the stride doubles."""
        return max(pair, key=lambda p: p[1]) if self.peaks else pair[0]

    def values(self) -> list[Point]:
        """The kept points, ending with the bucket still filling (``peaks``) or the last one."""
        if self.peaks:
            return self.points + ([self.bucket] if self.bucket is not None else [])
        if self.last is not None and (not self.points or self.points[-1] != self.last):
            return self.points + [self.last]
        return list(self.points)
