"""What ``resume`` does between its runs, in process: the reference's later checkpoints moved
aside for a script that finds its newest one (``resume_check.move_aside``)."""

from __future__ import annotations

from pathlib import Path

from repro_check import resume_check
from repro_check.report.model import CheckpointFile, CheckpointInfo
from repro_check.trace.protocol import record_of


def test_later_checkpoints_of_the_reference_are_moved_and_the_checkpoint_is_kept(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    for name in ("checkpoint-4", "checkpoint-8", "checkpoint-12"):
        (out / name).mkdir(parents=True)
        (out / name / "model.pt").write_text(name)
    (out / "last.pt").write_text("last")
    (out / "mine.txt").write_text("the user's")
    feed = resume_check.Collector(None)
    # the reference's saves, as its trace reports them: every 4 steps, and last.pt each time
    for step in (4, 8, 12):
        for path in (out / f"checkpoint-{step}", out / "last.pt"):
            feed.event(1, record_of({"info": {"save": {"step": step, "path": str(path)}}}))
    feed.event(2, record_of({"info": {"save": {"step": 2, "path": str(out / "checkpoint-2")}}}))
    info = CheckpointInfo(step=4, path=str(out / "checkpoint-4"), copy=None, kind="torch.save",
                          files=[CheckpointFile(str(out / "checkpoint-4")),
                                 CheckpointFile(str(out / "last.pt"))])
    moved = resume_check.move_aside(feed, info, tmp_path / "aside")
    assert moved == [str(out / "checkpoint-12"), str(out / "checkpoint-8")]
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-4", "last.pt", "mine.txt"]
    assert sorted(p.name for p in (tmp_path / "aside").iterdir()) == ["1-checkpoint-12",
                                                                      "2-checkpoint-8"]
    assert (tmp_path / "aside" / "2-checkpoint-8" / "model.pt").read_text() == "checkpoint-8"
    # nothing later: nothing moved, and no folder made
    assert resume_check.move_aside(feed, CheckpointInfo(step=12, path=str(out / "x"), copy=None,
                                                        kind="torch.save"),
                                   tmp_path / "none") == []
    assert not (tmp_path / "none").exists()
