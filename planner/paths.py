"""Paths a user gives (output folders and files, inputs, model folders), checked before any work starts.

A run that writes its results only at the end must not find out then that its output folder is a
file, sits under a file or cannot be written: each check here raises one ValueError that names the
option, the path, what is wrong and the fix. The config dataclasses call them from `__post_init__`
(a user calling from Python gets the same error as one on the command line), and `rl.cli` wraps them
as argparse types. Nothing is created: writability is probed with an unnamed temporary file in the
nearest folder that exists, which also catches read-only file systems (where `os.access` says yes to root).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["check_output_dir", "check_output_file", "check_input_file", "check_model_dir"]


def _nearest_existing(path: Path) -> Path:
    """`path` or the closest of its ancestors that exists."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _check_writable_folder(folder: Path, path: Path, name: str) -> None:
    """`folder` (where `path` goes) exists or can be made, and can be written in."""
    above = _nearest_existing(folder)
    if not above.is_dir():
        raise ValueError(f"{name} {str(path)!r}: {str(above)!r} is a file, so nothing can be made under it; "
                         "pass a path under a folder")
    try:
        with tempfile.TemporaryFile(dir=above):
            pass
    except OSError as error:
        raise ValueError(f"{name} {str(path)!r}: cannot write in {str(above)!r} ({error.strerror or error}); "
                         "pass a writable path") from None


def check_output_dir(path: str | os.PathLike, name: str = "output folder") -> Path:
    """`path` as an output folder: it is a folder or can be made, and it can be written in."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{name} {str(path)!r} is a file, not a folder; pass a folder (or remove the file)")
    _check_writable_folder(path, path, name)
    return path


def check_output_file(path: str | os.PathLike, name: str = "output file") -> Path:
    """`path` as an output file: not a folder, and its folder exists or can be made and can be written in."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise ValueError(f"{name} {str(path)!r} is a folder, not a file; pass a file path")
    _check_writable_folder(path.parent, path, name)
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{name} {str(path)!r} is not writable; pass a writable path")
    return path


def check_input_file(path: str | os.PathLike, name: str = "input file") -> Path:
    """`path` as an input: an existing file."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"{name} {str(path)!r}: " + ("a folder, not a file" if path.is_dir() else "no such file")
                         + "; pass an existing file")
    return path


def check_model_dir(path: str | os.PathLike, name: str = "model") -> Path:
    """`path` as a model folder: one with a config.json (a save_pretrained folder)."""
    path = Path(path).expanduser()
    if not (path / "config.json").is_file():
        raise ValueError(f"{name} {str(path)!r} is not a model folder (no config.json there); pass a "
                         "save_pretrained folder")
    return path
