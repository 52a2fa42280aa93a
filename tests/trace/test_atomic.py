"""Atomic outputs: a file appears whole under its name or not at all; the previous one survives
anything that stops a write half-way."""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from repro_check.trace.atomic import AtomicWriter, check_writable, write_text_atomic
from repro_check.errors import UsageError

from ..conftest import FIXTURES, cli_env

WRITER = r"""
import sys
from repro_check.trace.atomic import AtomicWriter
w = AtomicWriter(sys.argv[1])
w.write("new half " * 100000)
w.flush()
print("written", flush=True)
sys.stdin.read()  # wait to be killed
"""


def test_replaces_whole_and_keeps_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text("old")
    path.chmod(0o640)
    write_text_atomic(path, "new")
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_new_file_gets_the_usual_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "new.json", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o644


def test_exception_mid_write_leaves_the_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text("previous")
    with pytest.raises(AttributeError):
        write_text_atomic(path, None)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        with AtomicWriter(path) as w:
            w.write("half")
            raise RuntimeError("interrupted")
    assert path.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_text_utf8_cannot_hold_is_written_out(tmp_path: Path) -> None:
    """A lone surrogate (a file name that is not UTF-8) is no error: it is written as text."""
    path = write_text_atomic(tmp_path / "r.xml", "path /d\udcff/x")
    assert path.read_text() == "path /d\\udcff/x"


def test_killed_mid_write_leaves_the_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text("previous")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=cli_env())
    assert proc.stdout is not None and proc.stdout.readline() == "written\n"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert path.read_text() == "previous"
    leftovers = [p for p in tmp_path.iterdir() if p.name != "report.json"]
    assert all(p.name.startswith(".report.json.") for p in leftovers)  # hidden, never the name


def test_check_writable(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        check_writable(tmp_path / "missing" / "r.json", "--json")
    with pytest.raises(UsageError, match="is a directory"):
        check_writable(tmp_path, "--json")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        (locked / "probe").touch()
    except OSError:
        unwritable = locked
    else:  # root: permission bits do not stop it
        (locked / "probe").unlink()
        unwritable = Path("/proc")
    with pytest.raises(UsageError, match="is not writable"):
        check_writable(unwritable / "r.json", "--json")
    assert check_writable(tmp_path / "r.json") == tmp_path / "r.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["locked"]  # the probe is gone


# ---- what is at the path -----------------------------------------------------------------------
# Devices are reached through a symbolic link in tmp_path (the link is followed as /dev/stdout is
# itself a link): were a device ever replaced by mistake, only the link would be.


def test_a_symlink_is_followed_and_stays(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    real.chmod(0o640)
    link, chain = tmp_path / "link.json", tmp_path / "chain.json"
    link.symlink_to("real.json")
    chain.symlink_to(link)
    write_text_atomic(chain, "new")
    assert link.is_symlink() and chain.is_symlink() and real.read_text() == "new"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "made.json")
    write_text_atomic(dangling, "made")
    assert dangling.is_symlink() and (tmp_path / "made.json").read_text() == "made"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "chain.json", "dangling.json", "link.json", "made.json", "real.json"]


def test_a_character_device_is_written_through(tmp_path: Path) -> None:
    null = tmp_path / "null"
    null.symlink_to(os.devnull)
    assert check_writable(null, "--json") == null
    write_text_atomic(null, "x" * 200_000)
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode) and null.is_symlink()
    assert [p.name for p in tmp_path.iterdir()] == ["null"]


def test_a_fifo_is_written_through(tmp_path: Path) -> None:
    import threading

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def reader() -> None:
        with open(fifo, "rb") as fh:
            got.append(fh.read())

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    check_writable(fifo, "--json")
    write_text_atomic(fifo, "line\n" * 50_000)
    t.join(timeout=60)
    assert not t.is_alive() and got == [b"line\n" * 50_000]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["fifo"]


def test_dash_and_the_file_of_stdout_mean_standard_output(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_writable("-", "--json") == Path("-")
    write_text_atomic("-", '{"a": 1}\n')
    assert capsys.readouterr().out == '{"a": 1}\n'
    # what /dev/stdout names when stdout is a pipe or a file: written through that stream
    out = tmp_path / "out.txt"
    code = ("import sys; from repro_check.trace.atomic import write_text_atomic; "
            "print('summary', flush=True); write_text_atomic(sys.argv[1], 'report\\n')")
    for target in ("/dev/stdout", "/proc/self/fd/1"):
        link = tmp_path / "stdout-link"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        piped = subprocess.run([sys.executable, "-c", code, str(link)], capture_output=True,
                               text=True, env=cli_env(), timeout=60)
        assert piped.returncode == 0 and piped.stdout == "summary\nreport\n", piped.stderr
        with open(out, "w") as fh:
            done = subprocess.run([sys.executable, "-c", code, str(link)], stdout=fh,
                                  env=cli_env(), timeout=60)
        assert done.returncode == 0 and out.read_text() == "summary\nreport\n"
        assert link.is_symlink()


def test_what_is_not_a_file_is_refused_before_writing(tmp_path: Path) -> None:
    import socket

    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        with pytest.raises(UsageError, match=r"^--json path '.*/s' is a socket, not a regular "
                                             r"file$"):
            check_writable(sock_path, "--json")
        with pytest.raises(UsageError, match="is a socket"):
            write_text_atomic(sock_path, "x")
    (tmp_path / "dir").mkdir()
    (tmp_path / "to-dir").symlink_to("dir")
    for p in (tmp_path / "dir", tmp_path / "to-dir"):
        with pytest.raises(UsageError, match="is a directory"):
            check_writable(p, "--json")
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(UsageError, match="cannot be used"):
        check_writable(tmp_path / "loop", "--json")
    block = next((p for p in sorted(Path("/dev").glob("loop[0-9]"))
                  if stat.S_ISBLK(p.stat().st_mode)), None)
    if block is not None:
        (tmp_path / "blk").symlink_to(block)
        with pytest.raises(UsageError, match="is a block device"):
            check_writable(tmp_path / "blk", "--json")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["s", "dir", "to-dir", "loop"] + (["blk"] if block is not None else []))


def test_a_file_where_a_folder_should_be_is_named(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    for path in (tmp_path / "afile" / "x.json", tmp_path / "afile" / "sub" / "x.json"):
        with pytest.raises(UsageError, match=r"^--json '.*afile' is not a folder$"):
            check_writable(path, "--json")
        with pytest.raises(UsageError, match="is not a folder"):
            AtomicWriter(path)
    with pytest.raises(UsageError, match=r"folder '.*missing' does not exist"):
        check_writable(tmp_path / "missing" / "x.json", "--json")


def test_the_cli_refuses_a_socket_before_any_run(tmp_path: Path) -> None:
    import socket

    from ..conftest import run_plain

    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        res = run_plain("tiny.py", "--json", str(sock_path), "--trace-dir", str(tmp_path / "t"))
    assert res.code == 2 and res.stderr.count("\n") == 1 and "is a socket" in res.stderr
    assert "started" not in res.stdout + res.stderr and not (tmp_path / "t").exists()


# ---- a full disk -------------------------------------------------------------------------------
def _fail_writes_in(monkeypatch: pytest.MonkeyPatch, folder: Path, call: str = "write") -> None:
    """``os.write`` (or ``os.close``, after closing) fails with ENOSPC for files in ``folder``."""
    real = getattr(os, call)

    def in_folder(fd: int) -> bool:
        try:
            return os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder))
        except OSError:
            return False

    def write(fd: int, data: bytes) -> int:
        if in_folder(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    def close(fd: int) -> None:
        hit = in_folder(fd)
        real(fd)
        if hit:  # as NFS does: the data reaches the server, and fails, when the file closes
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, call, write if call == "write" else close)


@pytest.mark.parametrize("call", ["write", "close"])
@pytest.mark.parametrize("size", [10, 1_000_000], ids=["small", "large"])
def test_no_space_left_is_one_line_and_leaves_no_temp_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, size: int) -> None:
    from repro_check.trace.format import TraceWriter

    path = tmp_path / "report.json"
    path.write_text("previous")
    _fail_writes_in(monkeypatch, tmp_path, call)
    with pytest.raises(UsageError) as caught:
        write_text_atomic(path, "x" * size)
    assert str(caught.value) == f"cannot write {str(path)!r}: no space left on device"
    writer = TraceWriter(tmp_path / "run-1.jsonl")
    with pytest.raises(UsageError, match="run-1.jsonl'?: no space left"):
        for n in range(1, 1 + size // 10):
            writer.write({"step": n, "signals": {}})
        writer.close()
    writer.write({"end": {}})  # a caller cleaning up is not stopped by the same error again
    writer.abort()
    with pytest.raises(UsageError, match="no space left"):
        writer.close()
    assert path.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_abort_removes_the_temp_file_whatever_close_does(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    w = AtomicWriter(tmp_path / "r.json")
    w.write("x" * 100)
    _fail_writes_in(monkeypatch, tmp_path, "close")
    w.abort()
    w.abort()
    assert list(tmp_path.iterdir()) == []


def test_a_writer_never_committed_leaves_nothing_at_exit(tmp_path: Path) -> None:
    code = ("import sys; from repro_check.trace.atomic import AtomicWriter; "
            "w = AtomicWriter(sys.argv[1]); w.write('x' * 100000); w.flush(); "
            "raise SystemExit(3)")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r.json")],
                          env=cli_env(), timeout=60)
    assert proc.returncode == 3 and list(tmp_path.iterdir()) == []


def _private_tmpfs(tmp_path: Path) -> list[str]:
    """A command prefix running in a private mount namespace with a full 64 KiB tmpfs on
    ``tmp_path / 'full'`` (skips where namespaces or mounts are not permitted)."""
    import shutil

    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare")
    probe = subprocess.run([unshare, "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs "
                            f"{tmp_path}"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"no private tmpfs here: {probe.stderr.decode(errors='replace').strip()}")
    full = tmp_path / "full"
    full.mkdir()
    script = (f'mount -t tmpfs -o size=64k tmpfs "{full}" && mkdir "{full}/traces" && '
              f'(dd if=/dev/zero of="{full}/fill" bs=4096 2>/dev/null || true) && exec "$@"')
    return [unshare, "-rm", "sh", "-c", script, "sh"]


@pytest.mark.slow
def test_a_full_disk_in_a_private_tmpfs(tmp_path: Path) -> None:
    from repro_check.trace.format import TraceWriter

    prefix = _private_tmpfs(tmp_path)
    full = tmp_path / "full"
    trace = tmp_path / "a.jsonl"
    w = TraceWriter(trace)
    w.write({"format": "repro-check-trace", "version": 2, "header": {}})
    for n in range(1, 200):
        w.write({"step": n, "signals": {"x": "a" * 32}})
    w.write({"end": {"status": "completed"}})
    w.close()
    listing = f'; find "{full}" -type f'
    for argv in (["diff", str(trace), str(trace), "--json", str(full / "r.json")],
                 ["diff", str(trace), str(trace), "--junit", str(full / "j.xml")],
                 ["tiny.py", "--trace-dir", str(full / "traces"), "--", "--steps", "3"]):
        proc = subprocess.run(prefix + ["sh", "-c", '"$@"; echo "rc=$?"' + listing, "sh",
                                        sys.executable, "-m", "repro_check", *argv],
                              capture_output=True, text=True, env=cli_env(), timeout=300,
                              cwd=FIXTURES)
        lines = [line for line in proc.stderr.splitlines() if "started" not in line]
        assert "rc=2" in proc.stdout, proc.stdout + proc.stderr
        assert len(lines) == 1 and "no space left" in lines[0] and str(full) in lines[0], lines
        assert proc.stdout.split("rc=2", 1)[1].split() == [f"{full}/fill"]  # no temp file


def test_a_forked_process_exiting_leaves_the_parents_temp_file(tmp_path: Path) -> None:
    code = ("import os, sys; from repro_check.trace.atomic import AtomicWriter; "
            "w = AtomicWriter(sys.argv[1]); w.write('whole'); pid = os.fork()\n"
            "if pid == 0: sys.exit(0)  # runs the exit handlers it inherited\n"
            "os.waitpid(pid, 0); w.commit()")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r.json")],
                          env=cli_env(), timeout=60, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    assert (tmp_path / "r.json").read_text() == "whole"
