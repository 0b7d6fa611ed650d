"""treerl's packages refuse to import, naming the other distribution and the fix, when another
distribution's `planner`, `rl` or `verifiers` comes first on the path; and import as usual from a
plain checkout on sys.path and from the environment's own install."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest

from verifiers.provenance import check_packages

REPO = Path(__file__).resolve().parents[1]


def python(code: str, path: list[Path], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if path:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in path)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def fake_distribution(site: Path, name: str, version: str = "0.9.1") -> None:
    """An installed distribution `name` (dist-info with its RECORD) that provides the package `name`."""
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text("SHADOW = True\n")
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{name}/__init__.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    (info / "top_level.txt").write_text(f"{name}\n")


@pytest.mark.parametrize("shadowed, imported", [("verifiers", "rl"), ("verifiers", "planner"), ("planner", "rl"),
                                                ("rl", "verifiers")])
def test_another_distribution_first_on_the_path_is_named_with_the_fix(tmp_path, shadowed, imported):
    site = tmp_path / "site"
    fake_distribution(site, shadowed)
    result = python(f"import {imported}", [site, REPO], cwd=tmp_path)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ImportError: `import {shadowed}` finds {site / shadowed / '__init__.py'}, from the "
                           f"distribution {shadowed}, not treerl's {REPO / shadowed}")
    assert f"Fix: pip uninstall {shadowed} (if nothing else here needs it), or install treerl in a virtual " \
           f"environment of its own" in last


def test_a_plain_folder_that_shadows_is_named_too(tmp_path):
    (tmp_path / "rl").mkdir()
    (tmp_path / "rl" / "__init__.py").write_text("")
    result = python("import verifiers", [REPO], cwd=tmp_path)  # the current directory comes first on sys.path
    assert result.returncode == 1
    assert "`import rl` finds" in result.stderr and "a folder on sys.path (PYTHONPATH, the current directory)" \
        in result.stderr and f"Fix: rename or remove {tmp_path / 'rl'}" in result.stderr


def test_plain_checkout_on_sys_path_imports(tmp_path):
    result = python("import planner, rl, verifiers; print(planner.__file__, rl.__file__, verifiers.__file__)",
                    [REPO], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(REPO / name / "__init__.py") for name in ("planner", "rl", "verifiers")]
    check_packages(REPO)  # and in this process, however the tests found the packages


def test_installed_treerl_imports(tmp_path):
    """The environment's own install (editable in development and CI), with no PYTHONPATH."""
    try:
        distribution("treerl")
    except PackageNotFoundError:
        pytest.skip("treerl is not installed in this environment (the tests run from the checkout)")
    result = python("import planner, rl, verifiers; print(rl.__file__)", [], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).name == "__init__.py"


def test_a_name_that_is_not_found_is_no_error(tmp_path):
    result = python("import sys; sys.modules['rl'] = None; import verifiers; print('ok')", [REPO], cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
