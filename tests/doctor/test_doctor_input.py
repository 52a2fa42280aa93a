"""repro-check doctor on files it cannot parse: too deeply nested source (MemoryError or
RecursionError in the parser) and hostile pyproject.toml files are one line and exit 2, never an
internal error."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from repro_check.doctor import checkup as doctor
from repro_check.errors import UsageError

from ..conftest import repro_check_cli

#: 500,000 signs end in MemoryError in the parser, 5,000 in RecursionError
DEEP = {"memory": "x = " + "-" * 500_000 + "1\n", "recursion": "x = " + "-" * 5_000 + "1\n"}


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Run from an empty folder, so no pyproject.toml of ours is picked up, under Python's own
    recursion limit (as the command runs): a test in the same worker that compiled a model
    left torch's higher one, under which the parser reads the 5,000 signs."""
    monkeypatch.chdir(tmp_path)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        yield tmp_path
    finally:
        sys.setrecursionlimit(limit)


@pytest.mark.parametrize("kind", sorted(DEEP))
def test_a_target_nested_too_deeply_is_unreadable(elsewhere: Path, kind: str) -> None:
    (elsewhere / "deep.py").write_text(DEEP[kind])
    with pytest.raises(UsageError, match=r"^cannot read deep.py: nested too deeply to parse$"):
        doctor.doctor("deep.py", env=False)
    proc = repro_check_cli(["doctor", "--no-env", "deep.py"], cwd=elsewhere, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "nested too deeply to parse" in proc.stderr and "internal error" not in proc.stderr


def test_an_imported_file_nested_too_deeply_is_skipped(elsewhere: Path) -> None:
    (elsewhere / "deep.py").write_text(DEEP["recursion"])
    (elsewhere / "train.py").write_text("import deep\nimport torch\n"
                                        "torch.backends.cudnn.benchmark = True\n")
    report = doctor.doctor("train.py", env=False)
    assert report.files == ["train.py"] and [f.code for f in report.findings] == ["RC102"]
    assert report.skipped == [{"file": "deep.py", "reason": "nested too deeply to parse"}]


@pytest.mark.parametrize("text, message", [
    ("[tool.repro-check]\na = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    ("[tool.repro-check]\na = 1" + "0" * 5000 + "\n", "invalid TOML"),
    ("[tool.repro-check]\nx = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n", "nested too deeply"),
])
def test_a_hostile_pyproject_is_one_usage_error(elsewhere: Path, text: str, message: str) -> None:
    from repro_check import config

    (elsewhere / "pyproject.toml").write_text(text)
    with pytest.raises(UsageError, match=message) as caught:
        config.load(with_table=True)  # how doctor reads its settings
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400
