"""Rich layouts more than one report part uses (kept apart from :mod:`repro_check.report.terminal`
so that a part's module can render itself without importing the whole summary)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text


def hanging(label: Text | str, body: Text | str) -> Table:
    """``label`` then ``body``, whose wrapped lines start under its first character, not at
    column 0 (a long cause or source detail stays readable as one block)."""
    grid = Table.grid(padding=0)
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(label, body)
    return grid
