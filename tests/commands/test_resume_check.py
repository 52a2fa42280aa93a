"""What ``resume`` does between its runs, in process: the reference's later checkpoints moved
aside for a script that finds its newest one (``resume_check.move_aside``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro_check.commands import resume as resume_check
from repro_check.report.model import CheckpointFile, CheckpointInfo
from repro_check.trace.protocol import record_of

from ..conftest import CliResult, run_cli


def test_later_checkpoints_of_the_reference_are_moved_and_the_checkpoint_is_kept(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    for name in ("checkpoint-4", "checkpoint-8", "checkpoint-12"):
        (out / name).mkdir(parents=True)
        (out / name / "model.pt").write_text(name)
    (out / "last.pt").write_text("last")
    (out / "mine.txt").write_text("the user's")
    feed = resume_check.ResumeRecords(None)
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


def test_the_control_leaves_out_the_rng_state_only_where_the_runs_draw_after_the_checkpoint(
        ) -> None:
    """Which state the resume's control leaves out: the RNG state when the checkpoint holds one
    (or its contents cannot be seen) and the reference draws after it, else the optimizer's;
    nothing when it holds neither."""
    def state(kinds: dict[str, str], draws: bool) -> str | None:
        feed = resume_check.ResumeRecords(None)
        for step in (4, 5):
            signals = {"loss": "x", **({"rng.torch": "f"} if draws and step == 5 else {})}
            feed.event(1, record_of({"step": step, "signals": signals}))
        info = CheckpointInfo(step=4, path="ckpt.pt", copy=None, kind="torch.save",
                              kinds=kinds)
        return resume_check.ResumeControl(None, None, feed, info, None,  # type: ignore[arg-type]
                                          False).state()

    both = {"model": "model", "opt": "optimizer", "rng": "rng"}
    assert state(both, draws=True) == "rng"
    assert state(both, draws=False) == "optimizer"
    assert state({"model": "model", "rng": "rng"}, draws=False) is None
    # contents unseen: an RNG restore the resumed run makes is left out when the runs draw
    # after the checkpoint (a plain pickle of the RNG states and a hand-written SGD), else the
    # optimizer's
    assert state({}, draws=True) == "rng"
    assert state({}, draws=False) == "optimizer"


@pytest.fixture(scope="module")
def sgd_resumes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CliResult]:
    """fixtures/control/resume_sgd.py resumed exactly: plain SGD (no optimizer state to leave
    out) and its twin with momentum."""
    tmp = tmp_path_factory.mktemp("sgd-resumes")
    return {name: run_cli("resume", "control/resume_sgd.py:main", "--at", "4", "--resume-args",
                          "--resume {checkpoint}", "--", "--out", str(tmp / name / "out"),
                          *flags, tmp=tmp / name)
            for name, flags in (("plain", ()), ("momentum", ("--momentum",)))}


@pytest.mark.slow
def test_a_resume_whose_left_out_state_changes_nothing_is_unverified(
        sgd_resumes: dict[str, CliResult]) -> None:
    r = sgd_resumes["plain"]
    assert r.code == 1, r.stdout + r.stderr
    rep = r.report
    assert rep is not None and rep["verdict"] == "unverified"
    assert rep["resumes_exactly"] is False and rep["first_divergent_step"] is None
    ctl = rep["control"]
    assert ctl["status"] == "not seen"
    assert ctl["planted"]["tensor"] == "the optimizer state the checkpoint restores"
    assert "cannot tell whether the checkpoint restores the optimizer state" in ctl["detail"]
    assert "UNVERIFIED" in r.stdout


@pytest.mark.slow
def test_its_twin_with_momentum_sees_the_optimizer_state_left_out(
        sgd_resumes: dict[str, CliResult]) -> None:
    r = sgd_resumes["momentum"]
    assert r.code == 0, r.stdout + r.stderr
    ctl = (r.report or {})["control"]
    assert (ctl["status"], ctl["seen_step"], ctl["seen_signal"]) == ("seen", 5, "opt")
    assert "RESUMES EXACTLY" in r.stdout
