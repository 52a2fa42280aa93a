from __future__ import annotations

import os
from pathlib import Path

import pytest

from repro_check import targets
from repro_check.errors import TargetNotFound, UsageError

from .conftest import FIXTURES


@pytest.mark.parametrize(
    "text, kind",
    [
        ("train:main", "module_function"),
        ("pkg.mod:Trainer.fit", "module_function"),
        ("train", "module"),
        ("fixtures/train.py", "file"),
        ("fixtures/train.py:main", "file_function"),
        ("/abs/path/run.py:main", "file_function"),
    ],
)
def test_parse_forms(text: str, kind: str) -> None:
    assert targets.parse(text).kind == kind


@pytest.mark.parametrize("text", ["", "train:", ":main", "train:ma-in", "9x:main", " train:main"])
def test_parse_rejects_malformed(text: str) -> None:
    with pytest.raises(UsageError):
        targets.parse(text)


@pytest.fixture
def in_fixtures(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(FIXTURES)
    return FIXTURES


def test_check_accepts_existing_forms(in_fixtures: Path) -> None:
    for text in ("train:main", "tiny:main", "train.py", "train.py:main", "probe"):
        targets.check(targets.parse(text))


def test_missing_module_suggests_close_match(in_fixtures: Path) -> None:
    with pytest.raises(TargetNotFound, match=r"no module named 'trian'.*did you mean 'train'"):
        targets.check(targets.parse("trian:main"))


def test_missing_function_suggests_close_match(in_fixtures: Path) -> None:
    with pytest.raises(TargetNotFound, match=r"no function 'mian'.*did you mean 'main'"):
        targets.check(targets.parse("train:mian"))
    with pytest.raises(TargetNotFound, match=r"train.py has no function 'mian'"):
        targets.check(targets.parse("train.py:mian"))


def test_missing_file_suggests_close_match(in_fixtures: Path) -> None:
    with pytest.raises(TargetNotFound, match=r"no such file: tran.py.*'train.py'"):
        targets.check(targets.parse("tran.py"))


def test_check_runs_no_target_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    marker = tmp_path / "ran"
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (pkg / "job.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef main():\n    pass\n")
    monkeypatch.chdir(tmp_path)
    targets.check(targets.parse("pkg.job:main"))
    with pytest.raises(TargetNotFound, match="no function 'nope'"):
        targets.check(targets.parse("pkg.job:nope"))
    with pytest.raises(TargetNotFound, match="no module named 'pkg.jb'"):
        targets.check(targets.parse("pkg.jb:main"))
    assert not marker.exists()


def test_module_search_starts_in_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "json.py").write_text("def main():\n    pass\n")
    monkeypatch.chdir(tmp_path)
    spec = targets.find_module("json", targets.search_path(os.getcwd()))
    assert spec.origin == str(tmp_path / "json.py")
