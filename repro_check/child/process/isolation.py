"""A run at another git revision (``--across rev=``, ``bisect``) must run that revision's code.

The parent starts it in the revision's checkout with the project's import folders taken from
there (:func:`repro_check.run.revisions.isolating_environment`). What else could still reach the
user's working tree (an editable install's finder for a module the checkout lacks, a ``.pth``
that imports the project at start-up) is caught here: once the target has run, every module it
loaded from the working tree is named, and the run's comparison is marked incomplete, so such
a cell is never reported as agreeing."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from repro_check.trace.protocol import REVISION_VAR

#: modules named at most in the warning
SHOWN = 3


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def foreign_modules(root: Path, checkout: Path) -> list[tuple[str, str]]:
    """``(module, file)`` of every loaded module whose file is in the working tree ``root`` but
    not in ``checkout`` (nor in this package, nor in the interpreter's own folders)."""
    ours = Path(__file__).resolve().parents[2]  # repro_check/, from child/process/
    installed = [Path(p).resolve() for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}]
    found: list[tuple[str, str]] = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not isinstance(file, str):
            continue
        try:
            path = Path(file).resolve()
        except (OSError, RuntimeError):
            continue
        if _under(path, root) and not _under(path, checkout) and not _under(path, ours) \
                and not any(_under(path, i) for i in installed):
            found.append((name, file))
    return sorted(found)


def check(emit: Callable[[dict[str, Any]], None]) -> None:
    """In a run at a revision: a warning that leaves the comparison incomplete for each module
    the target loaded from the working tree instead of the revision's checkout."""
    told = os.environ.get(REVISION_VAR)
    if not told or os.pathsep not in told:
        return
    root, checkout = (Path(p) for p in told.split(os.pathsep, 1))
    found = foreign_modules(root.resolve(), checkout.resolve())
    if not found:
        return
    shown = ", ".join(f"{name} ({file})" for name, file in found[:SHOWN])
    more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    emit({"warning": f"this run of revision checkout {checkout} imported {shown}{more} from the "
                     f"working tree {root}, not from the revision: it did not run the "
                     "revision's code, so it cannot be compared (an installed package or a .pth "
                     "file that points at the working tree; install the project in a way this "
                     "revision's checkout can replace, or run the check in that checkout)",
          "incomplete": True})
