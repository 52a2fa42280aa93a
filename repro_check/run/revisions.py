"""Runs of the target at other git revisions (``--across rev=A,B``, ``bisect``), the user's checkout
untouched.

Each revision is checked out with ``git worktree add --detach`` into a temporary folder: git
writes only that folder and its own bookkeeping under ``.git/worktrees/``, never the user's
working tree, index, HEAD, branch or stash. ``WORKTREE`` stands for the working tree as it is,
uncommitted changes included: its files (tracked and untracked, less the ignored ones) are
copied into a temporary folder. Every folder is removed, and git's record of it pruned, when the
:class:`Checkouts` is closed (a ``finally``: also on Ctrl-C and on errors).

A run at a revision starts in the folder of the checkout that matches the user's current folder,
so a relative TARGET and the paths the script opens name that revision's files.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from repro_check import targets
from repro_check.errors import TargetNotFound, UsageError
from repro_check.trace.protocol import REVISION_VAR

if TYPE_CHECKING:
    from repro_check.run.runner import RunSpec

#: the revision that stands for the working tree as it is, uncommitted changes included
WORKTREE = "WORKTREE"

#: seconds a git command may take
GIT_TIMEOUT = 300.0
#: variables that would point git at another repository or index than the one asked
_GIT_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
             "GIT_COMMON_DIR", "GIT_PREFIX")


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_VARS}
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


def git(root: str | os.PathLike[str], *args: str, check: bool = True) -> str:
    """``git -C root ARGS``'s output; a failure is a :class:`UsageError` with git's words."""
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              env=git_env(), timeout=GIT_TIMEOUT, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise UsageError("git is not installed (needed for rev= and bisect)") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"git {' '.join(args)} did not finish within {GIT_TIMEOUT:g} s") \
            from None
    if check and done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise UsageError(f"git {' '.join(args[:2])}: {said}")
    return done.stdout


def repository(folder: str | os.PathLike[str] | None = None) -> Path:
    """The top folder of the git repository holding ``folder`` (the current one)."""
    where = Path(folder or os.getcwd())
    try:
        done = subprocess.run(["git", "-C", str(where), "rev-parse", "--show-toplevel"],
                              capture_output=True, text=True, env=git_env(),
                              timeout=GIT_TIMEOUT, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise UsageError("git is not installed (needed for rev= and bisect)") from None
    except subprocess.TimeoutExpired:
        raise UsageError("git rev-parse did not answer") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise UsageError(f"{where} is not in a git repository (rev= and bisect run the target "
                         "at git revisions)")
    return Path(done.stdout.strip()).resolve()


def resolve(root: Path, rev: str) -> str:
    """The commit ``rev`` names (a full hash), or :data:`WORKTREE`; an unknown one is a usage
    error."""
    if rev == WORKTREE:
        return WORKTREE
    if rev.startswith("-"):
        raise UsageError(f"{rev!r} is not a git revision")
    out = git(root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}",
              check=False).strip()
    if not out:
        raise UsageError(f"unknown git revision {rev!r} in {root}")
    return out


@dataclasses.dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    date: str
    author: str

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


def describe(root: Path, sha: str) -> Commit:
    """A commit's hash, subject, author date (ISO 8601) and author."""
    if sha == WORKTREE:
        return Commit(WORKTREE, "the working tree, uncommitted changes included", "", "")
    out = git(root, "log", "-1", "--format=%H%x00%s%x00%aI%x00%an", sha, "--")
    parts = (out.rstrip("\n").split("\x00") + ["", "", "", ""])[:4]
    return Commit(*parts)


class Checkouts:
    """Temporary checkouts of revisions of the repository at ``root``; :meth:`close` removes
    them all (use as a context manager)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.base = Path(tempfile.mkdtemp(prefix="repro-check-rev-"))
        self.folders: dict[str, Path] = {}
        self.added: list[Path] = []

    def __enter__(self) -> Checkouts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def checkout(self, sha: str) -> Path:
        """The folder of revision ``sha`` (a full hash or WORKTREE), made on first use."""
        if sha in self.folders:
            return self.folders[sha]
        folder = self.base / (sha[:12] if sha != WORKTREE else "worktree")
        if sha == WORKTREE:
            copy_working_tree(self.root, folder)
        else:
            self.added.append(folder)
            git(self.root, "worktree", "add", "--detach", "--quiet", str(folder), sha)
        self.folders[sha] = folder
        return folder

    def close(self) -> None:
        for folder in self.added:
            git(self.root, "worktree", "remove", "--force", str(folder), check=False)
        shutil.rmtree(self.base, ignore_errors=True)
        if self.added:
            git(self.root, "worktree", "prune", check=False)
        self.added.clear()
        self.folders.clear()


def copy_working_tree(root: Path, folder: Path) -> None:
    """The working tree's files as they are (tracked and untracked, not ignored) into ``folder``."""
    listed = git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    folder.mkdir(parents=True, exist_ok=True)
    for name in sorted(set(filter(None, listed.split("\x00")))):
        src = root / name
        if not os.path.lexists(src) or src.is_dir() and not src.is_symlink():
            continue  # deleted, or a submodule
        dst = folder / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst, follow_symlinks=False)


def relocate(spec: RunSpec, root: Path, checkout: Path, cwd: str | None = None) -> RunSpec:
    """``spec`` run from ``checkout``: in its folder matching the current one, with an absolute
    TARGET inside the repository pointing at the checkout's file."""
    here = Path(cwd or os.getcwd()).resolve()
    try:
        rel = here.relative_to(root)
    except ValueError:
        raise UsageError(f"the current folder {here} is outside the repository {root}") from None
    target = spec.target
    if target.path is not None:
        try:
            inside = (here / target.path).resolve().relative_to(root)
        except ValueError:
            raise UsageError(f"TARGET {target.path} is outside the repository {root}: "
                             "another revision cannot change it") from None
        if os.path.isabs(target.path):
            target = dataclasses.replace(target, path=str(checkout / inside))
    env = {**spec.extra_env, **isolating_environment(root, checkout, spec.extra_env)}
    return dataclasses.replace(spec, told=spec.told.replace(target=target),
                               cwd=str(checkout / rel), extra_env=env)


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _installed_here() -> list[Path]:
    """Where this interpreter's own files are (a virtual environment inside the repository is
    not the project's code)."""
    return [Path(p).resolve() for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}]


def import_folders(root: Path) -> list[Path]:
    """The folders inside the repository this interpreter imports the project's code from, other
    than a run's own folder: ``sys.path`` entries (``PYTHONPATH``, the ``.pth`` of an editable
    install: hatch, setuptools' compat mode) and the folders holding the packages an editable
    install's finder maps (setuptools: ``__editable___*_finder.MAPPING``); relative to ``root``.
    A run at another revision must import them from that revision's checkout."""
    ours = Path(__file__).resolve().parents[1]
    installed = _installed_here()
    found: list[Path] = []
    entries = [p for p in sys.path if p]
    entries += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for module in list(sys.modules.values()):
        mapping = getattr(module, "MAPPING", None)
        if getattr(module, "__name__", "").startswith("__editable__") and isinstance(mapping, dict):
            entries += [str(Path(str(p)).parent) for p in mapping.values()]
    entries += [str(p) for e in list(entries) for p in _link_tree_sources(Path(e), root)]
    for entry in entries:
        try:
            folder = Path(entry).resolve()
        except (OSError, RuntimeError):
            continue
        if not _under(folder, root) or any(_under(folder, i) for i in installed) \
                or (folder / "repro_check").resolve() == ours:
            continue
        rel = folder.relative_to(root)
        if rel not in found:
            found.append(rel)
    return found


def _link_tree_sources(entry: Path, root: Path, most: int = 200) -> list[Path]:
    """Where the modules of a link tree inside the repository really are (setuptools' strict
    editable mode: ``build/__editable__.NAME/pkg/__init__.py`` is a link to ``src/pkg/...``): the
    folders holding the linked packages and modules (``src``)."""
    try:
        if not _under(entry.resolve(), root) or not entry.is_dir():
            return []
        children = sorted(entry.iterdir())[:most]
    except OSError:
        return []
    found: list[Path] = []
    for child in children:
        linked = child / "__init__.py" if child.is_dir() else child
        if linked.suffix == ".py" and linked.is_symlink():
            real = linked.resolve()
            folder = real.parent.parent if child.is_dir() else real.parent
            if folder not in found:
                found.append(folder)
    return found


def isolating_environment(root: Path, checkout: Path, given: dict[str, str]) -> dict[str, str]:
    """What a run at a revision's ``checkout`` needs in its environment to import the project
    from there: ``PYTHONPATH`` with each folder of :func:`import_folders` taken from the checkout
    (first, so an editable install's finder is never asked) and no entry inside the working tree;
    and :data:`REVISION_VAR`, by which the run checks that nothing came from the working tree
    all the same (:mod:`repro_check.child.process.isolation`)."""
    kept = [p for p in (given.get("PYTHONPATH") or os.environ.get("PYTHONPATH", "")).split(os.pathsep)
            if p and not _under(Path(p).resolve(), root)]
    mapped = [str(checkout / rel) for rel in import_folders(root)]
    env = {REVISION_VAR: os.pathsep.join((str(root), str(checkout.resolve())))}
    if mapped or kept != [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]:
        env["PYTHONPATH"] = os.pathsep.join(mapped + kept)
    return env


def check_target(text: str, root: Path, folders: dict[str, Path], cwd: str | None = None) -> None:
    """A file TARGET exists and parses in every revision's checkout (``folders``: each revision
    as written -> its checkout), checked before any run: a revision without it is a usage error
    that names the revision, not a run's failure to find a file the user can see."""
    target = targets.parse(text)
    targets.check(target)  # here first: a TARGET missing here too is the usual error
    if target.path is None:
        return  # a module: the run finds it on its checkout's path
    here = Path(cwd or os.getcwd()).resolve()
    try:
        inside = (here / target.path).resolve().relative_to(root)
    except ValueError:
        return  # outside the repository: relocate() says so
    for name, folder in folders.items():
        there = folder / inside
        try:
            targets.check(dataclasses.replace(target, path=str(there)))
        except TargetNotFound as e:
            said = str(e).replace(str(there), target.path)
            if not there.exists():
                said = f"{target.path} does not exist there"
            raise UsageError(f"--across rev={name}: {said}") from None
