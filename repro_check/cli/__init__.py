"""The command line: parsers, commands and multi-target plans; the library does the work."""

from __future__ import annotations

from repro_check.cli.main import console_main, main

__all__ = ["console_main", "main"]
