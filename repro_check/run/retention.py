"""How many checks' traces ``.repro-check/runs/`` keeps.

Every check writes its traces into a folder of its own there (``STAMP-PID-XXXX``); without a
limit the folder grows by every check (a long job's traces are hundreds of MB). When a command
makes its folder, the older ones beyond the most recent :data:`DEFAULT_KEEP` are removed, except:

* a folder whose command is still running (the pid in its name is alive);
* a folder a report the user asked for points at (``--json``, ``--junit``, ``--report``):
  :func:`keep_for` notes the reports' paths beside it (:data:`KEPT_BY`), and it is kept as
  long as one of those files exists;
* anything outside ``.repro-check/runs/`` (``--trace-dir`` is the user's own folder: never
  touched).

``REPRO_CHECK_KEEP_RUNS=N`` sets the number (``0``: keep every folder).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from repro_check.errors import UsageError
from repro_check.trace.atomic import write_text_atomic

#: the environment variable that sets how many checks' trace folders are kept
KEEP_VAR = "REPRO_CHECK_KEEP_RUNS"
#: folders kept by default: the most recent checks'
DEFAULT_KEEP = 20
#: the folder beside the trace folders that holds, for each one a report points at, the list of
#: those reports (``.kept-by/FOLDER.json``: nothing is added to the trace folder itself)
KEPT_BY = ".kept-by"
#: a trace folder's name: ``YYYYmmdd-HHMMSS-PID-XXXX``
_NAME = re.compile(r"^\d{8}-\d{6}-(?P<pid>\d+)-")
#: the folders whose ``runs/`` holds the default trace folders (in the project; in the
#: temporary folder when the project is read-only)
_ROOTS = (".repro-check", "repro-check")


def keep_count() -> int:
    """How many trace folders to keep (:data:`KEEP_VAR`, else :data:`DEFAULT_KEEP`; 0: all)."""
    text = os.environ.get(KEEP_VAR, "").strip()
    if not text:
        return DEFAULT_KEEP
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise UsageError(f"{KEEP_VAR}={text!r}: give a whole number of trace folders to keep "
                         "(0: keep them all)")
    return value


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def note_of(folder: Path) -> Path:
    """Where the reports pointing at trace folder ``folder`` are listed."""
    return folder.parent / KEPT_BY / f"{folder.name}.json"


def _pinned(folder: Path) -> bool:
    """Whether a report the user asked for, still there, points at ``folder``."""
    try:
        paths = json.loads(note_of(folder).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(paths, list) and any(isinstance(p, str) and os.path.exists(p) for p in paths)


def prune(root: Path, keep: int, current: Path | None = None) -> list[Path]:
    """Remove the trace folders in ``root`` older than the ``keep`` most recent (see the module's
    docstring for what is never removed); the folders removed."""
    if keep <= 0:
        return []
    try:
        folders = sorted((p for p in root.iterdir() if p.is_dir() and _NAME.match(p.name)),
                         key=lambda p: p.name, reverse=True)
    except OSError:
        return []
    removed: list[Path] = []
    for folder in folders[keep:]:
        match = _NAME.match(folder.name)
        if folder == current or match is None or _alive(int(match["pid"])) or _pinned(folder):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            removed.append(folder)
            note_of(folder).unlink(missing_ok=True)
    return removed


def keep_for(trace_dir: str | os.PathLike[str] | None, reports: Iterable[str | None]) -> None:
    """Note in the check's trace folder under ``.repro-check/runs/`` the reports that point at
    it, so that :func:`prune` keeps it while one of them exists."""
    paths = [os.path.abspath(p) for p in reports if p and p != "-"]
    if trace_dir is None or not paths:
        return
    folder = Path(trace_dir).resolve()
    while folder.parent.name != "runs" or folder.parent.parent.name not in _ROOTS:
        if folder.parent == folder:
            return  # not under .repro-check/runs: the user's own folder, never pruned
        folder = folder.parent
    note = note_of(folder)
    try:
        note.parent.mkdir(exist_ok=True)
        known = json.loads(note.read_text()) if note.exists() else []
    except (OSError, ValueError):
        known = []
    merged = list(dict.fromkeys([*(p for p in known if isinstance(p, str)), *paths]))
    try:
        write_text_atomic(note, json.dumps(merged) + "\n")
    except OSError:
        pass  # a folder we cannot write to is one we could not remove either
