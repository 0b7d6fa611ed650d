"""The code's layout keeps three promises, read from the source with `ast` (nothing is imported):

1. The library (`planner`, `rl`, `verifiers`) never imports the lab (`scripts/lab`) or a script.
2. No import cycle: no two modules import each other, directly or through others, at the top, inside a
   function or under `if TYPE_CHECKING:`.
3. Imports sit at the top of the file. A function may import an optional heavy module (torch, vllm, ray,
   transformers, matplotlib, ...) or one of ours that imports such a module at its top, so that importing
   the library stays cheap; fewer than `MAX_LOCAL_LIGHT_IMPORTS` other function-local imports remain.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("planner", "rl", "verifiers")
HEAVY = {"torch", "vllm", "ray", "transformers", "matplotlib", "safetensors", "peft", "trl", "tensorboard", "gguf",
         "accelerate", "sympy", "math_verify", "latex2sympy2_extended", "networkx", "tokenizers", "tqdm",
         "huggingface_hub", "datasets", "scipy", "pandas"}
"""Third-party modules slow enough to import (or optional enough) that a function may import them late."""
MAX_LOCAL_LIGHT_IMPORTS = 40


def _module_files() -> dict[str, Path]:
    """Dotted name -> file, for the library packages, the lab (`lab.*`) and the scripts (by file stem)."""
    files = {}
    for package in LIBRARY:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for path in (ROOT / "scripts").rglob("*.py"):
        parts = path.relative_to(ROOT / "scripts").with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def _imports(path: Path, modules: set[str]) -> list[tuple[str, bool]]:
    """(imported name, at module level?) for every import in `path`; a `from a import b` where `a.b` is one
    of `modules` counts as importing `a.b`."""
    out = []

    def visit(node, top: bool):
        for child in ast.iter_child_nodes(node):
            nested = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((alias.name, top) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [f"{child.module}.{a.name}" for a in child.names if f"{child.module}.{a.name}" in modules]
                out.extend((n, top) for n in names or [child.module])
            visit(child, nested)

    visit(ast.parse(path.read_text(), str(path)), True)
    return out


def _first_party(name: str, modules: set[str]) -> str | None:
    """The longest known module that `name` is or lies in, or None for a third-party module."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


@pytest.fixture(scope="module")
def graph():
    files = _module_files()
    modules = set(files)
    edges = {m: [(_first_party(n, modules), n, top) for n, top in _imports(p, modules)] for m, p in files.items()}
    return files, edges


def test_the_library_never_imports_the_lab_or_a_script(graph):
    files, edges = graph
    wrong = [f"{m} imports {target}" for m, found in edges.items() if m.split(".")[0] in LIBRARY
             for target, _, _ in found if target is not None and target.split(".")[0] not in LIBRARY]
    assert not wrong, "the library must not import the lab or the scripts:\n" + "\n".join(wrong)


def test_no_import_cycles(graph):
    _, edges = graph
    adjacency = {m: {t for t, _, _ in found if t is not None and t != m and not m.startswith(t + ".")}
                 for m, found in edges.items()}  # a package's own __init__ is not a cycle
    # Tarjan's strongly connected components: any component of two or more modules is a cycle.
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def connect(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in adjacency.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(adjacency):
        if v not in index:
            connect(v)
    assert not cycles, f"modules that import each other: {cycles}"


def test_function_local_imports_are_heavy_modules(graph):
    files, edges = graph
    heavy_at_top: dict[str, bool] = {}

    def imports_heavy(module: str, seen=frozenset()) -> bool:
        """Whether importing `module` imports a heavy third-party module (at the top, transitively)."""
        if module not in heavy_at_top:
            heavy_at_top[module] = any(
                (target is None and name.split(".")[0] in HEAVY)
                or (target is not None and target not in seen and imports_heavy(target, seen | {module}))
                for target, name, top in edges[module] if top)
        return heavy_at_top[module]

    light = [f"{m}: {name}" for m, found in edges.items() for target, name, top in found
             if not top and not (name.split(".")[0] in HEAVY if target is None else imports_heavy(target))]
    assert len(light) < MAX_LOCAL_LIGHT_IMPORTS, (
        f"{len(light)} function-local imports of light modules (move them to the top of the file):\n"
        + "\n".join(sorted(light)))
