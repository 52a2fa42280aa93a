"""The one folder a run's ``PYTHONPATH`` gets so that it can import this package, and nothing else.

A run must import ``repro_check`` (its entry point is ``python -m repro_check.child``), also with
another interpreter (``--across python=``). The folder that holds ``repro_check/`` is, for a
normal install, a whole ``site-packages``: put on a run's ``PYTHONPATH`` it came before the
standard library and made interpreter B import interpreter A's libraries (A's torch). So the
runs get a folder of their own holding only a link to this package, made once per command and
removed when it ends; where no link can be made, the folder that holds the package, as before.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

#: the folder that holds repro_check/
PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
_PACKAGE = Path(PACKAGE_PARENT) / "repro_check"
_made: list[str] = []


def package_entry() -> str:
    """A folder holding only this package (a link to it), for a run's ``PYTHONPATH``."""
    if _made and (Path(_made[0]) / "repro_check").exists():
        return _made[0]
    try:
        folder = tempfile.mkdtemp(prefix="repro-check-import-")
    except OSError:
        return PACKAGE_PARENT
    try:
        os.symlink(_PACKAGE, os.path.join(folder, "repro_check"), target_is_directory=True)
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        return PACKAGE_PARENT
    if not _made:
        atexit.register(_remove)
    _made[:] = [folder]
    return folder


def _remove() -> None:
    for folder in _made:
        shutil.rmtree(folder, ignore_errors=True)


def with_package(pythonpath: str | None) -> str:
    """``pythonpath`` with :func:`package_entry` last."""
    return os.pathsep.join(p for p in (pythonpath, package_entry()) if p)
