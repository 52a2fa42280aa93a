"""``--across`` workers, start, compile and rev: what is checked before any run, what each cell
imposes, the checkouts of revisions (the user's checkout untouched), and the batches compared
across worker counts (one invocation each for an unseeded and a seeded augmentation).

The targets that run train with a plain optimizer instead of torch.optim's (which imports
torch._dynamo, seconds a run): tests/run/across_light_targets.py."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from repro_check.errors import UsageError
from repro_check.report.model import AcrossCell, AcrossPart
from repro_check.run import axes as ax
from repro_check.run import revisions
from repro_check.diagnose.localize import compare
from repro_check.run.runner import COMPILE_CACHE_VARS
from repro_check.commands.across import compile_detail, compile_warning, price_of_compile, unmatched
from repro_check.targets import parse
from repro_check.trace.protocol import RunConfig

from ..conftest import CliResult, run_cli, run_plain
from ..git_repos import (HANGING, commit, five_commits, git, interrupt_when_started, script,
                         state)
from .across_light_targets import PLAIN_SGD, light, light_fixture, light_five_commits, light_script


def test_the_light_targets_swap_only_the_optimizer() -> None:
    """The targets these tests run are the fixtures' scripts with one optimizer made PlainSGD or
    PlainAdam, whose steps are SGD's (p - lr * grad) and Adam's (about p - lr * sign(grad) at
    the first step)."""
    torch = pytest.importorskip("torch")
    text = light("import torch\nopt = torch.optim.Adam(m.parameters(), lr=0.1)\n")
    assert text.startswith(PLAIN_SGD) and "opt = PlainAdam(m.parameters(), lr=0.1)" in text
    assert "PlainSGD(model.parameters(), lr=0.1)" in light_script("1.001")
    assert "* 1.001" in light_script("1.001")
    with pytest.raises(AssertionError, match="found 0"):
        light("opt = make_optimizer()\n")
    space: dict[str, Any] = {}
    exec(compile(PLAIN_SGD, "plain_sgd", "exec"), space)
    for name, expected in (("PlainSGD", [1.0 - 0.5 * 3.0, -2.0 + 0.5 * 4.0]),
                           ("PlainAdam", [1.0 - 0.5, -2.0 + 0.5])):
        w = torch.tensor([1.0, -2.0], requires_grad=True)
        opt = space[name]([w], lr=0.5)
        assert isinstance(opt, torch.optim.Optimizer)
        (w * torch.tensor([3.0, -4.0])).sum().backward()
        opt.step()
        assert w.tolist() == pytest.approx(expected), name
        opt.zero_grad()
        assert w.grad is None


@pytest.mark.parametrize("text, says", [
    ("workers=0,-1", "whole numbers from 0, got '-1'"),
    ("workers=0,two", "whole numbers from 0, got 'two'"),
    ("workers=0,1.5", "whole numbers from 0, got '1.5'"),
    ("start=fork,thread", "'thread' is not one of fork, spawn, forkserver"),
    ("compile=on,maybe", "'maybe' is not one of on, off"),
    ("rev=HEAD", "at least two values"),
    ("nproc=1,0", "whole numbers from 1 to 64, got '0'"),
    ("nproc=1,65", "whole numbers from 1 to 64, got '65'"),
    ("nproc=1,two", "whole numbers from 1 to 64, got 'two'"),
    ("compile-cache=warm,cold", "compile-cache=cold,warm"),
    ("compile-cache=cold,hot", "compile-cache=cold,warm"),
    ("compile-cache=cold,warm,warm", "compile-cache=cold,warm"),
])
def test_malformed_axis_is_one_usage_error(text: str, says: str) -> None:
    with pytest.raises(UsageError, match=says.replace("(", r"\(").replace(".", r"\.")):
        ax.parse_axis(text)


def test_cells_impose_workers_start_and_compile() -> None:
    cells = ax.grid(ax.parse_axes(["workers=0,2", "start=fork,spawn", "compile=off,on"]))
    assert len(cells) == 8
    first, last = cells[0], cells[-1]
    # what reaches the run through its configuration (RunConfig's fields)
    assert first.overrides() == {"num_workers": 0, "start_method": "fork", "compile": False}
    assert last.overrides() == {"num_workers": 2, "start_method": "spawn", "compile": True}
    assert first.environment() == {} and last.environment() == {}
    base = RunConfig(run=1, target=parse("t.py"))
    told = base.replace(**first.overrides())
    assert RunConfig.from_json(told.to_json()) == told


def test_compile_cache_may_not_be_set_twice() -> None:
    for var in COMPILE_CACHE_VARS:
        with pytest.raises(UsageError, match=f"env:{var} and compile-cache= both"):
            ax.parse_axes(["compile-cache=cold,warm", f"env:{var}=a,b"])
    assert ax.CACHE_VARIABLES == COMPILE_CACHE_VARS  # the axis sets what every run gets


def test_each_warm_cell_has_the_cold_twin_before_it() -> None:
    cells = ax.grid(ax.parse_axes(["threads=1,2", "compile-cache=cold,warm"]))
    assert [c.label for c in cells] == [
        "threads=1, compile-cache=cold", "threads=1, compile-cache=warm",
        "threads=2, compile-cache=cold", "threads=2, compile-cache=warm"]
    assert [c.warm for c in cells] == [False, True, False, True]
    assert [ax.cold_twin(c, cells) for c in cells] == [None, cells[0], None, cells[2]]
    # the axis imposes nothing inside the run: only where its caches are (the across plan)
    assert all(c.overrides() == {} and "compile-cache" not in str(c.environment())
               for c in cells)


def test_compile_on_a_script_that_never_compiles_is_a_warning(tmp_path: Path) -> None:
    plain = tmp_path / "plain.py"
    plain.write_text("def main():\n    pass\n")
    axes = ax.parse_axes(["compile=off,on"])
    assert "never calls torch.compile" in (compile_warning(axes, parse(str(plain))) or "")
    compiled = tmp_path / "compiled.py"
    compiled.write_text("import torch\nf = torch.compile(lambda x: x)\n")
    assert compile_warning(axes, parse(str(compiled))) is None
    assert compile_warning(ax.parse_axes(["workers=0,1"]), parse(str(plain))) is None
    # the word alone is not a compile: a regular expression, a comment, Python's own compile()
    regex = tmp_path / "regex.py"
    regex.write_text("import re\n# torch.compile is not used\nPAT = re.compile('x')\n"
                     "code = compile('1', 'f', 'eval')\n")
    assert "never calls torch.compile" in (compile_warning(axes, parse(str(regex))) or "")
    for text in ("from torch import compile\nf = compile(g)\n",
                 "import torch\n@torch.compile\ndef f(x):\n    return x\n",
                 "model.compile()\n"):
        (tmp_path / "other.py").write_text(text)
        assert compile_warning(axes, parse(str(tmp_path / "other.py"))) is None, text


def test_price_of_compile_pairs_each_on_with_its_off() -> None:
    cells = ax.grid(ax.parse_axes(["compile=off,on"]))
    infos = [AcrossCell(index=c.index, label=c.label, settings=c.settings_dict(), runs=[c.index],
                        steps=4, seconds=s, loop_seconds=s / 2, versions={})
             for c, s in zip(cells, (4.0, 8.0))]
    (row,) = price_of_compile(cells, infos)
    assert (row.on, row.off) == ("compile=on", "compile=off")
    assert row.ratio == pytest.approx(2.0)
    assert (row.on_run_seconds_per_step, row.off_run_seconds_per_step) == (2.0, 1.0)
    part = AcrossPart(axes=[("compile", ["off", "on"])], cells=infos, pairs=[],
                      compile_price=[row])
    assert part.to_dict()["across"]["price_of_compile"] == [row.to_dict()]
    assert row.to_dict()["on_run_seconds_per_step"] == 2.0


def test_eager_and_compiled_op_sequences_that_part_name_no_culprit_op() -> None:
    def op(name: str, ins: list[str], out: list[str]) -> dict[str, Any]:
        return {"k": "op", "ph": "forward", "m": "net", "op": name, "in": ins, "out": out}

    eager = [op("aten::mm", ["x", "w"], ["y"]), op("aten::tanh", ["y"], ["t"])]
    fused = [op("aten::mm", ["x", "w"], ["y"]), op("inductor::cpp_fused_tanh", ["y"], ["t2"])]
    loc = compare(1, eager, fused)
    assert unmatched(loc)
    assert "cannot be matched from op 1 on" in compile_detail(loc, 1)
    same_ops = [op("aten::mm", ["x", "w"], ["y"]), op("aten::tanh", ["y"], ["t2"])]
    assert not unmatched(compare(1, eager, same_ops))  # one op, other bits: a culprit


# ---- revisions: checkouts that never touch the user's -----------------------------------------
def test_checkouts_leave_the_checkout_alone_and_copy_uncommitted_work(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shas = five_commits(root)
    (root / "model.py").write_text(script("2.0"))  # uncommitted
    (root / "new.py").write_text("x = 1\n")  # untracked
    git(root, "stash", "list")
    before = state(root)
    assert revisions.repository(root / ".") == root.resolve()
    assert revisions.resolve(root, "HEAD~1") == shas[3]
    with pytest.raises(UsageError, match="unknown git revision 'v9'"):
        revisions.resolve(root, "v9")
    with revisions.Checkouts(root) as co:
        old = co.checkout(shas[0])
        now = co.checkout(revisions.WORKTREE)
        assert (old / "model.py").read_text() == script()
        assert (now / "model.py").read_text() == script("2.0") and (now / "new.py").exists()
        assert state(root)["status"] == before["status"]
    assert not old.exists() and not now.exists()
    assert state(root) == before


@pytest.fixture(scope="module")
def revs(tmp_path_factory: pytest.TempPathFactory) -> tuple[CliResult, dict[str, str],
                                                          dict[str, str], list[str]]:
    """rev=HEAD~1,HEAD,WORKTREE in a repository whose last commit changes nothing and whose
    working tree scales the output (uncommitted): 3 runs and 2 probe runs."""
    root = tmp_path_factory.mktemp("revs") / "repo"
    shas = light_five_commits(root)
    (root / "model.py").write_text(light_script("1.002"))
    before = state(root)
    res = run_cli("model.py:main", "--across", "rev=HEAD~1,HEAD,WORKTREE",
                  tmp=tmp_path_factory.mktemp("revs-run"), cwd=root)
    return res, before, state(root), shas


@pytest.mark.slow
def test_rev_compares_revisions_and_the_uncommitted_change(revs: tuple[CliResult, dict[str, str], dict[str, str], list[str]]) -> None:
    res, before, after, shas = revs
    assert res.code == 1, res.stdout + res.stderr
    assert res.report is not None
    across = res.report["across"]
    pairs = {p["b"]: p for p in across["pairs"]}
    assert pairs["rev=HEAD"]["bit_identical"] is True  # a readme changes no numbers
    work = pairs["rev=WORKTREE"]
    assert (work["first_divergent_step"], work["signal"]) == (1, "loss")
    assert (work["culprit_op"], work["culprit"]) == ("aten::mul", "Net")
    # two revisions run different code: said of the working tree's code, no seeding advice
    loc = work["localization"]
    assert loc["cause"] == "code" and "rev=WORKTREE's code passes another value" in loc["detail"]
    assert "seed what" not in loc["detail"], loc
    assert work["drift"] is not None
    assert across["revisions"]["HEAD~1"]["sha"] == shas[3]
    assert across["revisions"]["HEAD"]["subject"] == "five: a readme"
    assert "Revisions" in res.stdout and shas[3][:12] in res.stdout
    assert "WORKTREE: the working tree, uncommitted changes included" in res.stdout
    assert before == after


def test_rev_outside_a_repository_and_unknown_revisions_are_usage_errors(tmp_path: Path) -> None:
    outside = tmp_path / "plain"
    outside.mkdir()
    (outside / "t.py").write_text("def main():\n    pass\n")
    res = run_plain("t.py:main", "--across", "rev=HEAD,WORKTREE", cwd=outside)
    assert res.code == 2 and "not in a git repository" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    commit(root, "one", {"t.py": "def main():\n    pass\n"})
    res = run_plain("t.py:main", "--across", "rev=HEAD,nope", cwd=root)
    assert res.code == 2 and "unknown git revision 'nope'" in res.stderr
    # a TARGET only the working tree has (untracked) names the revision that lacks it
    (root / "u.py").write_text("def main():\n    pass\n")
    res = run_plain("u.py:main", "--across", "rev=HEAD,WORKTREE", cwd=root)
    lines = res.stderr.strip().splitlines()
    assert res.code == 2 and len(lines) == 1, res.stderr
    assert "--across rev=HEAD: u.py does not exist there" in lines[0]
    assert not (root / ".repro-check").exists()  # nothing ran
    assert git(root, "worktree", "list").count("\n") == 1  # the checkout removed


def test_ctrl_c_mid_run_of_a_revision_leaves_the_checkout_as_it_was(tmp_path: Path) -> None:
    """rev=HEAD,WORKTREE, Ctrl-C to the whole process group while the working tree's run goes:
    exit 130, the user's files, branch, index, stash and HEAD as they were, no checkout left."""
    root = tmp_path / "repo"
    shas = light_five_commits(root)
    git(root, "branch", "-q", "topic", shas[2])
    (root / "model.py").write_text(HANGING)  # uncommitted: the WORKTREE side waits
    (root / "notes.txt").write_text("untracked\n")
    before = state(root)
    temp = tmp_path / "temp"
    temp.mkdir()
    code, err = interrupt_when_started(
        ["model.py:main", "--across", "rev=HEAD,WORKTREE", "--trace-dir",
         str(tmp_path / "traces"), "--", str(tmp_path / "started.fifo")],
        root, tmp_path / "started.fifo", temp)
    assert code == 130, err
    assert "Traceback" not in err
    assert state(root) == before and (root / "model.py").read_text() == HANGING
    assert not list(temp.glob("repro-check-rev-*"))  # every checkout removed


@pytest.mark.parametrize("axis, says", [
    ("workers=0,-1", "worker counts are whole numbers from 0, got '-1'"),
    ("rev=HEAD,nope", "unknown git revision 'nope'"),
])
def test_bad_values_of_the_new_axes_are_one_line_and_exit_2_before_any_run(
        tmp_path: Path, axis: str, says: str) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    commit(root, "one", {"t.py": "def main():\n    pass\n"})
    res = run_plain("t.py:main", "--across", axis, cwd=root)
    lines = res.stderr.strip().splitlines()
    assert res.code == 2 and len(lines) == 1 and says in lines[0], res.stderr
    assert not (root / ".repro-check").exists()  # nothing ran


# ---- workers: batches compared across worker counts ---------------------------------------------
@pytest.fixture(scope="module")
def loaders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fixtures/loaders.py with a plain optimizer, in a folder of its own (run from there)."""
    return light_fixture("loaders.py", tmp_path_factory.mktemp("loaders")).parent


@pytest.fixture(scope="module")
def unseeded(loaders: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[CliResult, Path]:
    tmp = tmp_path_factory.mktemp("workers-global")
    return run_cli("loaders.py:main", "--across", "workers=0,2", "--report",
                   str(tmp / "r.html"), "--", "--augment", "global", "--steps", "3",
                   tmp=tmp, cwd=loaders), tmp / "r.html"


@pytest.fixture(scope="module")
def seeded(loaders: Path, tmp_path_factory: pytest.TempPathFactory) -> CliResult:
    """The seeded augmentation, also across start methods: workers=0,2 x start=fork,spawn."""
    return run_cli("loaders.py:main", "--across", "workers=0,2", "--across", "start=fork,spawn",
                   "--", "--augment", "indexed", "--steps", "3",
                   tmp=tmp_path_factory.mktemp("workers-indexed"), cwd=loaders)


def test_a_worker_side_draw_from_an_unseeded_source_differs_across_worker_counts(
        unseeded: tuple[CliResult, Path]) -> None:
    res, html = unseeded
    assert res.code == 1, res.stdout + res.stderr
    assert res.report is not None
    (pair,) = res.report["across"]["pairs"]
    assert pair["b"] == "workers=2" and pair["identical"] is False
    assert pair["batches_identical"] is False and pair["first_batch_step"] == 1
    assert pair["worker_draw"] == ["Python's random"]
    note = pair["loading_note"]
    assert "the data loading (the Dataset or its collate function) draws from Python's random" in note
    assert ("draws from Python's random: in the main process with workers=0; in the workers "
            "with workers=2.") in note
    assert "the batches differ from step 1 with workers=2" in " ".join(res.stdout.split())
    assert 'class="loading"' in html.read_text()


@pytest.fixture(scope="module")
def in_workers(loaders: Path, tmp_path_factory: pytest.TempPathFactory) -> CliResult:
    """The unseeded augmentation with workers on both sides: workers=1,2."""
    return run_cli("loaders.py:main", "--across", "workers=1,2", "--", "--augment", "global",
                   "--steps", "3", tmp=tmp_path_factory.mktemp("workers-both"), cwd=loaders)


@pytest.mark.slow
def test_a_draw_made_only_inside_the_workers_is_named(in_workers: CliResult) -> None:
    """No stream of the main process differs (both sides draw in their workers), yet the
    report names the stream the workers draw from: each worker's fetches are watched. Worker 0
    fetches the first batch with either count (its stream seeded alike), so the batches part
    at step 2, where the second worker's first batch comes."""
    res = in_workers
    assert res.code == 1, res.stdout + res.stderr
    assert res.report is not None
    (pair,) = res.report["across"]["pairs"]
    assert pair["batches_identical"] is False and pair["first_batch_step"] == 2
    assert pair["worker_draw"] == ["Python's random"]
    assert ("draws from Python's random: in the workers with workers=1; in the workers with "
            "workers=2.") in pair["loading_note"]


@pytest.mark.slow
def test_a_seeded_augmentation_gives_the_same_batches_for_any_worker_count(seeded: CliResult) -> None:
    res = seeded
    assert res.code == 0, res.stdout + res.stderr
    assert res.report is not None
    pairs = {p["b"]: p for p in res.report["across"]["pairs"]}
    assert set(pairs) == {"workers=0, start=spawn", "workers=2, start=fork",
                          "workers=2, start=spawn"}
    for pair in pairs.values():
        assert pair["bit_identical"] is True and pair["batches_identical"] is True
        assert pair["worker_draw"] == [] and "identical at every one of 3 steps" in pair["loading_note"]
    assert "start=spawn" in pairs["workers=2, start=spawn"]["loading_note"]


# ---- compile: eager against compiled, run to run ---------------------------------------------------
def inductor_compiles() -> str | None:
    """Why torch.compile cannot work here (None: it can): inductor on the CPU compiles C++."""
    if shutil.which(os.environ.get("CXX", "g++")) is None and shutil.which("c++") is None:
        return "torch.compile on the CPU needs a C++ compiler (g++), and none is installed"
    return None


@pytest.mark.slow
@pytest.mark.skipif(inductor_compiles() is not None, reason=str(inductor_compiles()))
def test_a_deterministic_compiled_model_repeats_and_is_compared_with_eager(tmp_path: Path) -> None:
    """compile=off,on with two runs each: each environment repeats run to run, eager and
    compiled are compared, and every run compiled in cache folders of its own, removed after
    (minutes on a loaded CPU: inductor compiles C++ in each compiled run)."""
    caches = tmp_path / "caches.jsonl"
    res = run_cli("compiled.py:main", "--across", "compile=off,on", "--runs", "2", "--",
                  "--steps", "2", "--deterministic", "--caches", str(caches), tmp=tmp_path,
                  timeout=1500)
    assert res.code in (0, 1), res.stdout + res.stderr
    assert res.report is not None
    across = res.report["across"]
    assert [c["reproducible"] for c in across["cells"]] == [True, True]  # run to run
    (pair,) = across["pairs"]
    assert pair["a"] == "compile=off" and pair["b"] == "compile=on"
    if not pair["identical"]:  # the compiled kernels are not seen op by op: said plainly
        loc = pair["localization"] or {}
        assert pair["culprit_op"] is None and not loc.get("found"), loc
        detail = str(loc.get("detail"))
        assert "cannot be matched" in detail and "no single op can be named" in detail
        # the compiled model ran compiled in its probe run, and is compared as a whole
        out = loc["output_difference"]
        assert out["module"] == "Sequential" and out["compiled"] and out["shape"] == [32, 1]
        if out["largest"] == 0:  # forward agrees: the first gradient that differs is named
            grad = loc["gradient_difference"]
            assert grad["module"].startswith("Sequential.") and grad["largest"] > 0
            assert f"first parameter whose gradient differs is {grad['module']!r}" in detail
        else:
            assert "the first module whose output differs is 'Sequential'" in detail
    (price,) = across["price_of_compile"]
    assert price["on_run_seconds_per_step"] > 0 and "Price of torch.compile" in res.stdout
    runs = [json.loads(line) for line in caches.read_text().splitlines()]
    compiled = [r for r in runs if r["compiled"]]
    assert len(compiled) >= 2 and len(runs) - len(compiled) >= 2  # probe runs may add some
    assert all(r["TORCHINDUCTOR_CACHE_DIR:filled"] for r in compiled)  # inductor wrote there
    folders = [r[v] for r in runs for v in COMPILE_CACHE_VARS]
    assert all(folders) and len(set(folders)) == len(folders)  # no run shares one
    assert not any(Path(f).exists() for f in folders)  # removed when each run ended


@pytest.mark.slow
@pytest.mark.skipif(inductor_compiles() is not None, reason=str(inductor_compiles()))
def test_warm_runs_start_from_the_caches_the_first_cold_run_filled(tmp_path: Path) -> None:
    """compile-cache=cold,warm with two runs each: the first cold run fills the shared caches
    (inductor misses), the other cold run compiles in caches of its own, both warm runs start
    from the filled caches and hit them; the shared folder is gone afterwards."""
    caches = tmp_path / "caches.jsonl"
    res = run_cli("compiled.py:main", "--across", "compile-cache=cold,warm", "--runs", "2",
                  "--", "--steps", "2", "--deterministic", "--caches", str(caches),
                  tmp=tmp_path, timeout=1500)
    assert res.code in (0, 1), res.stdout + res.stderr
    assert res.report is not None
    (pair,) = res.report["across"]["pairs"]
    assert pair["a"] == "compile-cache=cold" and pair["b"] == "compile-cache=warm"
    runs = [json.loads(line) for line in caches.read_text().splitlines()]
    assert len(runs) >= 4  # probe runs may add some
    var = "TORCHINDUCTOR_CACHE_DIR"
    warm = [r for r in runs if r[f"{var}:filled at start"]]
    cold = [r for r in runs if not r[f"{var}:filled at start"]]
    assert len(warm) >= 2 and len(cold) >= 2
    assert all(r["fxgraph_cache_hit"] > 0 and r["fxgraph_cache_miss"] == 0 for r in warm)
    assert all(r["fxgraph_cache_hit"] == 0 for r in cold)
    shared = {r[var] for r in warm}
    assert len(shared) == 1 and shared <= {r[var] for r in cold}  # one cold run filled it
    assert not any(Path(r[v]).exists() for r in runs for v in COMPILE_CACHE_VARS)
    said = " ".join(res.report["warnings"])
    assert "compile-cache=warm started from the compile caches compile-cache=cold filled" in said


CACHES = """
import json, os, sys

def main():
    with open(sys.argv[1], "a") as fh:
        fh.write(json.dumps({v: os.environ.get(v) for v in sys.argv[2:]}) + "\\n")
    return {"x": 1.0}
"""


@pytest.mark.slow
def test_compile_on_a_script_that_never_compiles_runs_with_a_warning_each_run_in_cache_folders_of_its_own(
        tmp_path: Path) -> None:
    """compile=off,on on a script that never compiles: warned before the runs, and run. Each of
    its two runs (one an environment) is given compile cache folders of its own, removed after:
    the script writes down the cache variables it sees."""
    script_path = tmp_path / "caches.py"
    script_path.write_text(CACHES)
    seen = tmp_path / "seen.jsonl"
    res = run_cli(f"{script_path}:main", "--across", "compile=off,on", "--", str(seen),
                  *COMPILE_CACHE_VARS, tmp=tmp_path)
    assert res.code == 0, res.stdout + res.stderr
    assert res.report is not None
    assert any("never calls torch.compile" in w for w in res.report["warnings"])
    assert "never calls torch.compile" in " ".join(res.stderr.split())  # said before the runs
    assert res.stderr.index("warning:") < res.stderr.index("started")
    runs = [json.loads(line) for line in seen.read_text().splitlines()]
    assert len(runs) == 2
    folders = [r[v] for r in runs for v in COMPILE_CACHE_VARS]
    assert all(folders) and len(set(folders)) == 4  # none shared between runs or tools
    assert not any(Path(f).exists() for f in folders)  # removed when the run ended
