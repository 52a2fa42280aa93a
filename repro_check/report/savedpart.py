"""What the runs left, in every output, from one view of it: the saved files and the modules'
state at the end, compared tensor by tensor, and the first that differs (file, key, step and
line of the save), as the terminal's line and the HTML page's paragraph."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from repro_check.report.htmlkit import escape
from repro_check.report.model import Report, SavedPart


def left_sentence(part: SavedPart) -> str | None:
    """What the runs left, in one sentence (None: no module with tensors and nothing saved, so
    nothing to say)."""
    saves = part.saves
    state = any(f.kind == "state" for f in part.files)
    what = " and ".join(([f"{saves} saved file(s)"] if saves else [])
                        + (["the modules' state at the end"] if state else []))
    first = part.first
    if first is None:
        if not part.tensors_compared:  # no module with tensors, nothing saved: nothing to say
            return f"What the runs left: {what}, holding no tensor to compare." if saves \
                else None
        return f"What the runs left agrees: {what}, {part.tensors_compared} tensor(s) compared."
    diff = first.first_difference
    key = f" in {diff.key}" if diff is not None and diff.key else ""
    how = f" ({diff.detail}, run {diff.run} vs run 1)" if diff is not None else ""
    return (f"What the runs left differs: {first.name}{key}{how}, saved by {first.where}; "
            f"{what}, {part.tensors_compared} tensor(s) compared.") if first.kind == "file" else \
        (f"What the runs left differs: the modules' state at the end{key}{how}"
         # with no saved file, what was compared is the state just named: not said twice
         f"{'; ' + what if saves else ''}, {part.tensors_compared} tensor(s) compared.")


@dataclass(frozen=True)
class SavedView:
    """What the runs left as every output shows it: one sentence, and whether it tells of a
    difference."""

    sentence: str
    #: a save or the end state differs between the runs
    differs: bool

    @classmethod
    def of(cls, report: Report) -> SavedView | None:
        """The report's saved files and end state (None: nothing to say, or the target failed,
        when what a run left says nothing about reproducibility)."""
        part = report.saved
        if part is None or not part.files or report.error is not None:
            return None
        sentence = left_sentence(part)
        return None if sentence is None else cls(sentence, part.first is not None)

    def terminal(self) -> list[Any]:
        """The summary's line, red when something differs."""
        from rich.text import Text

        return [Text(self.sentence, style="red" if self.differs else "")]

    def html(self) -> list[str]:
        """The page's paragraph under the outcome."""
        return [f'<p id="saved">{escape(self.sentence)}</p>']


def saved_parts(report: Report) -> list[Any]:
    """The terminal's line on what the runs left, or nothing."""
    view = SavedView.of(report)
    return [] if view is None else view.terminal()


def saved_section(report: Report) -> list[str]:
    """The page's paragraph on what the runs left, or nothing."""
    view = SavedView.of(report)
    return [] if view is None else view.html()
