"""``repro-check resume``'s bad input: one line on stderr, exit 2, nothing run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize("flags, says", [
    (["--at", "0", "--resume-args", "x"], "--at: must be a positive whole number, got '0'"),
    (["--at", "two"], "--at: must be a positive whole number, got 'two'"),
    (["--resume-args", "x"], "resume needs --at K"),
    (["--at", "3", "--resume-args", "'unbalanced"], "cannot be split into arguments"),
    (["--at", "3", "--max-steps", "3"], "leaves nothing to resume"),
    (["--at", "3", "--no-seed"], "same seeding"),
])
def test_bad_resume_options_are_one_line_and_exit_2(tmp_path: Path, flags: list[str],
                                                    says: str) -> None:
    r = run_cli("resume", "resume/train.py:main", *flags, tmp=tmp_path)
    assert r.code == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], r.stderr
    assert not (tmp_path / "traces").exists() or not any((tmp_path / "traces").iterdir())
