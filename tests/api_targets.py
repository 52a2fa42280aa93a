"""What the shared API runs (tests/api_runs.py) run, and the settings the tests derive from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .conftest import FIXTURES

TINY = f"{FIXTURES / 'tiny.py'}:main"
PRINTED = f"{FIXTURES / 'printed_metric.py'}:main"
SEED = 5
STEPS = 6
DIVERGE_AT = 4
TINY_ARGS = ["--steps", str(STEPS)]


@dataclass
class Golden:
    """A golden recorded through the API: its file, the record report and its dict."""

    path: Path
    report: Any
    data: dict[str, Any]
