"""Atomic outputs: a file appears whole under its name or not at all; the previous one survives
anything that stops a write half-way."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from repro_check.trace.atomic import AtomicWriter, check_writable, write_text_atomic
from repro_check.errors import UsageError

from .conftest import cli_env

WRITER = r"""
import sys
from repro_check.trace.atomic import AtomicWriter
w = AtomicWriter(sys.argv[1])
w.write("new half " * 100000)
w.file.flush()
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
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(path, "half written \ud800 cannot be encoded")
    with pytest.raises(RuntimeError):
        with AtomicWriter(path) as w:
            w.write("half")
            raise RuntimeError("interrupted")
    assert path.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


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
