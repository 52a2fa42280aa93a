"""Atomic file output: write to a temporary file beside the target, then rename over it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO

from repro_check.errors import UsageError


def check_writable(path: str | os.PathLike[str], what: str = "output") -> Path:
    """Fail early (before any run starts) when ``path`` cannot be written."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise UsageError(f"{what} path {str(p)!r} is a directory")
    if not parent.is_dir():
        raise UsageError(f"{what} folder {str(parent)!r} does not exist")
    # try it: permission bits say nothing for root, read-only mounts or full quotas
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".probe", dir=parent)
    except OSError as e:
        raise UsageError(f"{what} folder {str(parent)!r} is not writable ({e.strerror})") from None
    os.close(fd)
    os.unlink(probe)
    return p


def _umask() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _final_mode(path: Path) -> int:
    """The mode the file would have had if written in place (temporary files are 0600)."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        return 0o666 & ~_umask()


class AtomicWriter:
    """A text file that appears under its final name only when :meth:`commit` is called."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent or "."
        )
        self._tmp = Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # as an ordinary new file would be, not mkstemp's 0600
        self.file: IO[str] = os.fdopen(fd, "w", encoding="utf-8")

    def write(self, text: str) -> None:
        self.file.write(text)

    def commit(self) -> Path:
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            os.fchmod(self.file.fileno(), _final_mode(self.path))
            self.file.close()
            os.replace(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise
        return self.path

    def abort(self) -> None:
        if not self.file.closed:
            self.file.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> AtomicWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Replace ``path`` with ``text`` atomically; an interrupted write leaves the old file."""
    with AtomicWriter(path) as w:
        w.write(text)
    return Path(path)
