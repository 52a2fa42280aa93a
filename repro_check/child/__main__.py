"""``python -m repro_check.child``: the process of one run (see :mod:`repro_check.child.main`)."""

from __future__ import annotations

from repro_check.child.main import launch

launch()
