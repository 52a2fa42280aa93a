"""Atomic file output: write to a temporary file beside the target, then rename over it.

What is at the path decides how it is written: a regular file (or nothing yet) is replaced
atomically; a symbolic link is followed, so the file it points to is replaced and the link stays;
a character device or a FIFO (``/dev/null``, ``/dev/stdout`` on a pipe) is written through, as a
shell redirection would; ``-`` is standard output. Anything else (a directory, a socket, a block
device) is refused by :func:`check_writable` before any run starts. A write that fails (a full
disk) is a :class:`UsageError` naming the path, and never leaves a temporary file behind.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro_check.errors import UsageError

#: the path that means standard output (``--json -``)
STDOUT = "-"
#: buffered bytes written out at once (a trace line is usually far smaller)
_CHUNK = 1 << 16


def write_error(path: str | os.PathLike[str], exc: OSError) -> UsageError:
    """The one-line error for an output that could not be written (a full disk says so)."""
    shown = "standard output" if os.fspath(path) == STDOUT else repr(os.fspath(path))
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        why = "no space left on device" if exc.errno == errno.ENOSPC \
            else "no space left (disk quota exceeded)"
    else:
        why = exc.strerror or str(exc) or type(exc).__name__
    return UsageError(f"cannot write {shown}: {why}")


@dataclass(frozen=True)
class Destination:
    """Where an output goes: ``kind`` is ``replace`` (a regular file, or nothing yet: ``path``
    is the file to replace, symlinks resolved), ``through`` (a device or FIFO, opened and written
    in place), ``stdout`` or ``stderr`` (the path is the file one of them already writes to)."""

    kind: str
    path: Path


def _same_file(st: os.stat_result, fd: int) -> bool:
    try:
        other = os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (other.st_dev, other.st_ino)


def _folder_problem(path: Path) -> str | None:
    """Why the folder of ``path`` cannot hold it: a missing folder, or a part that is a file."""
    parent = path.parent if str(path.parent) else Path(".")
    try:
        if stat.S_ISDIR(os.stat(parent).st_mode):
            return None
    except OSError:
        pass
    for part in [*reversed(parent.parents), parent]:
        if str(part) in ("", "."):
            continue
        try:
            st = os.stat(part)
        except FileNotFoundError:
            return f"folder {str(parent)!r} does not exist"
        except OSError as e:
            return f"folder {str(parent)!r} cannot be used ({e.strerror})"
        if not stat.S_ISDIR(st.st_mode):
            return f"{str(part)!r} is not a folder"
    return f"folder {str(parent)!r} does not exist"


def destination(path: str | os.PathLike[str], what: str = "output") -> Destination:
    """Classify ``path`` as an output; :class:`UsageError` for what cannot be one."""
    text = os.fspath(path)
    if text == STDOUT:
        return Destination("stdout", Path(STDOUT))
    p = Path(text)
    try:
        st: os.stat_result | None = os.stat(p)  # follows symbolic links
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as e:
        raise UsageError(f"{what} path {text!r} cannot be used ({e.strerror})") from None
    if st is None:
        real = Path(os.path.realpath(p))  # a dangling link: the file it names is created
        problem = _folder_problem(real if os.path.islink(p) else p)
        if problem is not None:
            raise UsageError(f"{what} {problem}")
        return Destination("replace", real)
    mode = st.st_mode
    if _same_file(st, 1):
        return Destination("stdout", p)
    if _same_file(st, 2):
        return Destination("stderr", p)
    if stat.S_ISREG(mode):
        return Destination("replace", Path(os.path.realpath(p)))
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return Destination("through", p)
    if stat.S_ISDIR(mode):
        raise UsageError(f"{what} path {text!r} is a directory")
    kind = "a socket" if stat.S_ISSOCK(mode) else "a block device" if stat.S_ISBLK(mode) \
        else "not a regular file"
    raise UsageError(f"{what} path {text!r} is {kind}, not a regular file")


def check_writable(path: str | os.PathLike[str], what: str = "output") -> Path:
    """Fail early (before any run starts) when ``path`` cannot be written; ``-`` is stdout."""
    dest = destination(path, what)
    p = Path(os.fspath(path))
    if dest.kind == "through":
        if not os.access(p, os.W_OK):
            raise UsageError(f"{what} path {str(p)!r} is not writable")
        return p
    if dest.kind != "replace":
        return p
    folder = dest.path.parent
    # try it: permission bits say nothing for root, read-only mounts or full quotas
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{dest.path.name}.", suffix=".probe", dir=folder)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise write_error(p, e) from None
        raise UsageError(f"{what} folder {str(folder)!r} is not writable ({e.strerror})") from None
    os.close(fd)
    os.unlink(probe)
    return p


def _identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """The file ``path`` is (device and inode, links followed), or None when there is none."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _written_through(path: str) -> bool:
    """A device or FIFO (``/dev/null``): written in place, it replaces nothing."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def check_distinct(outputs: Sequence[tuple[str, str | os.PathLike[str] | None]],
                   inputs: Sequence[tuple[str, str | os.PathLike[str] | None]]) -> None:
    """Refuse (:class:`UsageError`, before anything runs) an output that is one of the inputs
    or another output: writing it would replace the file being read, or the other report. Files
    are compared by identity, so a symbolic or hard link to an input is caught too; an output
    that does not exist yet is told apart by the path it will be created at."""
    seen: list[tuple[str, str, Any]] = []
    for what, path in inputs:
        if path is not None:
            seen.append((what, os.fspath(path), _identity(path)))
    for what, path in outputs:
        if path is None or os.fspath(path) in ("", STDOUT) or _written_through(os.fspath(path)):
            continue
        text = os.fspath(path)
        ident = _identity(text)
        created = os.path.realpath(text)
        for other, other_path, other_ident in seen:
            same = ident is not None and ident == other_ident if ident is not None \
                else other_ident is None and created == os.path.realpath(other_path)
            if same:
                raise UsageError(f"{what} {text!r} is the same file as {other} "
                                 f"{other_path!r}: writing it would replace that file")
        seen.append((what, text, ident))


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


def _discard(state: dict[str, Any]) -> None:
    """Close the descriptor and remove the temporary file, whatever fails on the way (run once
    by :meth:`AtomicWriter.abort`, or at exit for a writer nobody committed or aborted)."""
    if state.get("pid", os.getpid()) != os.getpid():
        return  # a forked process exiting: the file is its parent's
    fd, tmp = state.pop("fd", None), state.pop("tmp", None)
    try:
        if fd is not None:
            os.close(fd)
    except OSError:
        pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


class AtomicWriter:
    """A text file that appears under its final name only when :meth:`commit` is called.

    A device, FIFO or standard output is written as the text comes instead. The first failed
    write raises :class:`UsageError` and discards the temporary file; later writes are ignored
    and :meth:`commit` raises the same error, so a caller cleaning up after it is not stopped.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(os.fspath(path))
        self._shown = os.fspath(path)
        self._dest = destination(path)
        self._buffer: list[bytes] = []
        self._buffered = 0
        self._failed: UsageError | None = None
        self._committed = False
        self._state: dict[str, Any] = {"pid": os.getpid()}
        kind, target = self._dest.kind, self._dest.path
        try:
            if kind == "replace":
                fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                           dir=target.parent)
                self._state.update(fd=fd, tmp=tmp)
                os.fchmod(fd, 0o666 & ~_umask())  # as an ordinary new file, not mkstemp's 0600
            elif kind == "through":
                flags = os.O_WRONLY | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
                self._state["fd"] = os.open(target, flags)
        except OSError as e:
            _discard(self._state)
            raise write_error(self._shown, e) from None
        self._cleanup = weakref.finalize(self, _discard, self._state)

    # ---- writing -------------------------------------------------------------------------
    def _emit(self, data: bytes) -> None:
        kind = self._dest.kind
        if kind in ("stdout", "stderr"):
            stream = sys.stdout if kind == "stdout" else sys.stderr
            stream.write(data.decode("utf-8"))
            return
        fd = self._state["fd"]
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]

    def _push(self) -> None:
        data = b"".join(self._buffer)
        self._buffer, self._buffered = [], 0
        if data:
            self._emit(data)

    def _fail(self, exc: OSError) -> UsageError:
        self._failed = write_error(self._shown, exc)
        self._buffer, self._buffered = [], 0
        self._cleanup()
        return self._failed

    def write(self, text: str) -> None:
        if self._failed is not None:
            return
        data = text.encode("utf-8", "backslashreplace")  # a lone surrogate (a path's) written out
        self._buffer.append(data)
        self._buffered += len(data)
        if self._buffered >= _CHUNK:
            try:
                self._push()
            except OSError as e:
                raise self._fail(e) from None

    def flush(self) -> None:
        """Hand what is buffered to the file (not durable until :meth:`commit`)."""
        if self._failed is not None:
            raise self._failed
        try:
            self._push()
        except OSError as e:
            raise self._fail(e) from None

    def commit(self) -> Path:
        """Write what is left and put the file in place; the path written (or ``-``)."""
        if self._failed is not None:
            raise self._failed
        if self._committed:
            return self.path
        try:
            self._push()
            kind = self._dest.kind
            if kind in ("stdout", "stderr"):
                (sys.stdout if kind == "stdout" else sys.stderr).flush()
            elif kind == "through":
                self._cleanup()
            else:
                fd = self._state["fd"]
                os.fsync(fd)
                os.fchmod(fd, _final_mode(self._dest.path))
                self._state.pop("fd")
                os.close(fd)
                os.replace(self._state["tmp"], self._dest.path)
                self._state.pop("tmp")
                self._cleanup.detach()
        except OSError as e:
            raise self._fail(e) from None
        except BaseException:
            self.abort()
            raise
        self._committed = True
        return self.path

    def abort(self) -> None:
        """Forget the output: the temporary file is removed whatever closing it does."""
        self._buffer, self._buffered = [], 0
        self._cleanup()

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
    return Path(os.fspath(path))
