"""Each revision runs its own code: the project's import folders are taken from the revision's
checkout (an editable install, ``PYTHONPATH`` or a link tree pointing at the working tree is
redirected), and a run that still loaded a module from the working tree is never compared."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from repro_check.child.process import isolation
from repro_check.run import revisions
from repro_check.trace.protocol import REVISION_VAR

from ..conftest import cli_env, run_cli
from ..git_repos import commit, git

TRAIN = '''import torch

LR = {lr}


def main():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for _ in range(3):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {{"loss": loss.item()}}
'''


def src_layout(repo: Path) -> list[str]:
    """A src-layout project whose second commit changes the learning rate from 0.1 to 0.5."""
    (repo / "src" / "toyproj").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    return [commit(repo, "lr 0.1", {"src/toyproj/__init__.py": "",
                                    "src/toyproj/train.py": TRAIN.format(lr="0.1")}),
            commit(repo, "lr 0.5", {"src/toyproj/train.py": TRAIN.format(lr="0.5")})]


# ---- where this interpreter imports the project from ------------------------------------------

def test_path_entries_finder_mappings_and_link_trees_in_the_repository_are_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "repo"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "__init__.py").write_text("")
    (root / "flat" / "other").mkdir(parents=True)
    (root / ".venv" / "lib").mkdir(parents=True)
    tree = root / "build" / "__editable__.pkg-1.0" / "pkg"  # setuptools' strict mode
    tree.mkdir(parents=True)
    (tree / "__init__.py").symlink_to(root / "src" / "pkg" / "__init__.py")
    finder = types.ModuleType("__editable___flat_1_0_finder")
    finder.MAPPING = {"other": str(root / "flat" / "other")}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, finder.__name__, finder)
    monkeypatch.setattr(sys, "path", [*sys.path, str(root / "src"), str(tree.parent),
                                      str(tmp_path / "elsewhere")])
    monkeypatch.setattr(sys, "prefix", str(root / ".venv"))  # a venv inside the repository
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root / ".venv" / "lib"),
                                                      str(tmp_path / "kept")]))
    found = revisions.import_folders(root)
    assert Path("src") in found and Path("flat") in found
    assert Path("build/__editable__.pkg-1.0") in found
    assert not [f for f in found if f.parts[:1] == (".venv",)]
    checkout = tmp_path / "checkout"
    env = revisions.isolating_environment(root, checkout, {})
    paths = env["PYTHONPATH"].split(os.pathsep)
    assert paths[0] == str(checkout / found[0]) and str(checkout / "src") in paths
    assert paths[-1] == str(tmp_path / "kept")  # outside the repository: kept, last
    assert not [p for p in paths if p.startswith(str(root))]
    assert env[REVISION_VAR] == os.pathsep.join([str(root), str(checkout.resolve())])


def test_modules_loaded_from_the_working_tree_are_named_in_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, checkout = tmp_path / "repo", tmp_path / "checkout"
    for folder, name in ((root, "leaked_mod_rc"), (checkout, "checked_out_mod_rc")):
        folder.mkdir()
        (folder / f"{name}.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.syspath_prepend(str(checkout))
    import checked_out_mod_rc  # noqa: F401
    import leaked_mod_rc  # noqa: F401

    try:
        assert [n for n, _ in isolation.foreign_modules(root.resolve(), checkout.resolve())] \
            == ["leaked_mod_rc"]
        said: list[dict[str, Any]] = []
        monkeypatch.setenv(REVISION_VAR, os.pathsep.join([str(root), str(checkout)]))
        isolation.check(said.append)
        assert len(said) == 1 and said[0]["incomplete"] is True
        assert "leaked_mod_rc" in said[0]["warning"] and "not from the revision" in said[0]["warning"]
        monkeypatch.delenv(REVISION_VAR)
        isolation.check(said.append)  # not a run at a revision: nothing checked
        assert len(said) == 1
    finally:
        for name in ("leaked_mod_rc", "checked_out_mod_rc"):
            sys.modules.pop(name, None)


# ---- end to end --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    repo = tmp_path_factory.mktemp("isolation") / "proj"
    return repo, src_layout(repo)


@pytest.mark.slow
def test_each_revision_imports_its_own_code_from_an_installed_src_layout(
        project: tuple[Path, list[str]], tmp_path: Path) -> None:
    """The project's ``src`` is on every process's path, as an editable install's ``.pth`` puts
    it: rev=A,B still runs each revision's learning rate (it said bit-identical)."""
    repo, (a, b) = project
    env = cli_env(PYTHONPATH=os.pathsep.join([str(repo / "src"), cli_env()["PYTHONPATH"]]))
    out = tmp_path / "report.json"
    # a fresh command line: its own interpreter finds the project through PYTHONPATH
    proc = subprocess.run([sys.executable, "-m", "repro_check", "toyproj.train:main",
                           "--across", f"rev={a[:10]},{b[:10]}", "--json", str(out)],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    report: Any = json.loads(out.read_text()) if out.exists() else None
    assert proc.returncode == 1 and report is not None, proc.stdout + proc.stderr
    assert report["first_divergent_step"] is not None and not report["incomplete"]
    losses = [m.get("loss") for m in report["metrics"]]
    assert losses[0] != losses[1]


@pytest.mark.slow
def test_a_revision_that_still_loads_the_working_trees_code_is_never_compared(
        project: tuple[Path, list[str]], tmp_path: Path) -> None:
    """A start-up hook that loads the working tree's module by its path cannot be redirected:
    the runs say so, and the check is INCOMPLETE (exit 1), never bit-identical."""
    repo, (a, _) = project
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('toy_leak', {str(repo / 'src/toyproj/train.py')!r})\n"
        "import sys\nsys.modules['toy_leak'] = m = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(m)\n")
    env = cli_env(PYTHONPATH=os.pathsep.join([str(hook), cli_env()["PYTHONPATH"]]))
    res = run_cli("toyproj.train:main", "--across", f"rev={a[:10]},{a[:10]}~0", tmp=tmp_path,
                  cwd=repo / "src", env=env)
    report: Any = res.report
    assert res.code == 1 and report is not None, res.stdout + res.stderr
    assert report["incomplete"] and "toy_leak" in report["incomplete"][0]
    assert "INCOMPLETE" in res.stdout


# ---- a run's path to this package ---------------------------------------------------------------

@pytest.mark.slow
def test_a_run_imports_this_package_and_nothing_else_from_where_it_is_installed(
        tmp_path: Path) -> None:
    """repro-check imported from a folder that holds other modules too (a site-packages): the
    runs can import repro_check, but not the other modules (an interpreter of ``--across
    python=`` imported the first interpreter's libraries, its torch included)."""
    site = tmp_path / "site-packages"
    site.mkdir()
    shutil.copytree(Path(revisions.__file__).resolve().parents[1], site / "repro_check",
                    ignore=shutil.ignore_patterns("__pycache__"))  # installed there, as pip does
    (site / "leakmod_rc.py").write_text("X = 1\n")
    (tmp_path / "probe.py").write_text(
        "import torch\n"
        "try:\n    import leakmod_rc\n    leaked = 1\nexcept ImportError:\n    leaked = 0\n"
        "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(3):\n    opt.zero_grad()\n    model(torch.ones(1, 2)).pow(2).sum().backward()\n"
        "    opt.step()\n"
        "print(f'leaked: {leaked}')\n")
    env = {k: v for k, v in cli_env().items() if k != "PYTHONPATH"}
    out = tmp_path / "report.json"
    # installed there: on sys.path as a site folder is, not through PYTHONPATH (which the runs
    # inherit, as the user set it)
    start = (f"import sys, runpy; sys.path.insert(0, {str(site)!r}); sys.argv[0] = 'repro-check'; "
             "runpy.run_module('repro_check', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", start, "probe.py", "--json", str(out),
                           "--metric", r"leaked=leaked: (\d+)"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    metrics = json.loads(out.read_text())["metrics"]
    assert [m["printed:leaked"] for m in metrics] == [0, 0]
