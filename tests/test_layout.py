"""The package's floor plan, read from its source with ``ast``: no import cycle between modules,
no ``_private`` name imported from another module, and the process boundary kept (what runs
inside the training process never imports the parent's side)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "repro_check"

#: subpackages that run inside the user's training process, and what they may import
INSIDE = ("repro_check.child",)
SHARED = ("repro_check.trace", "repro_check.errors", "repro_check.targets",
          "repro_check.version", "repro_check.workloads")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Line numbers of imports under ``if TYPE_CHECKING:`` (never executed)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                for sub in ast.walk(inner):
                    lines.add(getattr(sub, "lineno", -1))
    return lines


def imports_of(name: str) -> list[tuple[str, str | None, int]]:
    """(module imported, name taken from it or None, line) for every import of the package."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_only(tree)
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    out: list[tuple[str, str | None, int]] = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
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


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(edges[n]):
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


def test_no_import_cycle_between_modules() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


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
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
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
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
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


def test_every_folder_of_the_package_is_a_subpackage_with_a_docstring() -> None:
    for folder in [p for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"
                   and p.name != "data"]:
        init = folder / "__init__.py"
        assert init.exists(), folder
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init} says nothing of itself"


@pytest.mark.parametrize("module", ["repro_check", "repro_check.api", "repro_check.cli"])
def test_importing_the_package_loads_neither_torch_nor_rich(module: str) -> None:
    code = (f"import sys, {module}; heavy = [m for m in ('torch', 'rich', 'numpy') "
            "if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_tests_mirror_the_package() -> None:
    tests = Path(__file__).resolve().parent
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    folders = {p.name for p in tests.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= packages, f"test folders with no subpackage: {sorted(folders - packages)}"
    missing = sorted(packages - folders - {"workloads"})
    assert not missing, f"subpackages without a test folder: {missing}"
