"""Write one benchmark's section into docs/benchmarks.md, replacing that section if it exists."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
HEADER = "# Benchmarks\n\nEach section is written by the script named in it; rerun that command to refresh it.\n"


def machine_line() -> str:
    """Cores, CPU model, date and commit: the context every table needs."""
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=DOC.parent.parent, check=False).stdout.strip() or "unknown"
    except OSError:
        commit = "unknown"
    return (f"Machine: {os.cpu_count()} cores, {cpu}; date {_dt.date.today().isoformat()}; "
            f"commit {commit} (plus the working tree at the time).")


def update_section(heading: str, body: str, doc: Path = DOC, header: str = HEADER) -> Path:
    """Replace (or append) the `## heading` section of `doc` (docs/benchmarks.md) with `body`; a new file
    starts with `header`."""
    doc.parent.mkdir(parents=True, exist_ok=True)
    text = doc.read_text() if doc.exists() else header
    title = f"## {heading}\n"
    section = f"{title}\n{body.strip()}\n\n"
    if title in text:
        start = text.index(title)
        end = text.find("\n## ", start + len(title))
        text = text[:start] + section + (text[end + 1:] if end != -1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    doc.write_text(text)
    return doc
