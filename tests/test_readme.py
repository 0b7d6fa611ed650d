"""The README's Python example runs as written (SmolLM2 on the transformers backend)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "the README lost its Python example"
    exec(compile(blocks[0], str(README), "exec"), {})
    out = capsys.readouterr().out
    assert "answer:" in out and "tokens generated:" in out and "tree nodes:" in out
