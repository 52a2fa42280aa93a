"""``.repro-check/runs/`` keeps the most recent checks' traces, and never what a running command
or a report the user asked for points at."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from repro_check.errors import UsageError
from repro_check.run import retention

from ..conftest import cli_env, repro_check_cli


def folder(root: Path, stamp: str, pid: int, files: int = 1) -> Path:
    f = root / f"{stamp}-{pid}-abcd"
    f.mkdir(parents=True)
    for i in range(files):
        (f / f"run-{i + 1}.jsonl").write_text("{}\n")
    return f


def a_dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid  # reaped: no process has it (until the system hands it out again)


def test_the_oldest_folders_beyond_the_limit_go_and_the_rest_stay(tmp_path: Path) -> None:
    root = tmp_path / ".repro-check" / "runs"
    dead = a_dead_pid()
    made = [folder(root, f"20260101-0000{i:02d}", dead) for i in range(6)]
    running = folder(root, "20250101-000000", os.getppid())  # older, but its command runs
    reported = folder(root, "20250101-000001", dead)
    report = tmp_path / "report.json"
    report.write_text("{}")
    retention.keep_for(reported / "check" / "nested", [str(report), None, "-"])
    assert json.loads(retention.note_of(reported).read_text()) == [str(report)]
    assert sorted(p.name for p in reported.iterdir()) == ["run-1.jsonl"]  # nothing added there
    foreign = root / "not-a-trace-folder"
    foreign.mkdir()
    removed = retention.prune(root, 3, current=made[-1])
    assert sorted(removed) == sorted(made[:3])
    assert all(f.exists() for f in (*made[3:], running, reported, foreign))
    report.unlink()  # the report is gone: its traces may go too
    assert retention.prune(root, 3) == [reported]
    assert not retention.note_of(reported).exists()
    assert retention.prune(root, 0) == []  # 0 keeps everything


def test_a_folder_outside_the_default_root_is_never_marked(tmp_path: Path) -> None:
    mine = tmp_path / "my-traces" / "20260101-000000-1-abcd"
    mine.mkdir(parents=True)
    retention.keep_for(mine, [str(tmp_path / "r.json")])
    assert not retention.note_of(mine).exists()


def test_the_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(retention.KEEP_VAR, raising=False)
    assert retention.keep_count() == retention.DEFAULT_KEEP
    monkeypatch.setenv(retention.KEEP_VAR, "5")
    assert retention.keep_count() == 5
    for bad in ("-1", "many"):
        monkeypatch.setenv(retention.KEEP_VAR, bad)
        with pytest.raises(UsageError, match=retention.KEEP_VAR):
            retention.keep_count()


@pytest.mark.slow
def test_a_check_prunes_the_old_folders_and_keeps_the_one_its_report_names(tmp_path: Path) -> None:
    """Two real checks with REPRO_CHECK_KEEP_RUNS=1: the first writes --json, so its traces stay
    after the second; a third check without a report then removes the second's."""
    (tmp_path / "train.py").write_text(
        "import torch\nm = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(3):\n    opt.zero_grad()\n    m(torch.ones(1, 2)).pow(2).sum().backward()\n"
        "    opt.step()\n")
    env = cli_env(**{retention.KEEP_VAR: "1"})
    runs = tmp_path / ".repro-check" / "runs"

    def check(*extra: str) -> set[str]:
        proc = repro_check_cli(["train.py", *extra], cwd=tmp_path, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return {p.name for p in runs.iterdir() if p.name != retention.KEPT_BY}

    first = check("--json", str(tmp_path / "report.json"))
    second = check()
    assert first < second and len(second) == 2  # the reported one kept
    third = check()
    assert first <= third and len(third) == 2 and not (second - first) & third
