"""``bisect GOOD BAD TARGET``: the first commit whose run differs, the checkout never moved.

One repository of five commits (the fourth changes an op's numerics, the second is broken)
serves the real bisects: one through the command line that finds the fourth commit (and reads
its run options from the repository's [tool.repro-check]), one through the Python API where BAD
matches GOOD, one where GOOD cannot run. Their model trains with a plain optimizer (no
torch.optim import of dynamo: tests/run/across_light_targets.py). The search's git-bisect
semantics (skips, undecided ends, the number of steps) are tested with verdicts given directly,
without runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from repro_check.errors import UsageError
from repro_check.report.model import BisectCommit, BisectPart, JudgedCommit, Report
from repro_check.commands import bisect
from repro_check.report.render import summary
from repro_check.report.terminal import make_console
from repro_check.run import revisions

from ..conftest import CliResult, run_cli, run_plain
from ..git_repos import HANGING, commit, five_commits, git, interrupt_when_started, state
from ..run.across_light_targets import light_five_commits, light_script

#: the repository's run options: max-steps is read, the check's runs are not (one run a commit)
CONFIG = "[tool.repro-check]\nmax-steps = 1\nruns = 5\n"


def render(report: Report) -> str:
    """The report's summary as the command line prints it."""
    console = make_console(width=120, force_terminal=False)
    with console.capture() as cap:
        console.print(summary(report), crop=False)
    return cap.get()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The five commits, and an untracked pyproject.toml with run options."""
    root = tmp_path_factory.mktemp("bisect") / "repo"
    shas = light_five_commits(root)
    (root / "pyproject.toml").write_text(CONFIG)
    return root, shas


@pytest.fixture(scope="module")
def found(repo: tuple[Path, list[str]], tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[CliResult, dict[str, str], dict[str, str]]:
    """From the third commit (fixed) to the fifth: the fourth is the only commit to test; the
    search over more commits is test_search_skips_what_fails_as_git_bisect_run_does's."""
    root, _ = repo
    before = state(root)
    res = run_cli("bisect", "HEAD~2", "HEAD", "model.py:main",
                  tmp=tmp_path_factory.mktemp("bisect-run"), cwd=root)
    return res, before, state(root)


def test_bisect_names_the_fourth_commit_its_step_signal_and_op(found: tuple[CliResult, dict[str, str], dict[str, str]],
                                                             repo: tuple[Path, list[str]]) -> None:
    res, _, _ = found
    _, shas = repo
    assert res.code == 1, res.stdout + res.stderr
    assert res.report is not None
    b = res.report["bisect"]
    assert b["first_bad"]["sha"] == shas[3] and b["first_bad"]["subject"] == "four: scale the output"
    assert b["first_bad"]["date"] and b["first_bad"]["author"] == "Ada"
    assert (b["step"], b["signal"]) == (1, "loss")
    assert b["op"] == "aten::mul" and b["module"] == "Net"
    # the commit's code passes another number: said of its code, with no seeding advice
    loc = b["localization"]
    assert loc["cause"] == "code" and loc["differing_inputs"] == [1], loc
    assert f"commit {shas[3][:12]}'s code passes another value" in loc["detail"], loc
    assert "seed what" not in loc["detail"] and "entropy" not in loc["detail"], loc
    assert b["drift"]["max_abs"] > 0
    tested = {t["sha"]: t["verdict"] for t in b["tested"]}
    assert tested[shas[3]] == "bad" and all(v in ("good", "bad", "skip") for v in tested.values())
    assert set(b["skipped"]) == {s for s, v in tested.items() if v == "skip"}
    # about log2(2 candidates) runs plus GOOD's, and the count is printed
    assert b["candidates"] == 2 and b["runs"] == len(b["tested"]) + 1 == 2
    assert f"{b['runs']} run(s)" in res.stdout and "first commit that differs" in res.stdout
    assert "git bisect start" in Path(b["log"]).read_text()
    assert shas[3][:12] in res.stdout
    assert re.search(r"\d run\(s\) .* in \d+\.\d s", res.stdout)  # the count and the time


def test_bisect_reads_max_steps_from_the_config_but_not_its_runs(
        found: tuple[CliResult, dict[str, str], dict[str, str]]) -> None:
    """pyproject.toml says max-steps = 1 and runs = 5: every commit's run stops at step 1,
    and each commit is run once."""
    res, _, _ = found
    assert res.report is not None
    assert res.report["max_steps"] == 1 and res.report["steps"][-1] == 1  # the config's
    b = res.report["bisect"]
    assert b["runs"] == len(b["tested"]) + 1  # one run a commit tested, and GOOD's


def test_bisect_leaves_the_checkout_as_it_was(found: tuple[CliResult, dict[str, str], dict[str, str]]) -> None:
    _, before, after = found
    assert before == after


def test_search_skips_what_fails_as_git_bisect_run_does(tmp_path: Path) -> None:
    """Verdicts without runs: commit 2 fails (skip); a bad commit next to only skipped ones
    leaves git undecided, as ``git bisect run`` would."""
    root = tmp_path / "repo"
    shas = five_commits(root)
    folder = tmp_path / "search"
    git(root, "worktree", "add", "--detach", "-q", str(folder), shas[4])
    before = state(root)

    def verdicts(table: dict[int, str]) -> tuple[str | None, list[str], list[int]]:
        seen: list[int] = []

        def judge(sha: str) -> str:
            seen.append(shas.index(sha))
            return table[shas.index(sha)]

        found, undecided, log = bisect.search(folder, shas[0], shas[4], judge)
        assert "git bisect start" in log
        revisions.git(folder, "bisect", "reset", "HEAD")
        return found, undecided, seen

    found, undecided, seen = verdicts({1: "skip", 2: "good", 3: "bad", 4: "bad"})
    assert found == shas[3] and len(seen) <= 3
    found, undecided, seen = verdicts({1: "good", 2: "skip", 3: "bad", 4: "bad"})
    assert found is None and set(undecided) == {shas[2], shas[3]}
    found, undecided, seen = verdicts({1: "good", 2: "good", 3: "good", 4: "bad"})
    assert found == shas[4] and 4 not in seen  # git takes BAD as bad: the caller runs it
    assert state(root)["head"] == before["head"] and state(root)["status"] == before["status"]


@pytest.mark.parametrize("argv, says", [
    (["HEAD~1", "nosuchrev", "model.py:main"], "unknown git revision 'nosuchrev'"),
    (["HEAD", "HEAD~1", "model.py:main"], "is not an ancestor of BAD"),
    (["HEAD", "HEAD", "model.py:main"], "are the same commit"),
    (["HEAD~1", "WORKTREE", "model.py:main"], "bisect walks commits"),
    (["HEAD~1", "HEAD", "missing.py:main"], "no such file"),
])
def test_usage_errors_are_one_line_before_any_run(repo: tuple[Path, list[str]], argv: list[str],
                                                  says: str) -> None:
    root, _ = repo
    res = run_plain("bisect", *argv, cwd=root)
    assert res.code == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], res.stderr
    assert git(root, "worktree", "list").count("\n") == 1


def test_not_a_git_repository_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text("def main():\n    pass\n")
    with pytest.raises(UsageError, match="not in a git repository"):
        revisions.repository(tmp_path)
    res = run_plain("bisect", "A", "B", "model.py:main", cwd=tmp_path)
    assert res.code == 2 and "not in a git repository" in res.stderr


@pytest.mark.slow
def test_ctrl_c_mid_run_leaves_the_checkout_as_it_was(tmp_path: Path) -> None:
    """Ctrl-C to the whole process group while the search runs a commit (GOOD recorded, the
    bisect's own worktree in the middle of ``git bisect``): exit 130, and the user's files,
    branch, index, stash and HEAD are as they were, with no checkout left behind."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    commit(root, "one: the model", {"model.py": light_script()})
    for n in ("two", "three", "four"):  # every commit after GOOD runs until it is stopped
        commit(root, f"{n}: waits", {"model.py": HANGING, "n.txt": n})
    (root / "model.py").write_text(light_script("3.0"))  # uncommitted work, and a stash
    git(root, "stash", "-q")
    (root / "notes.txt").write_text("untracked\n")
    (root / "n.txt").write_text("changed, uncommitted\n")
    before = state(root)
    temp = tmp_path / "temp"
    temp.mkdir()
    code, err = interrupt_when_started(
        ["bisect", "HEAD~3", "HEAD", "model.py:main", "--trace-dir", str(tmp_path / "traces"),
         "--", str(tmp_path / "started.fifo")], root, tmp_path / "started.fifo", temp)
    assert code == 130, err
    assert "Traceback" not in err and "testing" in err
    assert state(root) == before
    assert (root / "n.txt").read_text() == "changed, uncommitted\n"
    assert not list(temp.glob("repro-check-rev-*"))  # every checkout removed


def test_a_good_that_fails_is_exit_3(repo: tuple[Path, list[str]], tmp_path: Path) -> None:
    """GOOD is the broken second commit: its one run fails, nothing is searched."""
    root, _ = repo
    before = state(root)
    broken = run_cli("bisect", "HEAD~3", "HEAD", "model.py:main", tmp=tmp_path, cwd=root)
    assert broken.code == 3, broken.stdout + broken.stderr
    assert broken.report is not None and "cannot run" in (broken.report["error"] or "")
    assert broken.report["bisect"]["tested"] == []
    assert broken.report["bisect"]["runs"] == 1
    assert state(root) == before


@pytest.mark.slow
def test_the_api_returns_the_typed_bisect_and_bad_that_matches_good_is_exit_0(
        repo: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``repro_check.bisect``: the report with its typed part; usage errors raised before any
    run. BAD (a README added) matches GOOD: exit 0, no commit named, two runs, and the summary
    says so with the count and the time (as the command line prints it)."""
    import repro_check

    root, shas = repo
    before = state(root)
    monkeypatch.chdir(root)
    with pytest.raises(UsageError, match="unknown git revision 'nope'"):
        repro_check.bisect("nope", "HEAD", "model.py:main")
    report = repro_check.bisect("HEAD~1", "HEAD", "model.py:main", max_steps=1,
                                trace_dir=str(tmp_path / "traces"))
    assert report.exit_code == 0 and report.bisect is not None
    part = report.bisect
    assert isinstance(part, BisectPart) and part.matches and part.first_bad is None
    assert isinstance(part.bad, BisectCommit) and part.bad.sha == shas[4]
    assert part.bad.subject == "five: a readme" and part.runs == 2
    assert all(isinstance(t, JudgedCommit) for t in part.tested)
    assert [r.steps for r in report.results][-1] == 1
    text = render(report)
    assert "matches GOOD: no commit differs" in text
    assert re.search(r"2 run\(s\) .* in \d+\.\d s", text)  # the count and the time
    assert state(root) == before


@pytest.fixture(scope="module")
def unresolved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Three commits; the second breaks model.py's syntax: TARGET does not resolve there."""
    root = tmp_path_factory.mktemp("unresolved") / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    return root, [commit(root, "one: the model", {"model.py": light_script()}),
                  commit(root, "two: a syntax error", {"model.py": "def main(:\n"}),
                  commit(root, "three: scale the output", {"model.py": light_script("1.001")})]


@pytest.mark.slow
def test_a_commit_where_the_target_does_not_resolve_is_skipped(
        unresolved: tuple[Path, list[str]], tmp_path: Path) -> None:
    """TARGET resolves in the checkout but not at the second commit: git bisect run's skip
    (125), not a usage error of the command. Between it and BAD only skipped commits are left:
    undecided, exit 3, the two named."""
    root, shas = unresolved
    before = state(root)
    res = run_cli("bisect", "HEAD~2", "HEAD", "model.py:main", "--max-steps", "1", tmp=tmp_path,
                  cwd=root)
    assert res.code == 3, res.stdout + res.stderr
    assert res.report is not None
    b = res.report["bisect"]
    assert b["skipped"] == [shas[1]] and set(b["undecided"]) == {shas[1], shas[2]}
    (skipped,) = b["tested"]
    assert skipped["verdict"] == "skip" and "SyntaxError" in skipped["error"]
    assert "does not resolve at this commit: importing model.py failed" in skipped["error"]
    assert f"git bisect skip {shas[1]}" in Path(b["log"]).read_text()  # the log kept
    assert "undecided" in res.stdout and "Traceback" not in res.stderr
    assert state(root) == before


def test_a_good_where_the_target_does_not_resolve_is_exit_3(
        unresolved: tuple[Path, list[str]], tmp_path: Path) -> None:
    root, shas = unresolved
    res = run_cli("bisect", "HEAD~1", "HEAD", "model.py:main", tmp=tmp_path, cwd=root)
    assert res.code == 3, res.stdout + res.stderr
    assert res.report is not None
    assert f"GOOD {shas[1][:12]} cannot run" in res.report["error"]
    assert "importing model.py failed: SyntaxError" in res.report["error"]
    assert res.report["bisect"]["tested"] == [] and res.report["bisect"]["runs"] == 1


def test_the_api_raises_usage_errors_before_any_run(repo: tuple[Path, list[str]],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``repro_check.bisect`` with a revision git does not know: UsageError, the repository
    untouched (the typed report of a real search is asserted in the slow tier)."""
    import repro_check

    root, _ = repo
    before = state(root)
    monkeypatch.chdir(root)
    with pytest.raises(UsageError, match="unknown git revision 'nope'"):
        repro_check.bisect("nope", "HEAD", "model.py:main")
    assert state(root) == before


@pytest.mark.slow
def test_a_commit_that_runs_other_ops_is_said_to_by_its_localization(tmp_path: Path) -> None:
    """The commit scales the output by a tensor it builds (``torch.full(...).relu()``) instead
    of a number: the two probe runs part at op N, which is what the commit's code does, not
    control flow on a value that is not reproducible."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    commit(root, "one: the model", {"model.py": light_script()})
    bad = commit(root, "two: a tensor scale",
                 {"model.py": light_script("torch.full((), 1.001).relu()")})
    res = run_cli("bisect", "HEAD~1", "HEAD", "model.py:main", "--max-steps", "1",
                  tmp=tmp_path / "run", cwd=root)
    assert res.code == 1, res.stdout + res.stderr
    assert res.report is not None
    b = res.report["bisect"]
    assert b["first_bad"]["sha"] == bad and b["step"] == 1
    loc = b["localization"]
    assert loc["found"] and loc["cause"] == "code", loc
    assert loc["detail"].startswith(f"commit {bad[:12]}'s code runs other ops from op "
                                    f"{loc['op_index']} on: {loc['op']} in "), loc
    assert "control flow" not in loc["detail"] and "not reproducible" not in loc["detail"], loc
