"""Fail at import, with the fix, when another distribution provides `planner`, `rl` or `verifiers`.

Why: the three import names of treerl are PyPI packages too (`verifiers` is an RL library of this
very field). Installed side by side, whichever the import system finds first shadows the other
without a word, and treerl fails later with a missing name or a wrong result. Each of treerl's
packages calls `check_packages` when it is imported: every one of the three names that can be
found must resolve to the folder beside the others (one checkout or one install). That holds in an
editable install, a plain checkout on sys.path and an ordinary install.

Only what the import system would find is compared (no distribution metadata is read, which takes
about a second); the other distribution is looked up only to name it in the error. A name that
cannot be found at all is not an error here (a copy of `verifiers` alone works: it imports neither
of the others).

This module imports nothing from treerl, so `planner` and `rl` run it from its file
(``runpy.run_path``) even when the name `verifiers` is taken by another distribution.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["PACKAGES", "check_packages"]

PACKAGES = ("planner", "rl", "verifiers")
"""treerl's import names, which must all come from one place."""


def _origin(name: str) -> Path | None:
    """The file `import name` loads (or has loaded), None when there is none."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # ValueError: a module in sys.modules without a spec
        return None
    return Path(spec.origin).resolve() if spec is not None and spec.origin else None


def _distributions(name: str) -> list[str]:
    """The installed distributions other than treerl that provide the top-level module `name`."""
    from importlib.metadata import packages_distributions  # only on the error path: ~50 ms to import

    return sorted({d for d in packages_distributions().get(name, []) if d.lower() != "treerl"})


def _message(name: str, found: Path, root: Path) -> str:
    others = _distributions(name)
    if others:
        source = f"the distribution {', '.join(others)}"
        fix = (f"pip uninstall {others[0]} (if nothing else here needs it), or install treerl in a virtual "
               f"environment of its own: python -m venv .venv && .venv/bin/pip install -e {root}")
    else:
        source = "a folder on sys.path (PYTHONPATH, the current directory) that is not treerl's"
        fix = f"rename or remove {found.parent}, or take its folder off sys.path / PYTHONPATH"
    return (f"`import {name}` finds {found}, from {source}, not treerl's {root / name}: two packages named "
            f"{name!r} are installed and the other one shadows treerl's (its planner, rl and verifiers must "
            f"come from one place). Fix: {fix}.")


def check_packages(root: str | Path | None = None) -> None:
    """Raise ImportError naming the other distribution and the fix when one of `PACKAGES` resolves
    outside ``root`` (default: the folder that holds this package, i.e. treerl's checkout or install)."""
    root = Path(root).resolve() if root is not None else Path(__file__).resolve().parents[1]
    for name in PACKAGES:
        found = _origin(name)
        if found is not None and found != root / name / "__init__.py":
            raise ImportError(_message(name, found, root))
