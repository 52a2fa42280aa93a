"""``python -m repro_check``."""

from __future__ import annotations

import sys

from repro_check.cli.main import console_main

if __name__ == "__main__":
    sys.exit(console_main())
