"""The package's floor plan, read from its source with ``ast``: no import cycle between
packages nor between modules, no ``_private`` name imported from another module, and the process
boundary kept (what runs inside the training process never imports the parent's side).

Every import counts: at the top of a module, inside a function and under ``if TYPE_CHECKING:``.
An import that only runs later still ties the two modules together, and a cycle hidden that way
is a cycle all the same (each side's types and behaviour depend on the other's)."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path


PACKAGE = Path(__file__).resolve().parents[1] / "repro_check"

#: subpackages that run inside the user's training process, and what they may import
INSIDE = ("repro_check.child",)
#: what both sides use: the trace format and the parent/child protocol (``trace``), and the few
#: top-level modules the run entry needs besides: errors (the exceptions a run reports),
#: targets (finding and calling the TARGET), version, and the bundled workloads
SHARED = ("repro_check.trace", "repro_check.errors", "repro_check.targets",
          "repro_check.version", "repro_check.workloads")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


@functools.cache
def parsed(path: Path) -> ast.Module:
    """The syntax tree of ``path``, parsed once a session (every test walks the same files)."""
    return ast.parse(path.read_text(), str(path))


def imports_of(name: str) -> list[tuple[str, str | None, int]]:
    """(module imported, name taken from it or None, line) for every import of the package,
    wherever it stands (module level, in a function, under ``if TYPE_CHECKING:``)."""
    return _imports_of(name, MODULES[name])


@functools.cache
def _imports_of(name: str, path: Path) -> list[tuple[str, str | None, int]]:
    tree = parsed(path)
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    out: list[tuple[str, str | None, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names
                    if a.name.split(".")[0] == "repro_check"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "repro_check":
                continue
            for a in node.names:
                sub = f"{mod}.{a.name}"
                if sub in MODULES:
                    out.append((sub, None, node.lineno))
                else:
                    out.append((mod, a.name, node.lineno))
    return out


def graph() -> dict[str, set[str]]:
    return {name: {m for m, _, _ in imports_of(name) if m in MODULES and m != name}
            for name in MODULES}


def package_of(module: str) -> str:
    """The node of ``module`` in the package graph: its subpackage right under repro_check, or
    the module itself for a top-level module (``repro_check.config``) and the package root."""
    parts = module.split(".")
    return ".".join(parts[:2])


def package_graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name, targets in graph().items():
        here = package_of(name)
        edges.setdefault(here, set()).update(
            package_of(m) for m in targets if package_of(m) != here)
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(edges):
        if n not in state and (found := visit(n)):
            return found
    return None


def where(cycle: list[str], edges_of: dict[str, list[str]]) -> str:
    """The cycle, with the import lines that make each of its edges."""
    return " -> ".join(cycle) + "".join(f"\n  {a} -> {b}: {', '.join(edges_of[a, b][:4])}"
                                        for a, b in zip(cycle, cycle[1:]))


def import_sites(of: object = None) -> dict[tuple[str, str], list[str]]:
    """(importer node, imported node) -> the ``file:line`` of each import making that edge;
    ``of`` maps a module to its node (the module itself when None)."""
    node = of if callable(of) else (lambda m: m)
    sites: dict[tuple[str, str], list[str]] = {}
    for name in MODULES:
        for mod, _, line in imports_of(name):
            if mod in MODULES and node(mod) != node(name):
                sites.setdefault((node(name), node(mod)), []).append(
                    f"{MODULES[name].relative_to(PACKAGE.parent)}:{line}")
    return sites


def test_no_import_cycle_between_modules() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + where(cycle or [], import_sites())


def test_no_import_cycle_between_packages() -> None:
    cycle = find_cycle(package_graph())
    assert cycle is None, "package cycle: " + where(cycle or [], import_sites(package_of))


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_imports_in_functions_and_under_type_checking_count(tmp_path: Path) -> None:
    """A cycle hidden in a function or under ``TYPE_CHECKING`` is found, at both levels."""
    names = {"repro_check.x.a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                "    from repro_check.y import b\n",
             "repro_check.y.b": "def f():\n    from repro_check.x.a import thing\n"}
    saved = dict(MODULES)
    try:
        for name, text in names.items():
            path = tmp_path / f"{name.rsplit('.', 1)[-1]}.py"
            path.write_text(text)
            MODULES[name] = path
        assert find_cycle(graph()) == ["repro_check.x.a", "repro_check.y.b", "repro_check.x.a"]
        assert find_cycle(package_graph()) == ["repro_check.x", "repro_check.y", "repro_check.x"]
    finally:
        MODULES.clear()
        MODULES.update(saved)


def test_no_private_name_imported_from_another_module() -> None:
    bad = [f"{MODULES[n].relative_to(PACKAGE.parent)}:{line} imports {taken} from {mod}"
           for n in MODULES for mod, taken, line in imports_of(n)
           if taken is not None and taken.startswith("_") and not taken.startswith("__")
           or taken is None and mod.rsplit(".", 1)[-1].startswith("_")
           and not mod.rsplit(".", 1)[-1].startswith("__")]
    assert not bad, "\n".join(bad)


def module_aliases(name: str) -> dict[str, str]:
    """Local names bound to modules of the package (``from repro_check.child import capture``)."""
    path = MODULES[name]
    out: dict[str, str] = {}
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("repro_check"):
            for a in node.names:
                if f"{node.module}.{a.name}" in MODULES:
                    out[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in MODULES and a.asname:
                    out[a.asname] = a.name
    return out


def test_no_private_name_of_another_module_is_used_through_it() -> None:
    bad = []
    for n, path in MODULES.items():
        aliases = module_aliases(n)
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in aliases and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} uses "
                           f"{aliases[node.value.id]}.{node.attr}")
    assert not bad, "\n".join(bad)


def test_the_training_process_side_never_imports_the_parent_side() -> None:
    allowed = INSIDE + SHARED
    bad = [f"{n} imports {mod}" for n in MODULES if n.startswith(INSIDE + SHARED)
           for mod, _, _ in imports_of(n)
           if mod != "repro_check" and not mod.startswith(allowed)]
    assert not bad, "\n".join(bad)


#: the one module of the parent side allowed to import the training process's side: the package
#: root, which re-exports ``log_metric`` (a function the target calls inside its own run)
ROOT = "repro_check"


def test_the_parent_side_never_imports_the_training_process_side() -> None:
    """What both processes need to know (the seeding components, the exit statuses, the run's
    configuration file, the environment fingerprint, the pins' file names) is in the shared
    modules; the parent starts a run by its module name only (``python -m repro_check.child``)."""
    bad = [f"{MODULES[n].relative_to(PACKAGE.parent)}:{line} imports {mod}"
           for n in MODULES if not n.startswith(INSIDE + SHARED) and n != ROOT
           for mod, _, line in imports_of(n) if mod.startswith(INSIDE)]
    assert not bad, "\n".join(bad)


#: ``child/`` by role: what starts and ends a run (``process``), what seeds and pins it
#: (``seeding``), what observes it (``observe``); at the top only the entry, the patch registry
#: and the features installed through it
CHILD_TOP = {"repro_check.child", "repro_check.child.__main__", "repro_check.child.main",
             "repro_check.child.patches", "repro_check.child.features"}
CHILD_ROLES = ("repro_check.child.process", "repro_check.child.seeding",
               "repro_check.child.observe")


def test_the_training_process_side_is_split_by_role() -> None:
    loose = sorted(n for n in MODULES if n.startswith(INSIDE) and n not in CHILD_TOP
                   and not n.startswith(CHILD_ROLES))
    assert not loose, f"modules of child/ in no role's folder: {loose}"


def test_every_folder_of_the_package_is_a_subpackage_with_a_docstring() -> None:
    for folder in [p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__"
                   and "data" not in p.relative_to(PACKAGE).parts]:
        init = folder / "__init__.py"
        assert init.exists(), folder
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init} says nothing of itself"


def test_importing_the_package_loads_neither_torch_nor_rich() -> None:
    """One fresh interpreter imports each module in turn, each the first to load what it needs:
    after each, none of the heavy modules is loaded (what loaded one is named)."""
    code = ("import importlib, sys\n"
            "for module in ('repro_check', 'repro_check.api', 'repro_check.cli'):\n"
            "    importlib.import_module(module)\n"
            "    heavy = [m for m in ('torch', 'rich', 'numpy') if m in sys.modules]\n"
            "    print(module, ','.join(heavy))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n") == ["repro_check ", "repro_check.api ", "repro_check.cli ", ""]


def test_the_tests_mirror_the_package() -> None:
    tests = Path(__file__).resolve().parent
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    folders = {p.name for p in tests.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= packages, f"test folders with no subpackage: {sorted(folders - packages)}"
    missing = sorted(packages - folders - {"workloads"})
    assert not missing, f"subpackages without a test folder: {missing}"


def function_level_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import inside a function of ``path``: for ``from M import N`` where
    ``M.N`` is a module of the package, that module."""
    out = {}
    name = module_name(path)
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for fn in ast.walk(parsed(path)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom):
                    mod = node.module or ""
                    if node.level:
                        mod = ".".join(here[: len(here) - node.level + 1] + ([mod] if mod else []))
                    sub = f"{mod}.{node.names[0].name}"
                    out[node.lineno] = sub if sub in MODULES else mod
                elif isinstance(node, ast.Import):
                    out[node.lineno] = node.names[0].name
    return sorted(out.items())


#: libraries that cost seconds or megabytes to load, which ``import repro_check``, ``--help`` and
#: a run's start before seeding must not pay for: an import of one inside a function needs no
#: comment, the reason is this list
HEAVY = frozenset({"torch", "torchvision", "numpy", "rich", "matplotlib", "PIL", "safetensors",
                   "pandas", "scipy"})


def top_level_imports(name: str) -> set[str]:
    """Every module ``name`` imports when it is loaded (not inside a function, not under
    ``if TYPE_CHECKING:``), of the package or not."""
    out: set[str] = set()
    tree = parsed(MODULES[name])
    here = name.split(".") if MODULES[name].name == "__init__.py" else name.split(".")[:-1]
    body = [n for n in tree.body if not (isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test))]
    for node in body:
        for sub in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(sub, ast.Import):
                out |= {a.name for a in sub.names}
            elif isinstance(sub, ast.ImportFrom):
                mod = sub.module or ""
                if sub.level:
                    mod = ".".join(here[: len(here) - sub.level + 1] + ([mod] if mod else []))
                out.add(mod)
                out |= {f"{mod}.{a.name}" for a in sub.names if f"{mod}.{a.name}" in MODULES}
    return out


@functools.cache
def loads_heavy(module: str) -> bool:
    """Whether loading ``module`` loads a library of :data:`HEAVY`: it is one, or a module of the
    package that imports one (or such a module) when it is loaded."""
    if module.split(".")[0] in HEAVY:
        return True
    if module not in MODULES:
        return False
    seen, todo = {module}, [module]
    while todo:
        for dep in top_level_imports(todo.pop()):
            if dep.split(".")[0] in HEAVY:
                return True
            if dep in MODULES and dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return False


#: what a comment may hold that gives no reason: a linter's or a type checker's pragma
PRAGMA = re.compile(r"noqa(:\s*[A-Z0-9, ]+)?|type:\s*ignore(\[[^\]]*\])?")


def _comment(line: str) -> bool:
    """Whether ``line`` has a comment that says something (a ``noqa`` or ``type: ignore``
    pragma alone says nothing of why)."""
    if "#" not in line:
        return False
    texts = [PRAGMA.sub("", t).strip(" -:") for t in line.split("#")[1:]]
    return any(texts)


def says_why(lines: list[str], lineno: int) -> bool:
    """A comment on the import's line, or on the lines right above it (the comment of a group of
    imports covers every import of the group)."""
    if _comment(lines[lineno - 1]):
        return True
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith(("from ", "import ")):
        if _comment(lines[i]):
            return True
        i -= 1
    return i >= 0 and lines[i].strip().startswith("#") and _comment(lines[i])


def test_an_import_inside_a_function_is_heavy_or_says_why() -> None:
    """An import belongs at the top of its module, where the module's dependencies are seen at
    a glance; one inside a function is there only to keep start-up cheap. Where it loads a heavy
    library (:data:`HEAVY`, directly or through a module of the package that imports one when
    loaded) the structure says why and no comment is asked for; any other (a module ``--help``
    or a run's entry need not load, one a platform lacks) says why in a comment."""
    bad = []
    for name, path in MODULES.items():
        lines = path.read_text().splitlines()
        for lineno, module in function_level_imports(path):
            if loads_heavy(module) or says_why(lines, lineno):
                continue
            bad.append(f"{path.relative_to(PACKAGE.parent)}:{lineno} imports {module}")
    assert not bad, f"{len(bad)} imports inside functions say not why:\n" + "\n".join(bad)


def test_the_heavy_rule_sees_what_loads_torch() -> None:
    """The rule's own premise: the terminal renderers load rich when loaded; the options, the
    trace format and the step recorder (torch only once a step is taken) do not."""
    assert loads_heavy("repro_check.report.terminal")
    assert loads_heavy("torch.nn")
    assert not loads_heavy("repro_check.run.options")
    assert not loads_heavy("repro_check.child.observe.capture")
    assert not loads_heavy("repro_check.trace.format")
